"""Token usage: reasoning/cached tokens, failed attempts' usage, summary totals, the spend guard."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import FAST_RETRIES, eval_args, run_cli
from support.cli import read_records as records
from support.datagen import doccount_reply, doccount_rows, write_doccount

# OpenAI's usage object for reasoning models: completion_tokens_details / prompt_tokens_details
DETAILS = {
    "completion_tokens_details": {"reasoning_tokens": 50},
    "prompt_tokens_details": {"cached_tokens": 8},
}


def _data(tmp_path: Path, n: int) -> tuple[str, list]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


def _summary(run: Path) -> dict:
    return json.loads((run / "scores" / "summary.json").read_text())


def _score(run: Path) -> str:
    res = run_cli("score", "--run-root", str(run), "--no-report")
    assert res.returncode == 0, res.stderr
    return (run / "scores" / "summary.md").read_text()


def test_reasoning_and_cached_tokens_are_recorded_and_totalled(tmp_path, server) -> None:
    data, rows = _data(tmp_path, 4)
    server.update_config(answers=doccount_reply(rows), usage_extra=DETAILS)
    run = tmp_path / "r"
    res = run_cli("evaluate", *eval_args(server.base_url, data, run))
    assert res.returncode == 0, res.stderr
    for rec in records(run):
        assert rec["usage"]["reasoning_tokens"] == 50 and rec["usage"]["cached_tokens"] == 8
    md = _score(run)
    usage = _summary(run)["usage"]
    assert usage["reasoning_tokens"] == {"n": 4, "sum": 200}
    assert usage["cached_tokens"] == {"n": 4, "sum": 32}
    assert "reasoning tokens 200" in md and "cached tokens 32" in md


def test_without_details_nothing_new_appears(tmp_path, server) -> None:
    data, rows = _data(tmp_path, 3)
    server.update_config(answers=doccount_reply(rows))
    run = tmp_path / "r"
    assert run_cli("evaluate", *eval_args(server.base_url, data, run)).returncode == 0
    for rec in records(run):
        assert set(rec["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
        assert "inline_think" not in rec
    md = _score(run)
    assert {"reasoning_tokens", "cached_tokens", "failed_attempts"}.isdisjoint(_summary(run)["usage"])
    assert "Failed or retried attempts" not in md


def test_failed_attempts_keep_their_usage(tmp_path, server) -> None:
    data, rows = _data(tmp_path, 3)
    first = rows[0]["image_sha256"]
    server.update_config(answers=doccount_reply(rows), script={first: ["empty_content", "empty_content"]})
    run = tmp_path / "r"
    res = run_cli("evaluate", *eval_args(server.base_url, data, run), *FAST_RETRIES)
    assert res.returncode == 0, res.stderr
    [rec] = [r for r in records(run) if r["image_sha256"] == first]
    errors = rec["retry_errors"]
    assert [e["kind"] for e in errors] == ["empty_content"] * 2
    assert all(e["usage"]["prompt_tokens"] > 0 for e in errors)
    spent = sum(e["usage"]["total_tokens"] for e in errors)
    md = _score(run)
    failed = _summary(run)["usage"]["failed_attempts"]
    assert failed["attempts_with_usage"] == 2 and failed["total_tokens"] == spent
    assert f"{spent} total tokens" in md


def test_spend_guard_stops_cleanly_and_resume_continues(tmp_path, server) -> None:
    data, rows = _data(tmp_path, 6)
    server.update_config(answers=doccount_reply(rows))
    run = tmp_path / "r"
    cmd = [
        "evaluate",
        *eval_args(server.base_url, data, run),
        "--concurrency",
        "1",
        "--max-total-tokens",
        "1",
    ]
    res = run_cli(*cmd)
    assert res.returncode == 3 and "--max-total-tokens 1" in res.stderr and "re-run" in res.stderr, res.stderr
    assert len(records(run)) == 1 and len(server.requests()) == 1
    config = json.loads((run / "run_config.json").read_text())
    assert config["request_policy"]["max_total_tokens"] == 1
    res = run_cli(*cmd)
    assert res.returncode == 3 and len(records(run)) == 2
    res = run_cli("evaluate", *eval_args(server.base_url, data, run), "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    assert len(records(run)) == 6 and all(r["status"] == "ok" for r in records(run))
