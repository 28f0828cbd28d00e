"""One run's report: its page, scores/report.html (write_report), rendered from templates/run.html, and
the same rows as a table, scores/per_question.csv (write_per_question).

An archive carries another rendering (archived_report): from the run's records alone, with no image and
no text of the data, at a stamp taken from the run, so `verify` rebuilds it byte for byte.

scores/per_question.csv: one line per question (per response with --repeats), for a spreadsheet or pandas.
Columns: sample_id, repeat (with --repeats), the benchmark's subgroup fields (DocCount: target_class;
a list field's values joined with "; "), question (from the data; blank when the data was not found),
ground_truth, parsed_answer, parse_status, outcome, correct, latency_s, and the token counts. Every
question of the run is a line, missing ones included (outcome `missing`), as in the report. A text cell
that starts like a spreadsheet formula (`=`, `+`, `-`, `@`, tab, CR: a sample id or question from the data)
gets a leading `'` (core.text.csv_cell); numbers are written as they are.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluator.core.atomic import write_atomic
from evaluator.core.jsonl import is_num, utf8_text
from evaluator.core.records import Usage
from evaluator.core.secrets import redactor_from_env
from evaluator.core.text import csv_cell
from evaluator.data.benchmarks.base import Benchmark
from evaluator.report import count_errors, pieces
from evaluator.report.base import (
    DIRECTION_LABELS,
    IMAGE_PX,
    REPORT_FILE,
    Log,
    ReportError,
    direction_of,
    error_of,
    group_key,
    log_to_stderr,
    now,
    render,
    version,
)
from evaluator.report.pagedata import PageData, load_page_data
from evaluator.report.pieces import QuestionRow, Select
from evaluator.report.run_facts import data_parts, dates_text, reasoning_text, sampling_text
from evaluator.runfolder.batches import batch_line
from evaluator.scoring import MergedRun, merge_run, score_run
from evaluator.scoring.base import SCORES_DIR, ScoreResult
from evaluator.scoring.markdown import timeouts_text
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.summary_shape import Summary


def render_report(merged: MergedRun, page: PageData, stamp: tuple[str, str] | None = None) -> str:
    """The HTML of one run's report. `stamp`: the (version, time) it says it was written by and at
    (default: this version, now)."""
    bench, summary = merged.benchmark, merged.summary
    title = bench.title
    model = merged.run_config.model or summary.get("model")
    figs, plot_notes = pieces.plots(merged.run_root)
    limit = count_errors.absurd_limit(merged.rows)
    errors = count_errors.error_stats(merged.rows, limit)
    image_note = _image_note(page, len(merged.rows))
    return render(
        "run.html",
        f"{title} report: {model}",
        page.images,
        stamp=stamp,
        bench_title=title,
        model=model,
        meta=_meta(merged, title, model, stamp[1] if stamp else now()),
        headline=pieces.headline(summary),
        outcome_pills=pieces.outcome_pills(merged.rows),
        group_tables=pieces.group_tables(summary, count_errors.group_error_stats(bench, merged.rows, limit)),
        anatomy=pieces.anatomy(summary, errors["absurd"], limit),
        confusion=count_errors.confusion_tables(bench, summary, merged.rows, limit),
        unit="responses" if pieces.repeats_of(summary) > 1 else "questions",
        absurd_factor=count_errors.ABSURD_FACTOR,
        plots=figs,
        warnings=page.notes + plot_notes + [str(w) for w in summary.get("warnings") or []],
        info=[image_note] if image_note else [],
        controls=_run_controls(bench, summary, merged.rows),
        group_header=pieces.group_header(bench),
        rows=_run_rows(merged.rows, page, bench, pieces.repeats_of(summary)),
    )


def _image_note(page: PageData, rows: int) -> str | None:
    if page.archived:
        return ARCHIVED_NOTE
    if not page.images_requested:
        return "This report was written without images (--no-images)."
    if page.source:
        return (
            f"Thumbnails: {len(page.image_key)} of {rows} questions, from {page.source}; each image was matched "
            f"by sample id and verified against the SHA-256 recorded in the run, then downscaled for this page."
        )
    return None


def _meta(merged: MergedRun, title: str, model: Any, written: str) -> list[tuple[str, pieces.Parts]]:
    config, summary = merged.run_config, merged.summary
    data, question_set = data_parts(config, summary)
    return [
        ("model", [("code", model), ("", f" ({config.backend} backend)")]),
        ("benchmark", [("", title)]),
        ("run", [("code", merged.run_root.resolve().name)]),
        ("data", data),
        ("question set", question_set),
        ("sampling", [("", sampling_text(config))]),
        *([("reasoning", [("", reasoning_text(summary["reasoning"]))])] if "reasoning" in summary else []),
        *([("timeouts", [("", timeouts_text(summary["timeouts"]))])] if "timeouts" in summary else []),
        ("run dates", [("", dates_text(config))]),
        *([("batch", [("", batch_line(summary["batch"]))])] if summary.get("batch") else []),
        ("report", [("", f"written {written}")]),
    ]


def _run_controls(bench: Benchmark, summary: Summary, rows: list[ScoredRow]) -> pieces.Controls:
    results = Counter("correct" if r.correct else "wrong" for r in rows)
    dirs = Counter(direction_of(r) for r in rows)
    result_options = [(k, f"{k} ({results[k]})") for k in ("correct", "wrong") if results[k]]
    dir_options = [(k, f"{v} ({dirs[k]})") for k, v in DIRECTION_LABELS.items() if dirs[k]]
    selects = pieces.group_filters(bench, summary, [r.groups for r in rows])
    selects.append(pieces.status_select("status", "status", rows))
    selects.append(Select("result", "result", [("", "all")] + result_options))
    selects.append(Select("dir", "error", [("", "all")] + dir_options))
    sort_options = [
        ("order:asc", "question order"),
        ("err:desc", "error size, largest first"),
        ("err:asc", "error size, smallest first"),
        ("lat:desc", "latency, slowest first"),
        ("tok:desc", "completion tokens, most first"),
    ]
    return pieces.controls(selects, sort_options, "response or reasoning text")


def _run_rows(rows: list[ScoredRow], page: PageData, bench: Benchmark, k: int = 1) -> list[QuestionRow]:
    if k > 1:  # with --repeats, one table row holds a question's K responses
        return [_question_row(i // k, rows[i : i + k], page, bench, True) for i in range(0, len(rows), k)]
    return [_question_row(i, [row], page, bench, False) for i, row in enumerate(rows)]


def _union(reps: list[ScoredRow], fn: Callable[[ScoredRow], str]) -> str:
    return "|" + "|".join(sorted({fn(r) for r in reps})) + "|"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _question_row(
    i: int, reps: list[ScoredRow], page: PageData, bench: Benchmark, stacked: bool
) -> QuestionRow:
    """A question's row: its one response, or its K responses stacked (with --repeats)."""
    row = reps[0]
    sid = row.sample_id
    groups = row.groups
    sides = [pieces.side(r, bench, j if r.repeat is None else r.repeat) for j, r in enumerate(reps)]
    right = sum(1 for r in reps if r.correct)
    errs = [abs(e) for r in reps if (e := error_of(r)) is not None]
    lats = [s["usage"]["latency"] for s in sides if s["usage"]["latency"] is not None]
    toks = [c for s in sides if is_num(c := s["usage"]["completion"])]
    if stacked:
        caption = f"{sid} · truth {row.ground_truth} · {len(reps)} repeats"
    else:
        cls = group_key(groups.get("target_class")) if "target_class" in groups else ""
        caption = f"{sid} · {cls} · truth {row.ground_truth}"
    attrs = [
        ("data-f-status", _union(reps, lambda r: r.outcome)),
        ("data-f-result", _union(reps, lambda r: "correct" if r.correct else "wrong")),
        ("data-f-dir", _union(reps, direction_of)),
        *pieces.group_attrs(bench, groups),
        ("data-s-order", str(i)),
        ("data-s-err", str(max(errs)) if errs else ""),
        ("data-s-lat", pieces.fmt_float(_mean(lats))),
        ("data-s-tok", pieces.fmt_float(_mean(toks))),
    ]
    return QuestionRow(
        number=i + 1,
        sid=sid,
        anchor=sid,
        shown=sid,
        right=right == len(reps),
        attrs=attrs,
        thumb=pieces.thumb(page, sid, caption),
        group_text=pieces.group_text(bench, groups),
        question=page.questions.get(sid),
        truth=row.ground_truth if row.ground_truth is not None else "–",
        sides=sides,
        stacked=stacked,
        repeats_note=f"{right} of {len(reps)} repeats right" if stacked else "",
    )


