"""The /models probes a refusal's error line relies on (evaluator/evaluation/reachability.py), each within a
whole-request deadline and the model list's size cap (trust3 #5); and the lines of the refusals that are
configuration errors (exit 2): a server with no chat completions (a static file server's 501), a model the
server does not serve (told from other 404s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.adversarial_server import RouteServer
from support.cli import FAST_RETRIES, eval_args, run_cli
from support.datagen import doccount_rows, write_doccount

from evaluator.evaluation.reachability import answering_base_urls, model_not_found, served_models


def test_served_models_lists_the_models() -> None:
    with RouteServer({}) as srv:
        assert served_models(srv.base_url, None) == ["m"]


@pytest.mark.parametrize("how", ["drip", "drip_headers"])
def test_a_dripping_models_list_ends_at_the_deadline(how: str) -> None:
    with RouteServer({"/v1/models": how}) as srv:
        t0 = time.monotonic()
        assert served_models(srv.base_url, None, timeout_s=1.0) is None
        took = time.monotonic() - t0
    assert took < 2.5, took


def test_answering_base_urls_asks_each_candidate_within_the_deadline() -> None:
    with RouteServer({"/v1/models": "drip"}) as srv:
        t0 = time.monotonic()
        answering = answering_base_urls(srv.base_url + "/x", None, timeout_s=1.0)
        took = time.monotonic() - t0
        hits = len(srv.hits)
    assert answering == []  # only /v1/models would answer, and it drips
    assert took < hits * 1.0 + 2.0, (took, hits)


def test_a_huge_models_list_is_not_a_list() -> None:
    with RouteServer({"/v1/models": "huge"}, huge_bytes=64 * 2**20) as srv:
        assert served_models(srv.base_url, None, timeout_s=20.0) is None


def _data(tmp_path: Path, n: int = 4) -> tuple[str, list[dict[str, Any]]]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


class _Counting(SimpleHTTPRequestHandler):
    """The standard library's static file server (`python3 -m http.server`): POST gets 501."""

    seen: list[str] = []

    def log_request(self, code: Any = "-", size: Any = "-") -> None:  # once per request answered
        self.seen.append(self.command)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("H", (_Counting,), {"seen": seen})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(tmp_path)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_static_file_server_is_no_chat_endpoint_exit_2_without_retries(tmp_path, static_server) -> None:
    url, seen = static_server
    data, _ = _data(tmp_path, 6)
    res = run_cli("evaluate", *eval_args(url, data, tmp_path / "r"), *FAST_RETRIES, "--concurrency", "2")
    assert res.returncode == 2, res.stderr
    [line] = _errors(res.stderr)
    assert f"{url}/chat/completions has no chat completions endpoint" in line, line
    assert "501" in line and "re-run" not in res.stderr
    assert seen.count("POST") <= 2  # the concurrency's worth, none of them retried


def test_a_wrong_model_names_it_and_lists_the_served_ones(tmp_path, server) -> None:
    data, _ = _data(tmp_path)
    server.update_config(strict_model=True)  # vLLM's 404 NotFoundError "The model `x` does not exist."
    res = run_cli("evaluate", *eval_args(server.base_url, data, tmp_path / "r", model="no-such-model"))
    assert res.returncode == 2, res.stderr
    [line] = _errors(res.stderr)
    assert "'no-such-model'" in line and "it serves test-model" in line and "--model" in line, line


def test_a_model_not_found_is_told_from_other_404s() -> None:
    # vLLM (entrypoints/openai/serving_engine.py _check_model) and OpenAI's texts; OpenRouter's is not one
    assert model_not_found(404, "HTTP 404: The model `x` does not exist.")
    assert model_not_found(404, "HTTP 404: The model `x` does not exist or you do not have access to it.")
    assert not model_not_found(404, "HTTP 404: No endpoints found that can handle the requested parameters.")
    assert not model_not_found(404, "HTTP 404: Not Found")
