from __future__ import annotations

import pytest
from support.cli import eval_args, run_cli

from evaluator.request.endpoint import (
    EndpointError,
    base_url_candidates,
    normalize_base_url,
    not_found_hint,
    server_root,
    split_query,
)


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


@pytest.mark.parametrize(
    ("url", "base"),
    [
        # a path is used as given: no /v1 added, trailing slash dropped, case kept
        (
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        ),
        ("https://open.bigmodel.cn/api/paas/v4", "https://open.bigmodel.cn/api/paas/v4"),
        ("https://api.example.com/openai", "https://api.example.com/openai"),
        ("https://api.example.com/OpenAI/V1/", "https://api.example.com/OpenAI/V1"),
        ("https://api.example.com/openai/v1/chat/completions", "https://api.example.com/openai/v1"),
        # a full chat URL is the endpoint itself, even without /v1
        ("http://h:9/chat/completions", "http://h:9"),
        ("https://h/api/paas/v4/chat/completions", "https://h/api/paas/v4"),
        # query strings are kept
        (
            "https://h/openai/deployments/x?api-version=2024-10-21",
            "https://h/openai/deployments/x?api-version=2024-10-21",
        ),
        ("https://h/base/chat/completions?a=1&b=", "https://h/base?a=1&b="),
        ("http://h:8000?a=1", "http://h:8000/v1?a=1"),
    ],
)
def test_paths_are_used_as_given(url: str, base: str) -> None:
    assert normalize_base_url(url) == base


@pytest.mark.parametrize("url", ["api.example.com/v1", "ftp://x/v1", "http://user:pw@host/v1", ""])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(EndpointError):
        normalize_base_url(url)


def test_server_root_and_query() -> None:
    assert server_root("http://h:8000/v1") == "http://h:8000"
    assert server_root("http://h:8000/v1?x=1") == "http://h:8000"
    assert server_root("https://h/v1beta/openai") == "https://h/v1beta/openai"
    assert split_query("https://h/p?a=1&b=") == ("https://h/p", {"a": "1", "b": ""})


def test_not_found_hint_names_the_url_and_suggests_only_a_checked_one() -> None:
    hint = not_found_hint("http://h:8000/api/v1", ["http://h:8000/v1"])
    assert "http://h:8000/api/v1/chat/completions" in hint and "--base-url http://h:8000/v1 answers" in hint
    unchecked = not_found_hint("http://h:8000/api/v1")
    assert "--base-url" not in unchecked and "http://h:8000/api/v1/chat/completions" in unchecked


def test_base_url_candidates_are_nearby_urls_closest_first() -> None:
    assert base_url_candidates("http://h:8000/api/v1") == [
        "http://h:8000/api/v1/v1",
        "http://h:8000/api",
        "http://h:8000/v1",
        "http://h:8000",
    ]
    assert base_url_candidates("http://h:8000?x=1") == ["http://h:8000/v1?x=1"]


@pytest.mark.parametrize(
    ("given", "path"),
    [
        ("{root}", "/v1/chat/completions"),
        ("{root}/v1beta/openai/", "/v1beta/openai/chat/completions"),
        ("{root}/api/paas/v4", "/api/paas/v4/chat/completions"),
        ("{root}/Some/Path/chat/completions", "/Some/Path/chat/completions"),
        ("{root}/chat/completions", "/chat/completions"),
    ],
)
def test_requests_arrive_where_the_url_says(tmp_path, doc_data, server, given: str, path: str) -> None:
    server.update_config(chat_paths=[path])
    run = tmp_path / "r"
    res = run_cli("evaluate", *eval_args(given.format(root=server.url), doc_data, run), "--limit", "1")
    assert res.returncode == 0, res.stderr
    assert [r["path"] for r in server.requests()] == [path]


def test_query_string_arrives_with_every_request(tmp_path, doc_data, server) -> None:
    server.update_config(chat_paths="*")
    run = tmp_path / "r"
    url = f"{server.url}/openai/deployments/x?api-version=2024-10-21&flag="
    res = run_cli("evaluate", *eval_args(url, doc_data, run), "--limit", "2")
    assert res.returncode == 0, res.stderr
    reqs = server.requests()
    assert [r["path"] for r in reqs] == ["/openai/deployments/x/chat/completions"] * 2
    assert [r["query"] for r in reqs] == [{"api-version": "2024-10-21", "flag": ""}] * 2


KEY = "sk-url-test-0123456789abcdef"


@pytest.mark.parametrize(
    "url",
    [
        f"https://generativelanguage.googleapis.com/v1beta/openai?key={KEY}",
        f"https://gw.example.com/v1?api_key={KEY}&api-version=1",
        "https://gw.example.com/v1?x-api-key=abc",
        "https://gw.example.com/v1?access_token=abc",
        "https://store.example.com/v1?sv=2024&sig=abc%2Bdef",
        "https://fn.example.com/api?code=abc",
        f"https://gw.example.com/v1?innocent={KEY}",  # the key itself, whatever the name
        f"https://gw.example.com/v1?innocent={KEY[4:20]}",  # ... or a long piece of it
        f"https://me:{KEY}@gw.example.com/v1",
    ],
)
def test_a_url_that_carries_a_credential_is_refused_without_quoting_it(url: str) -> None:
    with pytest.raises(EndpointError) as err:
        normalize_base_url(url, KEY)
    text = str(err.value)
    assert "MODEL_API_KEY" in text and "abc" not in text and KEY[:8] not in text and KEY[8:16] not in text


@pytest.mark.parametrize(
    "url",
    ["https://x.openai.azure.com/openai/deployments/d?api-version=2024-10-21", "https://h/v1?flag=&n=1"],
)
def test_other_query_parameters_are_kept(url: str) -> None:
    assert normalize_base_url(url, KEY) == url


def test_a_key_in_the_url_is_one_line_pointing_to_the_env_and_nothing_is_sent(
    tmp_path, doc_data, server
) -> None:
    url = f"{server.base_url}?key=sk-pasted-0123456789abcdef"
    res = run_cli("evaluate", *eval_args(url, doc_data, tmp_path / "r"), "--limit", "1")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "key=..." in lines[0] and "MODEL_API_KEY" in lines[0], lines
    assert "sk-pasted" not in res.stderr + res.stdout
    assert server.requests() == [] and not (tmp_path / "r" / "run_config.json").exists()
