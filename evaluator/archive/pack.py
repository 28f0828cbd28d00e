"""Pack a scored run folder into one deterministic .tar.gz (create_archive).

The run's scores/report.html is not copied: the archive gets a rendering without thumbnails or question
texts (report.archived_report), which `verify` rebuilds from the archived records and compares.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import evaluator
from evaluator.archive.base import (
    BUNDLE_FILES,
    DATASET,
    ENVIRONMENT,
    FORMAT,
    FORMAT_VERSION,
    INDEX,
    PLOT_KEYS,
    PROMPTS,
    REPRODUCE,
    RUN_FILES,
    RUNS,
    SUMS,
    TOP_SUFFIX,
    ArchiveError,
    ArchiveInfo,
    check_not_in_use,
    default_bundle_root,
    json_bytes,
    mismatched_keys,
    read_json_bytes,
    secret_hits,
    sha256_hex,
)
from evaluator.archive.images import PLOTS, image_problems
from evaluator.archive.plan import reproduce_md
from evaluator.core.atomic import atomic_file
from evaluator.core.jsonl import utf8_text
from evaluator.data.benchmarks import REGISTRY
from evaluator.data.benchmarks.base import prompts_dir
from evaluator.report import PER_QUESTION_FILE, REPORT_FILE
from evaluator.report.run_page import archived_report
from evaluator.runfolder.batches import LEDGER
from evaluator.runfolder.files import CONFIG, MANIFEST, MERGED, PARTIAL
from evaluator.runfolder.runconfig import RunConfig, RunConfigError
from evaluator.scoring import SCORES_DIR, SUMMARY_JSON, SUMMARY_MD, ScoreError, merge_run

# What scores/ holds that the archive carries: the scorer's files (report.html gets its own rendering);
# anything else there (a copy of the page with its thumbnails, a user's file) is left out.
SCORE_FILES = (SUMMARY_JSON, SUMMARY_MD, PER_QUESTION_FILE, *PLOTS)


def _collect_run(root: Path, run_dir: str, entries: dict[str, bytes], output: Path) -> list[str]:
    """The run's files into `entries`; the files of scores/ that are not the scorer's, left out."""
    for name in RUN_FILES:
        path = root / name
        if not path.is_file():
            hint = (
                f"score it first: doccount score --run-root {root}"
                if name == MERGED
                else "is it a run folder written by doccount evaluate?"
            )
            raise ArchiveError(f"{root} has no {name}; {hint}")
        entries[f"{run_dir}/{name}"] = path.read_bytes()
    # a batch run: its batch ids and rows (the summary's `batch` is made from it)
    if (root / LEDGER).is_file():
        entries[f"{run_dir}/{LEDGER}"] = (root / LEDGER).read_bytes()
    scores = root / SCORES_DIR
    if not (scores / SUMMARY_JSON).is_file():
        raise ArchiveError(
            f"{root} has no {SCORES_DIR}/{SUMMARY_JSON}; score it first: doccount score --run-root {root}"
        )
    out = output.resolve()
    left_out: list[str] = []
    for path in sorted(scores.rglob("*")):
        if not path.is_file() or path.name.endswith(".tmp") or path.resolve() == out:
            continue
        if path == scores / REPORT_FILE:  # it shows the data's images: the archive gets its own rendering
            continue
        rel = path.relative_to(root).as_posix()
        if path.parent != scores or path.name not in SCORE_FILES:  # a page copy, a user's file: images?
            left_out.append(rel)
            continue
        entries[f"{run_dir}/{rel}"] = path.read_bytes()
    return left_out


def _check_scores_current(root: Path, run_dir: str, entries: dict[str, bytes]) -> dict[str, Any]:
    summary = read_json_bytes(
        entries[f"{run_dir}/{SCORES_DIR}/{SUMMARY_JSON}"], f"{root}/{SCORES_DIR}/{SUMMARY_JSON}"
    )
    stale = "the scores are older than the records; run `doccount score --run-root {}` and archive again"
    partial_sha = (summary.get("inputs") or {}).get("partial_sha256")
    if partial_sha and partial_sha != sha256_hex(entries[f"{run_dir}/{PARTIAL}"]):
        raise ArchiveError(
            f"{SCORES_DIR}/{SUMMARY_JSON} was computed from other records than {PARTIAL}: "
            + stale.format(root)
        )
    merged_sha = (summary.get("outputs") or {}).get("responses_sha256")
    if merged_sha and merged_sha != sha256_hex(entries[f"{run_dir}/{MERGED}"]):
        raise ArchiveError(f"{MERGED} does not match {SCORES_DIR}/{SUMMARY_JSON}: " + stale.format(root))
    try:
        fresh = merge_run(root).summary
    except ScoreError as exc:
        raise ArchiveError(
            f"the run cannot be re-scored, so an archive of it would not verify: {exc}"
        ) from None
    diff = mismatched_keys(fresh, summary, ignore=PLOT_KEYS)
    if diff:
        raise ArchiveError(
            f"{SCORES_DIR}/{SUMMARY_JSON} does not match a re-score of the records (differs in {', '.join(diff)}); "
            + stale.format(root)
        )
    return summary


def _collect_prompts(config: RunConfig, entries: dict[str, bytes], recorded: dict[str, str]) -> None:
    prompts = config.prompts  # a malformed `prompts` entry is refused by the type (RunConfigError)
    folder = prompts_dir()
    commit = config.environment.get("git_commit")
    for name, expected in sorted(prompts.items()):
        path = folder / name
        if not path.is_file():
            raise ArchiveError(
                f"prompt file {name} (hashed in {CONFIG}) is not in {folder}; set DOCCOUNT_PROMPTS_DIR"
            )
        data = path.read_bytes()
        if sha256_hex(data) != expected:
            raise ArchiveError(
                f"{PROMPTS}/{name} has changed since the run ({CONFIG} records {str(expected)[:12]}..., the file is "
                f"{sha256_hex(data)[:12]}...); check out the commit the run was made with"
                + (f" ({commit})" if commit else "")
                + " and archive again"
            )
        entries[f"{PROMPTS}/{name}"] = data
        recorded[f"{PROMPTS}/{name}"] = f"run_config.json prompts[{name!r}]"


def _collect_bundle(
    config: RunConfig, bundle_root: Path, entries: dict[str, bytes], recorded: dict[str, str]
) -> dict[str, str]:
    containers = config.environment.get("containers") or {}
    missing: dict[str, str] = {}
    for name, env in BUNDLE_FILES.items():
        path = bundle_root / name
        expected = containers.get(env) if env else None
        if not path.is_file():
            if expected:
                raise ArchiveError(
                    f"the run recorded the SHA-256 of {name} ({env}) but {path} does not exist; pass "
                    "--bundle-root with the checkout the run was made from"
                )
            missing[name] = "not present in the bundle when the archive was made"
            continue
        data = path.read_bytes()
        if expected and sha256_hex(data) != expected:
            raise ArchiveError(
                f"{name} has changed since the run ({CONFIG} environment.containers.{env} records "
                f"{str(expected)[:12]}..., the file is {sha256_hex(data)[:12]}...); archive from the checkout "
                "the run was made with (--bundle-root)"
            )
        entries[name] = data
        if expected:
            recorded[name] = f"run_config.json environment.containers.{env}"
    return missing


def _manifest_samples(data: bytes) -> list[dict[str, Any]]:
    samples = []
    for line in data.splitlines():
        if line.strip():
            try:
                d = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, or nested too deep to read
                d = None
            # a damaged line: no id, so a crafted archive does not verify
            d = d if isinstance(d, dict) else {}
            samples.append({"sample_id": d.get("sample_id"), "image_sha256": d.get("image_sha256")})
    return samples


def _typed(config: dict[str, Any], root: Path) -> RunConfig:
    try:
        typed = RunConfig.from_dict(config)
    except RunConfigError as exc:
        raise ArchiveError(f"{root}/{CONFIG}: {exc}; the run folder is damaged") from None
    if typed.benchmark not in REGISTRY or not typed.model:
        raise ArchiveError(f"{root}/{CONFIG} names no known benchmark or no model; the run folder is damaged")
    return typed


def dataset_record(config: RunConfig, manifest_bytes: bytes) -> dict[str, Any]:
    """dataset.json: the run's data origin, hashes and question list (the images are not archived)."""
    data = config.data
    origin_keys = ("source", "pattern", "dataset", "requested_revision", "revision")
    return {
        "benchmark": config.benchmark,
        "origin": {k: data[k] for k in origin_keys if k in data},
        "files": data.get("files") or [],
        "questions": data.get("questions"),
        "manifest_sha256": data.get("manifest_sha256"),
        "selection": data.get("selection") or {},
        "samples": _manifest_samples(manifest_bytes),
        "note": "The images are not archived. manifest_sha256 is the SHA-256 over 'sample_id<TAB>image_sha256' "
        "lines of all questions; selection is the evaluated part (samples lists it).",
    }


