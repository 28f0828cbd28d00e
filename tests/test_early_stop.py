"""The early stop: an endpoint that refuses the request shape stops the run at once, with the fix."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.cli import FAST_RETRIES, eval_args, run_cli
from support.cli import read_records as records
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.core.records import ResponseRecord, RetryError, Sampling
from evaluator.request.breaker import Breaker, EndpointRefused

# OpenAI's text for reasoning models (koosoli/ESPHomeDesigner#379, teilomillet/gollm#33)
MAX_TOKENS_REFUSED = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
# Claude 4.5 migration guide; BerriAI/litellm#15097
BOTH_REFUSED = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."


def _data(tmp_path: Path, n: int) -> tuple[str, list]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


def _evaluate(url: str, data: str, run: Path, *extra: str):
    return run_cli("evaluate", *eval_args(url, data, run), *FAST_RETRIES, *extra)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_refused_field_stops_within_the_concurrency(tmp_path, server) -> None:
    data, _ = _data(tmp_path, 40)
    server.update_config(refuse_fields={"max_tokens": MAX_TOKENS_REFUSED}, latency_s=0.05)
    res = _evaluate(server.base_url, data, tmp_path / "r", "--concurrency", "4")
    assert res.returncode == 3
    [line] = _error_lines(res.stderr)
    assert f"HTTP 400 ({MAX_TOKENS_REFUSED})" in line
    assert "--max-tokens-field max_completion_tokens" in line
    assert len(server.requests()) <= 4
    recs = records(tmp_path / "r")
    assert len(recs) == len(server.requests()) and all(r["status"] == "request_error" for r in recs)
    # the fix works
    res = _evaluate(server.base_url, data, tmp_path / "r2", "--max-tokens-field", "max_completion_tokens")
    assert res.returncode == 0, res.stderr


def test_one_request_with_concurrency_one_and_the_top_p_hint(tmp_path, server) -> None:
    data, _ = _data(tmp_path, 10)
    server.update_config(refuse_fields={"top_p": BOTH_REFUSED})
    res = _evaluate(server.base_url, data, tmp_path / "r", "--concurrency", "1")
    assert res.returncode == 3
    [line] = _error_lines(res.stderr)
    assert BOTH_REFUSED in line and "--top-p none" in line
    assert len(server.requests()) == 1 and len(records(tmp_path / "r")) == 1


def test_a_wrong_path_is_a_configuration_error_naming_a_checked_base_url(tmp_path, server) -> None:
    """--base-url .../api/v1 where the server serves /v1: exit 2, the URL that answered 404, and only a
    base URL that was checked to answer (never .../api, which is wrong too)."""
    data, rows = _data(tmp_path, 30)
    res = _evaluate(f"{server.url}/api/v1", data, tmp_path / "r", "--concurrency", "3")
    assert res.returncode == 2, res.stderr
    [line] = _error_lines(res.stderr)
    assert f"404 Not Found for {server.url}/api/v1/chat/completions" in line
    assert f"--base-url {server.url}/v1 answers" in line and f"{server.url}/api " not in line
    assert len([r for r in server.requests() if r["path"].endswith("/chat/completions")]) <= 3
    # the suggestion works
    server.update_config(answers=doccount_reply(rows))
    res = _evaluate(f"{server.url}/v1", data, tmp_path / "r2")
    assert res.returncode == 0, res.stderr


def test_a_path_below_v1_gets_the_checked_v1(tmp_path, server) -> None:
    data, _ = _data(tmp_path, 6)
    server.update_config(chat_paths=["/v1/chat/completions"])
    res = _evaluate(f"{server.url}/v1/api", data, tmp_path / "r", "--concurrency", "2")
    assert res.returncode == 2, res.stderr
    [line] = _error_lines(res.stderr)
    # /v1 answers /models here, so it is the one suggested; nothing unchecked is
    assert f"--base-url {server.url}/v1 answers" in line


def test_an_unknown_model_404_points_at_the_model_not_the_url(tmp_path, server) -> None:
    data, _ = _data(tmp_path, 6)
    server.update_config(strict_model=True)  # 404 "The model `m` does not exist." (vLLM's text)
    res = _evaluate(server.base_url, data, tmp_path / "r", "--concurrency", "2")
    assert res.returncode == 2  # a configuration error (issue #42): a re-run cannot help
    [line] = _error_lines(res.stderr)
    assert "HTTP 404" in line and "--model 'm'" in line and "did you mean" not in line


def test_a_4xx_after_a_success_is_that_rows_error(tmp_path, server) -> None:
    data, rows = _data(tmp_path, 8)
    bad = rows[3]["image_sha256"]
    server.update_config(answers=doccount_reply(rows), script={bad: ["400"]})
    res = _evaluate(server.base_url, data, tmp_path / "r", "--concurrency", "1")
    assert res.returncode == 3 and not _error_lines(res.stderr), res.stderr
    by_status = sorted(r["status"] for r in records(tmp_path / "r"))
    assert by_status == ["ok"] * 7 + ["request_error"]


def test_different_refusals_before_a_success_do_not_stop(tmp_path, server) -> None:
    """Two rows refused with different messages are two rows' errors; the rest run."""
    data, rows = _data(tmp_path, 6)
    server.update_config(
        answers=doccount_reply(rows),
        script={rows[0]["image_sha256"]: ["400"], rows[1]["image_sha256"]: ["422"]},
    )
    res = _evaluate(server.base_url, data, tmp_path / "r", "--concurrency", "2")
    assert res.returncode == 3 and not _error_lines(res.stderr), res.stderr
    assert sorted(r["status"] for r in records(tmp_path / "r")) == ["ok"] * 4 + ["request_error"] * 2


