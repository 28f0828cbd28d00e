"""The data side of an evaluation: load and check the data source, the dry run's validation report and
the `data` block of run_config.json (origin, file hashes, digests)."""

from __future__ import annotations

from collections import Counter

from evaluator.core.errors import ExitCode
from evaluator.core.output import answer
from evaluator.data.benchmarks import Benchmark, get_benchmark
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.data.parquet import (
    DataSource,
    check_schema,
    file_sha256,
    iter_samples,
    labels_digest,
    manifest_digest,
    messages_digest,
    origin_line,
    resolve_hub,
    resolve_local,
)
from evaluator.runfolder.runconfig import DataFile, DataRecord


def load_source(
    benchmark_name: str, data_files: str | None, dataset: str | None, revision: str | None
) -> tuple[Benchmark, DataSource]:
    benchmark = get_benchmark(benchmark_name)
    source = resolve_local(data_files) if data_files else resolve_hub(benchmark, dataset, revision)
    check_schema(benchmark, source)
    return benchmark, source


def duplicate_ids(manifest: list[ManifestEntry]) -> list[str]:
    counts = Counter(e.sample_id for e in manifest)
    return sorted(sid for sid, c in counts.items() if c > 1)


def duplicates_message(dups: list[str]) -> str:
    shown = ", ".join(dups[:10]) + (" ..." if len(dups) > 10 else "")
    return (
        f"{len(dups)} duplicate sample id(s) in the data ({shown}); every question needs a unique id, "
        "so the data files are probably mixed up or duplicated: check the --data-files glob"
    )


def data_record(source: DataSource, manifest: list[ManifestEntry], folder: list[ManifestEntry]) -> DataRecord:
    """run_config.json `data`: origin, file hashes, digests of the whole data and of the folder's set."""
    files: list[DataFile] = [
        {"name": p.name, "sha256": file_sha256(p), "bytes": p.stat().st_size} for p in source.files
    ]
    return {
        **source.origin,
        "files": files,
        "questions": len(manifest),
        "manifest_sha256": manifest_digest(manifest),
        "labels_sha256": labels_digest(manifest),
        "messages_sha256": messages_digest(manifest),
        "selection": {"questions": len(folder), "manifest_sha256": manifest_digest(folder)},
    }


def validate_data(
    benchmark: Benchmark, source: DataSource, manifest: list[ManifestEntry], selection: list[ManifestEntry]
) -> int:
    """--dry-run: validate every selected row with its image bytes; report failures by sample id."""
    wanted = {e.sample_id for e in selection}
    failures: list[tuple[str, str]] = []
    groups: Counter[str] = Counter()
    checked = 0
    for sample in iter_samples(benchmark, source, with_images=True):
        if sample.sample_id not in wanted:
            continue
        checked += 1
        for name in benchmark.group_fields:
            value = sample.groups.get(name)
            for v in value if isinstance(value, list) else [value]:
                groups[f"{name}={v}"] += 1
        if sample.data_error:
            failures.append((sample.sample_id, sample.data_error))
    dups = duplicate_ids(manifest)
    answer(f"benchmark: {benchmark.name}")
    answer(f"data: {origin_line(source.origin)}")
    answer(f"files: {', '.join(p.name for p in source.files)}")
    answer(f"questions: {len(manifest)} in the data, {len(selection)} selected, {checked} checked")
    unique = len({e.sample_id for e in manifest})
    answer(f"unique sample ids: {'no' if dups else 'yes'} ({unique})")
    for key, count in sorted(groups.items()):
        answer(f"  {key}: {count}")
    for name, allowed in getattr(benchmark, "expected_groups", {}).items():
        odd = sorted({k.split("=", 1)[1] for k in groups if k.startswith(f"{name}=")} - set(allowed))
        if odd:
            answer(f"warning: unexpected {name} value(s): {', '.join(odd)}")
    if failures or dups:
        if dups:
            answer(f"FAILED: {duplicates_message(dups)}")
        if failures:
            answer(f"FAILED: {len(failures)} row(s) failed validation:")
        for sid, err in failures:
            answer(f"  {sid}: {err}")
        return ExitCode.NOT_VERIFIED
    answer("OK: schema, ids, answers and every image SHA-256 are valid")
    return ExitCode.OK
