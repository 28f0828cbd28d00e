"""The spread over repeats (the seed and the (sample_id, repeat) key live in evaluator.core.records). Pure.

The merged rows of a run made with --repeats K > 1 are K consecutive rows per question (repeats 0..K-1),
in manifest order. Counts over rows (outcomes, parse status, error anatomy, usage) then pool every
response; accuracies are re-stated per question: accuracy = mean of the K per-repeat accuracies (= correct
responses / (questions x K)), with a question-cluster bootstrap interval instead of Wilson's (which would
treat the K responses to one question as independent questions). A run with K = 1 never comes here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evaluator.data.benchmarks.base import Benchmark
from evaluator.scoring.base import ci_text, group_keys, pct_text
from evaluator.scoring.board import AccuracyBlock
from evaluator.scoring.row import ScoredQuestion, ScoredRow, responses_of
from evaluator.scoring.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, bootstrap_mean_interval
from evaluator.scoring.summary_shape import RepeatMetrics, Summary

CLUSTER_BOOTSTRAP = "question_cluster_bootstrap"


# ----------------------------------------------------------------------------- spread over repeats


def repeat_accuracy_block(correct: np.ndarray) -> AccuracyBlock:
    """Accuracy of a (questions x K) matrix: the mean over repeats, with its cluster-bootstrap interval."""
    n, k = correct.shape
    total = int(correct.sum())
    per_q = correct.mean(axis=1) if n else np.zeros(0)
    ci = bootstrap_mean_interval(per_q)
    return {
        "questions": n,
        "responses": n * k,
        "correct": total,
        "accuracy": total / (n * k) if n else None,
        "ci95": list(ci) if ci else None,
    }


def repeat_metrics(correct: np.ndarray) -> RepeatMetrics:
    """The summary's `repeats` section for a (questions x K) boolean matrix (rows: manifest order)."""
    n, k = correct.shape
    per_repeat = correct.sum(axis=0).astype(int).tolist() if n else [0] * k
    acc = [c / n if n else None for c in per_repeat]
    accs = np.asarray([a for a in acc if a is not None], dtype=np.float64)
    right = correct.sum(axis=1).astype(int) if n else np.zeros(0, dtype=int)
    majority = int((2 * right > k).sum())
    ci = bootstrap_mean_interval(right / k if n else [])
    return {
        "k": k,
        "questions": n,
        "per_repeat": [{"repeat": r, "correct": per_repeat[r], "accuracy": acc[r]} for r in range(k)],
        "mean_accuracy": float(accs.mean()) if accs.size else None,
        "std_accuracy": float(accs.std(ddof=1)) if accs.size > 1 else None,
        "ci95": list(ci) if ci else None,
        "agreement": {
            "right_count_histogram": {str(j): int((right == j).sum()) for j in range(k + 1)},
            "always_right": int((right == k).sum()),
            "never_right": int((right == 0).sum()),
            "sometimes_right": int(((right > 0) & (right < k)).sum()),
        },
        "majority_vote": {
            "label": "DIAGNOSTIC ONLY: a question counts as right when more than half of its repeats are",
            "correct": majority,
            "accuracy": majority / n if n else None,
        },
    }


