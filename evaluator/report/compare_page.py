"""Two runs side by side (write_compare_report, templates/compare.html), the questions they disagree on first."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

from evaluator.data.benchmarks.base import Benchmark
from evaluator.report import pieces
from evaluator.report.base import (
    IMAGE_PX,
    VERDICT_RANK,
    VERDICTS,
    Log,
    ReportError,
    answer_of,
    ci,
    error_of,
    log_to_stderr,
    members,
    pct,
    render,
)
from evaluator.report.pagedata import PageData, load_page_data
from evaluator.report.pieces import Parts, QuestionRow, Select
from evaluator.report.run_facts import data_parts, dates_text, sampling_text
from evaluator.report.run_page import write_page
from evaluator.scoring import MergedRun, merge_run
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.summary_shape import Primary, Summary

Pair = tuple[str, "ScoredRow | None", "ScoredRow | None"]


def verdict_of(a: ScoredRow | None, b: ScoredRow | None) -> str:
    if a is None or b is None:
        return "unpaired"
    ca, cb = a.correct, b.correct
    if ca and cb:
        return "both_right"
    if ca:
        return "only_a"
    if cb:
        return "only_b"
    same = (answer_of(a), a.outcome) == (answer_of(b), b.outcome)
    return "both_wrong_same" if same else "both_wrong_diff"


def render_compare(ma: MergedRun, mb: MergedRun, page: PageData, names: tuple[str, str]) -> str:
    bench = ma.benchmark
    title = bench.title
    # paired by (question, repeat): with --repeats each response meets its own counterpart
    a_rows = {r.key: r for r in ma.rows}
    b_rows = {r.key: r for r in mb.rows}
    order = list(a_rows) + [k for k in b_rows if k not in a_rows]
    pairs: list[Pair] = [(k[0], a_rows.get(k), b_rows.get(k)) for k in order]
    verdicts = Counter(verdict_of(a, b) for _, a, b in pairs)
    na, nb = names
    return render(
        "compare.html",
        f"{title} comparison: {na} vs {nb}",
        page.images,
        bench_title=title,
        names=names,
        summary_rows=_summary_rows(ma, mb, pairs),
        group_tables=[_group_compare(name, ma.summary, mb.summary) for name in bench.group_fields],
        verdict_pills=[(k, v, verdicts.get(k, 0)) for k, v in VERDICTS.items()],
        notes=_compare_notes(ma, mb, page),
        controls=_compare_controls(bench, ma.summary, pairs, verdicts),
        group_header=pieces.group_header(bench),
        rows=[_compare_row(i, sid, a, b, page, bench) for i, (sid, a, b) in enumerate(pairs)],
    )


class GroupCompare(TypedDict):
    label: str
    heads: list[str]
    rows: list[list[Any]]


def _accuracy_parts(p: Primary) -> Parts:
    correct, questions = p.get("correct"), p.get("questions")
    return [
        ("b", pct(p.get("accuracy"))),
        ("", f" ({'' if correct is None else correct} / {'' if questions is None else questions})"),
    ]


def _summary_rows(ma: MergedRun, mb: MergedRun, pairs: list[Pair]) -> list[tuple[str, Parts, Parts]]:
    pa_, pb_ = ma.summary["primary"], mb.summary["primary"]
    paired = [(a, b) for _, a, b in pairs if a is not None and b is not None]
    acc_a = sum(1 for a, _ in paired if a.correct)
    acc_b = sum(1 for _, b in paired if b.correct)
    da, qa = data_parts(ma.run_config, ma.summary)
    db, qb = data_parts(mb.run_config, mb.summary)

    def text(x: Any) -> Parts:
        return [("", "" if x is None else str(x))]

    return [
        ("model", text(ma.run_config.model), text(mb.run_config.model)),
        ("run", text(ma.run_root.resolve().name), text(mb.run_root.resolve().name)),
        ("data", da, db),
        ("question set", qa, qb),
        ("sampling", text(sampling_text(ma.run_config)), text(sampling_text(mb.run_config))),
        ("run dates", text(dates_text(ma.run_config)), text(dates_text(mb.run_config))),
        ("exact-count accuracy", _accuracy_parts(pa_), _accuracy_parts(pb_)),
        ("95% Wilson interval", text(ci(pa_.get("ci95"))), text(ci(pb_.get("ci95")))),
        (f"correct on the {len(paired)} shared questions", text(acc_a), text(acc_b)),
    ]


def _group_compare(name: str, sa: Summary, sb: Summary) -> GroupCompare:
    ga, gb = sa["groups"].get(name), sb["groups"].get(name)
    va_, vb_ = ga["values"] if ga else {}, gb["values"] if gb else {}
    keys = list((ga["order"] if ga else []) or va_) + [k for k in vb_ if k not in va_]
    label = "class" if name == "target_class" else name
    rows = []
    for k in keys:
        x, y = va_.get(k) or pieces.NO_VALUE, vb_.get(k) or pieces.NO_VALUE
        rows.append(
            [k, x.get("questions"), pct(x.get("accuracy")), ci(x.get("ci95"))]
            + [y.get("questions"), pct(y.get("accuracy")), ci(y.get("ci95"))]
        )
    heads = [label, "questions A", "A", "A 95% CI", "questions B", "B", "B 95% CI"]
    return {"label": label, "heads": heads, "rows": rows}


def _compare_notes(ma: MergedRun, mb: MergedRun, page: PageData) -> list[str]:
    notes = list(page.notes)
    digest_a = (ma.summary.get("data") or {}).get("manifest_sha256")
    if digest_a != (mb.summary.get("data") or {}).get("manifest_sha256"):
        notes.append(
            "The two runs have different question sets (manifest SHA-256 differs); questions in one run only are "
            "listed last and the accuracies above are over different denominators."
        )
    return notes


def _compare_controls(
    bench: Benchmark, summary: Summary, pairs: list[Pair], verdicts: Counter
) -> pieces.Controls:
    selects = pieces.group_filters(bench, summary, [_either(a, b).groups for _, a, b in pairs])
    disagree = sum(verdicts[k] for k in ("only_a", "only_b", "both_wrong_diff"))
    options = [(k, f"{v} ({verdicts[k]})") for k, v in VERDICTS.items() if verdicts[k]]
    selects.append(
        Select("verdict", "verdict", [("", "all"), ("disagree", f"disagree ({disagree})"), *options])
    )
    selects.append(pieces.status_select("status-a", "A status", [a for _, a, _ in pairs if a]))
    selects.append(pieces.status_select("status-b", "B status", [b for _, _, b in pairs if b]))
    sort_options = [
        ("rank:asc", "disagreements first"),
        ("order:asc", "question order"),
        ("gap:desc", "error gap |A|−|B|, largest first"),
    ]
    return pieces.controls(selects, sort_options, "either response text")


def _either(a: ScoredRow | None, b: ScoredRow | None) -> ScoredRow:
    """The row a pair has (every pair has one at least)."""
    row = a or b
    assert row is not None
    return row


def _compare_row(
    i: int, sid: str, a: ScoredRow | None, b: ScoredRow | None, page: PageData, bench: Benchmark
) -> QuestionRow:
    any_row = _either(a, b)
    groups = any_row.groups
    v = verdict_of(a, b)
    ea, eb = (error_of(a) if a else None), (error_of(b) if b else None)
    gap = abs(abs(ea) - abs(eb)) if ea is not None and eb is not None else None
    verdict_members = [v] + (["disagree"] if v in ("only_a", "only_b", "both_wrong_diff") else [])
    repeat = any_row.repeat
    anchor, shown = (sid, sid) if repeat is None else (f"{sid}-r{repeat}", f"{sid} · repeat {repeat}")
    attrs = [
        ("data-f-verdict", members(verdict_members)),
        ("data-f-status-a", f"|{a.outcome if a else 'absent'}|"),
        ("data-f-status-b", f"|{b.outcome if b else 'absent'}|"),
        *pieces.group_attrs(bench, groups),
        ("data-s-order", str(i)),
        ("data-s-rank", str(VERDICT_RANK[v])),
        ("data-s-gap", "" if gap is None else str(gap)),
    ]
    return QuestionRow(
        number=i + 1,
        sid=sid,
        anchor=anchor,
        shown=shown,
        right=bool(a and a.correct) and bool(b and b.correct),
        attrs=attrs,
        thumb=pieces.thumb(page, sid, f"{sid} · truth {any_row.ground_truth}"),
        group_text=pieces.group_text(bench, groups),
        question=page.questions.get(sid),
        truth=any_row.ground_truth if any_row.ground_truth is not None else "–",
        a=pieces.side(a, bench) if a else None,
        b=pieces.side(b, bench) if b else None,
        verdict=v,
        verdict_label=VERDICTS[v],
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
    log: Log | None = log_to_stderr,
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
    a_ids = {r.sample_id for r in ma.rows}
    rows = list(ma.rows) + [r for r in mb.rows if r.sample_id not in a_ids]
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
        write_page(target, render_compare(ma, mb, page, _run_labels(ma, mb)))
    except OSError as exc:
        raise ReportError(
            f"cannot write the comparison {target} ({exc.strerror}); choose another path"
        ) from None
    return target
