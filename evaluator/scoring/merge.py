"""The merge: one row per manifest question, from the latest valid record or a `missing` row.

It reads the folder's run_config.json and manifest.jsonl and checks that they belong together, then
selects the records that count (the valid ones that belong to the run, the latest per question).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evaluator.core.jsonl import JSONObject, is_int, object_at
from evaluator.core.records import Key
from evaluator.core.text import examples
from evaluator.data.benchmarks import REGISTRY, get_benchmark
from evaluator.data.benchmarks.base import Benchmark, ManifestEntry
from evaluator.data.parquet import manifest_digest
from evaluator.runfolder.files import CONFIG, MANIFEST, PARTIAL, ReadReport, gc_paused, parse_jsonl, read_json
from evaluator.runfolder.manifest import ManifestError, load_manifest
from evaluator.runfolder.runconfig import RunConfig, RunConfigError
from evaluator.runfolder.selection import latest_valid, record_key
from evaluator.scoring.base import MergedRun, ScoreError, outcome_of
from evaluator.scoring.metrics import summarize
from evaluator.scoring.row import ScoredRow, missing_line, scored_row
from evaluator.scoring.summary_shape import Inputs, ManifestCheck, RecordCounts


def load_config(run_root: Path) -> RunConfig:
    """run_config.json, typed (wrong field types refused in one line; absent newer fields take their defaults)."""
    if not run_root.exists():
        raise ScoreError(
            f"run folder {run_root} does not exist; pass the folder that evaluate wrote (runs/<name>)"
        )
    if not run_root.is_dir():
        raise ScoreError(
            f"{run_root} is a file, not a run folder; pass the folder that evaluate wrote (runs/<name>)"
        )
    path = run_root / CONFIG
    if not path.exists():
        raise ScoreError(f"{run_root} has no {CONFIG}; is it a run folder written by doccount-evaluate?")
    try:
        config = read_json(path)
    except (OSError, ValueError) as exc:
        raise ScoreError(f"{path} cannot be read as JSON ({exc}); the run folder is damaged") from None
    if not isinstance(config, dict):
        raise ScoreError(f"{path} is not a JSON object; the run folder is damaged")
    try:
        typed = RunConfig.from_dict(config)
    except RunConfigError as exc:
        raise ScoreError(f"{path}: {exc}; the run folder is damaged") from None
    if typed.benchmark not in REGISTRY:
        raise ScoreError(
            f"{path} names benchmark {typed.benchmark!r}; expected one of {', '.join(sorted(REGISTRY))}"
        )
    return typed


def load_run_manifest(run_root: Path, lenient: set[str] | None = None) -> list[ManifestEntry]:
    """runfolder.manifest.load_manifest, its refusal as a ScoreError (same text)."""
    try:
        return load_manifest(run_root, lenient)
    except ManifestError as exc:
        raise ScoreError(str(exc)) from None


def check_manifest_digest(
    config: RunConfig, manifest: list[ManifestEntry], warnings: list[str]
) -> ManifestCheck:
    data = config.data
    selection = object_at(data, "selection")
    expected = selection.get("manifest_sha256")
    actual = manifest_digest(manifest)
    if not expected:
        warnings.append(
            f"{CONFIG} records no data.selection.manifest_sha256, so {MANIFEST} could not be verified against it"
        )
        verified = False
    elif expected != actual:
        raise ScoreError(
            f"{MANIFEST} (SHA-256 {actual[:12]}..., {len(manifest)} questions) does not match the question set "
            f"recorded in {CONFIG} (SHA-256 {str(expected)[:12]}..., {selection.get('questions')} questions): "
            "one of them was replaced or an evaluate run was cut short between writing them. Re-run "
            "doccount-evaluate with the options in run_config.json to rewrite both"
        )
    else:
        verified = True
    return {"manifest_sha256": actual, "manifest_verified": verified}


def select_records(
    report: ReadReport,
    manifest: list[ManifestEntry],
    config: RunConfig,
    warnings: list[str],
    lenient: set[Key] | None = None,
) -> tuple[dict[Key, JSONObject], RecordCounts]:
    """The latest valid record per question of the manifest (evaluator.runfolder.selection); raises on records
    that belong to another run. Adds to `lenient` the ids whose selected record only json.loads could read.
    """
    by_id = {e.sample_id: e for e in manifest}
    latest, valid, malformed = latest_valid(report.records)
    outside = {rec["sample_id"] for rec in latest.values() if rec["sample_id"] not in by_id}
    foreign = _foreign(valid, by_id, config)
    if outside:
        latest = {key: rec for key, rec in latest.items() if rec["sample_id"] in by_id}
    if lenient is not None and report.lenient:
        chosen = {id(rec) for rec in latest.values()}
        records = report.records
        lenient.update(record_key(records[i]) for i in report.lenient if id(records[i]) in chosen)
    if malformed:
        warnings.append(
            f"{len(malformed)} record(s) in {PARTIAL} are not valid response records and were ignored: "
            f"{examples(malformed)}"
        )
    if foreign:
        raise ScoreError(
            f"{len(foreign)} record(s) in {PARTIAL} do not match this run's {CONFIG}/{MANIFEST} "
            f"(model {config.model!r}, benchmark {config.benchmark!r}): {examples(foreign)}. "
            "The records and the run configuration come from different runs or data; score the folder the "
            "records were written in, or move the foreign records out"
        )
    if valid and not latest:
        raise ScoreError(
            f"none of the {len(valid)} record(s) in {PARTIAL} belongs to this run's question set "
            f"({len(manifest)} questions in {MANIFEST}, e.g. {manifest[0].sample_id}; records are for e.g. "
            f"{sorted(outside)[0]}): {CONFIG}/{MANIFEST} come from another dataset than the records"
        )
    if outside:
        warnings.append(
            f"{len(outside)} sample id(s) with records are not in this run's question set and were ignored "
            f"(e.g. from an earlier run with a larger --limit): {examples(sorted(outside))}"
        )
    counts: RecordCounts = {
        "records_valid": len(valid),
        "records_malformed": len(malformed),
        "sample_ids_outside": len(outside),
    }
    return latest, counts


def _foreign(valid: list[JSONObject], by_id: dict[str, ManifestEntry], config: RunConfig) -> list[str]:
    """Valid records of the question set made for another image, benchmark or model, described."""
    run_benchmark, run_model = config.benchmark, config.model
    foreign: list[str] = []
    for rec in valid:
        entry = by_id.get(rec["sample_id"])
        if entry is None:
            continue
        rec_hash, rec_benchmark, rec_model = rec.get("image_sha256"), rec.get("benchmark"), rec.get("model")
        reasons = []
        if isinstance(rec_hash, str) and entry.image_sha256 and rec_hash != entry.image_sha256:
            reasons.append("image hash")
        if rec_benchmark not in (None, run_benchmark):
            reasons.append(f"benchmark {rec_benchmark!r}")
        if rec_model not in (None, run_model):
            reasons.append(f"model {rec_model!r}")
        if reasons:
            foreign.append(f"{rec['sample_id']} ({', '.join(reasons)})")
    return foreign


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
        line.update(entry.groups)
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
