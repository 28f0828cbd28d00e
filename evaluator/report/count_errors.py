"""Where a model over- or under-counts, for the run page: a confusion matrix of true against parsed counts
(per class, with the number of questions in each cell), and per-class absolute errors.

A single absurd answer (a 30-digit integer from a broken or hostile model) makes a mean absolute error
meaningless, so the median is shown beside it and such answers are counted: an answer is absurd when it
is more than ABSURD_FACTOR times the largest true count of the run. In the matrix they get one column.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any, TypedDict

from evaluator.data.benchmarks.base import Benchmark
from evaluator.report.base import answer_of
from evaluator.scoring import group_keys
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.summary_shape import Summary

ABSURD_FACTOR = 10
MAX_COLUMNS = 30  # more distinct counts than this: equal-width ranges instead (the table stays readable)
ABSURD, NO_ANSWER = "absurd", "no answer"


def absurd_limit(rows: list[ScoredRow]) -> int | None:
    """Answers above this are absurd: ABSURD_FACTOR times the largest true count (None: no true count)."""
    truths = [r.ground_truth for r in rows if r.ground_truth is not None]
    return ABSURD_FACTOR * max(truths) if truths else None


def _pairs(rows: list[ScoredRow]) -> list[tuple[int, int | None]]:
    """(true count, parsed answer or None) of every response with a known true count."""
    return [(r.ground_truth, answer_of(r)) for r in rows if r.ground_truth is not None]


class ErrorStats(TypedDict):
    parsed: int
    mean_absolute_error: float | None
    median_absolute_error: float | None
    absurd: int


class Cell(TypedDict):
    n: int
    kind: str
    alpha: str


class Confusion(ErrorStats):
    """One confusion matrix of the run page: rows are true counts, with their cells."""

    label: str
    n: int
    columns: list[str]
    rows: list[tuple[str, list[Cell]]]


def error_stats(rows: list[ScoredRow], limit: int | None) -> ErrorStats:
    """Mean and median absolute error over parsed answers, and the count of absurd answers."""
    pairs = [(t, a) for t, a in _pairs(rows) if a is not None]
    errors = [abs(a - t) for t, a in pairs]
    return {
        "parsed": len(errors),
        "mean_absolute_error": sum(errors) / len(errors) if errors else None,
        "median_absolute_error": statistics.median(errors) if errors else None,
        "absurd": sum(1 for _, a in pairs if limit is not None and a > limit),
    }


def group_error_stats(
    benchmark: Benchmark, rows: list[ScoredRow], limit: int | None
) -> dict[str, dict[str, ErrorStats]]:
    """error_stats per subgroup value, keyed as the summary's groups are (field -> value key -> stats)."""
    out: dict[str, dict[str, ErrorStats]] = {}
    for name in benchmark.group_fields:
        members: dict[str, list[ScoredRow]] = {}
        for r in rows:
            for key in group_keys(r.groups, name):
                members.setdefault(key, []).append(r)
        out[name] = {key: error_stats(sub, limit) for key, sub in members.items()}
    return out


def _bins(values: list[int]) -> list[tuple[int, int]]:
    """Each distinct count its own bin, or equal-width ranges when there are more than MAX_COLUMNS."""
    distinct = sorted(set(values))
    if len(distinct) <= MAX_COLUMNS:
        return [(v, v) for v in distinct]
    lo, hi = distinct[0], distinct[-1]
    width = math.ceil((hi - lo + 1) / MAX_COLUMNS)
    starts = sorted({lo + (v - lo) // width * width for v in distinct})
    return [(s, s + width - 1) for s in starts]


def _bin_of(bins: list[tuple[int, int]], value: int) -> int:
    return next(i for i, (lo, hi) in enumerate(bins) if lo <= value <= hi)


def _label(b: tuple[int, int]) -> str:
    return str(b[0]) if b[0] == b[1] else f"{b[0]}–{b[1]}"


def confusion(rows: list[ScoredRow], limit: int | None, label: str) -> Confusion | None:
    """Rows: true counts; columns: parsed answers (absurd ones, then unanswered, in a column each)."""
    pairs = _pairs(rows)
    if not pairs:
        return None

    def column(t: int, a: int | None) -> Any:
        if a is None:
            return NO_ANSWER
        return ABSURD if limit is not None and a > limit else a

    cols = [column(t, a) for t, a in pairs]
    bins = _bins([t for t, _ in pairs] + [c for c in cols if isinstance(c, int)])
    cells = Counter(
        (_bin_of(bins, t), c if isinstance(c, str) else _bin_of(bins, c))
        for (t, _), c in zip(pairs, cols, strict=True)
    )
    extra = [c for c in (ABSURD, NO_ANSWER) if c in cols]
    top = max(cells.values())
    row_bins = sorted({_bin_of(bins, t) for t, _ in pairs})
    table: list[tuple[str, list[Cell]]] = []
    for i in row_bins:
        line: list[Cell] = []
        for j in [*range(len(bins)), *extra]:
            n = cells.get((i, j), 0)
            if j == NO_ANSWER:
                kind = "none"
            elif j == ABSURD or j > i:
                kind = "over"
            else:
                kind = "under" if j < i else "exact"
            line.append({"n": n, "kind": kind, "alpha": f"{0.15 + 0.85 * n / top:.2f}"})
        table.append((_label(bins[i]), line))
    return {
        "label": label,
        "n": len(pairs),
        "columns": [_label(b) for b in bins] + extra,
        "rows": table,
        **error_stats(rows, limit),
    }


def confusion_tables(
    benchmark: Benchmark, summary: Summary, rows: list[ScoredRow], limit: int | None
) -> list[Confusion]:
    """The whole run, then one matrix per value of the benchmark's first subgroup field (DocCount: class),
    in the summary's order."""
    out = [confusion(rows, limit, "all questions")]
    if benchmark.group_fields:
        name = benchmark.group_fields[0]
        members: dict[str, list[ScoredRow]] = {}
        for r in rows:
            for key in group_keys(r.groups, name):
                members.setdefault(key, []).append(r)
        field = "" if name == "target_class" else f"{name} = "
        group = summary["groups"].get(name)
        order = group["order"] if group else []
        keys = [k for k in order if k in members] + [k for k in members if k not in order]
        out += [confusion(members[key], limit, f"{field}{key}") for key in keys]
    return [t for t in out if t is not None]
