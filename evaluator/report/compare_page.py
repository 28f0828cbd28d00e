"""Two runs side by side (write_compare_report), the questions they disagree on first."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from evaluator.core.keys import record_key
from evaluator.data.benchmarks.base import Benchmark
from evaluator.report.base import (
    IMAGE_PX,
    STATUS_LABELS,
    TITLES,
    VERDICT_RANK,
    VERDICTS,
    Log,
    ReportError,
    _ci,
    _e,
    _members,
    _pct,
    _stderr,
    answer_of,
    error_of,
    outcome,
)
from evaluator.report.pagedata import (
    PageData,
    load_page_data,
)
from evaluator.report.pieces import (
    _answer_cell,
    _controls,
    _counts,
    _error_cell,
    _footer,
    _group_attrs,
    _group_filters,
    _group_header,
    _group_text,
    _notes,
    _reasoning_block,
    _select,
    _status_cell,
    _text_block,
    _thumb,
    _usage,
)
from evaluator.report.pieces import page as page_html
from evaluator.report.run_facts import _data_html, _dates, _sampling_text
from evaluator.report.run_page import (
    _question_html,
    _write_atomic,
)
from evaluator.scoring import MergedRun, merge_run

# ----------------------------------------------------------------------------- two runs


def verdict_of(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if a is None or b is None:
        return "unpaired"
    ca, cb = bool(a.get("correct")), bool(b.get("correct"))
    if ca and cb:
        return "both_right"
    if ca:
        return "only_a"
    if cb:
        return "only_b"
    same = (answer_of(a), outcome(a)) == (answer_of(b), outcome(b))
    return "both_wrong_same" if same else "both_wrong_diff"


def _side_cell(row: dict[str, Any] | None, benchmark: Benchmark) -> str:
    if row is None:
        return '<span class="badge st-absent">not in this run</span>'
    return (
        f"{_answer_cell(row, benchmark)}<div>{_error_cell(row)}</div>{_status_cell(row)}"
        f'<div class="detail">{_usage(row)[0]}</div>'
    )


def _side_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    return _text_block(row.get("response_text"), "resp", "no visible response") + _reasoning_block(
        row.get("reasoning_text")
    )


def render_compare(ma: MergedRun, mb: MergedRun, page: PageData, names: tuple[str, str]) -> str:
    bench = ma.benchmark
    title = TITLES.get(bench.name, bench.name)
    # paired by (question, repeat): with --repeats each response meets its own counterpart
    a_rows = {record_key(r): r for r in ma.rows}
    b_rows = {record_key(r): r for r in mb.rows}
    order = list(a_rows) + [k for k in b_rows if k not in a_rows]
    pairs = [(k[0], a_rows.get(k), b_rows.get(k)) for k in order]
    verdicts = Counter(verdict_of(a, b) for _, a, b in pairs)
    na, nb = names
    body = ['<header class="top">', f"<h1>{_e(title)} · A: {_e(na)} vs B: {_e(nb)}</h1>"]
    body.append(_summary_table(ma, mb, pairs))
    body += [_group_compare(name, ma.summary, mb.summary) for name in bench.group_fields]
    body.append(
        '<h2>Agreement</h2><div class="pills">'
        + "".join(
            f'<span class="pill"><span class="agree-{k}">{_e(v)}</span> {verdicts.get(k, 0)}</span>'
            for k, v in VERDICTS.items()
        )
        + "</div>"
    )
    body.append(_notes(_compare_notes(ma, mb, page)))
    body.append("</header>")
    body.append(_compare_controls(bench, ma.summary, pairs, verdicts))
    body += _compare_table(pairs, page, bench, names)
    return page_html(f"{title} comparison: {na} vs {nb}", body, page.images, _footer())


def _primary(m: MergedRun) -> dict[str, Any]:
    return m.summary.get("primary") if isinstance(m.summary.get("primary"), dict) else {}


def _summary_table(ma: MergedRun, mb: MergedRun, pairs: list) -> str:
    pa_, pb_ = _primary(ma), _primary(mb)
    paired = [(a, b) for _, a, b in pairs if a is not None and b is not None]
    acc_a = sum(1 for a, _ in paired if a.get("correct"))
    acc_b = sum(1 for _, b in paired if b.get("correct"))
    da, qa = _data_html(ma.run_config, ma.summary)
    db, qb = _data_html(mb.run_config, mb.summary)
    out = [
        '<table class="stats" id="compare-summary"><thead><tr><th></th><th>A</th><th>B</th></tr></thead><tbody>'
    ]
    for label, va, vb in [
        ("model", _e(ma.run_config.model), _e(mb.run_config.model)),
        ("run", _e(ma.run_root.resolve().name), _e(mb.run_root.resolve().name)),
        ("data", da, db),
        ("question set", qa, qb),
        ("sampling", _sampling_text(ma.run_config), _sampling_text(mb.run_config)),
        ("run dates", _dates(ma.run_config), _dates(mb.run_config)),
        (
            "exact-count accuracy",
            f"<b>{_pct(pa_.get('accuracy'))}</b> ({_e(pa_.get('correct'))} / {_e(pa_.get('questions'))})",
            f"<b>{_pct(pb_.get('accuracy'))}</b> ({_e(pb_.get('correct'))} / {_e(pb_.get('questions'))})",
        ),
        ("95% Wilson interval", _ci(pa_.get("ci95")), _ci(pb_.get("ci95"))),
        (f"correct on the {len(paired)} shared questions", str(acc_a), str(acc_b)),
    ]:
        out.append(
            f'<tr><td>{_e(label)}</td><td style="text-align:left">{va}</td><td style="text-align:left">{vb}</td></tr>'
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _group_compare(name: str, sa: dict[str, Any], sb: dict[str, Any]) -> str:
    ga, gb = sa.get("groups") or {}, sb.get("groups") or {}
    va_, vb_ = (ga.get(name) or {}).get("values") or {}, (gb.get(name) or {}).get("values") or {}
    keys = list((ga.get(name) or {}).get("order") or va_) + [k for k in vb_ if k not in va_]
    label = "class" if name == "target_class" else name
    out = [
        f'<h2>Accuracy by {_e(label)}</h2><table class="stats"><thead><tr><th>{_e(label)}</th><th>questions A</th>'
        "<th>A</th><th>A 95% CI</th><th>questions B</th><th>B</th><th>B 95% CI</th></tr></thead><tbody>"
    ]
    for k in keys:
        x, y = va_.get(k) or {}, vb_.get(k) or {}
        out.append(
            f"<tr><td>{_e(k)}</td><td>{_e(x.get('questions'))}</td><td>{_pct(x.get('accuracy'))}</td>"
            f"<td>{_ci(x.get('ci95'))}</td><td>{_e(y.get('questions'))}</td><td>{_pct(y.get('accuracy'))}</td>"
            f"<td>{_ci(y.get('ci95'))}</td></tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _compare_notes(ma: MergedRun, mb: MergedRun, page: PageData) -> list[str]:
    notes = list(page.notes)
    digest_a = (ma.summary.get("data") or {}).get("manifest_sha256")
    if digest_a != (mb.summary.get("data") or {}).get("manifest_sha256"):
        notes.append(
            "The two runs have different question sets (manifest SHA-256 differs); questions in one run only are "
            "listed last and the accuracies above are over different denominators."
        )
    return notes


def _status_select(attr: str, label: str, rows: list[dict[str, Any]]) -> str:
    counts = _counts(rows, outcome)
    return _select(
        attr,
        label,
        [("", "all")] + [(k, f"{v} ({counts[k]})") for k, v in STATUS_LABELS.items() if counts[k]],
    )


def _compare_controls(bench: Benchmark, summary: dict[str, Any], pairs: list, verdicts: Counter) -> str:
    selects = _group_filters(bench, summary, [(a or b or {}).get("groups") or {} for _, a, b in pairs])
    disagree = sum(verdicts[k] for k in ("only_a", "only_b", "both_wrong_diff"))
    selects.append(
        _select(
            "verdict",
            "verdict",
            [("", "all"), ("disagree", f"disagree ({disagree})")]
            + [(k, f"{v} ({verdicts[k]})") for k, v in VERDICTS.items() if verdicts[k]],
        )
    )
    selects.append(_status_select("status-a", "A status", [a for _, a, _ in pairs if a]))
    selects.append(_status_select("status-b", "B status", [b for _, _, b in pairs if b]))
    sort_options = [
        ("rank:asc", "disagreements first"),
        ("order:asc", "question order"),
        ("gap:desc", "error gap |A|−|B|, largest first"),
    ]
    return _controls(selects, sort_options, "either response text")


def _compare_table(pairs: list, page: PageData, bench: Benchmark, names: tuple[str, str]) -> list[str]:
    na, nb = names
    out = [
        '<section><table class="rows" id="rows"><colgroup><col class="c-n"><col class="c-img"><col class="c-q">'
        '<col class="c-num"><col class="c-st"><col class="c-st"><col class="c-agree"><col><col></colgroup>'
        f"<thead><tr><th>#</th><th>image</th><th>{_e(_group_header(bench))}</th><th>truth</th><th>A: {_e(na)}</th>"
        f"<th>B: {_e(nb)}</th><th>verdict</th><th>A response</th><th>B response</th></tr></thead><tbody>"
    ]
    out += [_compare_row(i, sid, a, b, page, bench) for i, (sid, a, b) in enumerate(pairs)]
    out.append("</tbody></table></section>\n")
    return out


def _compare_row(i: int, sid: str, a: Any, b: Any, page: PageData, bench: Benchmark) -> str:
    any_row = a or b or {}
    groups = any_row.get("groups") or {}
    v = verdict_of(a, b)
    ea, eb = (error_of(a) if a else None), (error_of(b) if b else None)
    gap = abs(abs(ea) - abs(eb)) if ea is not None and eb is not None else None
    members = [v] + (["disagree"] if v in ("only_a", "only_b", "both_wrong_diff") else [])
    correct = bool(a and a.get("correct")) and bool(b and b.get("correct"))
    caption = f"{sid} · truth {any_row.get('ground_truth')}"
    truth = any_row.get("ground_truth") if any_row.get("ground_truth") is not None else "–"
    repeat = any_row.get("repeat")
    anchor, shown = (sid, sid) if repeat is None else (f"{sid}-r{repeat}", f"{sid} · repeat {repeat}")
    return (
        f'<tr class="q {"right" if correct else "wrong"}" id="q-{_e(anchor)}" data-sid="{_e(sid)}"'
        f' data-f-verdict="{_e(_members(members))}"'
        f' data-f-status-a="|{outcome(a) if a else "absent"}|" data-f-status-b="|{outcome(b) if b else "absent"}|"'
        f"{_group_attrs(bench, groups)}"
        f' data-s-order="{i}" data-s-rank="{VERDICT_RANK[v]}" data-s-gap="{"" if gap is None else gap}">'
        f'<td class="idx">{i + 1}</td><td>{_thumb(page, sid, caption)}</td>'
        f'<td><div class="cls">{_group_text(bench, groups)}</div>{_question_html(page, sid)}'
        f'<div class="sid mono">{_e(shown)}</div></td>'
        f'<td class="num">{_e(truth)}</td>'
        f"<td>{_side_cell(a, bench)}</td><td>{_side_cell(b, bench)}</td>"
        f'<td><span class="agree-{v}">{_e(VERDICTS[v])}</span></td>'
        f"<td>{_side_text(a)}</td><td>{_side_text(b)}</td></tr>"
    )


def _run_labels(ma: MergedRun, mb: MergedRun) -> tuple[str, str]:
    a, b = ma.run_config.model, mb.run_config.model
    if a == b:
        a, b = ma.run_root.resolve().name, mb.run_root.resolve().name
        if a == b:
            a, b = f"{a} (A)", f"{b} (B)"
    return a, b


def write_compare_report(
    run_a: Path | str,
    run_b: Path | str,
    output: Path | str,
    *,
    data_files: str | None = None,
    images: bool = True,
    image_px: int = IMAGE_PX,
    log: Log | None = _stderr,
) -> Path:
    """Write a side-by-side page for two runs of one benchmark (rows where they disagree first).

    Images come from `data_files`, else run A's recorded data (falling back to run B's); each is verified
    against the image SHA-256 recorded for the question.
    """
    ma, mb = merge_run(Path(run_a)), merge_run(Path(run_b))
    if ma.benchmark.name != mb.benchmark.name:
        raise ReportError(
            f"cannot compare a {ma.benchmark.name} run with a {mb.benchmark.name} run; pick two runs of one benchmark"
        )
    a_ids = {r["sample_id"] for r in ma.rows}
    rows = list(ma.rows) + [r for r in mb.rows if r["sample_id"] not in a_ids]
    page = load_page_data(ma.benchmark, ma.run_config, rows, data_files, images, image_px)
    if page.source is None and not data_files:
        second = load_page_data(mb.benchmark, mb.run_config, rows, None, images, image_px)
        if second.source is not None:
            page = second
    if log:
        for note in page.notes:
            log(note)
    target = Path(output)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(target, render_compare(ma, mb, page, _run_labels(ma, mb)))
    except OSError as exc:
        raise ReportError(
            f"cannot write the comparison {target} ({exc.strerror}); choose another path"
        ) from None
    return target
