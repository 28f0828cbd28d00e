"""HTML report of a run: `scores/report.html`, one self-contained page to read the questions a model got wrong.

Self-contained means the page makes no network request: the stylesheet, the script (both in
`evaluator/report/assets/`), the plots and the thumbnails are inline, and a Content-Security-Policy
(`default-src 'none'`) makes the browser refuse anything else. It opens from the run folder or from an
archive.

* `write_report(run_root, data_files=None, images=True)` writes one run's page and scores/per_question.csv
  (the scorer calls it; `write_per_question` alone with `doccount score --no-report`);
* `write_compare_report(run_a, run_b, output)` writes a side-by-side page for two runs, rows where they
  disagree first.

Rows come from `evaluator.scoring.merge_run`: one row per question of the run's manifest (the full
denominator), missing questions included. Thumbnails are downscaled JPEG copies made for the page with
Pillow (the evaluated bytes are untouched); an image is used only when its sample id is in the run and
the SHA-256 of its bytes equals the image_sha256 of the run's record. When the data cannot be found the
page is written without thumbnails and says why (also on stderr); image problems never raise.

May import: core, data, request, runfolder, scoring.
"""

from evaluator.report.base import REPORT_FILE, ReportError, clip_text
from evaluator.report.compare_page import write_compare_report
from evaluator.report.pagedata import load_page_data, thumbnail_data_url
from evaluator.report.run_page import PER_QUESTION_FILE, write_per_question, write_report

__all__ = [
    "PER_QUESTION_FILE",
    "REPORT_FILE",
    "ReportError",
    "clip_text",
    "load_page_data",
    "thumbnail_data_url",
    "write_compare_report",
    "write_per_question",
    "write_report",
]
