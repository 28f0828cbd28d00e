from __future__ import annotations

import pytest

from evaluator.endpoint import EndpointError, normalize_base_url, server_root


@pytest.mark.parametrize(
    "url",
    [
        "http://host:8000",
        "http://host:8000/",
        "http://host:8000/v1",
        "http://host:8000/v1/",
        "http://host:8000/v1/chat/completions",
        "http://host:8000/v1/chat/completions/",
        "  http://HOST:8000/v1  ",
    ],
)
def test_spellings_normalise_to_one_endpoint(url: str) -> None:
    assert normalize_base_url(url) == "http://host:8000/v1"


def test_path_prefix_is_kept() -> None:
    assert normalize_base_url("https://api.example.com/openai/v1/chat/completions") == (
        "https://api.example.com/openai/v1"
    )
    assert normalize_base_url("https://api.example.com/openai") == "https://api.example.com/openai/v1"


@pytest.mark.parametrize("url", ["api.example.com/v1", "ftp://x/v1", "http://user:pw@host/v1", ""])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(EndpointError):
        normalize_base_url(url)


def test_server_root() -> None:
    assert server_root("http://h:8000/v1") == "http://h:8000"
