"""The fast paths added for performance give exactly what the plain code gives.

* request_bytes (the image spliced into the canonical body) == canonical_json(build_body(...));
* done_keys' column-wise read == the line-by-line read, on clean and damaged record files;
* last_integer_fallback (reversed search) == the last match of -?[0-9]+;
* scoring: responses.jsonl written in chunks by a writer thread == encoding all rows at once, each line
  the merged row in compact sorted-key form (read back, it is the row); the one-pass record selection and summary statistics == the plain multi-pass code they replaced (kept
  below as references), on clean and damaged record files.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator import scoring
from evaluator.core import jsonl as core_values
from evaluator.core import text
from evaluator.core.records import Sampling
from evaluator.data.benchmarks import get_benchmark
from evaluator.data.benchmarks.base import ManifestEntry, Sample
from evaluator.data.parquet import manifest_digest
from evaluator.data.parsing import MAX_ANSWER_DIGITS, last_integer_fallback
from evaluator.request.body import _URL_SLOT, build_body, canonical_json, request_bytes
from evaluator.runfolder import files as run_files
from evaluator.runfolder.files import MERGED, PARTIAL, read_jsonl
from evaluator.runfolder.runconfig import RunConfig
from evaluator.runfolder.selection import done_keys, record_key, record_problem
from evaluator.scoring import merge as scoring_select
from evaluator.scoring import write as scoring_write
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.stats import PERCENTILES, describe, percentile

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


@pytest.mark.timeout(600)  # 200 examples, each drawing two plots: ~50 s of CPU, minutes on a busy machine
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


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def assert_responses_form(data: bytes, rows: list[dict[str, Any]]) -> None:
    """responses.jsonl's form: one line per row, read back to the row; compact, sorted keys, UTF-8."""
    lines = data.split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows, strict=True):
        back = json.loads(line)
        assert json.dumps(back, sort_keys=True) == json.dumps(row, sort_keys=True)  # NaN-safe equality
        if not _has_float(row):  # floats may be spelled differently (0.00001 for 1e-05); the rest may not
            compact = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=line.isascii())
            assert line == compact.encode("utf-8")


