"""The leaderboard page (index.html, templates/leaderboard.html): the runs in rank order in a table that
fits a 1280-pixel screen (rank, run, accuracy with interval, per group, cost, latency, complete), every
other column one click away, the forest plot, published against reproduced, then the pairwise matrix.

Built in the report's page frame (its stylesheet inline, its Content-Security-Policy that forbids any
network request); the only links are to each run's own report, relative to the page, each a percent-encoded
`./` path (core.text.safe_href), never a scheme such as `javascript:`.

The forest plot: every run's accuracy with its 95% interval on one axis, in rank order, with the
published accuracy (and its Wilson interval) beside a run that reproduces one. Drawn as inline SVG by
templates/leaderboard.html; this module only places things (pure geometry).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypedDict

from markupsafe import Markup

from evaluator.core.vocab import NOT_COMPARABLE
from evaluator.report.base import asset, render
from evaluator.report.board_columns import Cell, Column, columns, p_text, pct, verdict_detail
from evaluator.scoring.board import Board, BoardPair, PublishedBlock
from evaluator.scoring.stats import wilson_interval


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


def render_page(board: Board, stamp: tuple[str, str] | None = None) -> str:
    """index.html of a board built here, or of a leaderboard.json read back (the archive check renders the
    archived one again once scoring.board.is_board says it has the shape this code writes)."""
    title = f"Leaderboard: {board['title']}"
    every = columns(board)
    main, full = [c for c in every if c.main], [c for c in every if c.full]
    return render(
        "leaderboard.html",
        title,
        stamp=stamp,
        board_css=Markup(asset("leaderboard.css")),
        board=board,
        main_heads=[(c.heading, c.align) for c in main],
        main_rows=board_rows(board, main),
        heads=[(c.heading, c.align) for c in full],
        rows=board_rows(board, full),
        forest=forest(board),
        published=published_rows(board),
        names=[e["name"] for e in board["runs"]],
        matrix=matrix(board),
    )


def board_rows(board: Board, cols: list[Column]) -> list[BoardRow]:
    """Each run's cells, the best value of each accuracy column marked (bold, as in the paper's Table 5)."""
    cells: list[list[Cell]] = [[{**c.cell(e), "cls": c.align} for c in cols] for e in board["runs"]]
    for j in range(len(cols)):
        values = [v for row in cells if (v := row[j]["value"]) is not None]
        best = max(values) if len(values) > 1 else None
        for row in cells:
            row[j]["best"] = best is not None and row[j]["value"] == best
    return [
        {"name": e["name"], "complete": e["complete"], "cells": row}
        for e, row in zip(board["runs"], cells, strict=True)
    ]


def _points(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f}"


def _interval(c: Sequence[float] | None) -> str:
    return "" if not c else f"[{100 * c[0]:+.1f}, {100 * c[1]:+.1f}]"


def _verdict(block: PublishedBlock) -> VerdictCells:
    """The verdict's word (a CSS class from it), and beside it the detectable difference or the reason."""
    word = block.get("verdict") or NOT_COMPARABLE
    return {"verdict": word, "verdict_class": word.replace(" ", "-"), "verdict_note": verdict_detail(block)}


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
                "p": p_text(b.get("p_value")),
                "p_holm": p_text(b.get("p_holm")),
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
                "p": p_text(pub["p_value"]),
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


WIDTH, LABEL_W, RIGHT_PAD, ROW_H, TOP, BOTTOM = 1000, 300, 30, 26, 34, 34
# The most characters a label shows left of the axis: 290 units at 13 px, with room for wide letters (a
# longer run name ends in "…" and its whole name is the label's tooltip, instead of running off the left)
LABEL_CHARS = 34


class PublishedMark(TypedDict):
    x: float
    lo: float
    hi: float
    title: str


class ForestRow(TypedDict, total=False):
    """One run's line: its point and interval (x, lo, hi: none without an accuracy), the published one."""

    y: float
    label: str
    short: str
    x: float | None
    pub: PublishedMark | None
    lo: float
    hi: float
    title: str


class Forest(TypedDict):
    width: int
    height: float
    left: int
    right: int
    axis_y: float
    ticks: list[tuple[float, str]]
    rows: list[ForestRow]
    has_published: bool


def short_label(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1].rstrip() + "…"


def _span(board: Board) -> tuple[float, float]:
    """The axis: every interval and point, widened to whole 10-point steps (5 when narrow)."""
    values = []
    for e in board["runs"]:
        values += [v for v in [e["accuracy"], *(e["ci95"] or [])] if v is not None]
        pub = e.get("published")
        if pub:
            values += [v for v in [pub["accuracy"], *(_published_interval(pub) or [])] if v is not None]
    if not values:
        return 0.0, 1.0
    step = 0.05 if max(values) - min(values) < 0.25 else 0.1
    lo = max(0.0, math.floor(min(values) / step + 1e-9) * step)
    hi = min(1.0, math.ceil(max(values) / step - 1e-9) * step)
    return (lo, hi) if hi > lo else (max(0.0, lo - step), min(1.0, hi + step))


def _published_interval(pub: PublishedBlock) -> tuple[float, float] | None:
    return wilson_interval(pub["correct"], pub["questions"]) if pub.get("questions") else None


def forest(board: Board) -> Forest:
    lo, hi = _span(board)
    plot_w = WIDTH - LABEL_W - RIGHT_PAD

    def x(v: float) -> float:
        return round(LABEL_W + (v - lo) / (hi - lo) * plot_w, 1)

    step = 0.05 if hi - lo <= 0.3 else 0.1
    tick_values = [round(lo + k * step, 6) for k in range(round((hi - lo) / step) + 1)]
    ticks = [(x(t), f"{100 * t:.0f}") for t in tick_values]
    rows: list[ForestRow] = []
    for i, e in enumerate(board["runs"]):
        y = TOP + i * ROW_H + ROW_H / 2
        label = f"{e['rank']}. {e['name']}"
        row: ForestRow = {"y": y, "label": label, "short": short_label(label), "x": None, "pub": None}
        acc = e["accuracy"]
        if acc is not None:
            ci = e["ci95"] or (acc, acc)
            row.update({"x": x(acc), "lo": x(ci[0]), "hi": x(ci[1])})
            row["title"] = f"{e['name']}: {100 * acc:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
        pub = e.get("published")
        pub_acc = pub.get("accuracy") if pub else None
        if pub and pub_acc is not None:
            pci = _published_interval(pub) or (pub_acc, pub_acc)
            row["pub"] = {
                "x": x(pub_acc),
                "lo": x(pci[0]),
                "hi": x(pci[1]),
                "title": f"published ({pub.get('source') or 'no source'}): {100 * pub_acc:.1f}% "
                f"[{100 * pci[0]:.1f}, {100 * pci[1]:.1f}]",
            }
        rows.append(row)
    height = TOP + len(rows) * ROW_H + BOTTOM
    return {
        "width": WIDTH,
        "height": height,
        "left": LABEL_W,
        "right": WIDTH - RIGHT_PAD,
        "axis_y": height - BOTTOM + 4,
        "ticks": ticks,
        "rows": rows,
        "has_published": any(r.get("pub") for r in rows),
    }