def environment_record(config: RunConfig) -> dict[str, Any]:
    env = config.environment
    containers = env.get("containers") or {}
    return {
        "run": env,
        "images": {k: containers.get(k) for k in ("DOCCOUNT_IMAGE_EVAL", "DOCCOUNT_IMAGE_VLLM")},
        "backend": config.backend,
        "endpoint": config.endpoint,
        "endpoints": config.endpoints or ([config.endpoint] if config.endpoint else []),
        "server": config.server,
        **({"servers": config.servers} if config.servers else {}),
        "archived_with": {"evaluator_version": evaluator.__version__, "format_version": FORMAT_VERSION},
    }


def write_tar_gz(raw: Any, top: str, entries: dict[str, bytes]) -> None:
    """Deterministic bytes: sorted names, fixed metadata, gzip without mtime or file name."""
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in sorted(entries):
            data = entries[name]
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))


def _check_paths(root: Path, output: Path) -> None:
    if not root.is_dir():
        raise ArchiveError(
            f"run folder {root} does not exist or is not a folder; pass the folder evaluate wrote"
        )
    if not (root / CONFIG).is_file():
        raise ArchiveError(f"{root} has no {CONFIG}; is it a run folder written by doccount evaluate?")
    if output.exists() and output.is_dir():
        raise ArchiveError(
            f"--output {output} is a folder; pass a file name such as {root.resolve().name}.tar.gz"
        )
    if not output.parent.resolve().is_dir():
        raise ArchiveError(f"the folder of --output {output} does not exist")
    check_not_in_use(root)