def _slow_done(path: Path) -> set[str]:
    report = read_jsonl(path)
    return {sid for sid, repeat in done_keys(report.records) if repeat == 0}


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
        # valid JSON that strict readers refuse: a lone surrogate (text and id), a huge answer
        b'{"sample_id": "q1", "status": "ok", "parsed_answer": 1, "response_text": "x\\ud800 <answer>1</answer>"}',
        b'{"sample_id": "s3\\udc00", "status": "ok", "parsed_answer": 2}',
        b'{"sample_id": "q2", "status": "ok", "parsed_answer": 123456789012345678901234567890}',
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
def test_done_keys_fast_path_agrees_with_the_line_by_line_read(
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
        keys, report = run_files.done_keys(root)
        done = {sid for sid, repeat in keys if repeat == 0}
        slow = read_jsonl(root / PARTIAL)
        assert done == _slow_done(root / PARTIAL)
        assert report.torn_tail == slow.torn_tail
        assert report.bad_lines == slow.bad_lines


HAND_MADE = [  # (record, why), with the done set worked out by hand from the selection rule
    ({"sample_id": "a", "status": "ok", "parsed_answer": 3}, "done, until the next line"),
    ({"sample_id": "b", "status": "ok", "parsed_answer": None}, "a parse failure: not done"),
    ({"sample_id": "c", "status": "request_error"}, "not done"),
    ({"sample_id": "a", "status": "request_error"}, "the latest valid record of a: a is not done"),
    ({"sample_id": "d", "status": "ok", "parsed_answer": 1, "repeat": 1}, "(d, 1) done, (d, 0) not"),
    ({"sample_id": "e", "status": "weird", "parsed_answer": 2}, "not a valid record: ignored"),
    ({"sample_id": "f", "status": "ok", "parsed_answer": 2}, "done"),
    ({"sample_id": "f", "status": "bogus"}, "invalid, so it does not replace f's answer"),
]


@pytest.mark.parametrize("torn", [False, True])  # clean: the column-wise read; torn: the line-by-line one
def test_done_keys_on_a_hand_made_file(tmp_path: Path, torn: bool) -> None:
    lines = "".join(json.dumps(r) + "\n" for r, _ in HAND_MADE) + ('{"sample_id": "g", "sta' if torn else "")
    (tmp_path / PARTIAL).write_text(lines)
    done, report = run_files.done_keys(tmp_path)
    assert done == {("d", 1), ("f", 0)}
    assert report.torn_tail is torn
    assert bool(report.records) is torn  # the clean file went the column-wise way (no record built)


def test_done_keys_without_a_records_file(tmp_path: Path) -> None:
    done, report = run_files.done_keys(tmp_path)
    assert done == set() and not report.torn_tail and not report.bad_lines


def _last_integer_reference(text: str | None) -> int | None:
    if not text:
        return None
    found = re.findall(r"-?[0-9]+", text)
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


# ----------------------------------------------------------------------------- scoring: plain references


def _plain_select(
    records: list[dict], manifest: list[ManifestEntry], config: dict
) -> tuple[dict, dict, list]:
    """The multi-pass select_records this replaced (warnings and the error text, not just the result)."""
    warnings: list[str] = []
    by_id = {e.sample_id: e for e in manifest}
    valid = [r for r in records if not record_problem(r)]
    malformed = [f"record {i + 1} ({p})" for i, r in enumerate(records) if (p := record_problem(r))]
    if malformed:
        warnings.append(("malformed", len(malformed), text.examples(malformed)))
    foreign, outside = [], set()
    for rec in valid:
        entry = by_id.get(rec["sample_id"])
        if entry is None:
            outside.add(rec["sample_id"])
            continue
        reasons = []
        h = rec.get("image_sha256")
        if isinstance(h, str) and entry.image_sha256 and h != entry.image_sha256:
            reasons.append("image hash")
        if rec.get("benchmark") not in (None, config.get("benchmark")):
            reasons.append(f"benchmark {rec.get('benchmark')!r}")
        if rec.get("model") not in (None, config.get("model")):
            reasons.append(f"model {rec.get('model')!r}")
        if reasons:
            foreign.append(f"{rec['sample_id']} ({', '.join(reasons)})")
    if foreign:
        return {}, {"foreign": foreign}, warnings
    if valid and len(outside) == len({r["sample_id"] for r in valid}):
        return {}, {"none_belongs": len(valid)}, warnings
    latest = {record_key(r): r for r in valid if r["sample_id"] in by_id}
    counts = {
        "records_valid": len(valid),
        "records_malformed": len(malformed),
        "sample_ids_outside": len(outside),
    }
    return latest, counts, warnings


def _plain_usage(rows: list[dict]) -> dict:
    # a count is an int (the record's Usage Struct): one of another type (5.0, hand-edited) reads as None
    out: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        vals = [
            u[key] for r in rows if isinstance(u := r.get("usage"), dict) and core_values.is_int(u.get(key))
        ]
        out[key] = describe(vals, with_sum=True)
    earlier = [a for r in rows for a in (r.get("earlier_attempts") or []) if isinstance(a, dict)]
    tokens = [
        u["total_tokens"]
        for a in earlier
        if isinstance(u := a.get("usage"), dict) and core_values.is_int(u.get("total_tokens"))
    ]
    out["earlier_attempts"] = {"responses": len(earlier), "total_tokens": sum(tokens)}
    return out


def _plain_groups(benchmark, rows: list[ScoredRow]) -> dict:
    """Grouped from each row's written line (not its typed fields); the blocks by the library's functions."""
    out: dict[str, Any] = {}
    for name in benchmark.group_fields:
        members: dict[str, list[ScoredRow]] = {}
        for row in rows:
            for key in scoring.group_keys(row.line.get("groups") or {}, name):
                members.setdefault(key, []).append(row)
        order = scoring.ordered_values(benchmark, name, set(members))
        values = {}
        for key in order:
            sub = members.get(key, [])
            values[key] = {
                **scoring.accuracy_block(sub),
                "outcomes": scoring.outcome_counts(sub),
                "extra_metrics": scoring.extra_metrics_of(benchmark, sub) if sub else {},
            }
        multi = any(isinstance((r.line.get("groups") or {}).get(name), list) for r in rows)
        out[name] = {"multi_valued": multi, "order": order, "values": values}
    return out


def _plain_buckets(benchmark, rows: list[ScoredRow]) -> dict:
    buckets = list(scoring.BUCKETS)
    if benchmark.zero_counts or 0 in [r.line.get("ground_truth") for r in rows]:
        buckets.insert(0, scoring.ZERO_BUCKET)
    members: dict[str, list[ScoredRow]] = {name: [] for name, _, _ in buckets}
    for row in rows:
        truth = row.line.get("ground_truth")
        members.setdefault(
            scoring.bucket_of(truth if core_values.is_int(truth) else None, buckets), []
        ).append(row)
    order = [name for name, _, _ in buckets] + (["unknown"] if members.get("unknown") else [])
    values = {}
    for name in order:
        sub = members[name]
        anatomy = scoring.error_anatomy(sub)
        values[name] = {
            **scoring.accuracy_block(sub),
            "parsed": anatomy["parsed"],
            "mean_absolute_error": anatomy["mean_absolute_error"],
        }
    return {"order": order, "values": values}


SCORE_ENTRY = st.builds(
    lambda i, truth, group: (i, truth, group),
    st.integers(min_value=0, max_value=7),
    st.none() | st.integers(min_value=0, max_value=30),
    st.sampled_from(["Table", "Photograph", "Other", ["a", "b"], ["b"], [], True, None, 3]),
)
SCORE_RECORD = st.fixed_dictionaries(
    {
        "sample_id": st.sampled_from([f"q{i}" for i in range(9)]),  # q8 is not in the manifest
        "status": st.sampled_from(["ok", "ok", "ok", "request_error", "data_error", "bogus"]),
        "parsed_answer": st.none() | st.integers(min_value=-2, max_value=30),
        "ground_truth": st.none() | st.integers(min_value=0, max_value=30) | st.just(True),
        "response_text": st.none() | st.text(max_size=20) | st.just("so the count is 7\n<answer>7</answer>"),
        "latency_s": st.none() | st.floats(min_value=0, max_value=100) | st.integers(0, 5),
        "usage": st.none()
        | st.fixed_dictionaries(
            {
                "prompt_tokens": st.none() | st.integers(0, 10**6),
                "completion_tokens": st.integers(0, 10**6) | st.floats(0, 10, allow_nan=False),
                "total_tokens": st.none() | st.integers(0, 10**6),
            }
        ),
        "earlier_attempts": st.lists(
            st.fixed_dictionaries({"usage": st.fixed_dictionaries({"total_tokens": st.integers(0, 99)})}),
            max_size=2,
        ),
        "finish_reason": st.sampled_from([None, "stop", "length"]),
        "parse_status": st.sampled_from(["ok", "no_tag"]),
        "attempts": st.integers(0, 3),
        "extra": JSONISH,
    },
    optional={"model": st.just("m"), "benchmark": st.just("doccount"), "image_sha256": st.just("h1")},
)


# 100 examples in all (hypothesis's default), as four items of 25 so that pytest-xdist spreads them. Each
# example scores a run folder twice, and every scoring draws the two PNG plots, which this property does
# not look at: ~0.7 s of CPU for each example that gets that far (about 3 in 4), so the 200 examples this
# had (twice the default, for no stated reason) were ~100 s of CPU, a twelfth of the whole suite's
# (~1,200 s on 2 cores, so ~50 s of `make test`'s wall time). The space drawn from is small
# (2 benchmarks, up to 8 manifest entries and 14 records, chunk sizes 1-4, a cut or not, up to 2 odd lines),
# and the cheap properties above keep 200. The second scoring of each example, and any example whose
# plots equal an earlier one's, reuses the PNG bytes kept by evaluator/scoring/plots.py (no drawing).
@pytest.mark.parametrize("shard", range(4))
@pytest.mark.timeout(600)
@settings(FAST, max_examples=25)
@given(
    benchmark=st.sampled_from(["doccount", "countqa"]),
    entries=st.lists(SCORE_ENTRY, min_size=1, max_size=8, unique_by=lambda e: e[0]),
    records=st.lists(SCORE_RECORD, max_size=14),
    odd=st.lists(st.tuples(st.integers(min_value=0, max_value=14), ODD_LINES), max_size=2),
    cut=st.none() | st.integers(min_value=0, max_value=60),
    chunk=st.integers(min_value=1, max_value=4),
)
def test_scoring_fast_paths_agree_with_the_plain_code(
    shard, benchmark, entries, records, odd, cut, chunk
) -> None:
    bench = get_benchmark(benchmark)
    field = bench.group_fields[0]
    manifest = [
        ManifestEntry(f"q{i}", "h1" if i % 2 else None, truth, {field: group}) for i, truth, group in entries
    ]
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False).encode() for r in records]
    for at, line in odd:
        lines.insert(min(at, len(lines)), line)
    data = b"".join(line + b"\n" for line in lines)
    if cut is not None and lines:
        data = data[: max(0, len(data) - cut)]
    config = {
        "benchmark": benchmark,
        "model": "m",
        "data": {"selection": {"questions": len(manifest), "manifest_sha256": manifest_digest(manifest)}},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        root.mkdir()
        (root / "run_config.json").write_text(json.dumps(config))
        (root / "manifest.jsonl").write_text("".join(json.dumps(e.to_dict()) + "\n" for e in manifest))
        (root / PARTIAL).write_bytes(data)

        report = read_jsonl(root / PARTIAL)
        warnings: list[str] = []
        plain_latest, plain_counts, plain_warnings = _plain_select(report.records, manifest, config)
        if "foreign" in plain_counts or "none_belongs" in plain_counts:
            with pytest.raises(scoring.ScoreError):
                scoring_select.select_records(report, manifest, RunConfig.from_dict(config), warnings)
            return
        latest, counts = scoring_select.select_records(
            report, manifest, RunConfig.from_dict(config), warnings
        )
        assert list(latest.items()) == list(plain_latest.items())
        assert counts == plain_counts
        assert len(warnings) == len(plain_warnings) + (1 if counts["sample_ids_outside"] else 0)

        merged = scoring.merge_run(root)
        rows = merged.rows
        assert merged.summary["usage"] == _plain_usage([r.line for r in rows])
        assert merged.summary["groups"] == _plain_groups(bench, rows)
        assert merged.summary["count_buckets"] == _plain_buckets(bench, rows)
        plain_bytes = scoring.merged_jsonl(rows, merged.lenient_rows)
        assert_responses_form(plain_bytes, [r.line for r in rows])

        old_chunk = scoring_write.MERGED_CHUNK_ROWS
        scoring_write.MERGED_CHUNK_ROWS = chunk  # several chunks even for a handful of rows
        try:
            result = scoring.score_run(root)
            first = {
                name: (root / name).read_bytes()
                for name in (MERGED, "scores/summary.json", "scores/summary.md")
            }
            scoring.score_run(root)
        finally:
            scoring_write.MERGED_CHUNK_ROWS = old_chunk
        assert first[MERGED] == plain_bytes
        assert result.summary["outputs"]["responses_sha256"] == hashlib.sha256(plain_bytes).hexdigest()
        again = {name: (root / name).read_bytes() for name in first}
        assert again == first  # re-scoring the same folder gives the same bytes
        assert not list(root.glob("*.tmp"))


@FAST
@given(
    values=st.lists(
        st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False), max_size=30
    )
)
def test_describe_percentiles_equal_percentile(values) -> None:
    d = describe(values, with_sum=True)
    floats = [float(v) for v in values]
    for q in PERCENTILES:
        assert d[f"p{q}"] == percentile(floats, q)
    assert d["n"] == len(values) and d["sum"] == sum(values)
    assert d["min"] == (min(floats) if floats else None) and d["max"] == (max(floats) if floats else None)
