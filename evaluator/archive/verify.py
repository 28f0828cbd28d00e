"""Read an archive and verify it offline: checksums, recorded hashes, a re-score of the records.

An archived run's report.html is rebuilt from the archived records (no images, no data), at the stamp
the archived page shows, and compared byte for byte, so an edited page is caught even when SHA256SUMS was
recomputed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evaluator.archive.base import (
    BUNDLE_FILES,
    DATASET,
    FORMAT,
    FORMAT_VERSION,
    INDEX,
    PROMPTS,
    RUNS,
    SUMS,
    Archive,
    ArchiveError,
    Problem,
    VerifyResult,
    mismatched_keys,
)
from evaluator.archive.images import check_images
from evaluator.archive.opened import OpenedArchive
from evaluator.archive.pack import dataset_record
from evaluator.archive.read import read_archive  # noqa: F401  (tests read it from here)
from evaluator.data.parquet import file_sha256
from evaluator.report import REPORT_FILE, ReportError
from evaluator.report.run_page import archived_report, page_stamp
from evaluator.runfolder.batches import LEDGER, LedgerError, load_ledger
from evaluator.runfolder.files import CONFIG, MANIFEST, MERGED, PARTIAL
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring import SCORES_DIR, SUMMARY_JSON, SUMMARY_MD, ScoreError, score_run


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (what a copy or a re-score put on the temporary disk)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def check_sums(archive: OpenedArchive, problems: list[Problem], checks: list[str]) -> None:
    sums, bad = archive.sums.get()
    for n in bad:
        problems.append(Problem(SUMS, f"line {n} is not '<sha256>  <path>'"))
    for name in archive.duplicates:
        problems.append(Problem(name, "appears more than once in the archive"))
    ok = 0
    for name, expected in sorted(sums.items()):
        if name not in archive.files:
            problems.append(Problem(name, f"listed in {SUMS} but missing from the archive"))
        elif archive.sha256(name) != expected:
            problems.append(Problem(name, f"SHA-256 does not match {SUMS}"))
        else:
            ok += 1
    for name in sorted(archive.files):
        if name != SUMS and name not in sums:
            problems.append(Problem(name, f"not listed in {SUMS}"))
    checks.append(f"checksums: {ok} of {len(sums)} entries match {SUMS}")


def _check_recorded_hashes(
    archive: Archive, config: RunConfig, problems: list[Problem], checks: list[str]
) -> None:
    n = len(config.prompts)
    for name, expected in sorted(config.prompts.items()):
        entry = f"{PROMPTS}/{name}"
        if entry not in archive.files:
            problems.append(Problem(entry, f"hashed in {CONFIG} prompts but missing from the archive"))
        elif archive.sha256(entry) != expected:
            problems.append(Problem(entry, f"does not match the SHA-256 recorded in {CONFIG} prompts"))
    containers = config.environment.get("containers") or {}
    for name, env in BUNDLE_FILES.items():
        image_sha = containers.get(env) if env else None
        if not image_sha:
            continue
        n += 1
        if name not in archive.files:
            problems.append(
                Problem(name, f"{CONFIG} records its SHA-256 ({env}) but it is missing from the archive")
            )
        elif archive.sha256(name) != image_sha:
            problems.append(
                Problem(name, f"does not match the SHA-256 recorded in {CONFIG} environment.containers.{env}")
            )
    checks.append(f"recorded hashes: {n} file(s) checked against {CONFIG}")


def _check_dataset(archive: Archive, run_dir: str, config: RunConfig, problems: list[Problem]) -> None:
    if DATASET not in archive.files:
        problems.append(Problem(DATASET, "missing from the archive"))
        return
    try:
        archived = archive.json(DATASET)
        expected = dataset_record(config, archive.whole(f"{run_dir}/{MANIFEST}", b""))
    except (ArchiveError, ValueError):
        problems.append(Problem(DATASET, "is not valid JSON (or manifest.jsonl is not)"))
        return
    if archived != expected:
        keys = mismatched_keys(archived, expected) if isinstance(archived, dict) else ["(whole file)"]
        problems.append(
            Problem(DATASET, f"does not match {CONFIG} data and {MANIFEST} (differs in {', '.join(keys)})")
        )


# summary.json keys added within schema 3 (compatible additions): an archive from before lacks them.
SUMMARY_KEYS_ADDED = ("reasoning", "timeouts")


def _rescore(
    archive: Archive, run_dir: str, run_name: str, workdir: Path, problems: list[Problem], checks: list[str]
) -> Path | None:
    dest = workdir / run_name
    archive.extract(f"{run_dir}/", dest)
    summary_name = f"{run_dir}/{SCORES_DIR}/{SUMMARY_JSON}"
    copied = folder_bytes(dest)
    try:  # the ledger may name only batch/NAME.jsonl of its own folder (runfolder.batches.check_input_name)
        load_ledger(dest)
    except LedgerError:
        problems.append(
            Problem(f"{run_dir}/{LEDGER}", "names a file outside the run folder's batch/ or is damaged")
        )
    try:
        score_run(dest)
    except ScoreError as exc:
        problems.append(Problem(f"{run_dir}/{PARTIAL}", f"the archived run cannot be re-scored: {exc}"))
        return None
    if archive.budget is not None:  # what the re-score wrote (responses.jsonl, scores/) counts too
        archive.budget.spend(max(folder_bytes(dest) - copied, 0), f"the re-score of {run_dir}")
    if summary_name not in archive.files:
        problems.append(Problem(summary_name, "missing from the archive"))
        return dest
    try:
        archived = archive.json(summary_name)
    except ArchiveError as exc:
        problems.append(Problem(summary_name, str(exc).removeprefix(f"{summary_name} ")))
        return dest
    fresh = json.loads((dest / SCORES_DIR / SUMMARY_JSON).read_bytes())
    if isinstance(archived, dict):  # keys added since without a schema bump: an older summary has none
        for key in SUMMARY_KEYS_ADDED:
            if key not in archived:
                fresh.pop(key, None)
    if archived != fresh:
        keys = mismatched_keys(archived, fresh) if isinstance(archived, dict) else ["(whole file)"]
        note = ""
        if isinstance(archived, dict) and archived.get("schema_version") != fresh.get("schema_version"):
            note = f"; archived with summary schema {archived.get('schema_version')}, this evaluator writes {fresh.get('schema_version')}"
        problems.append(
            Problem(
                summary_name,
                f"does not match a re-score of {run_dir}/{PARTIAL} (differs in {', '.join(keys)}){note}",
            )
        )
    else:
        acc = fresh.get("primary") or {}
        checks.append(
            f"re-score: {SUMMARY_JSON} matches ({acc.get('correct')} / {acc.get('questions')} correct)"
        )
    for name in (MERGED, f"{SCORES_DIR}/{SUMMARY_MD}"):
        entry = f"{run_dir}/{name}"
        if entry in archive.files and archive.sha256(entry) != file_sha256(dest / name):
            problems.append(Problem(entry, f"does not match a re-score of {run_dir}/{PARTIAL}"))
    return dest


def verify_archive(archive: OpenedArchive, workdir: Path) -> VerifyResult:
    """Every check of `doccount verify`; the original run is extracted and re-scored under `workdir`."""
    problems: list[Problem] = []
    checks: list[str] = []
    check_sums(archive, problems, checks)
    check_images(archive, problems, checks)
    index = archive.index
    if index is None or index.get("format") != FORMAT:
        problems.append(Problem(INDEX, f"is not a {FORMAT} index"))
    elif index.get("format_version") != FORMAT_VERSION:
        problems.append(
            Problem(
                INDEX, f"format version {index.get('format_version')} (this evaluator reads {FORMAT_VERSION})"
            )
        )
    run = archive.run
    if run is None:
        problems.append(Problem(f"{RUNS}/", f"the archive holds no single run folder with a {CONFIG}"))
        return VerifyResult(archive, problems, checks, None)
    if run.config is None:
        problems.append(Problem(f"{run.dir}/{CONFIG}", str(run.error)))
        return VerifyResult(archive, problems, checks, None)
    _check_recorded_hashes(archive, run.config, problems, checks)
    _check_dataset(archive, run.dir, run.config, problems)
    dest = _rescore(archive, run.dir, run.name, workdir, problems, checks)
    check_report(archive, run.dir, run.name, workdir, problems, checks)
    return VerifyResult(archive, problems, checks, dest)


def extract_prompts(archive: Archive, dest: Path) -> Path:
    folder = dest / PROMPTS
    folder.mkdir(parents=True, exist_ok=True)
    archive.extract(f"{PROMPTS}/", folder)
    return folder


def check_report(
    archive: Archive, run_dir: str, run_name: str, workdir: Path, problems: list[Problem], checks: list[str]
) -> None:
    entry = f"{run_dir}/{SCORES_DIR}/{REPORT_FILE}"
    if entry not in archive.files:
        return
    page = archive.whole(entry)
    stamp = page_stamp(page.decode("utf-8", "replace"))
    folder = workdir / "report-check" / run_name  # the run folder's name is part of the page
    try:
        if stamp:
            archive.extract(f"{run_dir}/", folder)  # a large member is copied, never read whole
        fresh = archived_report(folder, stamp) if stamp else None
    except (ScoreError, ReportError, OSError, ValueError):
        fresh = None
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)  # the copy is removed once used, not kept to the end
    if fresh != page:
        if any(p.path == entry for p in problems):  # already reported (it holds an image): one line a file
            return
        problems.append(
            Problem(entry, "does not match the report rebuilt from the archived records (without images)")
        )
    else:
        checks.append(f"report: {REPORT_FILE} matches the page rebuilt from the archived records")
