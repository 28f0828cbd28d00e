"""What the data files add to a report page: question texts and verified, downscaled thumbnails."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core.errors import EvaluatorError
from evaluator.data.benchmarks.base import Benchmark, sha256_hex
from evaluator.data.parquet import (
    DataError,
    DataSource,
    check_schema,
    iter_samples,
    open_parquet,
    resolve_hub,
    resolve_local,
)
from evaluator.report.base import ID_COLUMN, IMAGE_PX, JPEG_QUALITY, QUESTION_COLUMN
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring.row import ScoredRow


@dataclass
class PageData:
    """What the data files add to the page: question texts and verified, downscaled images."""

    images: dict[str, str] = field(default_factory=dict)  # key -> data URL
    image_key: dict[str, str] = field(default_factory=dict)  # sample id -> key into images
    questions: dict[str, str] = field(default_factory=dict)  # sample id -> question text
    source: str | None = None  # where the data came from, for the page
    notes: list[str] = field(default_factory=list)  # shown in the page and on stderr
    images_requested: bool = True
    archived: bool = False  # the archive's copy: nothing of the data (no thumbnail, no question text)


class _NoData(EvaluatorError):
    pass


def _hub_cached(benchmark: Benchmark, dataset: str, revision: str | None) -> DataSource | None:
    """The pinned revision from the local Hugging Face cache, without any network access."""
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            dataset,
            repo_type="dataset",
            revision=revision,
            allow_patterns=[benchmark.hub_files],
            local_files_only=True,
        )
    except Exception:
        return None
    files = sorted(Path(folder).glob(benchmark.hub_files))
    if not files:
        return None
    return DataSource(files=files, origin={"source": "hub", "dataset": dataset, "revision": revision})


def find_source(
    benchmark: Benchmark, config: RunConfig, data_files: str | None, allow_download: bool = True
) -> tuple[DataSource, str]:
    """The data files of a run: --data-files, else the run's recorded local pattern or hub revision."""
    if data_files:
        try:
            source = resolve_local(data_files)
            check_schema(benchmark, source)
        except DataError as exc:
            raise _NoData(f"--data-files: {exc}") from None
        return source, f"--data-files {data_files}"
    data = config.data
    origin = data.get("source")
    if origin == "local" and isinstance(data.get("pattern"), str):
        pattern = data["pattern"]
        try:
            source = resolve_local(pattern)
            check_schema(benchmark, source)
        except DataError:
            raise _NoData(
                f"the run's data files {pattern!r} (from run_config.json, relative to the current directory) "
                "were not found; pass --data-files GLOB"
            ) from None
        return source, f"local files {pattern}"
    if origin == "hub" and isinstance(data.get("dataset"), str):
        dataset = data["dataset"]
        revision = data.get("revision") or data.get("requested_revision")
        cached = _hub_cached(benchmark, dataset, revision)
        if cached is None and not allow_download:
            raise _NoData(
                f"{dataset}@{revision} is not in the local Hugging Face cache (not downloaded without images); "
                "pass --data-files GLOB"
            )
        try:
            source = cached or resolve_hub(benchmark, dataset, revision)
            check_schema(benchmark, source)
        except DataError as exc:
            raise _NoData(str(exc)) from None
        return source, f"Hugging Face {dataset}@{revision}"
    raise _NoData("run_config.json records no data source; pass --data-files GLOB")


def thumbnail_data_url(data: bytes, px: int = IMAGE_PX, quality: int = JPEG_QUALITY) -> str:
    """A downscaled JPEG copy (longest side <= px) as a data URL; the input bytes are not modified."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as im:
        if im.format == "JPEG":
            im.draft("RGB", (px, px))  # decode at a reduced scale: fast for large pages
        img = ImageOps.exif_transpose(im)
        img.load()
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        img = flat
    elif img.mode != "RGB":
        img = img.convert("RGB")
    img.thumbnail((px, px), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, optimize=True, progressive=True)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _question_column(benchmark: Benchmark, source: DataSource, wanted: set[str]) -> dict[str, str]:
    """sample id -> question for benchmarks with a question column (read without the image column)."""
    if QUESTION_COLUMN not in benchmark.columns or ID_COLUMN not in benchmark.columns:
        return {}
    out: dict[str, str] = {}
    for path in source.files:
        pf = open_parquet(path)
        for batch in pf.iter_batches(
            batch_size=4096, columns=[ID_COLUMN, QUESTION_COLUMN], use_threads=False
        ):
            for sid, q in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                if sid in wanted and isinstance(q, str):
                    out[sid] = q
    return out


@dataclass
class _Scan:
    """What reading the data for a page found, besides the page's own fields."""

    seen: set[str] = field(default_factory=set)
    mismatch: list[str] = field(default_factory=list)
    unhashed: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    by_hash: dict[str, str] = field(default_factory=dict)


