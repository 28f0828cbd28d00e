"""The scored row: one question (and repeat) of a merged run, typed, as scoring, the report and the archive
read it; and the question row that groups a question's repeats for comparisons.

A row is the response record as read back (evaluator.core.records.RecordLine, with its lenient decode)
plus the scorer's fields. It is made once, where the records are read (evaluator.scoring.merge,
`read_scored_rows`), from the record that counted, or built by the merge for a question with no record
(its line holds MISSING_FIELDS: `missing_line`). `line` is that record as responses.jsonl holds it (the record's own fields, unknown ones
kept, plus `correct`, `outcome` and the group fields): the one thing written, so a record keeps its bytes
whatever it carried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.jsonl import JSONObject
from evaluator.core.records import Key, RecordLine, RetryError, read_record
from evaluator.runfolder.files import read_jsonl

MISSING_FIELDS = (
    *("sample_id", "benchmark", "groups", "ground_truth", "model", "backend", "image_sha256", "data_error"),
    *("status", "response_text", "parsed_answer", "parse_status", "correct", "outcome"),
)
"""The fields a `missing` row's line holds (with `repeat` under --repeats, and the group fields)."""


class ScoredRow(RecordLine, kw_only=True):
    """One row of responses.jsonl: the record's fields as read back, then the scorer's."""

    outcome: str = "missing"
    """ok, parse_failure, request_error, data_error or missing (evaluator.scoring.base.OUTCOMES)."""
    record_ground_truth: Any = msgspec.UNSET
    """The ground truth the record carried (any JSON value), when it differed from the manifest's; UNSET
    when it agreed."""
    line: JSONObject = msgspec.field(default_factory=dict)
    """The row as responses.jsonl holds it (JSON-ready; written as is)."""

    @property
    def failed_attempts(self) -> list[RetryError]:
        """Every failed attempt the record holds, its earlier (parse-retried) attempts' included."""
        return [*self.retry_errors, *(e for a in self.earlier_attempts for e in a.retry_errors)]

    @property
    def key(self) -> Key:
        """(sample_id, repeat), repeat 0 without --repeats (evaluator.core.records.record_key)."""
        return (self.sample_id, self.repeat or 0)


class ScoredQuestion(msgspec.Struct, frozen=True):
    """One question of a run for comparisons: its K rows (one without --repeats), in repeat order."""

    rows: list[ScoredRow]

    @property
    def sample_id(self) -> str:
        return self.rows[0].sample_id

    @property
    def image_sha256(self) -> str | None:
        return self.rows[0].image_sha256

    @property
    def ground_truth(self) -> int | None:
        return self.rows[0].ground_truth

    @property
    def groups(self) -> JSONObject:
        return self.rows[0].groups

    @property
    def correct(self) -> bool | float:
        """Right or wrong without repeats; with them, the mean correctness over the K repeats."""
        if len(self.rows) == 1:
            return self.rows[0].correct
        return sum(r.correct for r in self.rows) / len(self.rows)


def scored_row(line: JSONObject, outcome: str, correct: bool) -> ScoredRow:
    """The typed row over `line` (a record with a str sample_id: runfolder.selection), with the scorer's
    outcome and correctness (evaluator.core.records.read_record: a field of the wrong type reads as None)."""
    row = read_record(ScoredRow, line)
    row.outcome, row.correct, row.line = outcome, correct, line
    return row


def missing_line(row: ScoredRow) -> JSONObject:
    """The line of a `missing` row (built by the scorer): MISSING_FIELDS, the repeat with one, and the group
    fields."""
    line: JSONObject = {name: getattr(row, name) for name in MISSING_FIELDS}
    if row.repeat is not None:
        line["repeat"] = row.repeat
    for k, v in row.groups.items():
        line.setdefault(k, v)
    return line


def row_from_line(line: JSONObject) -> ScoredRow | None:
    """A row of a responses.jsonl already written (its own correct and outcome); None for a line without a
    str sample_id. A repeat that is not a non-negative int reads as 0 (evaluator.core.records.record_key)."""
    if not isinstance(line.get("sample_id"), str):
        return None
    outcome = line.get("outcome")
    return scored_row(line, outcome if isinstance(outcome, str) else "missing", line.get("correct") is True)


def read_scored_rows(path: Path) -> list[ScoredRow]:
    """The rows of a responses.jsonl (lines that are not rows are skipped)."""
    return [
        row for line in read_jsonl(path).records if isinstance(line, dict) and (row := row_from_line(line))
    ]


def question_rows(rows: list[ScoredRow], k: int) -> list[ScoredQuestion]:
    """One question row per question of a merged run (its K consecutive rows with --repeats K)."""
    return [ScoredQuestion(rows[i : i + k]) for i in range(0, len(rows), k)]


def responses_of(qrows: list[ScoredQuestion]) -> list[ScoredRow]:
    """The rows (responses) behind question rows."""
    return [r for q in qrows for r in q.rows]
