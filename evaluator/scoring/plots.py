"""PNG plots written next to the score tables (matplotlib, Agg canvas, no pyplot global state).

Determinism: matplotlib's default style (not the user's matplotlibrc), fixed size and dpi, no
"Software" metadata and no timestamps, so re-rendering the same summary gives the same bytes with the
same matplotlib/freetype versions.
"""

from __future__ import annotations

import io
from collections import Counter
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


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=PNG_METADATA)
    write_atomic(path, buf.getvalue())


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
    with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
        width = max(5.0, min(14.0, 1.2 + 0.9 * len(labels)))
        fig = Figure(figsize=(width, 4.0), dpi=DPI, layout="constrained")
        ax = fig.add_subplot()
        xs = list(range(len(labels)))
        ax.bar(xs, acc, color="#4C72B0", yerr=[low, high], capsize=4, ecolor="#222222")
        ax.axhline(100 * overall, color="#C44E52", linestyle="--", linewidth=1)
        ax.set_xticks(xs, labels, rotation=0 if single else 45, ha="center" if single else "right")
        ax.set_ylim(0, 104)
        ax.set_ylabel("exact-count accuracy (%)")
        ax.set_title(
            f"{summary['model']}: accuracy with 95% Wilson intervals\n"
            f"dashed: overall {100 * overall:.1f}% ({p['correct']}/{p['questions']})"
        )
        ax.grid(axis="y", alpha=0.3)
        _save(fig, path)


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
    with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
        fig = Figure(figsize=(5.5, 5.0), dpi=DPI, layout="constrained")
        ax = fig.add_subplot()
        pts = sorted(clipped.items())
        right = [(t, pr, n) for (t, pr), n in pts if t == pr]
        wrong = [(t, pr, n) for (t, pr), n in pts if t != pr]
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
        hi = max([cap if beyond else 0, max_true] + [pr for (_, pr) in clipped]) + 1
        ax.plot([0, hi], [0, hi], color="#444444", linewidth=0.8, linestyle=":")
        ax.set_xlim(-0.5, max_true + 1)
        ax.set_ylim(-1.5, hi)
        ax.set_xlabel("true count")
        ax.set_ylabel("predicted count (parsed answer)")
        notes = [f"{answered} parsed answers"]
        if unanswered:
            notes.append(f"{unanswered} without an answer not shown")
        if beyond:
            notes.append(f"{beyond} outside the range drawn at the edge")
        ax.set_title(f"{summary['model']}: predicted vs true\n" + "; ".join(notes), fontsize=9)
        if pairs:
            ax.legend(loc="upper left", fontsize=8, markerscale=0.6)
        ax.grid(alpha=0.3)
        _save(fig, path)
