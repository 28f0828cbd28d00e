"""The typed row (evaluator.scoring.row): whatever JSON a record line holds, its typed fields have their
declared types (checked by msgspec's own validator), its line is kept as read, and its key is the
record's key."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.core.records import lenient_struct, record_key
from evaluator.scoring.row import (
    ScoredRow,
    question_rows,
    responses_of,
    row_from_line,
    scored_row,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
FIELDS = [f for f in ScoredRow.__struct_fields__ if f not in ("line", "sample_id")]
TEXT = st.none() | st.text(max_size=8)
COUNT = st.none() | st.integers(min_value=0, max_value=50)
DICTS = st.lists(st.dictionaries(st.text(max_size=3), JSON, max_size=2), max_size=2)
# a value of each field's declared type: lines made only of these take msgspec's fast path
TYPED = {
    "repeat": st.none() | st.integers(min_value=-2, max_value=5),
    "status": st.sampled_from(["ok", "request_error", "missing"]),
    "outcome": st.sampled_from(["ok", "parse_failure"]),
    "correct": st.booleans(),
    "ground_truth": COUNT,
    "groups": st.dictionaries(st.text(max_size=5), JSON, max_size=2),
    "parsed_answer": st.none() | st.integers(),
    "latency_s": st.none() | st.integers(min_value=0, max_value=9) | st.floats(allow_nan=False),
    "attempts": COUNT,
    "fallback_answer": COUNT,
    "usage": st.none() | st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    "retry_errors": DICTS,
    "earlier_attempts": DICTS,
    "record_ground_truth": JSON,
}
REQUIRED = ("status", "ground_truth", "groups")
TYPED_LINE = st.fixed_dictionaries(
    {"sample_id": st.text(min_size=1, max_size=6)} | {name: TYPED[name] for name in REQUIRED},
    optional={name: TYPED.get(name, TEXT) for name in FIELDS if name not in REQUIRED}
    | {"unknown_field": JSON},
)
ANY_LINE = st.fixed_dictionaries(
    {"sample_id": st.text(min_size=1, max_size=6)},
    optional={name: TYPED.get(name, TEXT) | JSON for name in FIELDS} | {"unknown_field": JSON},
)
LINE = TYPED_LINE | ANY_LINE


# One drawn line for both properties (a row of the declared types; a written row reading back): drawing
# LINE is nearly all of their cost, and the second now sees the first's 300 examples (it had 100).
@settings(max_examples=300, deadline=None)
@given(LINE, st.sampled_from(["ok", "parse_failure", "missing"]), st.booleans())
def test_every_line_gives_a_row_of_the_declared_types_and_a_written_row_reads_back(
    line: dict[str, Any], outcome: str, correct: bool
) -> None:
    check_every_line_gives_a_row_of_the_declared_types(line, outcome, correct)
    check_a_written_row_reads_back_with_its_own_outcome_and_correct(line)


def check_every_line_gives_a_row_of_the_declared_types(
    line: dict[str, Any], outcome: str, correct: bool
) -> None:
    row = scored_row(line, outcome, correct)
    assert row.line is line  # the bytes written come from the line as read, unknown fields included
    # msgspec's strict validator is the oracle: a field of the wrong JSON type would be refused here
    back = msgspec.json.decode(msgspec.json.encode(msgspec.structs.replace(row, line={})), type=ScoredRow)
    assert back.sample_id == line["sample_id"] and back.outcome == outcome and back.correct is correct
    assert row.key == record_key(line)
    # the fast path (msgspec.convert) and the field-by-field one give the same row
    slow = lenient_struct(ScoredRow, line)
    slow.outcome, slow.correct, slow.line = outcome, correct, line
    assert msgspec.json.encode(row) == msgspec.json.encode(slow)  # same values, and same types (5 is not 5.0)


def check_a_written_row_reads_back_with_its_own_outcome_and_correct(line: dict[str, Any]) -> None:
    row = row_from_line({**line, "outcome": "ok", "correct": True})
    assert row is not None and (row.outcome, row.correct) == ("ok", True)
    assert row_from_line({**line, "sample_id": 7}) is None  # not a row: no str sample_id


def test_wrong_types_read_as_none_and_labels_keep_their_text() -> None:
    line = {
        "sample_id": "q",
        "ground_truth": True,  # a bool is not a count
        "parsed_answer": "3",
        "latency_s": "fast",
        "usage": [1],
        "retry_errors": [{"kind": "timeout"}, "junk"],
        "earlier_attempts": "no",
        "parse_status": 5,
        "finish_reason": None,
        "repeat": -1,
    }
    row = scored_row(line, "ok", False)
    assert (row.ground_truth, row.parsed_answer, row.latency_s, row.usage) == (None, None, None, None)
    # an object for a Struct is read field by field; what is not an object is left out
    assert [(e.kind, e.message, e.attempt) for e in row.retry_errors] == [("timeout", "", 0)]
    assert row.earlier_attempts == []
    assert (row.parse_status, row.finish_reason) == ("5", None)
    assert row.repeat is None and row.key == ("q", 0)
    assert row.record_ground_truth is msgspec.UNSET


def test_question_rows_group_repeats_and_mean_their_correctness() -> None:
    lines = [{"sample_id": s, "repeat": r} for s in ("a", "b") for r in range(3)]
    rows = [scored_row(x, "ok", x["repeat"] != 1 or x["sample_id"] == "b") for x in lines]
    qrows = question_rows(rows, 3)
    assert [q.sample_id for q in qrows] == ["a", "b"]
    assert [q.correct for q in qrows] == [2 / 3, 1.0]
    assert responses_of(qrows) == rows
    single = question_rows(rows[:1], 1)
    assert single[0].correct is True  # without repeats: right or wrong, not a mean
