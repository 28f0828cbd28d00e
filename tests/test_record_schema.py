"""One record schema (issue 40, point 4): the scored row is read with the record's own Structs, and its
lenient fallback (for a line that does not decode strictly) is derived from the fields the Struct declares.

A record the evaluator writes, with any subset of its fields damaged (a value of the wrong JSON type, or
the field removed; inside usage and a retry error too), still gives a row whose every field has its
declared type and whose intact fields equal the strict decode of the undamaged record."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.core.records import (
    ResponseAttempt,
    ResponseRecord,
    RetryError,
    Sampling,
    Usage,
    lenient_struct,
)
from evaluator.scoring.row import ScoredRow, scored_row

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=5,
)
TEXT = st.none() | st.text(max_size=8)
COUNT = st.none() | st.integers(min_value=0, max_value=10**6)
SECONDS = st.none() | st.floats(min_value=0, max_value=600)
LABELS = st.sampled_from(["ok", "no_tag", "not_integer", "no_response"])
USAGE = st.builds(
    Usage,
    prompt_tokens=COUNT,
    completion_tokens=COUNT,
    total_tokens=COUNT,
    reasoning_tokens=COUNT,
    cached_tokens=COUNT,
)
RETRY = st.builds(
    RetryError,
    attempt=st.integers(0, 5),
    kind=st.sampled_from(["timeout", "http_status", "empty_content"]),
    message=st.text(max_size=8),
    status_code=st.none() | st.integers(400, 599),
    retry_after_s=SECONDS,
    usage=st.none() | USAGE,
    wait_s=SECONDS,
    paced=st.none() | st.booleans(),
)
ATTEMPT = st.builds(
    ResponseAttempt,
    response_text=TEXT,
    reasoning_text=TEXT,
    parse_status=LABELS,
    finish_reason=TEXT,
    response_id=TEXT,
    usage=USAGE,
    latency_s=SECONDS,
    attempts=st.integers(1, 4),
    retry_errors=st.lists(RETRY, max_size=2),
)
RECORD = st.builds(
    ResponseRecord,
    sample_id=st.text(min_size=1, max_size=6),
    benchmark=st.just("doccount"),
    groups=st.dictionaries(st.sampled_from(["target_class", "source"]), st.text(max_size=4), max_size=2),
    ground_truth=COUNT,
    model=st.just("m"),
    backend=st.just("api"),
    sampling=st.just(Sampling(temperature=0.0, top_p=None, max_tokens=64)),
    started_at=st.just("2026-01-01T00:00:00Z"),
    finished_at=st.just("2026-01-01T00:00:01Z"),
    status=st.sampled_from(["ok", "request_error", "data_error"]),
    response_text=TEXT,
    reasoning_text=TEXT,
    parsed_answer=COUNT,
    parse_status=LABELS,
    fallback_answer=COUNT,
    finish_reason=TEXT,
    latency_s=SECONDS,
    usage=USAGE,
    attempts=st.integers(0, 4),
    retry_errors=st.lists(RETRY, max_size=2),
    earlier_attempts=st.lists(ATTEMPT, max_size=2),
    request_error=TEXT,
    image_sha256=TEXT,
    repeat=st.none() | st.integers(0, 4),
)
# outcome and correct are the scorer's, line is the line itself, record_ground_truth takes any value
ROW_FIELDS = [f for f in ScoredRow.__struct_fields__ if f not in ("sample_id", "outcome", "correct", "line")]
TYPES = {f.name: f.type for s in (ScoredRow, Usage, RetryError) for f in msgspec.structs.fields(s)}
REMOVED = object()


def converts(value: Any, tp: Any) -> bool:
    try:
        msgspec.convert(value, tp)
    except msgspec.ValidationError:
        return False
    return True


def damage(data: st.DataObject, obj: dict[str, Any], names: list[str]) -> set[str]:
    """Damage a drawn subset of `names` in `obj` (in place): removed, or a value of the wrong type."""
    hit = data.draw(st.sets(st.sampled_from(names)) if names else st.just(set()))
    for name in hit:
        tp = TYPES[name]
        bad = data.draw(st.just(REMOVED) | JSON.filter(lambda v, tp=tp: not converts(v, tp)))
        if bad is REMOVED:
            obj.pop(name, None)
        else:
            obj[name] = bad
    return hit


def same_except(row: Any, strict: Any, damaged: set[str], fields: list[str]) -> None:
    for name in fields:
        if name not in damaged:
            assert getattr(row, name) == getattr(strict, name), name


@settings(max_examples=200, deadline=None)
@given(RECORD, st.data())
def test_a_damaged_record_keeps_its_intact_fields_as_the_strict_decode_reads_them(
    record: ResponseRecord, data: st.DataObject
) -> None:
    line = record.to_dict()
    strict = msgspec.convert(line, ScoredRow)  # what the evaluator writes decodes strictly
    assert scored_row(line, "ok", True).usage == strict.usage == record.usage
    assert strict.retry_errors == record.retry_errors and strict.earlier_attempts == record.earlier_attempts

    bad = msgspec.json.decode(msgspec.json.encode(line))  # a deep copy to damage
    hit = damage(data, bad, [f for f in ROW_FIELDS if f != "record_ground_truth"])
    usage_hit: set[str] = set()
    if "usage" not in hit:
        usage_hit = damage(data, bad["usage"], list(Usage.__struct_fields__))
    error_hit: set[str] = set()
    if "retry_errors" not in hit and bad["retry_errors"]:
        error_hit = damage(data, bad["retry_errors"][0], list(RetryError.__struct_fields__))

    row = scored_row(bad, "ok", True)
    # every field has its declared type: msgspec's strict validator is the oracle
    msgspec.json.decode(msgspec.json.encode(msgspec.structs.replace(row, line={})), type=ScoredRow)
    same_except(row, strict, hit | {"usage", "retry_errors"}, ROW_FIELDS)
    if "usage" not in hit:
        same_except(row.usage, strict.usage, usage_hit, list(Usage.__struct_fields__))
    if "retry_errors" not in hit:
        assert len(row.retry_errors) == len(strict.retry_errors)
        assert row.retry_errors[1:] == strict.retry_errors[1:]
        if strict.retry_errors:
            fields = list(RetryError.__struct_fields__)
            same_except(row.retry_errors[0], strict.retry_errors[0], error_hit, fields)
    assert row.line is bad and row.sample_id == record.sample_id


def test_the_row_holds_the_records_own_structs() -> None:
    row_types = {f.name: f.type for f in msgspec.structs.fields(ScoredRow)}
    record_types = {f.name: f.type for f in msgspec.structs.fields(ResponseRecord)}
    assert row_types["retry_errors"] == record_types["retry_errors"] == list[RetryError]
    assert row_types["earlier_attempts"] == record_types["earlier_attempts"] == list[ResponseAttempt]
    assert row_types["usage"] == record_types["usage"] | None


def test_the_lenient_path_reads_every_declared_field() -> None:
    """The fallback has no list of its own: every field the Struct declares is read, and a wrong type
    in any of them still gives the others."""
    line = {name: TYPES_SAMPLE[name] for name in ROW_FIELDS} | {"sample_id": "q", "attempts": "three"}
    row = lenient_struct(ScoredRow, line)
    for name in ROW_FIELDS:
        if name != "attempts":
            assert getattr(row, name) == msgspec.convert(TYPES_SAMPLE[name], TYPES[name]), name
    assert row.attempts is None
    assert set(TYPES_SAMPLE) == set(ROW_FIELDS)  # a field added to ScoredRow needs a sample value here


TYPES_SAMPLE: dict[str, Any] = {
    "repeat": 2,
    "status": "ok",
    "ground_truth": 7,
    "groups": {"target_class": "Table"},
    "image_sha256": "ab",
    "parsed_answer": 6,
    "parse_status": "ok",
    "response_text": "<answer>6</answer>",
    "reasoning_text": "hm",
    "finish_reason": "stop",
    "latency_s": 1.5,
    "attempts": 2,
    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    "retry_errors": [{"attempt": 1, "kind": "timeout", "message": "slow"}],
    "earlier_attempts": [],
    "request_error": None,
    "data_error": None,
    "request_sha256": "cd",
    "fallback_answer": 6,
    "record_ground_truth": "7",
    "benchmark": "doccount",
    "model": "m",
    "backend": "api",
    "sampling": {"temperature": 0.0, "top_p": None, "max_tokens": 64},
    "started_at": "2026-01-01T00:00:00Z",
    "finished_at": "2026-01-01T00:00:01Z",
    "schema_version": 1,
    "response_id": "r",
    "system_fingerprint": "fp",
    "endpoint": "http://127.0.0.1:8000/v1",
    "inline_think": True,
    "seed": 3,
    "batch_id": "b",
    "protocol_anomalies": ["choices"],
}


@pytest.mark.parametrize("value", [3, "three", None])
def test_a_field_added_to_the_struct_is_read_by_the_lenient_path_with_no_other_edit(value: Any) -> None:
    class Grown(ScoredRow, kw_only=True):
        new_count: int | None = None

    line = {"sample_id": "q", "status": "ok", "ground_truth": 1, "groups": {}, "new_count": value}
    line["usage"] = {"total_tokens": "many", "prompt_tokens": 4}  # forces the lenient path
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(line, Grown)
    grown = lenient_struct(Grown, line)
    assert grown.new_count == (value if isinstance(value, int) else None)
    assert grown.usage == Usage(prompt_tokens=4)
    assert {f.name for f in msgspec.structs.fields(Grown)} == set(ScoredRow.__struct_fields__) | {"new_count"}
