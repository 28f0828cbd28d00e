"""Which records count: the valid ones that belong to the run, the latest per question."""

from __future__ import annotations

from evaluator.core.jsonl import JSONObject
from evaluator.core.text import examples
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.runfolder.files import CONFIG, MANIFEST, PARTIAL, ReadReport
from evaluator.runfolder.runconfig import RunConfig
from evaluator.runfolder.selection import Key, latest_valid, record_key
from evaluator.scoring.base import ScoreError
from evaluator.scoring.summary_shape import RecordCounts


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
