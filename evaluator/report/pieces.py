"""What the run and comparison pages show, as plain values for the templates (templates/macros.html)."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import msgspec

from evaluator.core.boundary import clip
from evaluator.core.jsonl import JSONObject, is_int, is_num, object_at
from evaluator.core.records import Usage
from evaluator.data.benchmarks.base import Benchmark
from evaluator.report.base import (
    PLOT_CAPTIONS,
    PLOT_MAX_BYTES,
    STATUS_LABELS,
    answer_of,
    attr_name,
    ci,
    clip_text,
    error_of,
    fallback_of,
    group_key,
    group_values,
    members,
    number,
    pct,
)
from evaluator.report.count_errors import ErrorStats
from evaluator.report.pagedata import PageData
from evaluator.scoring.base import SCORES_DIR
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.summary_shape import GroupBreakdown, GroupValue, Summary

Parts = list[tuple[str, str]]  # (kind, text): kind "" plain, "code", "b", "none" (templates' `rich`)


@dataclass
class Select:
    attr: str
    label: str
    options: list[tuple[str, str]]
    is_filter: bool = True


@dataclass
class Controls:
    selects: list[Select]
    sort: Select
    search_label: str


class Thumb(TypedDict):
    """A question's image cell: the key into the page's images, or why there is none."""

    key: str | None
    sid: str
    caption: str
    reason: str


class TextView(TypedDict):
    """A text as shown: clipped (head and tail), with how much was left out of how long a whole."""

    text: str
    omitted: int
    length: int


class UsageView(TypedDict):
    latency: int | float | None
    tokens: list[str]
    completion: int | None


class Side(TypedDict):
    """One response as its cells show it (side())."""

    answer: int | None
    fallback: int | None
    error: int | None
    status: list[tuple[str, str]]
    response: TextView | None
    reasoning: TextView | None
    usage: UsageView
    repeat: Any


@dataclass
class QuestionRow:
    """One table row: a question (with its K responses under --repeats, or the two runs' responses)."""

    number: int
    sid: str
    anchor: str
    shown: str
    right: bool
    attrs: list[tuple[str, str]]
    thumb: Thumb
    group_text: str
    question: str | None
    truth: Any
    sides: list[Side] = field(default_factory=list)
    stacked: bool = False
    repeats_note: str = ""
    a: Side | None = None
    b: Side | None = None
    verdict: str = ""
    verdict_label: str = ""


def controls(selects: list[Select], sort_options: list[tuple[str, str]], search_label: str) -> Controls:
    return Controls(selects, Select("sort", "sort", sort_options, is_filter=False), search_label)


class Headline(TypedDict):
    accuracy: str
    cells: list[tuple[str, str]]


class GroupTable(TypedDict):
    name: str
    heading: str
    heads: list[str]
    rows: list[list[Any]]


class Anatomy(TypedDict):
    parsed: int | None
    heads: list[str]
    cells: list[str]


def headline(summary: Summary) -> Headline:
    p = object_at(summary, "primary")
    extra = object_at(summary, "extra_metrics")
    if repeats_of(summary) > 1:
        cells = _repeat_cells(summary)
    else:
        cells = [
            ("correct / all questions", f"{_text(p.get('correct'))} / {_text(p.get('questions'))}"),
            ("95% Wilson interval", ci(p.get("ci95"))),
        ]
    cells += [(k.replace("_", " "), pct(v)) for k, v in extra.items()]
    return {"accuracy": pct(p.get("accuracy")), "cells": cells}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def repeats_of(summary: Summary) -> int:
    r = summary.get("repeats")
    k = r.get("k") if isinstance(r, dict) else 1
    return k if is_int(k) and k > 1 else 1


def _repeat_cells(summary: Summary) -> list[tuple[str, str]]:
    p, r = summary["primary"], summary["repeats"]
    a = r["agreement"]
    return [
        (
            f"mean of {r['k']} repeats; correct / (questions x repeats)",
            f"{_text(p.get('correct'))} / {_text(p.get('responses'))}",
        ),
        ("95% question-cluster bootstrap", ci(p.get("ci95"))),
        ("per-repeat accuracies", ", ".join(pct(x["accuracy"]) for x in r["per_repeat"])),
        (
            "questions always / sometimes / never right",
            f"{a['always_right']} / {a['sometimes_right']} / {a['never_right']}",
        ),
    ]


def outcome_pills(rows: list[ScoredRow]) -> list[tuple[str, str, int]]:
    c = Counter(r.outcome for r in rows)
    return [(k, label, c.get(k, 0)) for k, label in STATUS_LABELS.items()]


def group_tables(
    summary: Summary, errors: dict[str, dict[str, ErrorStats]] | None = None
) -> list[GroupTable]:
    """The summary's per-group accuracies; with `errors` (count_errors.group_error_stats), each value's
    mean and median absolute error beside its accuracy."""
    return [_group_table(name, g, (errors or {}).get(name)) for name, g in summary["groups"].items()]


NO_VALUE: GroupValue = {}  # a value of `order` without its entry (not written by metrics.group_breakdown)


def _group_table(name: str, g: GroupBreakdown, errors: dict[str, ErrorStats] | None) -> GroupTable:
    values = g["values"]
    label = "Class" if name == "target_class" else name
    extra_keys = sorted({k for v in values.values() for k in (v.get("extra_metrics") or {})})
    note = " (a question counts once in each of its values)" if g.get("multi_valued") else ""
    heads = [label, "questions", "correct", "accuracy", "95% CI"]
    heads += ["MAE", "median abs. error"] if errors is not None else []
    heads.append("not answered")
    rows = []
    for key in g.get("order") or list(values):
        v = values.get(key) or NO_VALUE
        oc = v.get("outcomes") or {}
        unanswered = (v.get("questions") or 0) - (oc.get("ok") or 0) if oc else ""
        extras = [pct((v.get("extra_metrics") or {}).get(k)) for k in extra_keys]
        cells = [key, v.get("questions"), v.get("correct"), pct(v.get("accuracy")), ci(v.get("ci95"))]
        if errors is not None:
            e = errors.get(key)
            cells += [
                number(e["mean_absolute_error"] if e else None),
                number(e["median_absolute_error"] if e else None),
            ]
        rows.append([*cells, unanswered, *extras])
    return {
        "name": name,
        "heading": (label.lower() if label == "Class" else label) + note,
        "heads": heads + [k.replace("_", " ") for k in extra_keys],
        "rows": rows,
    }


def anatomy(summary: Summary, absurd: int | None = None, limit: int | None = None) -> Anatomy | None:
    """The summary's error anatomy; with `absurd`, the count of answers above `limit` too."""
    e = summary.get("error_anatomy")
    if not isinstance(e, dict):
        return None
    heads = ["MAE", "median abs. error", "mean signed error", "exact", "over-count", "under-count"]
    heads.append("off by one")
    cells = [number(e.get(k)) for k in ("mean_absolute_error", "median_absolute_error", "mean_signed_error")]
    cells += [pct(e.get(k)) for k in ("exact_rate", "over_count_rate", "under_count_rate", "off_by_one_rate")]
    if absurd is not None:
        heads.append("absurd answers" + (f" (> {limit:,})" if limit is not None else ""))
        cells.append(str(absurd))
    return {"parsed": e.get("parsed"), "heads": heads, "cells": cells}


def plots(run_root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """(data URL, caption) of each PNG under scores/, and notes on the ones left out."""
    scores = run_root / SCORES_DIR
    pngs = sorted(scores.glob("*.png")) if scores.is_dir() else []
    if not pngs:
        return [], ["No plots were found under scores/ (run `doccount score` first to draw them)."]
    figs, notes = [], []
    known = [p for p in pngs if p.name in PLOT_CAPTIONS] + [p for p in pngs if p.name not in PLOT_CAPTIONS]
    for p in known:
        try:
            data = p.read_bytes()
        except OSError as exc:
            notes.append(f"plot {p.name} could not be read ({exc.strerror})")
            continue
        if len(data) > PLOT_MAX_BYTES or not data.startswith(b"\x89PNG"):
            notes.append(
                f"plot {p.name} was left out (not a PNG, or larger than {PLOT_MAX_BYTES // 1_000_000} MB)"
            )
            continue
        url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        figs.append((url, PLOT_CAPTIONS.get(p.name, p.name)))
    return figs, notes


def group_filters(benchmark: Benchmark, summary: Summary, rows_groups: list[JSONObject]) -> list[Select]:
    out = []
    sgroups = object_at(summary, "groups")
    for name in benchmark.group_fields:
        counts: Counter[str] = Counter()
        for g in rows_groups:
            counts.update(group_values(g, name))
        order = [group_key(v) for v in (sgroups.get(name) or {}).get("order") or []]
        order = [v for v in order if v in counts] + sorted(set(counts) - set(order))
        label = "class" if name == "target_class" else name
        options = [("", "all")] + [(v, f"{v} ({counts[v]})") for v in order]
        out.append(Select("g-" + attr_name(name), label, options))
    return out


def status_select(attr: str, label: str, rows: list[ScoredRow]) -> Select:
    counts = Counter(r.outcome for r in rows)
    options = [(k, f"{v} ({counts[k]})") for k, v in STATUS_LABELS.items() if counts[k]]
    return Select(attr, label, [("", "all")] + options)


def group_text(benchmark: Benchmark, groups: JSONObject) -> str:
    if list(benchmark.group_fields) == ["target_class"]:
        return _text(groups.get("target_class"))
    return " · ".join(f"{name}: {', '.join(group_values(groups, name))}" for name in benchmark.group_fields)


def group_header(benchmark: Benchmark) -> str:
    return (
        "class and question" if list(benchmark.group_fields) == ["target_class"] else "subgroups and question"
    )


def group_attrs(benchmark: Benchmark, groups: JSONObject) -> list[tuple[str, str]]:
    return [
        (f"data-f-g-{attr_name(name)}", members(group_values(groups, name)))
        for name in benchmark.group_fields
    ]


def thumb(page: PageData, sid: str, caption: str) -> Thumb:
    reason = "no image" if page.images_requested else "images off"
    return {"key": page.image_key.get(sid), "sid": sid, "caption": caption, "reason": reason}


def text_view(text: Any) -> TextView | None:
    """A response or reasoning text as shown: a very long one keeps its head and tail."""
    if not isinstance(text, str) or not text:
        return None
    clipped, omitted = clip_text(text)
    return {"text": clipped, "omitted": omitted, "length": len(text)}


def status_bits(row: ScoredRow) -> list[tuple[str, str]]:
    """(css class, text) of the status cell: the outcome badge, then details. An answered row's badge is
    its correctness (a green "ok" beside a wrong answer read as right); the request's status follows."""
    oc = row.outcome
    if oc == "ok":
        verdict = "right" if row.correct else "wrong"
        bits = [(f"badge st-{verdict}", verdict), ("detail", "request ok, answer parsed")]
    else:
        bits = [(f"badge st-{oc}", STATUS_LABELS[oc])]
    if oc == "parse_failure":
        bits.append(("detail", f"parse: {_text(row.parse_status)}"))
    if row.finish_reason and row.finish_reason != "stop":
        bits.append(("detail", f"finish: {row.finish_reason}"))
    if oc == "request_error" and row.request_error:
        bits.append(("detail", clip(row.request_error, 400)))
    if row.data_error:
        bits.append(("detail", clip(row.data_error, 400)))
    if row.attempts is not None and row.attempts > 1:
        bits.append(("detail", f"{row.attempts} HTTP attempts"))
    if row.earlier_attempts:
        bits.append(("detail", f"{len(row.earlier_attempts)} earlier response(s) re-sampled"))
    if row.record_ground_truth is not msgspec.UNSET:
        bits.append(("detail", f"record said truth {_text(row.record_ground_truth)}"))
    return bits


def usage_view(row: ScoredRow) -> UsageView:
    """Latency and tokens (prompt / completion / total, '–' where the server sent none)."""
    u = row.usage or Usage()
    counts = [u.prompt_tokens, u.completion_tokens, u.total_tokens]
    tokens = [str(x) if x is not None else "–" for x in counts] if any(is_num(x) for x in counts) else []
    return {"latency": row.latency_s, "tokens": tokens, "completion": counts[1]}


def side(row: ScoredRow, benchmark: Benchmark, repeat: Any = None) -> Side:
    """One response as its cells show it: answer, fallback, error, status, texts, usage."""
    return {
        "answer": answer_of(row),
        "fallback": fallback_of(row, benchmark),
        "error": error_of(row),
        "status": status_bits(row),
        "response": text_view(row.response_text),
        "reasoning": text_view(row.reasoning_text),
        "usage": usage_view(row),
        "repeat": repeat,
    }


def fmt_float(x: float | None) -> str:
    return "" if x is None or not is_num(x) else f"{x:g}"
