"""The one selection rule over responses.partial.jsonl, used by resume, score, report and archive.

- A record is *valid* when `record_problem` finds nothing wrong with it; invalid records are ignored
  everywhere (score warns about them), so they never hide or replace a good one.
- File order is completion order: for each question (`record_key`), the latest valid record counts.
- A question is *done* (resume does not send it again) when that record `is_done`.

The column-wise resume path applies the same rule to the `COLUMNS` alone (`done_keys_from_columns`;
tests/test_perf_paths.py checks both agree): a new key field goes in all three. The rule reads plain JSON
objects: it is the gate a record passes to be read typed at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evaluator.core.jsonl import JSONObject
from evaluator.core.records import Key, record_key, record_repeat

RECORD_STATUSES = ("ok", "request_error", "data_error")
# The fields the selection reads, with their Arrow types (the column-wise resume reads only these).
COLUMNS: dict[str, str] = {
    "sample_id": "string",
    "status": "string",
    "parsed_answer": "int64",
    "repeat": "int64",
}


def record_problem(rec: JSONObject) -> str | None:
    """Why a record is not a valid response record, or None."""
    sid = rec.get("sample_id")
    if not isinstance(sid, str) or not sid:
        return "no sample_id"
    if rec.get("status") not in RECORD_STATUSES:
        return f"status {rec.get('status')!r}"
    answer = rec.get("parsed_answer")
    if answer is not None and (not isinstance(answer, int) or isinstance(answer, bool)):
        return f"parsed_answer {answer!r}"
    if record_repeat(rec) is None:
        return f"repeat {rec.get('repeat')!r}"
    return None


def is_done(rec: JSONObject) -> bool:
    """Finished for resumption: an ok response with a parsed answer."""
    return rec.get("status") == "ok" and rec.get("parsed_answer") is not None


def latest_valid(
    records: Iterable[JSONObject],
) -> tuple[dict[Key, JSONObject], list[JSONObject], list[str]]:
    """The latest valid record per question (first-seen order), every valid record, and the invalid
    ones described as "record N (problem)" (N counts from 1 in `records`)."""
    latest: dict[Key, JSONObject] = {}
    valid: list[JSONObject] = []
    malformed: list[str] = []
    for i, rec in enumerate(records):
        problem = record_problem(rec)
        if problem:
            malformed.append(f"record {i + 1} ({problem})")
            continue
        valid.append(rec)
        latest[record_key(rec)] = rec
    return latest, valid, malformed


def done_keys(records: Iterable[JSONObject]) -> set[Key]:
    """The questions whose latest valid record is done."""
    latest, _, _ = latest_valid(records)
    return {key for key, rec in latest.items() if is_done(rec)}


def done_keys_from_columns(columns: dict[str, list[Any]]) -> set[Key]:
    """done_keys over the COLUMNS of every record (Arrow-typed: parsed_answer and repeat are ints or None),
    without building a record per row: record_problem, record_key and is_done on those fields."""
    latest: dict[Key, bool] = {}
    for sid, status, answer, repeat in zip(
        columns["sample_id"], columns["status"], columns["parsed_answer"], columns["repeat"], strict=True
    ):
        if not sid or status not in RECORD_STATUSES or (repeat is not None and repeat < 0):
            continue  # not a valid record (record_problem)
        latest[(sid, repeat or 0)] = status == "ok" and answer is not None
    return {key for key, done in latest.items() if done}