def page_bytes(text: str) -> bytes:
    # a lone surrogate (a server may send one) has no UTF-8 form: shown as U+FFFD
    # and the API key never reaches the page, whatever an older run folder holds
    return utf8_text(redactor_from_env()(text))


def write_page(path: Path, text: str) -> None:
    write_atomic(path, page_bytes(text))


ARCHIVED_NOTE = (
    "This is the archive's copy of the report: it shows nothing of the data (no thumbnails, no question "
    "texts), whose licence does not allow passing it on. The run folder's own report.html has them."
)
# the footer line every page ends with (templates/page.html): which version wrote it, and when. Both
# parts are bounded (a version string and "YYYY-MM-DD HH:MM UTC" are far shorter), so every place the
# search tries costs at most a few hundred steps: unbounded, a page repeating the line's start took
# quadratic time (40 s on 256 KB) and verify of an archived 8 MiB page never ended.
STAMP_PART = 100
_FOOTER = re.compile(
    rf"Written by doccount-eval (\S{{1,{STAMP_PART}}}) on ([^<>\n]{{1,{STAMP_PART}}}?)\. Self-contained page"
)


def page_stamp(html: str) -> tuple[str, str] | None:
    """The (version, time) a page's footer says it was written by and at."""
    found = _FOOTER.search(html)
    return (found.group(1), found.group(2)) if found else None


