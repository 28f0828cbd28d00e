"""The fast paths added for performance give exactly what the plain code gives.

* request_bytes (the image spliced into the canonical body) == canonical_json(build_body(...));
* done_sample_ids' column-wise read == the line-by-line read, on clean and damaged record files;
* last_integer_fallback (reversed search) == the last match of ANY_INTEGER.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator.benchmarks import get_benchmark
from evaluator.benchmarks.base import Sample
from evaluator.parsing import ANY_INTEGER, MAX_ANSWER_DIGITS, last_integer_fallback
from evaluator.records import Sampling
from evaluator.request import _URL_SLOT, build_body, canonical_json, request_bytes
from evaluator.runfolder import PARTIAL, done_sample_ids, latest_by_sample, read_jsonl

pytestmark = pytest.mark.timeout(120)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

IMAGES = [
    b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40,
    b"\x89PNG\r\n\x1a\n" + b"\x00\xff" * 50,
    b"GIF89a" + b"x" * 10,
    b"RIFF\x00\x00\x00\x00WEBP" + b"y" * 7,
]
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@FAST
@given(
    benchmark=st.sampled_from(["doccount", "countqa"]),
    image=st.sampled_from(IMAGES),
    text=st.text(max_size=60) | st.just(f"before {_URL_SLOT} after"),
    model=st.text(min_size=1, max_size=10),
    extra=st.dictionaries(
        st.text(min_size=1, max_size=6).filter(lambda k: k != "messages"), JSONISH, max_size=3
    ),
    with_slot=st.booleans(),
)
def test_request_bytes_is_the_canonical_json_of_the_body(
    benchmark, image, text, model, extra, with_slot
) -> None:
    if with_slot:  # the placeholder somewhere else in the body: the plain path must be taken
        extra = {**extra, "zz": _URL_SLOT}
    bench = get_benchmark(benchmark)
    sample = Sample("id-1", 0, image, None, 3, {}, text)
    sampling = Sampling(temperature=0.7, top_p=0.95, max_tokens=64, extra_body=extra)
    assert request_bytes(bench, sample, model, sampling) == canonical_json(
        build_body(bench, sample, model, sampling)
    )


def _slow_done(path: Path) -> set[str]:
    report = read_jsonl(path)
    return {
        sid
        for sid, rec in latest_by_sample(report.records).items()
        if rec.get("status") == "ok" and rec.get("parsed_answer") is not None
    }


RECORD = st.fixed_dictionaries(
    {
        "sample_id": st.sampled_from([f"s{i}" for i in range(6)]),
        "status": st.sampled_from(["ok", "ok", "request_error", "data_error"]),
        "parsed_answer": st.none() | st.integers(min_value=0, max_value=50),
        "response_text": st.text(max_size=30),
    }
)
ODD_LINES = st.sampled_from(
    [
        b"",
        b"   ",
        b"not json",
        b"[1, 2]",
        b"7",
        b'{"sample_id": 5, "status": "ok", "parsed_answer": 1}',
        b'{"sample_id": "s1", "status": "ok", "parsed_answer": 1.5}',
        b'{"sample_id": "s2", "status": "ok", "parsed_answer": "2"}',
        b'{"sample_id": "s3", "status": "ok", "parsed_answer": 1}{"sample_id": "s4", "status": "ok"}',
        b'{"sample_id": "s5\xff", "status": "ok", "parsed_answer": 1}',
        b'{"sample_id": "s0", "status": "ok", "parsed_answer": 1, "t": "\xe2\x82"}',
        b'{"sample_id": "s1", "status": "ok", "parsed_answer": NaN}',
        b'{"sample_id": null, "status": "ok", "parsed_answer": 1}',
        b'{"sample_id": "s2", "sample_id": "s3", "status": "ok", "parsed_answer": 1}',
    ]
)


@FAST
@given(
    records=st.lists(RECORD, max_size=12),
    ascii_only=st.booleans(),
    odd=st.lists(st.tuples(st.integers(min_value=0, max_value=12), ODD_LINES), max_size=2),
    trailing_newline=st.booleans(),
    cut=st.none() | st.integers(min_value=0, max_value=400),
)
def test_done_sample_ids_fast_path_agrees_with_the_line_by_line_read(
    records, ascii_only, odd, trailing_newline, cut
) -> None:
    lines = [json.dumps(r, ensure_ascii=ascii_only, sort_keys=True).encode() for r in records]
    for at, line in odd:
        lines.insert(min(at, len(lines)), line)
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    if cut is not None:
        data = data[:cut]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / PARTIAL).write_bytes(data)
        done, report = done_sample_ids(root)
        slow = read_jsonl(root / PARTIAL)
        assert done == _slow_done(root / PARTIAL)
        assert report.torn_tail == slow.torn_tail
        assert report.bad_lines == slow.bad_lines


def test_done_sample_ids_without_a_records_file(tmp_path: Path) -> None:
    done, report = done_sample_ids(tmp_path)
    assert done == set() and not report.torn_tail and not report.bad_lines


def _last_integer_reference(text: str | None) -> int | None:
    if not text:
        return None
    found = ANY_INTEGER.findall(text)
    return int(found[-1]) if found and len(found[-1]) <= MAX_ANSWER_DIGITS else None


@FAST
@given(text=st.none() | st.text(max_size=80) | st.text(alphabet="0123456789-- ab\n\u0663", max_size=40))
def test_last_integer_fallback_matches_the_last_any_integer_match(text) -> None:
    assert last_integer_fallback(text) == _last_integer_reference(text)


@pytest.mark.parametrize(
    "text",
    [
        "1" * MAX_ANSWER_DIGITS,
        "1" * (MAX_ANSWER_DIGITS + 1),
        "-" + "1" * (MAX_ANSWER_DIGITS - 1),
        "--5",
        "5-",
        "-0",
    ],
)
def test_last_integer_fallback_edges(text: str) -> None:
    assert last_integer_fallback(text) == _last_integer_reference(text)