def _index(
    run_name: str,
    run_dir: str,
    config: RunConfig,
    entries: dict[str, bytes],
    recorded: dict[str, str],
    missing: dict[str, str],
) -> dict[str, Any]:
    """ARCHIVE.json: format, run, every entry with its size and role, what was missing."""
    roles = {
        **{f"{run_dir}/{n}": "run" for n in (*RUN_FILES, LEDGER)},
        DATASET: "dataset manifest (no images)",
        ENVIRONMENT: "environment: versions, image ids, server",
        REPRODUCE: "how to verify and re-run",
    }
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run_name": run_name,
        "run_dir": run_dir,
        "benchmark": config.benchmark,
        "model": config.model,
        "entries": {
            name: {
                "bytes": len(entries[name]),
                "role": roles.get(name)
                or (
                    "scores"
                    if name.startswith(f"{run_dir}/")
                    else "prompt"
                    if name.startswith(f"{PROMPTS}/")
                    else "bundle"
                ),
                **({"recorded_in": recorded[name]} if name in recorded else {}),
            }
            for name in sorted(entries)
        },
        "missing": missing,
        "checksums": f"{SUMS} covers every entry except itself",
    }


def create_archive(
    run_root: Path, output: Path, bundle_root: Path | None = None, secret: str | None = None
) -> ArchiveInfo:
    """Write the deterministic archive of a scored run folder to `output`."""
    root = Path(run_root)
    _check_paths(root, output)
    run_name = root.resolve().name or "run"
    run_dir = f"{RUNS}/{run_name}"
    bundle = Path(bundle_root) if bundle_root else default_bundle_root()

    entries: dict[str, bytes] = {}
    left_out = _collect_run(root, run_dir, entries, output)
    raw = read_json_bytes(entries[f"{run_dir}/{CONFIG}"], f"{root}/{CONFIG}")
    config = _typed(raw, root)
    summary = _check_scores_current(root, run_dir, entries)
    try:
        entries[f"{run_dir}/{SCORES_DIR}/{REPORT_FILE}"] = archived_report(root)
    except ScoreError as exc:
        raise ArchiveError(f"the run's report cannot be rendered for the archive: {exc}") from None
    recorded: dict[str, str] = {}
    _collect_prompts(config, entries, recorded)
    missing = _collect_bundle(config, bundle, entries, recorded)
    entries[DATASET] = json_bytes(dataset_record(config, entries[f"{run_dir}/{MANIFEST}"]))
    entries[ENVIRONMENT] = json_bytes(environment_record(config))
    entries[REPRODUCE] = utf8_text(reproduce_md(raw, run_name, summary, missing, config))
    entries[INDEX] = json_bytes(_index(run_name, run_dir, config, entries, recorded, missing))
    images = image_problems(entries)
    if images:
        raise ArchiveError(
            f"refusing to archive: {images[0]} (an archive holds no image of the data); remove it from the run "
            "folder, or score the run again"
        )
    hits = secret_hits(entries, secret)
    if hits:
        raise ArchiveError(
            f"refusing to archive: the value of MODEL_API_KEY occurs in {', '.join(hits)}; remove it from the run "
            "folder first (if MODEL_API_KEY is only a placeholder such as EMPTY, unset it for this command)"
        )
    blob = write_archive(output, f"{run_name}{TOP_SUFFIX}", entries)
    return ArchiveInfo(output, sorted(entries), missing, sha256_hex(blob), len(blob), left_out)


def write_archive(output: Path, top: str, entries: dict[str, bytes]) -> bytes:
    """SHA256SUMS over the entries, then the archive written to `output` atomically; its bytes."""
    entries[SUMS] = "".join(f"{sha256_hex(entries[n])}  {n}\n" for n in sorted(entries)).encode("utf-8")
    try:
        with atomic_file(output) as sink:
            write_tar_gz(sink, top, entries)
    except OSError as exc:
        raise ArchiveError(f"cannot write {output} ({exc.strerror})") from None
    return output.read_bytes()