def run_stamp(merged: MergedRun) -> tuple[str, str]:
    """A stamp taken from the run (run_config.json's last update, to the minute), not from the clock:
    archiving twice gives the same bytes."""
    config = merged.run_config
    found = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d)", config.updated_at or config.created_at or "")
    return version(), f"{found.group(1)} {found.group(2)} UTC" if found else "an unrecorded time"


def archived_report(run_root: Path, stamp: tuple[str, str] | None = None) -> bytes:
    """The report.html an archive carries, from the run folder's records alone: no thumbnails and no
    question texts (the data is never read), at `stamp` (default: run_stamp). ScoreError when the run
    cannot be merged."""
    merged = merge_run(Path(run_root))
    page = PageData(images_requested=False, archived=True)
    return page_bytes(render_report(merged, page, stamp or run_stamp(merged)))


PER_QUESTION_FILE = "per_question.csv"
TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "; ".join(str(_cell(v)) for v in value)
    return value


def per_question_line(row: ScoredRow, benchmark: Benchmark, question: str | None, repeats: bool) -> list[Any]:
    usage = row.usage or Usage()
    state = row.outcome
    line: list[Any] = [row.sample_id, *([row.repeat] if repeats else [])]
    line += [row.groups.get(name) for name in benchmark.group_fields]
    line += [question, row.ground_truth, row.parsed_answer if state == "ok" else None]
    line += [row.parse_status if state in ("ok", "parse_failure") else None, state]
    line += [row.correct, row.latency_s]
    return [_cell(v) for v in line + [getattr(usage, k) for k in TOKEN_KEYS]]


def per_question_csv(merged: MergedRun, questions: dict[str, str]) -> str:
    repeats = pieces.repeats_of(merged.summary) > 1
    out = io.StringIO()
    writer = csv.writer(out)
    head = ["sample_id", *(["repeat"] if repeats else []), *merged.benchmark.group_fields, "question"]
    head += ["ground_truth", "parsed_answer", "parse_status", "outcome", "correct", "latency_s"]
    writer.writerow([csv_cell(c) for c in head + list(TOKEN_KEYS)])
    for row in merged.rows:
        question = questions.get(row.sample_id)
        writer.writerow([csv_cell(c) for c in per_question_line(row, merged.benchmark, question, repeats)])
    return out.getvalue()


def write_per_question(merged: MergedRun, questions: dict[str, str]) -> Path:
    target = merged.run_root / SCORES_DIR / PER_QUESTION_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, per_question_csv(merged, questions).encode("utf-8"))
    return target


def write_report(
    run_root: Path | str,
    data_files: str | None = None,
    images: bool = True,
    *,
    output: Path | str | None = None,
    image_px: int = IMAGE_PX,
    log: Log | None = log_to_stderr,
    merged: MergedRun | None = None,
) -> Path:
    """Write one run's report (default `<run_root>/scores/report.html`) and scores/per_question.csv;
    return the report's path.

    Raises ScoreError for a run folder that cannot be merged and ReportError when the file cannot be
    written; missing or mismatched data only leaves thumbnails out (with a note in the page and on stderr).
    `merged`: the run as score_run just merged it (keep_merged=True), instead of merging it again.
    """
    if merged is None:
        merged = merge_run(Path(run_root))
    page = load_page_data(merged.benchmark, merged.run_config, merged.rows, data_files, images, image_px)
    if log:
        for note in page.notes:
            log(note)
    target = Path(output) if output else merged.run_root / SCORES_DIR / REPORT_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_page(target, render_report(merged, page))
    except OSError as exc:
        raise ReportError(
            f"cannot write the report {target} ({exc.strerror}); choose another --output"
        ) from None
    try:
        write_per_question(merged, page.questions)
    except OSError as exc:  # the run folder may be read-only (an unpacked archive): the page is written
        if log:
            log(f"scores/per_question.csv was not written ({exc.strerror})")
    return target


def score_and_report(run_root: Path, note: Log, report: bool = True, images: bool = True) -> ScoreResult:
    """What `doccount score` does: score_run, then the page (or per_question.csv alone) from the same merge,
    its notes and warnings to `note`. The page is a view of the score: failing to write it never fails
    the scoring (a warning)."""
    result = score_run(run_root, keep_merged=True)
    for warning in result.warnings:
        note(f"warning: {warning}")
    merged = result.merged
    try:
        if report:
            page_notes: Log = lambda m: note(f"report: {m}")  # noqa: E731
            note(f"report: {write_report(run_root, images=images, merged=merged, log=page_notes)}")
        elif merged is not None:  # per_question.csv: question texts from the data when it is found
            page = load_page_data(merged.benchmark, merged.run_config, merged.rows, images=False)
            write_per_question(merged, page.questions)
    except Exception as exc:  # noqa: BLE001
        note(f"warning: {'the HTML report' if report else 'scores/per_question.csv'} was not written ({exc})")
    return result
