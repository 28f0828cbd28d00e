"""Property tests: the answer parsers and the crash-tolerant JSONL reader.

Parsers: total (never raise, whatever the model sends), and they read back what the protocol says.
Reader: records written by the real RecordWriter, then torn at ANY byte offset (a kill mid-write),
read back as exactly the complete prefix; a resumed writer appends after the torn line without
losing or merging records.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evaluator.core.records import ResponseRecord, RetryError, Sampling, Usage
from evaluator.data.parsing import last_integer_fallback, parse_answer_tag, parse_countqa
from evaluator.runfolder.files import PARTIAL, RecordWriter, read_jsonl

pytestmark = pytest.mark.timeout(120)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WS = st.text(alphabet=" \t\r\n", max_size=4)
# Long digit runs: what a degenerate model emits when it loops until max_tokens.
HUGE_DIGITS = st.integers(min_value=4200, max_value=9000).map(lambda k: "9" * k)
TEXT = st.text(max_size=200) | st.text(alphabet="<>/answer0123456789 -+\n", max_size=80)


# --------------------------------------------------------------------------- DocCount answer tag


@FAST
@given(prefix=TEXT, n=st.integers(min_value=-(10**30), max_value=10**30), pad=WS, pad2=WS, tail=WS)
def test_answer_tag_round_trip(prefix: str, n: int, pad: str, pad2: str, tail: str) -> None:
    assume("<answer>" not in prefix)
    text = f"{prefix}<answer>{pad}{n}{pad2}</answer>{tail}"
    assert parse_answer_tag(text) == parse_answer_tag(text)  # pure
    result = parse_answer_tag(text)
    assert (result.answer, result.status) == (n, "ok")


@FAST
@given(text=TEXT)
def test_answer_tag_is_total_and_consistent(text: str) -> None:
    result = parse_answer_tag(text)  # must not raise
    assert result.ok == (result.status == "ok")
    if result.ok:
        stripped = text.rstrip()
        assert stripped.endswith("</answer>")
        assert text.count("<answer>") == 1
        inner = stripped[stripped.rindex("<answer>") + len("<answer>") : -len("</answer>")]
        assert int(inner.strip()) == result.answer


@FAST
@given(prefix=TEXT, n=st.integers(min_value=0, max_value=10**6), suffix=st.text(min_size=1, max_size=40))
def test_answer_tag_must_be_final(prefix: str, n: int, suffix: str) -> None:
    assume("<answer>" not in prefix and suffix.strip())
    result = parse_answer_tag(f"{prefix}<answer>{n}</answer>{suffix}")
    assert not result.ok
    assert result.status in ("not_final", "multiple_tags")


@FAST
@given(a=st.integers(min_value=0, max_value=99), b=st.integers(min_value=0, max_value=99), mid=TEXT)
def test_answer_tag_two_tags_fail(a: int, b: int, mid: str) -> None:
    result = parse_answer_tag(f"<answer>{a}</answer>{mid}<answer>{b}</answer>")
    assert (result.answer, result.status) == (None, "multiple_tags")


@FAST
@given(inner=st.text(max_size=20))
def test_answer_tag_inner_must_be_an_integer(inner: str) -> None:
    assume("</answer>" not in inner)
    result = parse_answer_tag(f"<answer>{inner}</answer>")
    s = inner.strip()
    body = s[1:] if s[:1] in "+-" and s else s
    is_int = bool(body) and body.isascii() and body.isdigit()
    assert result.ok == is_int
    if is_int:
        assert result.answer == int(s)


@SLOW
@given(digits=HUGE_DIGITS, prefix=TEXT)
def test_parsers_survive_degenerate_digit_runs(digits: str, prefix: str) -> None:
    """A reply of thousands of digits (a looping model) is a parse failure, never an exception."""
    for text in (f"{prefix}<answer>{digits}</answer>", digits, f"{prefix} {digits} items"):
        tag = parse_answer_tag(text)
        assert tag.ok == (tag.answer is not None)
        cqa = parse_countqa(text)
        assert cqa.ok == (cqa.answer is not None)
        last_integer_fallback(text)


# --------------------------------------------------------------------------- CountQA and fallback

DECOR = st.text(alphabet="*_\"'`.,:; \t\r\n\u201c\u201d\u2018\u2019", max_size=6)


@FAST
@given(n=st.integers(min_value=0, max_value=10**12), left=DECOR, right=DECOR)
def test_countqa_reads_a_decorated_bare_integer(n: int, left: str, right: str) -> None:
    assert parse_countqa(f"{left}{n}{right}") == parse_countqa(f"{left}{n}{right}")
    result = parse_countqa(f"{left}{n}{right}")
    assert (result.answer, result.status) == (n, "ok")


@FAST
@given(text=TEXT)
def test_countqa_is_total(text: str) -> None:
    result = parse_countqa(text)
    assert result.ok == (result.answer is not None)
    if result.ok:
        assert result.answer >= 0
    elif text.strip():
        assert result.status == "no_number"
        assert not any(ch.isdecimal() for ch in text)
    else:
        assert result.status == "no_response"


@FAST
@given(
    text=TEXT,
    n=st.integers(min_value=-(10**9), max_value=10**9),
    tail=st.text(alphabet="abc .\n", max_size=10),
)
def test_last_integer_fallback(text: str, n: int, tail: str) -> None:
    value = last_integer_fallback(text)
    has_digit = any(ch in "0123456789" for ch in text)
    assert (value is not None) == has_digit
    # The last integer wins, whatever came before.
    assert last_integer_fallback(f"{text} {n}{tail}") == n


# --------------------------------------------------------------------------- JSONL reader


def _record(i: int, sid: str, text: str | None, answer: int | None, status: str) -> ResponseRecord:
    return ResponseRecord(
        sample_id=sid,
        benchmark="doccount",
        groups={"target_class": "Table"},
        ground_truth=i,
        model="m",
        backend="api",
        sampling=Sampling(1.0, 0.95, 16),
        started_at="2026-01-01T00:00:00.000Z",
        finished_at="2026-01-01T00:00:01.000Z",
        status=status,  # type: ignore[arg-type]
        response_text=text,
        parsed_answer=answer,
        usage=Usage(1, 2, 3),
        retry_errors=[RetryError(attempt=1, kind="http_status", message=text or "", status_code=500)],
    )


RECORDS = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12),
        st.none() | st.text(max_size=60),
        st.none() | st.integers(min_value=-(10**6), max_value=10**6),
        st.sampled_from(["ok", "request_error", "data_error"]),
    ),
    max_size=8,
).map(lambda items: [_record(i, *item) for i, item in enumerate(items)])


def _write_with_writer(root: Path, records: list[ResponseRecord]) -> None:
    async def go() -> None:
        writer = RecordWriter(root)
        writer.start()
        try:
            for rec in records:
                await writer.write(rec)
        finally:
            await writer.close()

    asyncio.run(go())


@SLOW
@given(records=RECORDS, data=st.data())
def test_read_jsonl_torn_at_any_offset_reads_the_complete_prefix(records: list[ResponseRecord], data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_with_writer(root, records)
        path = root / PARTIAL
        blob = path.read_bytes()
        lines = [r.to_line() for r in records]
        assert blob == b"".join(lines)  # the writer wrote exactly one line per record, in order
        cut = data.draw(st.integers(min_value=0, max_value=len(blob)), label="cut")
        with open(path, "r+b") as f:
            f.truncate(cut)
        report = read_jsonl(path)
        expected, offset, torn = [], 0, False
        for line in lines:
            body_end = offset + len(line) - 1  # without the newline
            if body_end <= cut:
                expected.append(json.loads(line))
            elif offset < cut:
                torn = True
            offset += len(line)
        assert report.records == expected
        assert report.bad_lines == []
        assert report.torn_tail == torn


@SLOW
@given(records=RECORDS, more=RECORDS, data=st.data())
def test_resumed_writer_appends_after_a_torn_line(
    records: list[ResponseRecord], more: list[ResponseRecord], data
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_with_writer(root, records)
        path = root / PARTIAL
        size = path.stat().st_size
        cut = data.draw(st.integers(min_value=0, max_value=size), label="cut")
        os.truncate(path, cut)
        before = read_jsonl(path)
        _write_with_writer(root, more)  # a resumed run: repairs the tail, then appends
        after = read_jsonl(path)
        assert after.records == before.records + [json.loads(r.to_line()) for r in more]
        assert not after.torn_tail
        # The torn fragment survives as one visible bad line, never glued to a new record.
        assert len(after.bad_lines) == (1 if before.torn_tail else 0)
