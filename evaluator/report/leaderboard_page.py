"""The leaderboard page (index.html, templates/leaderboard.html): the runs in rank order in a table that
fits a 1280-pixel screen (rank, run, accuracy with interval, per group, cost, latency, complete), every
other column one click away, the forest plot, published against reproduced, then the pairwise matrix.

Built in the report's page frame (its stylesheet inline, its Content-Security-Policy that forbids any
network request); the only links are to each run's own report, relative to the page, each a percent-encoded
`./` path (core.escape.safe_href), never a scheme such as `javascript:`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from markupsafe import Markup

from evaluator.core.escape import safe_href
from evaluator.core.vocab import NOT_COMPARABLE
from evaluator.report.base import asset
from evaluator.report.leaderboard_forest import forest
from evaluator.report.leaderboard_markdown import (
    ci,
    column_label,
    cost_cell,
    extra_metric_names,
    latency,
    pct,
    published_mark,
    verdict_detail,
)
from evaluator.report.templates import render
from evaluator.scoring.board import Board, BoardEntry, BoardPair, PublishedBlock


class Cell(TypedDict, total=False):
    """One table cell: text, sub, title, href; value: the number that can be "best" (bold); cls and best
    are set by board_rows."""

    text: Any
    value: float | None
    sub: str
    title: str
    href: str
    note: str
    flag: str
    cls: str
    best: bool


class BoardRow(TypedDict):
    name: str
    complete: bool
    cells: list[Cell]


class MatrixCell(TypedDict, total=False):
    """One pair in the matrix of pairs."""

    comparable: bool
    reason: str
    a: str
    b: str
    diff: str
    ci: str
    ptext: str
    sig: bool


class VerdictCells(TypedDict):
    verdict: str
    verdict_class: str
    verdict_note: str


class PublishedClassRow(VerdictCells):
    """One class of a reproduced result: published and reproduced side by side."""

    name: str
    published: str
    reproduced: str
    difference: str
    interval: str
    p: str
    p_holm: str
    size: str
    size_matches: bool


class PublishedRow(VerdictCells):
    """A run that reproduces a published result (published_rows)."""

    name: str
    source: str
    note: str
    published: str
    reproduced: str
    difference: str
    interval: str
    p: str
    mismatches: list[str]
    classes: list[PublishedClassRow]


Column = tuple[str, str, Callable[[BoardEntry], Cell]]  # header, css class, cell(entry)


def cell(
    text: Any,
    value: float | None = None,
    sub: str = "",
    title: str = "",
    href: str = "",
    note: str = "",
    flag: str = "",
) -> Cell:
    return {
        "text": text,
        "value": value,
        "sub": sub,
        "title": title,
        "href": href,
        "note": note,
        "flag": flag,
    }


def render_page(board: Board, stamp: tuple[str, str] | None = None) -> str:
    """index.html of a board built here, or of a leaderboard.json read back (the archive check renders the
    archived one again once scoring.board.is_board says it has the shape this code writes)."""
    title = f"Leaderboard: {board['title']}"
    main, full = main_columns(board), columns(board)
    return render(
        "leaderboard.html",
        title,
        stamp=stamp,
        board_css=Markup(asset("leaderboard.css")),
        board=board,
        main_heads=[(head, cls) for head, cls, _ in main],
        main_rows=board_rows(board, main),
        heads=[(head, cls) for head, cls, _ in full],
        rows=board_rows(board, full),
        forest=forest(board),
        published=published_rows(board),
        names=[e["name"] for e in board["runs"]],
        matrix=matrix(board),
    )


def main_columns(board: Board) -> list[Column]:
    """What a reader compares, narrow enough for 1280 pixels: the rest is in columns()."""
    cols: list[Column] = [
        ("Rank", "txt", lambda e: cell(e["rank"])),
        ("Run / model", "txt", _run_cell),
        ("Accuracy % [95% CI]", "num", _accuracy_cell),
    ]
    cols += [
        (f"{k.replace('_', ' ').capitalize()} %", "num", _extra_cell(k)) for k in extra_metric_names(board)
    ]
    cols += [(column_label(board, c), "num", _group_cell(c["field"], c["value"])) for c in board["columns"]]
    cols += [
        ("Cost USD", "num", lambda e: cell(cost_cell(e))),
        ("Latency s median / p95", "num", lambda e: cell(latency(e))),
        ("Reasoning declared / seen", "txt", _reasoning_cell),
        ("Complete", "txt", _complete_cell),
    ]
    return cols


def _reasoning_cell(e: BoardEntry) -> Cell:
    """The declared mode and the share of answered responses that showed reasoning (no "best": not a score)."""
    r = e.get("reasoning")
    declared, share = (r["declared"], r["observed_share"]) if r else (None, None)
    seen = "no answers" if share is None else f"{100 * share:.0f}% seen"
    title = f"declared {declared or 'nothing'}; " + (
        "no answered responses"
        if share is None
        else f"{100 * share:.1f}% of answered responses showed reasoning"
    )
    return cell(declared or "–", sub=seen, title=title)


def _run_cell(e: BoardEntry) -> Cell:
    href = safe_href(e["report"]) if e["report"] else ""
    return cell(e["name"], href=href, sub=f"{e['model']} · {e['provider']}")


def _accuracy_cell(e: BoardEntry) -> Cell:
    note, flag = published_mark(e)
    return cell(pct(e["accuracy"]), e["accuracy"], sub=ci(e["ci95"]), note=note, flag=flag)


def columns(board: Board) -> list[Column]:
    """Every column (the "all columns" table, as leaderboard.md has them)."""
    cols: list[Column] = [
        ("Rank", "txt", lambda e: cell(e["rank"])),
        ("Run", "txt", lambda e: cell(e["name"])),
        ("Model / provider", "txt", lambda e: cell(e["model"], sub=e["provider"])),
        ("Correct", "num", lambda e: cell(f"{e['correct']} / {e.get('responses', e['questions'])}")),
        (
            "Accuracy % [95% CI]",
            "num",
            lambda e: cell(pct(e["accuracy"]), e["accuracy"], sub=ci(e["ci95"])),
        ),
    ]
    for k in extra_metric_names(board):
        cols.append((f"{k.replace('_', ' ').capitalize()} %", "num", _extra_cell(k)))
    if any("repeats" in e for e in board["runs"]):
        cols.append(("Mean ± sd over repeats", "num", _repeats_cell))
    for c in board["columns"]:
        cols.append((column_label(board, c), "num", _group_cell(c["field"], c["value"])))
    for head, key in (
        ("Parse failures", "parse_failure"),
        ("Cut off", "cut_off"),
        ("Request errors", "request_error"),
        ("Missing", "missing"),
    ):
        cols.append((head, "num", _outcome_cell(key)))
    cols += [
        ("Tokens prompt / completion / reasoning", "num", _tokens_cell),
        ("Cost USD", "num", lambda e: cell(cost_cell(e))),
        ("Latency s median / p95", "num", lambda e: cell(latency(e))),
        ("Reasoning declared / seen", "txt", _reasoning_cell),
        ("Complete", "txt", _complete_cell),
        ("Report", "txt", lambda e: cell("report", href=safe_href(e["report"])) if e["report"] else cell("")),
    ]
    return cols


def _complete_cell(e: BoardEntry) -> Cell:
    return cell("yes" if e["complete"] else f"no ({e['state']})" if e.get("state") else "no")


def _repeats_cell(e: BoardEntry) -> Cell:
    r = e.get("repeats")
    if not r:
        return cell("")
    sd = "" if r["sd"] is None else f" ± {100 * r['sd']:.2f}"
    return cell(f"{pct(r['mean'])}{sd} (K={r['k']})")


def _outcome_cell(key: str) -> Callable[[BoardEntry], Cell]:
    def one(e: BoardEntry) -> Cell:
        return cell(e["outcomes"][key])

    return one


def _extra_cell(key: str) -> Callable[[BoardEntry], Cell]:
    def one(e: BoardEntry) -> Cell:
        value = (e.get("extra_metrics") or {}).get(key)
        return cell(pct(value), value)

    return one


def _group_cell(field: str, value: str) -> Callable[[BoardEntry], Cell]:
    def one(e: BoardEntry) -> Cell:
        block = e["per_group"][field][value]
        return cell(pct(block["accuracy"]), block["accuracy"], title=ci(block["ci95"]))

    return one


def _tokens_cell(e: BoardEntry) -> Cell:
    t = e["tokens"]
    full = f"prompt {t['prompt']:,}, completion {t['completion']:,}, reasoning {t['reasoning']:,}"
    full += f", cached {t['cached']:,}, of failed attempts {t['failed_attempts']:,}"
    return cell(" / ".join(_short(t[k]) for k in ("prompt", "completion", "reasoning")), title=full)


def _short(n: int) -> str:
    return f"{n:,}" if n < 10_000 else f"{n / 1000:.1f}k" if n < 1_000_000 else f"{n / 1e6:.2f}M"


def board_rows(board: Board, cols: list[Column]) -> list[BoardRow]:
    """Each run's cells, the best value of each accuracy column marked (bold, as in the paper's Table 5)."""
    cells: list[list[Cell]] = [[{**one(e), "cls": cls} for _, cls, one in cols] for e in board["runs"]]
    for j in range(len(cols)):
        values = [v for row in cells if (v := row[j]["value"]) is not None]
        best = max(values) if len(values) > 1 else None
        for row in cells:
            row[j]["best"] = best is not None and row[j]["value"] == best
    return [
        {"name": e["name"], "complete": e["complete"], "cells": row}
        for e, row in zip(board["runs"], cells, strict=True)
    ]


def _points(x: Any) -> str:
    return "" if x is None else f"{100 * x:+.1f}"


def _interval(c: Any) -> str:
    return "" if not c else f"[{100 * c[0]:+.1f}, {100 * c[1]:+.1f}]"


def _verdict(block: PublishedBlock) -> VerdictCells:
    """The verdict's word (a CSS class from it), and beside it the detectable difference or the reason."""
    word = block.get("verdict") or NOT_COMPARABLE
    return {"verdict": word, "verdict_class": word.replace(" ", "-"), "verdict_note": verdict_detail(block)}


