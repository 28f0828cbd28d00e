"""The leaderboard's forest plot: every run's accuracy with its 95% interval on one axis, in rank order,
with the published accuracy (and its Wilson interval) beside a run that reproduces one. Drawn as inline
SVG by templates/leaderboard.html; this module only places things (pure geometry)."""

from __future__ import annotations

import math
from typing import TypedDict

from evaluator.scoring.board import Board, PublishedBlock
from evaluator.scoring.stats import wilson_interval

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
    ticks = [(x(t), f"{100 * t:.0f}") for t in _ticks(lo, hi, step)]
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


def _ticks(lo: float, hi: float, step: float) -> list[float]:
    n = round((hi - lo) / step)
    return [round(lo + k * step, 6) for k in range(n + 1)]
