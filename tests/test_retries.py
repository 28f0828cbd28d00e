"""The retry policy at a real server: which faults are retried, which are recorded once, Retry-After; and
which HTTP statuses are retried at all (evaluator.request.ratelimit.retryable_status: every 5xx but 501)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import FAST_RETRIES, eval_args, read_records, run_cli
from support.cli import read_records as records
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.request.ratelimit import retryable_status

RETRYABLE = [
    "429",
    "429_no_retry_after",
    "408",
    "409",
    "425",
    "500",
    "502",
    "503",
    "drop",
    "malformed_json",
    "empty_content",
    "null_content",
    "no_choices",
    "truncated",
    "not_openai",
]
NOT_RETRYABLE = ["400", "401", "404", "422"]


def evaluate(server, doc_data: str, run: Path, *extra: str) -> Any:
    return run_cli(
        "evaluate",
        *eval_args(server.base_url, doc_data, str(run)),
        "--limit",
        "1",
        *FAST_RETRIES,
        *extra,
    )


@pytest.mark.parametrize("fault", RETRYABLE)
def test_retryable_fault_then_success(tmp_path, doc_data, doc_rows, server, fault: str) -> None:
    first = doc_rows[0]["image_sha256"]
    server.set_config(
        {"answers": doccount_reply(doc_rows), "script": {first: [fault, fault]}, "retry_after": 0}
    )
    res = evaluate(server, doc_data, tmp_path / "r")
    assert res.returncode == 0, res.stderr
    [rec] = records(tmp_path / "r")
    assert rec["status"] == "ok" and rec["correct"] is True
    assert rec["attempts"] == 3 and len(rec["retry_errors"]) == 2
    assert len(server.requests()) == 3


@pytest.mark.parametrize("fault", NOT_RETRYABLE)
def test_client_errors_are_recorded_once_never_resent(
    tmp_path, doc_data, doc_rows, server, fault: str
) -> None:
    server.set_config({"always_fault": fault})
    res = evaluate(server, doc_data, tmp_path / "r")
    assert res.returncode == 3
    [rec] = records(tmp_path / "r")
    assert rec["status"] == "request_error" and rec["correct"] is False
    assert rec["attempts"] == 1 and rec["retry_errors"][0]["status_code"] == int(fault)
    assert f"HTTP {fault}" in rec["request_error"]
    assert len(server.requests()) == 1


def test_retries_are_bounded_and_every_error_kept(tmp_path, doc_data, server) -> None:
    server.set_config({"always_fault": "503"})
    res = evaluate(server, doc_data, tmp_path / "r", "--max-retries", "2")
    assert res.returncode == 3 and "re-run" in res.stderr
    [rec] = records(tmp_path / "r")
    assert rec["attempts"] == 3 and [e["status_code"] for e in rec["retry_errors"]] == [503, 503, 503]
    assert len(server.requests()) == 3


def test_retry_after_is_honoured(tmp_path, doc_data, doc_rows, server) -> None:
    first = doc_rows[0]["image_sha256"]
    server.set_config({"answers": doccount_reply(doc_rows), "script": {first: ["429"]}, "retry_after": 1.5})
    res = evaluate(server, doc_data, tmp_path / "r")
    assert res.returncode == 0, res.stderr
    t = [r["time"] for r in server.requests()]
    assert t[1] - t[0] >= 1.4  # the 0.05 s backoff cap is overridden by the server's Retry-After
    [rec] = records(tmp_path / "r")
    assert rec["retry_errors"][0]["retry_after_s"] == 1.5


def test_timeout_is_retried(tmp_path, doc_data, doc_rows, server) -> None:
    first = doc_rows[0]["image_sha256"]
    server.set_config({"answers": doccount_reply(doc_rows), "script": {first: ["slow"]}, "slow_s": 10})
    res = evaluate(server, doc_data, tmp_path / "r", "--timeout", "1")
    assert res.returncode == 0, res.stderr
    # the retry went out after the 1 s timeout, not after the 10 s answer (the server's clock: the
    # interpreter's start-up on a loaded machine is not part of it)
    tries = [q["time"] for q in server.requests() if q["image_sha256"] == first]
    assert len(tries) == 2 and tries[1] - tries[0] < 9, tries
    [rec] = records(tmp_path / "r")
    assert rec["retry_errors"][0]["kind"] == "timeout" and rec["status"] == "ok"


def test_parse_failures_are_resampled_and_kept(tmp_path, doc_data, doc_rows, server) -> None:
    row = doc_rows[0]
    server.set_config({"default_reply": "I think there are a few."})
    # --no-smoke-check: one row whose every answer fails the parser would be a format smoke stop (exit 2)
    res = evaluate(server, doc_data, tmp_path / "r", "--retry-parse-failures", "2", "--no-smoke-check")
    assert res.returncode == 0
    [rec] = records(tmp_path / "r")
    assert rec["parse_status"] == "no_tag" and rec["parsed_answer"] is None and not rec["correct"]
    assert len(rec["earlier_attempts"]) == 2 and len(server.requests()) == 3
    assert rec["earlier_attempts"][0]["response_text"] == "I think there are a few."
    # a later good answer ends the re-sampling; earlier attempts stay in the record
    server.set_config({"answers": {row["image_sha256"]: "x"}, "default_reply": "x"})
    server.reset()
    res = evaluate(server, doc_data, tmp_path / "r2", "--retry-parse-failures", "0")
    [rec] = records(tmp_path / "r2")
    assert rec["earlier_attempts"] == [] and len(server.requests()) == 1


def test_data_errors_are_never_sent(tmp_path, doc_rows, server) -> None:
    from support.datagen import write_doccount

    rows = [dict(r) for r in doc_rows[:4]]
    rows[1]["image_sha256"] = "0" * 64  # hash mismatch
    rows[2]["answer"] = -3  # negative answer
    rows[3]["image"] = {"bytes": b"not an image at all", "path": "x"}
    from support.datagen import sha

    rows[3]["image_sha256"] = sha(b"not an image at all")
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.set_config({"answers": doccount_reply(doc_rows)})
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), str(tmp_path / "r")),
        *FAST_RETRIES,
    )
    assert res.returncode == 0, res.stderr
    by_id = {r["sample_id"]: r for r in records(tmp_path / "r")}
    assert by_id["doc-0000"]["status"] == "ok"
    for sid, needle in (("doc-0001", "does not match"), ("doc-0002", "negative"), ("doc-0003", "not JPEG")):
        rec = by_id[sid]
        assert rec["status"] == "data_error" and needle in rec["data_error"] and rec["correct"] is False
        assert rec["attempts"] == 0 and rec["request_sha256"] is None
    assert [r["image_sha256"] for r in server.requests()] == [rows[0]["image_sha256"]]


def test_a_dead_endpoint_stops_the_run_early_with_rows_recorded(tmp_path, server) -> None:
    from support.datagen import doccount_rows, write_doccount

    rows = doccount_rows(60)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.set_config({"always_fault": "503"})
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), str(tmp_path / "r")),
        "--concurrency",
        "2",
        "--max-retries",
        "1",
        *FAST_RETRIES,
    )
    assert res.returncode == 3 and "stopped early" in res.stderr and "Traceback" not in res.stderr
    recs = records(tmp_path / "r")
    assert 20 <= len(recs) < 60 and all(r["status"] == "request_error" for r in recs)
    assert len({r["sample_id"] for r in recs}) == len(recs)


def test_a_record_holds_one_attempt_only(tmp_path, doc_data, doc_rows, server) -> None:
    """A tagless reply, then a 400 on the re-sample: the record is the 400's alone (no stale text,
    parse status, fallback answer or latency from the first reply); the first reply stays whole in
    earlier_attempts."""
    first = doc_rows[0]["image_sha256"]
    server.set_config({"default_reply": "The count is 7", "script": {first: [None, "400"]}})
    res = evaluate(server, doc_data, tmp_path / "r", "--retry-parse-failures", "1")
    assert res.returncode == 3, res.stderr
    [rec] = records(tmp_path / "r")
    assert len(server.requests()) == 2
    assert rec["status"] == "request_error" and "HTTP 400" in rec["request_error"]
    assert rec["response_text"] is None and rec["parse_status"] == "no_response"
    assert rec["fallback_answer"] is None and rec["latency_s"] is None and rec["finish_reason"] is None
    assert rec["attempts"] == 1 and [e["status_code"] for e in rec["retry_errors"]] == [400]
    [earlier] = rec["earlier_attempts"]
    assert earlier["response_text"] == "The count is 7" and earlier["parse_status"] == "no_tag"
    assert earlier["attempts"] == 1 and earlier["retry_errors"] == [] and earlier["latency_s"] is not None


def _data(tmp_path: Path, n: int = 4) -> tuple[str, list[dict[str, Any]]]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_transient_5xx_is_still_retried(tmp_path, server, status: int) -> None:
    data, rows = _data(tmp_path, 3)
    first = {r["image_sha256"]: [str(status), None] for r in rows}  # one failure, then the answer
    server.update_config(answers=doccount_reply(rows), script=first)
    res = run_cli("evaluate", *eval_args(server.base_url, data, tmp_path / "r"), *FAST_RETRIES)
    assert res.returncode == 0, res.stderr
    assert [r["attempts"] for r in read_records(tmp_path / "r")] == [2, 2, 2]


def test_only_501_of_the_5xx_is_never_retried() -> None:
    assert not retryable_status(501)
    assert all(retryable_status(s) for s in (500, 502, 503, 504, 429, 408))
    assert not any(retryable_status(s) for s in (400, 401, 404, 405, 422))
