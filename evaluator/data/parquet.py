"""Dataset access: local parquet files or a pinned Hugging Face hub revision, streamed in small batches.

Images stay the original encoded bytes from the parquet file; nothing is decoded or re-encoded. The
digest of what a question sends besides its image (`messages_sha256`) lets the data layer fingerprint a
question set without building a request.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import msgspec

from evaluator.core.errors import UserError
from evaluator.core.text import one_line
from evaluator.data.benchmarks.base import Benchmark, ManifestEntry, Sample

if TYPE_CHECKING:
    import pyarrow.parquet as pq

BATCH_ROWS = 4  # small: a DocCount row holds a ~750 KB image
READ_BUFFER_BYTES = 1 << 20


class DataError(UserError):
    """The data selection cannot be used at all (not a per-row problem)."""


class DataOrigin(TypedDict, total=False):
    """Where the data came from (run_config.json `data`, first keys): a Hub dataset at a commit, or local
    files by their pattern."""

    source: str  # hub | local
    dataset: str
    requested_revision: str | None
    revision: str | None
    pattern: str


@dataclass
class DataSource:
    files: list[Path]
    origin: DataOrigin = field(default_factory=lambda: DataOrigin())  # recorded in run_config.json


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def resolve_local(pattern: str) -> DataSource:
    files = sorted(Path(p) for p in glob.glob(os.path.expanduser(pattern)))
    files = [f for f in files if f.is_file()]
    if not files:
        raise DataError(
            f"--data-files {pattern!r} matches no file; check the path (quote the glob so the shell "
            "does not expand it), or omit --data-files to load the dataset from the Hugging Face hub"
        )
    return DataSource(files=files, origin={"source": "local", "pattern": portable_pattern(pattern)})


def portable_pattern(pattern: str) -> str:
    """The glob as recorded: relative to the working directory, never this machine's absolute path.

    Files are identified by their SHA-256 anyway; outside the working directory only the file-name
    part is kept (reproduce then asks for --data-files).
    """
    expanded = os.path.expanduser(pattern)
    if not os.path.isabs(expanded):
        return pattern
    rel = os.path.relpath(expanded, os.getcwd())
    return Path(expanded).name if rel.startswith("..") else rel


def resolve_hub(benchmark: Benchmark, dataset: str | None, revision: str | None) -> DataSource:
    """The parquet files of a pinned hub revision, read in place from the HF cache (see evaluator/data/hub.py)."""
    from evaluator.data.hub import HubDataError, fetch

    try:
        snap = fetch(benchmark, dataset, revision)
    except HubDataError as exc:
        raise DataError(str(exc)) from None
    return DataSource(
        files=snap.files,
        origin={
            "source": "hub",
            "dataset": snap.repo_id,
            "requested_revision": revision,
            "revision": snap.commit,
        },
    )


def origin_line(origin: DataOrigin) -> str:
    """Where the data came from, for people: the hub dataset and commit, or the local glob."""
    if origin.get("source") == "hub":
        requested = origin.get("requested_revision") or "main"
        return f"{origin.get('dataset')} at commit {origin.get('revision')} (revision {requested})"
    return f"local files {origin.get('pattern')!r}"


def open_parquet(path: Path) -> pq.ParquetFile:
    # imported here, not at the top: the commands that only read run folders start ~0.15 s sooner
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # pre_buffer=False: pyarrow's default pre-buffers every row group of the selected columns (all
        # the images) before the first batch. buffer_size: stream column chunks page by page instead of
        # reading each row group's image column (~75 MB for DocCount) whole.
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{path} is not a readable parquet file ({one_line(exc)}); re-download it") from None


def check_schema(benchmark: Benchmark, source: DataSource) -> None:
    """Every file must have every declared column; the error lists expected and found columns."""
    for path in source.files:
        found = open_parquet(path).schema_arrow.names
        missing = [c for c in benchmark.columns if c not in found]
        if missing:
            raise DataError(
                f"{path} lacks column(s) {', '.join(missing)}. Expected columns: "
                f"{', '.join(benchmark.columns)}. Found: {', '.join(found)}. If the release renamed a "
                f"column, update `columns` in evaluator/data/benchmarks/{benchmark.name}.py"
            )


def iter_samples(benchmark: Benchmark, source: DataSource, with_images: bool = True) -> Iterator[Sample]:
    """Samples in file order, a few rows at a time, so memory does not grow with the dataset."""
    import pyarrow as pa

    columns = list(benchmark.columns) if with_images else benchmark.manifest_columns()
    row_index = 0
    for path in source.files:
        pf = open_parquet(path)
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
                yield from benchmark.samples(batch, row_index, with_images=with_images)
                row_index += batch.num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(
                f"{path} could not be read past row {row_index} ({one_line(exc)}); re-download it"
            ) from None


def build_manifest(benchmark: Benchmark, source: DataSource) -> list[ManifestEntry]:
    with_images = benchmark.manifest_reads_images
    return [
        ManifestEntry(
            s.sample_id, s.image_sha256, s.ground_truth, s.groups, s.data_error, messages_sha256(benchmark, s)
        )
        for s in iter_samples(benchmark, source, with_images=with_images)
    ]


def messages_digest(entries: list[ManifestEntry]) -> str:
    """SHA-256 over each question's messages digest: any changed prompt text changes it."""
    lines = (f"{e.sample_id}\t{e.messages_sha256 or ''}\n" for e in entries)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def labels_digest(entries: list[ManifestEntry]) -> str:
    """SHA-256 over each question's ground truth and group fields: a relabelled release changes it."""
    lines = (
        json.dumps([e.sample_id, e.ground_truth, e.groups], sort_keys=True, default=str) for e in entries
    )
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def manifest_digest(entries: list[ManifestEntry]) -> str:
    """SHA-256 over 'sample_id<TAB>image_sha256' lines: identifies the question set and its pixels."""
    lines = (f"{e.sample_id}\t{e.image_sha256 or ''}\n" for e in entries)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


# Stands in for the image in the digest of what a question sends besides its pixels (those have their own).
IMAGE_PLACEHOLDER = "<image>"


def messages_sha256(benchmark: Benchmark, sample: Sample) -> str:
    """SHA-256 of the question's chat messages (roles, text parts and their order, the image's place)
    without the image bytes: what a resume compares to know a question still sends the same text."""
    # msgspec with sorted keys: the canonical JSON form, ~10x faster than json.dumps (once per question
    # on every evaluate start, 100k questions included)
    encoded = msgspec.json.encode(benchmark.messages(sample, IMAGE_PLACEHOLDER), order="sorted")
    return hashlib.sha256(encoded).hexdigest()
