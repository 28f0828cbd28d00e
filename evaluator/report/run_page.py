"""One run's page: scores/report.html (write_report)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluator.core.atomic import write_atomic
from evaluator.core.jsonl import utf8_text
from evaluator.core.secrets import Redactor
from evaluator.data.benchmarks.base import Benchmark
from evaluator.report.base import (
    DIRECTION_LABELS,
    IMAGE_PX,
    REPORT_FILE,
    SCORES_DIR,
    STATUS_LABELS,
    TITLES,
    Log,
    ReportError,
    _e,
    _key,
    _now,
    _stderr,
    direction_of,
    error_of,
    outcome,
)
from evaluator.report.pagedata import (
    PageData,
    load_page_data,
)
from evaluator.report.pieces import (
    _anatomy,
    _answer_cell,
    _controls,
    _counts,
    _error_cell,
    _fmt_float,
    _footer,
    _group_attrs,
    _group_filters,
    _group_header,
    _group_tables,
    _group_text,
    _headline,
    _meta,
    _notes,
    _outcome_pills,
    _plots,
    _reasoning_block,
    _repeats_of,
    _select,
    _status_cell,
    _text_block,
    _thumb,
    _usage,
)
from evaluator.report.pieces import page as page_html
from evaluator.report.run_facts import _data_html, _dates, _sampling_text
from evaluator.runfolder.batches import batch_line
from evaluator.scoring import MergedRun, merge_run

# ----------------------------------------------------------------------------- one run


def render_report(merged: MergedRun, page: PageData) -> str:
    """The HTML of one run's report."""
    bench, summary = merged.benchmark, merged.summary
    title = TITLES.get(bench.name, bench.name)
    model = merged.run_config.model or summary.get("model")
    body = _run_header(merged, page, title, model)
    body.append(_run_controls(bench, summary, merged.rows))
    body += _run_table(merged.rows, page, bench, _repeats_of(summary))
    return page_html(f"{title} report: {model}", body, page.images, _footer())


def _image_note(page: PageData, rows: int) -> str | None:
    if not page.images_requested:
        return "This report was written without images (--no-images)."
    if page.source:
        return (
            f"Thumbnails: {len(page.image_key)} of {rows} questions, from {page.source}; each image was matched "
            f"by sample id and verified against the SHA-256 recorded in the run, then downscaled for this page."
        )
    return None


def _run_header(merged: MergedRun, page: PageData, title: str, model: Any) -> list[str]:
    config, summary, rows = merged.run_config, merged.summary, merged.rows
    data_text, qs_text = _data_html(config, summary)
    plots_html, plot_notes = _plots(merged.run_root)
    meta = [
        ("model", f"<code>{_e(model)}</code> ({_e(config.backend)} backend)"),
        ("benchmark", _e(title)),
        ("run", f"<code>{_e(merged.run_root.resolve().name)}</code>"),
        ("data", data_text),
        ("question set", qs_text),
        ("sampling", _sampling_text(config)),
        ("run dates", _dates(config)),
        *([("batch", _e(batch_line(summary["batch"])))] if summary.get("batch") else []),
        ("report", f"written {_e(_now())}"),
    ]
    out = ['<header class="top">', f"<h1>{_e(title)} · {_e(model)}</h1>", _meta(meta), "</header>\n<section>"]
    out += [_headline(summary), _outcome_pills(rows), _group_tables(summary), _anatomy(summary), plots_html]
    warnings = [str(w) for w in summary.get("warnings") or []]
    out.append(_notes(page.notes + plot_notes + warnings))
    image_note = _image_note(page, len(rows))
    if image_note:
        out.append(_notes([image_note], "info"))
    out.append("</section>")
    return out


