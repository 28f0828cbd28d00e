"""Chaos: the loopback server injects random faults into 30% of responses; the run still accounts for
every row exactly once, scores exactly what the endpoint answered, and every fault it survived is
visible, attempt by attempt, in the record of the row it hit.

The server's request log is the ground truth: it says which fault each request got, in order, per image
(each test image is unique, so an image identifies a row).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from support import launch
from support.cli import SCORE, clean_env, fast_eval_cmd, read_records

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import datagen  # noqa: E402
from support.openai_test_server import RETRY_ERROR_OF_FAULT, TestServer  # noqa: E402

pytestmark = pytest.mark.timeout(180)


RETRY_AFTER_S = 0.3
TIMEOUT_S = 3.0


def run(cmd: list[str], timeout: float = 150) -> subprocess.CompletedProcess:
    return launch.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=timeout)


def requests_by_image(srv: TestServer) -> dict[str, list[dict[str, Any]]]:
    by_image: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for req in sorted(srv.requests(), key=lambda r: r["n"]):
        by_image[req["image_sha256"]].append(req)
    return by_image


def test_random_faults_every_row_once_all_faults_recorded(tmp_path: Path) -> None:
    n_rows = 300
    rows = datagen.doccount_rows(n_rows)
    assert len({r["image_sha256"] for r in rows}) == n_rows  # an image identifies its row
    wrong = {r["sample_id"] for r in rows[::10]}  # the endpoint answers these wrongly
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-00000-of-00002.parquet", rows[:150])
    datagen.write_doccount(data / "test-00001-of-00002.parquet", rows[150:])
    config = {
        "answers": datagen.doccount_reply(rows, wrong=wrong),
        "fault_rate": 0.3,
        "faults": sorted(RETRY_ERROR_OF_FAULT),
        "retry_after": RETRY_AFTER_S,
        "slow_s": TIMEOUT_S + 5,
        "seed": 20260101,
    }
    root = tmp_path / "run"
    with TestServer(config) as srv:
        proc = run(
            fast_eval_cmd(
                srv.base_url,
                data,
                root,
                "--quiet",
                "--concurrency",
                "16",
                "--max-retries",
                "12",
                timeout=TIMEOUT_S,
            )
        )
        by_image = requests_by_image(srv)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr

    records = read_records(root)
    ids = [r["sample_id"] for r in records]
    assert sorted(ids) == sorted(r["sample_id"] for r in rows)  # every row exactly once
    assert len(ids) == len(set(ids)) == n_rows

    truth = {r["sample_id"]: r for r in rows}
    injected: Counter[str] = Counter()
    for rec in records:
        row = truth[rec["sample_id"]]
        assert rec["status"] == "ok", rec
        expected_answer = row["answer"] + (1 if rec["sample_id"] in wrong else 0)
        assert rec["parsed_answer"] == expected_answer
        assert rec["correct"] is (rec["sample_id"] not in wrong)
        # The record's attempts are exactly the server's requests for this image, fault for fault.
        reqs = by_image[row["image_sha256"]]
        faults = [q["fault"] for q in reqs]
        assert faults[-1] is None and None not in faults[:-1], (rec["sample_id"], faults)
        assert rec["attempts"] == len(reqs)
        got = [(e["kind"], e["status_code"]) for e in rec["retry_errors"]]
        assert got == [RETRY_ERROR_OF_FAULT[f] for f in faults[:-1]], (rec["sample_id"], faults, got)
        assert [e["attempt"] for e in rec["retry_errors"]] == list(range(1, len(reqs)))
        # Every retry re-sent the same bytes that the record's hash names.
        assert {q["body_sha256"] for q in reqs} == {rec["request_sha256"]}
        for fault, err in zip(faults, rec["retry_errors"], strict=False):
            injected[fault] += 1
            if fault == "429":  # Retry-After is read and honoured
                assert err["retry_after_s"] == pytest.approx(RETRY_AFTER_S)
            if fault == "429_no_retry_after":
                assert err["retry_after_s"] is None
        for prev, nxt, fault in zip(reqs, reqs[1:], faults, strict=False):
            if fault == "429":
                assert nxt["time"] - prev["time"] >= RETRY_AFTER_S - 0.02
    # Every fault kind was injected (the seed makes this deterministic) and none went unrecorded.
    all_faults = Counter(q["fault"] for reqs in by_image.values() for q in reqs if q["fault"])
    assert set(all_faults) == set(RETRY_ERROR_OF_FAULT), all_faults
    assert injected == all_faults
    assert sum(all_faults.values()) >= 0.2 * sum(len(v) for v in by_image.values())

    score = run([*SCORE, "--run-root", str(root)])
    assert score.returncode == 0, score.stderr
    merged = [json.loads(line) for line in (root / "responses.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in merged) == sorted(truth)
    assert sum(1 for r in merged if r["correct"] is True) == n_rows - len(wrong)
    assert (root / "scores" / "summary.json").exists()


def test_degenerate_replies_do_not_crash_the_run(tmp_path: Path) -> None:
    """A model looping until max_tokens (thousands of digits) is a parse failure, not a crash."""
    rows = datagen.doccount_rows(4)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    answers = datagen.doccount_reply(rows)
    answers[rows[0]["image_sha256"]] = "<answer>" + "9" * 5000 + "</answer>"
    answers[rows[1]["image_sha256"]] = "The count is " + "1" * 6000
    root = tmp_path / "run"
    with TestServer({"answers": answers}) as srv:
        proc = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", timeout=TIMEOUT_S))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    recs = {r["sample_id"]: r for r in read_records(root)}
    assert len(recs) == 4
    assert recs[rows[0]["sample_id"]]["parse_status"] == "not_integer"
    assert recs[rows[1]["sample_id"]]["parse_status"] == "no_tag"
    for r in rows[:2]:
        assert recs[r["sample_id"]]["status"] == "ok" and recs[r["sample_id"]]["correct"] is False
        assert recs[r["sample_id"]]["parsed_answer"] is None
    for r in rows[2:]:
        assert recs[r["sample_id"]]["correct"] is True


def test_text_without_a_utf8_form_and_huge_answers_are_recorded_scored_and_reported(tmp_path: Path) -> None:
    """A lone surrogate in a reply ("\\ud800" is valid JSON, not valid UTF-8) once hung the record writer; a
    30-digit answer must stay exact through the records, the merge and responses.jsonl."""
    rows = datagen.doccount_rows(3)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    answers = datagen.doccount_reply(rows)
    odd_text = f"odd \ud800 text, {rows[0]['answer']} regions\n<answer>{rows[0]['answer']}</answer>"
    huge = 123456789012345678901234567890
    answers[rows[0]["image_sha256"]] = odd_text
    answers[rows[1]["image_sha256"]] = f"<answer>{huge}</answer>"
    root = tmp_path / "run"
    with TestServer({"answers": answers}) as srv:
        proc = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", timeout=TIMEOUT_S), timeout=60)
    assert proc.returncode == 0, proc.stderr
    recs = {r["sample_id"]: r for r in read_records(root)}
    assert recs[rows[0]["sample_id"]]["response_text"] == odd_text
    assert recs[rows[0]["sample_id"]]["correct"] is True
    assert recs[rows[1]["sample_id"]]["parsed_answer"] == huge

    proc = run([*SCORE, "--run-root", str(root)], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "not written" not in proc.stderr, proc.stderr
    merged = {
        r["sample_id"]: r for r in map(json.loads, (root / "responses.jsonl").read_bytes().splitlines())
    }
    assert merged[rows[0]["sample_id"]]["response_text"] == odd_text
    assert merged[rows[1]["sample_id"]]["parsed_answer"] == huge
    assert merged[rows[1]["sample_id"]]["correct"] is False
    summary = json.loads((root / "scores" / "summary.json").read_text())
    assert (summary["primary"]["correct"], summary["primary"]["questions"]) == (2, 3)
    report = (root / "scores" / "report.html").read_text(encoding="utf-8")
    assert "odd \ufffd text" in report
    assert not list((root / "scores").glob("*.tmp"))


def test_non_retryable_errors_are_sent_once_and_retried_on_the_next_run(tmp_path: Path) -> None:
    rows = datagen.doccount_rows(4)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    bad = rows[1]["image_sha256"]
    config = {"answers": datagen.doccount_reply(rows), "script": {bad: ["400"]}}
    root = tmp_path / "run"
    with TestServer(config) as srv:
        first = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", timeout=TIMEOUT_S))
        assert first.returncode == 3, first.stderr
        assert "1 request(s) failed after retries" in first.stderr
        assert [q["image_sha256"] for q in srv.requests()].count(bad) == 1  # not hammered
        rec = {r["sample_id"]: r for r in read_records(root)}[rows[1]["sample_id"]]
        assert rec["status"] == "request_error" and rec["attempts"] == 1
        assert rec["request_error"].startswith("HTTP 400")
        srv.reset()
        second = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", timeout=TIMEOUT_S))
        assert second.returncode == 0, second.stderr
        assert [q["image_sha256"] for q in srv.requests()] == [bad]  # only the failed row again
    latest = {r["sample_id"]: r for r in read_records(root)}
    assert all(r["status"] == "ok" and r["correct"] for r in latest.values())
