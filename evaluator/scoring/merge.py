"""The merge: one row per manifest question, from the latest valid record or a `missing` row."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evaluator.core.jsonl import JSONObject, is_int
from evaluator.core.records import Key
from evaluator.core.text import examples
from evaluator.data.benchmarks import get_benchmark
from evaluator.data.benchmarks.base import Benchmark, ManifestEntry
from evaluator.runfolder.files import MANIFEST, PARTIAL, gc_paused, parse_jsonl
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring.base import MergedRun, ScoreError, outcome_of
from evaluator.scoring.load import check_manifest_digest, load_config, load_run_manifest
from evaluator.scoring.metrics import summarize
from evaluator.scoring.row import ScoredRow, missing_line, scored_row
from evaluator.scoring.select import select_records
from evaluator.scoring.summary_shape import Inputs


def _missing_row(
    entry: ManifestEntry, benchmark: Benchmark, config: RunConfig, repeat: int | None = None
) -> ScoredRow:
    """The row of a question (and repeat) with no record: no response, counted wrong."""
    row = ScoredRow(
        sample_id=entry.sample_id,
        benchmark=benchmark.name,
        groups=entry.groups,
        ground_truth=entry.ground_truth,
        model=config.model,
        backend=config.backend,
        status="missing",
        parse_status="no_response",
        correct=bool(benchmark.is_correct(None, entry.ground_truth)),
        image_sha256=entry.image_sha256,
        data_error=entry.data_error,
        repeat=repeat,
    )
    row.line = missing_line(row)
    return row


def _merge_rows(
    manifest: list[ManifestEntry],
    latest: dict[Key, JSONObject],
    benchmark: Benchmark,
    config: RunConfig,
    warnings: list[str],
) -> list[ScoredRow]:
    """One row per manifest entry (with --repeats K: K rows, repeats in order). Ground truth and groups come
    from the manifest; `correct` is recomputed."""
    rows = []
    relabelled: list[str] = []
    repeats = config.repeat_count
    for entry, repeat in [(e, r) for e in manifest for r in range(repeats)]:
        # the selected record becomes the row's line in place: nothing reads the records after the merge
        line = latest.get((entry.sample_id, repeat))
        if line is None:
            rows.append(_missing_row(entry, benchmark, config, repeat if repeats > 1 else None))
            continue
        if line.get("ground_truth") != entry.ground_truth:
            relabelled.append(entry.sample_id)
            line["record_ground_truth"] = line.get("ground_truth")
        line["ground_truth"] = entry.ground_truth
        line["groups"] = entry.groups
        for k, v in entry.groups.items():
            line[k] = v
        answer = line.get("parsed_answer") if line.get("status") == "ok" else None
        line["correct"] = correct = bool(benchmark.is_correct(answer, entry.ground_truth))
        line["outcome"] = outcome = outcome_of(line)
        rows.append(scored_row(line, outcome, correct))
    if relabelled:
        warnings.append(
            f"{len(relabelled)} record(s) carry a ground truth different from {MANIFEST} "
            f"({examples(relabelled)}); they were scored against the manifest (record value kept as "
            "record_ground_truth)"
        )
    return rows


def merge_run(run_root: Path) -> MergedRun:
    """Read, check and merge one run folder; compute its summary. Writes nothing."""
    with gc_paused():
        return _merge_run(Path(run_root))


def _merge_run(run_root: Path) -> MergedRun:
    config = load_config(run_root)
    benchmark = get_benchmark(config.benchmark)
    lenient: set[str] = set()  # sample ids whose manifest line only json.loads could read
    lenient_keys: set[Key] = set()  # (sample id, repeat) whose record line only json.loads could read
    manifest = load_run_manifest(run_root, lenient)
    warnings: list[str] = []
    data_check = check_manifest_digest(config, manifest, warnings)
    full = config.data.get("questions")
    if is_int(full) and full > len(manifest):
        warnings.append(
            f"this run covers {len(manifest)} of the {full} questions in the data (--limit): the score is over "
            "that subset, not a full-benchmark result"
        )
    partial = run_root / PARTIAL
    try:
        partial_bytes = partial.read_bytes() if partial.exists() else b""
    except OSError as exc:
        raise ScoreError(f"cannot read {partial} ({exc.strerror})") from None
    with ThreadPoolExecutor(max_workers=1) as hasher:  # SHA-256 releases the GIL: hash while parsing
        partial_sha256 = hasher.submit(lambda: hashlib.sha256(partial_bytes).hexdigest())
        report = parse_jsonl(partial_bytes)
    if not partial.exists():
        warnings.append(
            f"{PARTIAL} does not exist: no question has a response, every question counts as missing"
        )
    if report.torn_tail:
        warnings.append(f"the last line of {PARTIAL} was torn (a crash mid-write) and was ignored")
    if report.bad_lines:
        warnings.append(
            f"{len(report.bad_lines)} unparseable line(s) in {PARTIAL} were ignored (line numbers "
            f"{examples([str(n) for n in report.bad_lines])})"
        )
    latest, counts = select_records(report, manifest, config, warnings, lenient_keys)
    rows = _merge_rows(manifest, latest, benchmark, config, warnings)
    missing = sum(1 for r in rows if r.outcome == "missing")
    if missing and partial.exists():
        warnings.append(
            f"{missing} of {len(rows)} {'response' if config.repeat_count > 1 else 'question'}(s) have no record "
            "(status missing); they count as wrong. "
            "Re-run doccount-evaluate with the same options to finish the run"
        )
    inputs: Inputs = {
        "partial_sha256": partial_sha256.result(),
        "partial_bad_lines": len(report.bad_lines),
        "partial_torn_tail": report.torn_tail,
        **counts,
    }
    summary = summarize(run_root, config, benchmark, rows, data_check, inputs, warnings)
    lenient_rows = (
        {i for i, r in enumerate(rows) if r.sample_id in lenient or r.key in lenient_keys}
        if lenient or lenient_keys
        else set()
    )
    return MergedRun(run_root, config, benchmark, manifest, rows, summary, warnings, lenient_rows)


# ----------------------------------------------------------------------------- metrics