def _run_controls(bench: Benchmark, summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    statuses = _counts(rows, outcome)
    results = _counts(rows, lambda r: "correct" if r.get("correct") else "wrong")
    dirs = _counts(rows, direction_of)
    selects = _group_filters(bench, summary, [r.get("groups") or {} for r in rows])
    selects.append(
        _select(
            "status",
            "status",
            [("", "all")] + [(k, f"{v} ({statuses[k]})") for k, v in STATUS_LABELS.items() if statuses[k]],
        )
    )
    selects.append(
        _select(
            "result",
            "result",
            [("", "all")] + [(k, f"{k} ({results[k]})") for k in ("correct", "wrong") if results[k]],
        )
    )
    selects.append(
        _select(
            "dir",
            "error",
            [("", "all")] + [(k, f"{v} ({dirs[k]})") for k, v in DIRECTION_LABELS.items() if dirs[k]],
        )
    )
    sort_options = [
        ("order:asc", "question order"),
        ("err:desc", "error size, largest first"),
        ("err:asc", "error size, smallest first"),
        ("lat:desc", "latency, slowest first"),
        ("tok:desc", "completion tokens, most first"),
    ]
    return _controls(selects, sort_options, "response or reasoning text")


def _run_table(rows: list[dict[str, Any]], page: PageData, bench: Benchmark, k: int = 1) -> list[str]:
    out = [
        '<section><table class="rows" id="rows"><colgroup><col class="c-n"><col class="c-img"><col class="c-q">'
        '<col class="c-num"><col class="c-num"><col class="c-num"><col class="c-st"><col><col class="c-lat">'
        f"</colgroup><thead><tr><th>#</th><th>image</th><th>{_e(_group_header(bench))}</th><th>truth</th><th>answer</th>"
        "<th>error</th><th>status</th><th>response</th><th>latency, tokens</th></tr></thead><tbody>"
    ]
    if k > 1:  # with --repeats, one table row holds a question's K responses
        out += [_repeats_row(i // k, rows[i : i + k], bench, page) for i in range(0, len(rows), k)]
    else:
        out += [_run_row(i, row, page, bench) for i, row in enumerate(rows)]
    out.append("</tbody></table></section>\n")
    return out


def _question_html(page: PageData, sid: str) -> str:
    question = page.questions.get(sid)
    if question:
        return f'<div class="question">{_e(question)}</div>'
    return '<div class="question none">question text not available</div>'


def _run_row(i: int, row: dict[str, Any], page: PageData, bench: Benchmark) -> str:
    sid = str(row.get("sample_id"))
    groups = row.get("groups") or {}
    err = error_of(row)
    usage_html, lat, tok = _usage(row)
    cls = _key(groups.get("target_class")) if "target_class" in groups else ""
    caption = f"{sid} · {cls} · truth {row.get('ground_truth')}"
    correct = bool(row.get("correct"))
    truth = row.get("ground_truth") if row.get("ground_truth") is not None else "–"
    return (
        f'<tr class="q {"right" if correct else "wrong"}" id="q-{_e(sid)}" data-sid="{_e(sid)}"'
        f' data-f-status="|{outcome(row)}|" data-f-result="|{"correct" if correct else "wrong"}|"'
        f' data-f-dir="|{direction_of(row)}|"{_group_attrs(bench, groups)}'
        f' data-s-order="{i}" data-s-err="{"" if err is None else abs(err)}"'
        f' data-s-lat="{_fmt_float(lat)}" data-s-tok="{_fmt_float(tok)}">'
        f'<td class="idx">{i + 1}</td><td>{_thumb(page, sid, caption)}</td>'
        f'<td><div class="cls">{_group_text(bench, groups)}</div>{_question_html(page, sid)}'
        f'<div class="sid mono">{_e(sid)}</div></td>'
        f'<td class="num">{_e(truth)}</td>'
        f'<td class="res">{_answer_cell(row, bench)}</td><td>{_error_cell(row)}</td>'
        f"<td>{_status_cell(row)}</td>"
        f"<td>{_text_block(row.get('response_text'), 'resp', 'no visible response')}"
        f"{_reasoning_block(row.get('reasoning_text'))}</td>"
        f"<td>{usage_html}</td></tr>"
    )


def _write_atomic(path: Path, text: str) -> None:
    # a lone surrogate (a server may send one) has no UTF-8 form: shown as U+FFFD
    # and the API key never reaches the page, whatever an older run folder holds
    write_atomic(path, utf8_text(Redactor(os.environ.get("MODEL_API_KEY"))(text)))


def write_report(
    run_root: Path | str,
    data_files: str | None = None,
    images: bool = True,
    *,
    output: Path | str | None = None,
    image_px: int = IMAGE_PX,
    log: Log | None = _stderr,
    merged: MergedRun | None = None,
) -> Path:
    """Write one run's report (default `<run_root>/scores/report.html`) and return its path.

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
        _write_atomic(target, render_report(merged, page))
    except OSError as exc:
        raise ReportError(
            f"cannot write the report {target} ({exc.strerror}); choose another --output"
        ) from None
    return target


def _repeats_row(i: int, reps: list[dict[str, Any]], bench: Benchmark, page: PageData) -> str:
    """One question's row with its K responses stacked in the answer to usage cells."""
    row = reps[0]
    sid = str(row.get("sample_id"))
    groups = row.get("groups") or {}
    caption = f"{sid} · truth {row.get('ground_truth')} · {len(reps)} repeats"
    right = sum(1 for r in reps if r.get("correct"))
    errs = [abs(e) for r in reps if (e := error_of(r)) is not None]
    usage = [_usage(r) for r in reps]
    lats = [u[1] for u in usage if u[1] is not None]
    toks = [u[2] for u in usage if u[2] is not None]

    def union(fn: Callable[[dict[str, Any]], str]) -> str:
        return "|" + "|".join(sorted({fn(r) for r in reps})) + "|"

    def stacked(cell: Callable[[dict[str, Any]], str]) -> str:
        return "".join(
            f'<div class="rep"><span class="detail">repeat {r.get("repeat", j)}</span> {cell(r)}</div>'
            for j, r in enumerate(reps)
        )

    def texts(r: dict[str, Any]) -> str:
        return _text_block(r.get("response_text"), "resp", "no visible response") + _reasoning_block(
            r.get("reasoning_text")
        )

    truth = row.get("ground_truth") if row.get("ground_truth") is not None else "–"
    return (
        f'<tr class="q {"right" if right == len(reps) else "wrong"}" id="q-{_e(sid)}" data-sid="{_e(sid)}"'
        f' data-f-status="{union(outcome)}"'
        f' data-f-result="{union(lambda r: "correct" if r.get("correct") else "wrong")}"'
        f' data-f-dir="{union(direction_of)}"{_group_attrs(bench, groups)}'
        f' data-s-order="{i}" data-s-err="{max(errs) if errs else ""}"'
        f' data-s-lat="{_fmt_float(sum(lats) / len(lats) if lats else None)}"'
        f' data-s-tok="{_fmt_float(sum(toks) / len(toks) if toks else None)}">'
        f'<td class="idx">{i + 1}</td><td>{_thumb(page, sid, caption)}</td>'
        f'<td><div class="cls">{_group_text(bench, groups)}</div>{_question_html(page, sid)}'
        f'<div class="sid mono">{_e(sid)}</div>'
        f'<div class="detail">{right} of {len(reps)} repeats right</div></td>'
        f'<td class="num">{_e(truth)}</td>'
        f'<td class="res">{stacked(lambda r: _answer_cell(r, bench))}</td><td>{stacked(_error_cell)}</td>'
        f"<td>{stacked(_status_cell)}</td><td>{stacked(texts)}</td>"
        f"<td>{stacked(lambda r: _usage(r)[0])}</td></tr>"
    )
