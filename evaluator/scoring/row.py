"""The scored row: one question (and repeat) of a merged run, typed, as scoring, the report and the archive
read it; and the question row that groups a question's repeats for comparisons.

A row is made once, where the records are read (evaluator.scoring.merge, `read_scored_rows`), from the
record that counted (or the scorer's `missing` row). Its typed fields are what every metric, page and
check reads; usage, retry errors and earlier attempts are the record's own Structs (evaluator.core.records).
`line` is that record as responses.jsonl holds it (the record's own fields, unknown ones kept, plus
`correct`, `outcome` and the group fields): the one thing written, so a record keeps its bytes whatever it
carried. A field of the wrong JSON type (a hand-edited or crafted file) reads as None (or
empty), never as a value of another type; labels (status, parse_status, finish_reason) keep their text.
That fallback is derived from the fields ScoredRow declares (evaluator.core.lenient), not listed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec

from evaluator.core.jsonl import JSONObject
from evaluator.core.keys import Key
from evaluator.core.lenient import LABEL, lenient_struct
from evaluator.core.records import ResponseAttempt, RetryError, Usage
from evaluator.runfolder.files import read_jsonl

Label = Annotated[str | None, LABEL]


class ScoredRow(msgspec.Struct, kw_only=True):
    """One row of responses.jsonl."""

    sample_id: str
    """The question's id."""
    repeat: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The repeat index 0..K-1 with --repeats K > 1; None without (a record leaves it out), or when it is
    not a non-negative int."""
    status: Annotated[str, LABEL]
    """The record's status: ok, request_error, data_error; `missing` when no record counted."""
    outcome: str = "missing"
    """ok, parse_failure, request_error, data_error or missing (evaluator.scoring.base.OUTCOMES)."""
    correct: bool = False
    """The parsed answer equals the manifest's ground truth (recomputed by the scorer)."""
    ground_truth: int | None
    """The manifest's true count."""
    groups: JSONObject
    """The manifest's subgroup fields."""
    image_sha256: str | None = None
    parsed_answer: int | None = None
    parse_status: Label = None
    response_text: str | None = None
    reasoning_text: str | None = None
    finish_reason: Label = None
    latency_s: int | float | None = None
    """Seconds of the answered attempt, as the record holds it."""
    attempts: int | None = None
    usage: Usage | None = None
    """The answer's usage (a count of the wrong type reads as None)."""
    retry_errors: list[RetryError] = msgspec.field(default_factory=list)
    earlier_attempts: list[ResponseAttempt] = msgspec.field(default_factory=list)
    request_error: str | None = None
    data_error: str | None = None
    request_sha256: str | None = None
    fallback_answer: int | None = None
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
        """(sample_id, repeat), repeat 0 without --repeats (evaluator.core.keys.record_key)."""
        return (self.sample_id, self.repeat or 0)


class ScoredQuestion(msgspec.Struct, frozen=True):
    """One question of a run for comparisons: its K rows (one without --repeats), in repeat order."""

    rows: list[ScoredRow]

    @property
    def first(self) -> ScoredRow:
        return self.rows[0]

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
    outcome and correctness.

    A line whose every field has its declared type (what the evaluator writes) is converted by msgspec
    (C speed: a 100k-row run); any other goes field by field, a field of the wrong type read as None.
    Both give the same row (tests/test_scored_row.py, tests/test_record_schema.py)."""
    try:
        row = msgspec.convert(line, ScoredRow)
    except msgspec.ValidationError:
        row = lenient_row(line)
    row.outcome, row.correct, row.line = outcome, correct, line
    return row


def lenient_row(line: JSONObject) -> ScoredRow:
    """The row field by field, each field as ScoredRow declares it (evaluator.core.lenient)."""
    return lenient_struct(ScoredRow, line)


def row_from_line(line: JSONObject) -> ScoredRow | None:
    """A row of a responses.jsonl already written (its own correct and outcome); None for a line without a
    str sample_id. A repeat that is not a non-negative int reads as 0 (evaluator.core.keys.record_key)."""
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
