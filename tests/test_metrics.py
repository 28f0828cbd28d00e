"""evaluator.scoring.metrics: what summary.json counts that the other modules' tests do not (timeouts)."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import FAST_RETRIES, eval_args, run_cli
from support.datagen import doccount_reply


def test_timeouts_are_counted_in_summary_report_and_leaderboard(
    tmp_path: Path, doc_data: str, doc_rows: list, server
) -> None:
    """A server slow for some rows: one row times out on every attempt, two answer only after a timed-out
    attempt (a new sample), the rest answer at once. summary.json, summary.md, report.html and the
    leaderboard say how many rows each."""
    given_up, late_a, late_b = (r["image_sha256"] for r in doc_rows[:3])
    script = {given_up: ["slow", "slow"], late_a: ["slow", None], late_b: ["slow", None]}
    server.set_config({"answers": doccount_reply(doc_rows), "script": script, "slow_s": 5})
    run = tmp_path / "sweep" / "slow-run"
    args = [*eval_args(server.base_url, doc_data, run), "--limit", "6", *FAST_RETRIES]
    res = run_cli("evaluate", *args, "--timeout", "0.5", "--max-retries", "1")
    assert res.returncode == 3, res.stderr  # the row given up on is a request error: a re-run retries it
    scored = run_cli("score", "--run-root", str(run))
    assert scored.returncode == 0, scored.stderr
    summary = json.loads((run / "scores" / "summary.json").read_text())
    assert summary["timeouts"] == {"last_attempt_timed_out": 1, "answered_after_timeout": 2}
    sentence = "1 row(s) whose last attempt timed out (request errors), 2 row(s) answered only after"
    assert sentence in (run / "scores" / "summary.md").read_text()
    assert sentence in (run / "scores" / "report.html").read_text()
    board = run_cli("leaderboard", str(tmp_path / "sweep"), "--output", str(tmp_path / "board"))
    assert board.returncode == 0, board.stderr
    [entry] = json.loads((tmp_path / "board" / "leaderboard.json").read_text())["runs"]
    assert entry["timeouts"] == summary["timeouts"]
    table = (tmp_path / "board" / "leaderboard.md").read_text()
    header = next(line for line in table.splitlines() if "Timeouts last / answered after" in line)
    row = next(line for line in table.splitlines() if "slow-run" in line)
    column = [c.strip() for c in header.split("|")].index("Timeouts last / answered after")
    assert [c.strip() for c in row.split("|")][column] == "1 / 2"
    assert "Timeouts last / answered after" in (tmp_path / "board" / "index.html").read_text()


def test_a_timeout_that_is_not_the_last_failure_of_a_given_up_row_is_not_counted(
    tmp_path: Path, doc_data: str, doc_rows: list, server
) -> None:
    """A row given up on after a timeout then a 503 did not end in a timeout; a row that never timed out
    is in neither count."""
    first = doc_rows[0]["image_sha256"]
    server.set_config({"answers": doccount_reply(doc_rows), "script": {first: ["slow", "503"]}, "slow_s": 5})
    run = tmp_path / "r"
    args = [*eval_args(server.base_url, doc_data, run), "--limit", "2", *FAST_RETRIES]
    assert run_cli("evaluate", *args, "--timeout", "0.5", "--max-retries", "1").returncode == 3
    assert run_cli("score", "--run-root", str(run)).returncode == 0
    summary = json.loads((run / "scores" / "summary.json").read_text())
    assert summary["timeouts"] == {"last_attempt_timed_out": 0, "answered_after_timeout": 0}