def _p(x: Any) -> str:
    return "" if x is None else f"{x:.3g}"


def published_rows(board: Board) -> list[PublishedRow]:
    """The runs that carry a published result: both side by side, the difference, p, the verdict."""
    out: list[PublishedRow] = []
    for e in board["runs"]:
        pub = e.get("published")
        if not pub:
            continue
        classes: list[PublishedClassRow] = [
            {
                "name": name,
                "published": f"{pct(b['accuracy'])} ({b['correct']} / {b['questions']})",
                "reproduced": pct(b["reproduced_accuracy"]),
                "difference": _points(b["difference"]),
                "interval": _interval(b["difference_ci95"]),
                "p": _p(b.get("p_value")),
                "p_holm": _p(b.get("p_holm")),
                **_verdict(b),
                "size": f"{b['reproduced_questions']} here, {b['questions']} published",
                "size_matches": b["size_matches"],
            }
            for name, b in (pub.get("per_class") or {}).items()
        ]
        out.append(
            {
                "name": e["name"],
                "source": pub.get("source") or "",
                "note": " ".join(x for x in (pub.get("reasoning_note"), pub.get("note")) if x),
                "published": f"{pct(pub['accuracy'])} ({pub['correct']} / {pub['questions']})",
                "reproduced": f"{pct(e['accuracy'])} ({e['correct']} / {e.get('responses', e['questions'])})",
                "difference": _points(pub["difference"]),
                "interval": _interval(pub["difference_ci95"]),
                "p": _p(pub["p_value"]),
                **_verdict(pub),
                "mismatches": pub.get("class_size_mismatches") or [],
                "classes": classes,
            }
        )
    return out


