"""verify's check of an archived run's report.html: rebuilt from the archived records (no images, no
data), at the stamp the archived page shows, and compared byte for byte, so an edited page is caught even
when SHA256SUMS was recomputed."""

from __future__ import annotations

import shutil
from pathlib import Path

from evaluator.archive.base import Archive, Problem
from evaluator.report import REPORT_FILE, ReportError
from evaluator.report.run_page import archived_report, page_stamp
from evaluator.scoring import SCORES_DIR, ScoreError


def check_report(
    archive: Archive, run_dir: str, run_name: str, workdir: Path, problems: list[Problem], checks: list[str]
) -> None:
    entry = f"{run_dir}/{SCORES_DIR}/{REPORT_FILE}"
    if entry not in archive.files:
        return
    page = archive.whole(entry)
    stamp = page_stamp(page.decode("utf-8", "replace"))
    folder = workdir / "report-check" / run_name  # the run folder's name is part of the page
    prefix = f"{run_dir}/"
    try:
        for name in archive.files if stamp else ():
            if name.startswith(prefix):
                target = folder / name[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                archive.copy_to(name, target)  # a large member is copied, never read whole
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