def _record(status: str, http: int | None = None, message: str = "HTTP 400: refused") -> ResponseRecord:
    errors = [RetryError(1, "http_status", message, http)] if http else []
    return ResponseRecord(
        sample_id="s",
        benchmark="doccount",
        groups={},
        ground_truth=1,
        model="m",
        backend="api",
        sampling=Sampling(1.0, 0.95, 10),
        started_at="t",
        finished_at="t",
        status=status,  # type: ignore[arg-type]
        retry_errors=errors,
        parsed_answer=1 if status == "ok" else None,
    )


def test_breaker_waits_for_the_rows_in_flight_and_a_success_lifts_the_stop() -> None:
    async def scenario() -> None:
        b = Breaker(4, lambda status, message: "hint")
        for _ in range(4):
            await b.admit()
        b.outcome(_record("request_error", 400))  # first refusal: the gate closes
        assert not b._gate.is_set()
        b.outcome(_record("request_error", 400))  # confirmed, but two rows are still in flight
        b.outcome(_record("ok"))  # a success: the endpoint takes this shape after all
        b.outcome(_record("request_error", 400))  # after a success, one row's error
        assert b._gate.is_set() and b.any_success

        b = Breaker(3, lambda status, message: "hint")
        for _ in range(3):
            await b.admit()
        b.outcome(_record("request_error", 429, "HTTP 429: slow down"))  # not a shape refusal
        b.outcome(_record("request_error", 400))
        with pytest.raises(EndpointRefused) as info:
            b.outcome(_record("request_error", 400))
        assert info.value.status == 400 and "hint" in str(info.value)

    asyncio.run(scenario())


def test_nothing_listening_stops_at_once_naming_host_and_port(tmp_path) -> None:
    """A closed port: one error line naming host and port, exit 3 (a re-run continues), nothing recorded;
    the same command once the server is up just works."""
    import socket
    import time

    from support.openai_test_server import TestServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data, rows = _data(tmp_path, 8)
    url = f"http://127.0.0.1:{port}/v1"
    t0 = time.monotonic()
    res = _evaluate(url, data, tmp_path / "r", "--max-retries", "4")
    assert res.returncode == 3, res.stderr
    assert time.monotonic() - t0 < 30  # not 8 rows x 5 attempts of backoff
    [line] = _error_lines(res.stderr)
    assert f"127.0.0.1:{port}" in line and "is the server running?" in line and "make serve" in line
    assert not (tmp_path / "r" / "responses.partial.jsonl").exists() or records(tmp_path / "r") == []
    with TestServer(port=port) as server:
        server.set_config({"answers": doccount_reply(rows)})
        res = _evaluate(url, data, tmp_path / "r")
    assert res.returncode == 0, res.stderr
    assert sorted(r["status"] for r in records(tmp_path / "r")) == ["ok"] * 8