def _members(question_rows: list[ScoredRow], of: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, row in enumerate(question_rows):
        for key in of(row):
            out.setdefault(key, []).append(i)
    return out


def apply_repeats(
    summary: Summary, benchmark: Benchmark, rows: list[ScoredRow], k: int, bucket_of_row: Any
) -> None:
    """Re-state the accuracy blocks of `summary` (computed over all rows) per question; add `repeats`.

    bucket_of_row(row) -> the count-bucket name of a question (the scorer's own bucketing).
    """
    if len(rows) % k:
        raise ValueError(f"{len(rows)} rows is not a whole number of questions with {k} repeats each")
    # right/wrong as a (questions x K) matrix: K consecutive rows per question, repeats in order
    m = np.fromiter((r.correct for r in rows), dtype=bool, count=len(rows)).reshape(-1, k)
    first = rows[::k]  # one row per question: its groups and ground truth are the manifest's
    summary["primary"] = {"metric": "exact_count_accuracy", **repeat_accuracy_block(m)}
    summary["repeats"] = repeat_metrics(m)
    summary["methods"].update(
        {
            "interval": CLUSTER_BOOTSTRAP,
            "primary_metric": "exact-count accuracy = mean over the K repeats of (correct / all questions "
            "of the run's manifest)",
            "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
            "bootstrap_seed": BOOTSTRAP_SEED,
            "repeats": k,
            "counts_over": "responses (questions x repeats) for outcomes, parse status, error anatomy, usage",
        }
    )
    for name, g in summary["groups"].items():
        idx = _members(first, lambda r, name=name: group_keys(r.groups, name))
        for key in g["order"]:
            g["values"][key].update(repeat_accuracy_block(m[np.asarray(idx.get(key, []), dtype=int)]))
    idx = _members(first, lambda r: [bucket_of_row(r)])
    for key in summary["count_buckets"]["order"]:
        summary["count_buckets"]["values"][key].update(
            repeat_accuracy_block(m[np.asarray(idx.get(key, []), dtype=int)])
        )


def headline_markdown(summary: Summary) -> list[str]:
    p, r = summary["primary"], summary["repeats"]
    std = r["std_accuracy"]
    return [
        f"**Exact-count accuracy: {pct_text(p['accuracy'])}**, the mean of {r['k']} repeats over {p['questions']} "
        f"questions ({p['correct']} / {p['responses']} responses right; 95% question-cluster bootstrap interval "
        f"{ci_text(p['ci95'])}; standard deviation across repeats "
        f"{'n/a' if std is None else f'{100 * std:.2f} points'}). Every question of the run's manifest is "
        "in the denominator of every repeat; parse failures, request errors, data errors and missing rows "
        "count as wrong.",
        "",
    ]


def repeats_markdown(summary: Summary) -> list[str]:
    r = summary["repeats"]
    a = r["agreement"]
    mv = r["majority_vote"]
    out = [
        f"## Repeats ({r['k']} samples per question)",
        "",
        "| repeat | correct | accuracy |",
        "| ---: | ---: | ---: |",
    ]
    out += [
        f"| {p['repeat']} | {p['correct']} / {r['questions']} | {pct_text(p['accuracy'])} |"
        for p in r["per_repeat"]
    ]
    std = r["std_accuracy"]
    out += [
        f"| mean | | {pct_text(r['mean_accuracy'])} (sd {'n/a' if std is None else f'{100 * std:.2f}'} points, "
        f"95% CI {ci_text(r['ci95'])}) |",
        "",
        f"Per-question agreement: {a['always_right']} always right, {a['never_right']} never right, "
        f"{a['sometimes_right']} sometimes right. Questions by number of right repeats: "
        + ", ".join(f"{j}: {c}" for j, c in a["right_count_histogram"].items())
        + ".",
        "",
        f"Diagnostic only (not the score): majority vote over the repeats gives {mv['correct']} / "
        f"{r['questions']} = {pct_text(mv['accuracy'])}.",
        "",
        "With repeats, the tables below count responses (questions x repeats) in `correct` and the outcome "
        "columns; accuracies are means over repeats with question-cluster bootstrap intervals.",
        "",
    ]
    return out


# ----------------------------------------------------------------------------- compare


def compare_block(
    qrows: list[ScoredQuestion], k: int, wilson_block: Callable[[list[ScoredRow]], AccuracyBlock]
) -> AccuracyBlock:
    """A leaderboard accuracy block: wilson_block(rows) without repeats, the repeat block with them."""
    if k == 1:
        return wilson_block(responses_of(qrows))
    m = np.asarray([[r.correct for r in q.rows] for q in qrows], dtype=bool).reshape(-1, k)
    return repeat_accuracy_block(m)


def paired_mean_table(a: Sequence[float], b: Sequence[float]) -> dict[str, int]:
    """Paired table on per-question mean correctness (0/1 values give McNemar's table, and no `tied`)."""
    table = {"both_correct": 0, "only_a": 0, "only_b": 0, "neither": 0, "tied_partly_right": 0}
    for x, y in zip(a, b, strict=True):
        if x > y:
            table["only_a"] += 1
        elif y > x:
            table["only_b"] += 1
        elif x == 1:
            table["both_correct"] += 1
        elif x == 0:
            table["neither"] += 1
        else:
            table["tied_partly_right"] += 1
    return table
