"""PNG plots written next to the score tables (matplotlib, Agg canvas, no pyplot global state).

Determinism: matplotlib's default style (not the user's matplotlibrc), fixed size and dpi, no
"Software" metadata and no timestamps, so re-rendering the same summary gives the same bytes with the
same matplotlib/freetype versions.

Memo: since equal inputs give equal bytes, the PNG bytes of the last few drawings are kept in this process,
keyed by a digest of exactly what is drawn (the repr of the drawn values: 1 and 1.0, 0.0 and -0.0 differ).
Re-scoring the same folder (verify, a repeated `score`) writes the kept bytes instead of drawing again.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from evaluator.core.atomic import write_atomic
from evaluator.scoring.summary_shape import Summary

DPI = 100
PNG_METADATA = {"Software": None}
_RC: Any = {"font.size": 9, "axes.titlesize": 10, "svg.hashsalt": "doccount", "path.simplify": False}


MEMO_PLOTS = 16  # ~50 KB each: the two plots of the last few scorings
_memo: OrderedDict[str, bytes] = OrderedDict()
_memo_lock = threading.Lock()
# matplotlib is not thread-safe: one figure at a time (a sweep scores its runs in threads)
_draw_lock = threading.Lock()


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=PNG_METADATA)
    return buf.getvalue()


def _write_png(path: Path, kind: str, drawn: tuple[Any, ...], draw: Callable[[], bytes]) -> None:
    """Write draw()'s PNG to path; `drawn` must hold every value draw() puts on the figure."""
    # backslashreplace: a lone surrogate (a model name) has no UTF-8 form; repr escapes it anyway
    key = hashlib.sha256(repr((kind, drawn)).encode("utf-8", "backslashreplace")).hexdigest()
    with _memo_lock:
        png = _memo.get(key)
        if png is not None:
            _memo.move_to_end(key)
    if png is None:
        with _draw_lock:
            png = draw()
        with _memo_lock:
            _memo[key] = png
            while len(_memo) > MEMO_PLOTS:
                _memo.popitem(last=False)
    write_atomic(path, png)


def group_accuracy_png(path: Path, summary: Summary) -> None:
    """Bars: accuracy per subgroup value with 95% Wilson intervals; dashed line: overall accuracy."""
    labels: list[str] = []
    acc: list[float] = []
    low: list[float] = []
    high: list[float] = []
    single = len(summary["groups"]) == 1
    for name, g in summary["groups"].items():
        for key in g["order"]:
            v = g["values"][key]
            accuracy, ci = v["accuracy"], v["ci95"]
            if not v["questions"] or accuracy is None or ci is None:  # both are there when questions are
                continue
            labels.append(f"{key}\n(n={v['questions']})" if single else f"{name}={key} (n={v['questions']})")
            a = 100 * accuracy
            acc.append(a)
            low.append(a - 100 * ci[0])
            high.append(100 * ci[1] - a)
    p = summary["primary"]
    overall = p["accuracy"] or 0.0  # None only without questions, which render_plots reports
    title = (
        f"{summary['model']}: accuracy with 95% Wilson intervals\n"
        f"dashed: overall {100 * overall:.1f}% ({p['correct']}/{p['questions']})"
    )
    drawn = (tuple(labels), tuple(acc), tuple(low), tuple(high), 100 * overall, single, title)
    _write_png(path, "group_accuracy", drawn, lambda: _group_accuracy(*drawn))


def _group_accuracy(
    labels: tuple[str, ...],
    acc: tuple[float, ...],
    low: tuple[float, ...],
    high: tuple[float, ...],
    overall_pct: float,
    single: bool,
    title: str,
) -> bytes:
    with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
        width = max(5.0, min(14.0, 1.2 + 0.9 * len(labels)))
        fig = Figure(figsize=(width, 4.0), dpi=DPI, layout="constrained")
        ax = fig.add_subplot()
        xs = list(range(len(labels)))
        ax.bar(xs, list(acc), color="#4C72B0", yerr=[list(low), list(high)], capsize=4, ecolor="#222222")
        ax.axhline(overall_pct, color="#C44E52", linestyle="--", linewidth=1)
        ax.set_xticks(xs, list(labels), rotation=0 if single else 45, ha="center" if single else "right")
        ax.set_ylim(0, 104)
        ax.set_ylabel("exact-count accuracy (%)")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        return _png(fig)


def predicted_vs_true_png(
    path: Path, pairs: Counter[tuple[int, int]], questions: int, summary: Summary
) -> None:
    """Bubble plot of (true, predicted) over parsed answers; bubble area = number of questions.

    Takes the counted pairs (scoring.answer_pairs), not the rows, so rendering never holds the run's rows.
    """
    answered = sum(pairs.values())
    unanswered = questions - answered
    max_true = max((t for t, _ in pairs), default=1)
    cap = max(10, 2 * max_true)
    clipped: Counter[tuple[int, int]] = Counter()
    beyond = 0
    for (t, pred), n in pairs.items():
        clipped[(t, min(max(pred, -1), cap))] += n
        if pred > cap or pred < -1:
            beyond += n
    pts = sorted(clipped.items())
    right = tuple((t, pr, n) for (t, pr), n in pts if t == pr)
    wrong = tuple((t, pr, n) for (t, pr), n in pts if t != pr)
    hi = max([cap if beyond else 0, max_true] + [pr for (_, pr) in clipped]) + 1
    notes = [f"{answered} parsed answers"]
    if unanswered:
        notes.append(f"{unanswered} without an answer not shown")
    if beyond:
        notes.append(f"{beyond} outside the range drawn at the edge")
    title = f"{summary['model']}: predicted vs true\n" + "; ".join(notes)
    drawn = (right, wrong, hi, max_true, title, bool(pairs))
    _write_png(path, "predicted_vs_true", drawn, lambda: _predicted_vs_true(*drawn))


def _predicted_vs_true(
    right: tuple[tuple[int, int, int], ...],
    wrong: tuple[tuple[int, int, int], ...],
    hi: int,
    max_true: int,
    title: str,
    legend: bool,
) -> bytes:
    with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
        fig = Figure(figsize=(5.5, 5.0), dpi=DPI, layout="constrained")
        ax = fig.add_subplot()
        for group, color, label in ((right, "#55A868", "correct"), (wrong, "#C44E52", "wrong")):
            if group:
                ax.scatter(
                    [g[0] for g in group],
                    [g[1] for g in group],
                    s=[30 * g[2] for g in group],
                    color=color,
                    alpha=0.7,
                    edgecolors="none",
                    label=label,
                )
        ax.plot([0, hi], [0, hi], color="#444444", linewidth=0.8, linestyle=":")
        ax.set_xlim(-0.5, max_true + 1)
        ax.set_ylim(-1.5, hi)
        ax.set_xlabel("true count")
        ax.set_ylabel("predicted count (parsed answer)")
        ax.set_title(title, fontsize=9)
        if legend:
            ax.legend(loc="upper left", fontsize=8, markerscale=0.6)
        ax.grid(alpha=0.3)
        return _png(fig)
