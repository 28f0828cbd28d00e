"""The JSON Lines codec (evaluator/core/jsonl.py) against the standard library it replaces for speed.

Decoding must give exactly what json.loads gives, line for line, including integers beyond 64 bits,
NaN, lone surrogates and lines json.loads refuses; encoding must read back to the same value and be
compact with sorted keys.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator.core.jsonl import (
    NotJSON,
    decode_line,
    decode_strict_lines,
    encode_row,
    encode_rows,
    file_lines,
    split_lines,
)
from evaluator.runfolder.files import parse_jsonl

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 5, max_value=2**70)
    | st.integers(min_value=-(2**70), max_value=-(2**63) + 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
# Lines json.loads reads but strict JSON does not allow, and lines nobody reads.
ODD = st.sampled_from(
    [
        b'{"a": NaN}',
        b'{"a": -Infinity, "b": [Infinity]}',
        b'{"a": "\\ud800"}',
        b'{"a": "x\\udfff y"}',
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": 1e400}',
        b'{"a": "\xed\xa0\x80"}',
        b'{"a": 1} {"b": 2}',
        b'{"a": "\xff"}',
        b'{"a": 1,}',
        b'{"a": 01}',
        b'{"a": "tab\there"}',
        b'{"a": ' + b"1" * 5000 + b"}",
        b"[" * 3000 + b"]" * 3000,
        b"",
        b"   ",
        b"\r",
        b"7",
        b'"text"',
        b'{"a": 1',
    ]
)


def _same(a: Any, b: Any) -> bool:
    """Equality that also holds for NaN and tells 1 from 1.0 and True from 1."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _stdlib(line: bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(line)
    except (ValueError, RecursionError):
        return False, None


@FAST
@given(value=VALUES, spaced=st.booleans(), ascii_only=st.booleans())
def test_decode_line_is_json_loads_on_json(value: Any, spaced: bool, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":"))
    line = text.encode("utf-8")
    decoded, lenient = decode_line(line)
    assert _same(decoded, json.loads(line))
    assert not lenient


@FAST
@given(line=ODD)
def test_decode_line_agrees_with_json_loads_on_odd_lines(line: bytes) -> None:
    ok, expected = _stdlib(line)
    if not ok:
        with pytest.raises(NotJSON):
            decode_line(line)
        return
    decoded, lenient = decode_line(line)
    assert _same(decoded, expected)


def test_huge_integers_stay_exact() -> None:
    for n in (2**63, 2**64, -(2**63) - 1, 10**40, -(10**40)):
        line = json.dumps({"parsed_answer": n, "x": 1.5}).encode()
        decoded, lenient = decode_line(line)
        assert decoded["parsed_answer"] == n and isinstance(decoded["parsed_answer"], int)
        assert not lenient
        assert json.loads(encode_row(decoded)) == decoded


def _plain_parse(data: bytes) -> tuple[list[Any], list[int], bool, set[int]]:
    """The line-by-line json.loads reading parse_jsonl must reproduce (+ which records strict JSON refuses)."""
    records, bad, torn, lenient = [], [], False, set()
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        ok, obj = _stdlib(line)
        if ok and isinstance(obj, dict):
            if decode_strict_lines([line]) is None:
                lenient.add(len(records))
            records.append(obj)
        elif i == len(lines) - 1:
            torn = True
        else:
            bad.append(i + 1)
    return records, bad, torn, lenient


@FAST
@given(
    data=st.binary(max_size=40) | st.lists(st.sampled_from([b"a", b"\n", b"{}"]), max_size=8).map(b"".join)
)
def test_split_lines_is_bytes_split(data: bytes) -> None:
    assert [v.tobytes() for v in split_lines(data)] == data.split(b"\n")


# The encoding and the parsing properties draw their rows from one example: drawing nested VALUES is
# nearly all of their cost (~35 ms an example), so 300 examples of each shared one draw.
@FAST
@given(
    rows=st.lists(st.dictionaries(st.text(max_size=6), VALUES, max_size=5), max_size=6),
    odd=st.lists(st.tuples(st.integers(0, 6), ODD), max_size=3),
    newline=st.booleans(),
    cut=st.none() | st.integers(0, 40),
)
def test_encoded_rows_read_back_and_parse_jsonl_is_the_stdlib_read(rows, odd, newline, cut) -> None:
    check_encoded_rows_read_back_compact_and_sorted(rows)
    check_parse_jsonl_is_the_line_by_line_stdlib_read(rows, odd, newline, cut)


def check_parse_jsonl_is_the_line_by_line_stdlib_read(records, odd, newline, cut) -> None:
    lines = [json.dumps(r).encode() for r in records]
    for at, line in odd:
        lines.insert(min(at, len(lines)), line)
    data = b"\n".join(lines) + (b"\n" if newline and lines else b"")
    if cut is not None:
        data = data[: max(0, len(data) - cut)]
    report = parse_jsonl(data)
    expected, bad, torn, lenient = _plain_parse(data)
    assert len(report.records) == len(expected)
    assert all(_same(a, b) for a, b in zip(report.records, expected, strict=True))
    assert (report.bad_lines, report.torn_tail, report.lenient) == (bad, torn, lenient)


def check_encoded_rows_read_back_compact_and_sorted(rows) -> None:
    data = encode_rows(rows)
    assert data == b"".join(encode_row(r) for r in rows)
    lines = data.split(b"\n")
    assert lines.pop() == b""
    for line, row in zip(lines, rows, strict=True):
        assert _same(json.loads(line), json.loads(json.dumps(row, sort_keys=True)))
        back = json.loads(line)
        assert list(back) == sorted(back)
        assert b"\n" not in line


def test_lenient_rows_keep_nan_and_lone_surrogates() -> None:
    rows = [{"b": float("nan"), "a": 1}, {"t": "x\ud800y", "é": 2}, {"a": "plain", "é": 1}]
    data = encode_rows(rows, lenient=[0])
    lines = data.split(b"\n")[:-1]
    assert lines[0] == b'{"a":1,"b":NaN}'  # NaN kept (msgspec would write null)
    assert lines[1] == b'{"t":"x\\ud800y","\\u00e9":2}'  # no UTF-8 form: ASCII escapes
    assert lines[2] == '{"a":"plain","é":1}'.encode()
    assert math.isnan(json.loads(lines[0])["b"])
    assert json.loads(lines[1])["t"] == "x\ud800y"
    assert encode_rows(rows, lenient=[0]) == data  # the same bytes every time


def test_file_lines_reads_lines_and_skips_those_over_the_cap() -> None:
    f = io.BytesIO(b"a\n" + b"b" * 50 + b"\nc\n" + b"d" * 30)
    assert list(file_lines(f, 10)) == [b"a\n", b"c\n"]  # the 30 d's have no newline and are over the cap
    f = io.BytesIO(b"one\ntwo")
    assert list(file_lines(f, 10)) == [b"one\n", b"two"]