def matrix(board: Board) -> list[tuple[str, list[MatrixCell | None]]]:
    """Rows and columns in rank order; the upper triangle holds each pair (row = A, the better run)."""
    names = [e["name"] for e in board["runs"]]
    pairs = {(p["a"], p["b"]): p for p in board["pairwise"]}
    return [
        (a, [_matrix_cell(pairs.get((a, b))) if j > i else None for j, b in enumerate(names[1:], start=1)])
        for i, a in enumerate(names[:-1])
    ]


def _matrix_cell(p: BoardPair | None) -> MatrixCell | None:
    if p is None:
        return None
    if not p["comparable"]:
        return {"comparable": False, "reason": p["reason"]}
    lo, hi = p["difference_ci95"] or (0.0, 0.0)
    holm = p["p_holm"]
    test = " (sign-flip)" if p.get("p_test") == "sign_flip" else ""
    return {
        "comparable": True,
        "a": p["a"],
        "b": p["b"],
        "diff": f"{100 * p['difference']:+.1f}",
        "ci": f"[{100 * lo:+.1f}, {100 * hi:+.1f}]",
        "ptext": "p n/a" if p["p_value"] is None else f"p {p['p_value']:.3g}{test}, Holm {holm:.3g}",
        "sig": holm is not None and holm < 0.05,
    }