def load_page_data(
    benchmark: Benchmark,
    config: RunConfig,
    rows: list[ScoredRow],
    data_files: str | None = None,
    images: bool = True,
    image_px: int = IMAGE_PX,
) -> PageData:
    """Question texts and thumbnails for `rows`; every problem becomes a note, nothing raises."""
    page = PageData(images_requested=images)
    expected = {row.sample_id: row.image_sha256 or None for row in rows}
    try:
        source, described = find_source(benchmark, config, data_files, allow_download=images)
    except _NoData as exc:
        what = "thumbnails and question texts are" if images else "question texts are"
        page.notes.append(f"The data was not found, so {what} not shown: {exc}.")
        return page
    except Exception as exc:  # a broken cache or install must not cost the report
        page.notes.append(f"The data could not be opened ({type(exc).__name__}: {exc}); no thumbnails.")
        return page
    page.source = described
    if images:
        try:
            import PIL  # noqa: F401
        except ImportError:
            page.notes.append("Pillow is not installed, so thumbnails are not shown (pip install pillow).")
            images = False
    scan = _Scan()
    try:
        _scan_data(benchmark, source, expected, images, image_px, page, scan)
    except Exception as exc:  # a damaged file part-way: keep what was read
        page.notes.append(
            f"Reading the data stopped early ({type(exc).__name__}: {exc}); some rows lack images."
        )
    page.notes += _scan_notes(scan, expected, described)
    return page


def _scan_data(
    benchmark: Benchmark,
    source: DataSource,
    expected: dict[str, str | None],
    images: bool,
    image_px: int,
    page: PageData,
    scan: _Scan,
) -> None:
    column_questions = _question_column(benchmark, source, set(expected))
    with_bytes = images or benchmark.manifest_reads_images
    for sample in iter_samples(benchmark, source, with_images=with_bytes):
        sid = sample.sample_id
        if sid not in expected or sid in scan.seen:
            continue
        scan.seen.add(sid)
        want = expected[sid]
        # The question text is used when the data row is the evaluated one (its recorded hash matches).
        question = column_questions.get(sid) if QUESTION_COLUMN in benchmark.columns else sample.text
        if question and (want is None or sample.image_sha256 == want):
            page.questions[sid] = question
        if not images:
            continue
        if want is None:
            scan.unhashed.append(sid)
            continue
        if sample.image is None or sha256_hex(sample.image) != want:
            scan.mismatch.append(sid)
            continue
        key = scan.by_hash.get(want)
        if key is None:
            try:
                url = thumbnail_data_url(sample.image, image_px)
            except Exception as exc:
                scan.broken.append(f"{sid} ({type(exc).__name__})")
                continue
            key = f"i{len(scan.by_hash)}"
            scan.by_hash[want] = key
            page.images[key] = url
        page.image_key[sid] = key


def _scan_notes(scan: _Scan, expected: dict[str, str | None], described: str) -> list[str]:
    notes = []
    absent = [sid for sid in expected if sid not in scan.seen]
    if absent:
        notes.append(
            f"{len(absent)} question(s) of the run are not in the data ({described}), e.g. "
            f"{', '.join(absent[:5])}: no thumbnail or question text for them."
        )
    if scan.mismatch:
        notes.append(
            f"{len(scan.mismatch)} image(s) in the data do not match the SHA-256 recorded in the run and are not "
            f"shown (the data differs from what was evaluated): {', '.join(scan.mismatch[:5])}"
            + (" …" if len(scan.mismatch) > 5 else "")
        )
    if scan.unhashed:
        notes.append(
            f"{len(scan.unhashed)} question(s) have no recorded image SHA-256, so no image is shown for them."
        )
    if scan.broken:
        notes.append(
            f"{len(scan.broken)} image(s) could not be decoded for a thumbnail: {', '.join(scan.broken[:5])}"
        )
    return notes
