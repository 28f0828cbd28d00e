"""The spread over repeats (the seed and the (sample_id, repeat) key live in evaluator.core.records). Pure.

* `repeat_metrics(correct)`: over a (questions x K) boolean matrix, each repeat's accuracy over
  every question, their mean (the headline), standard deviation, a question-cluster bootstrap interval
  for the mean, per-question agreement and majority-vote accuracy (a diagnostic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluator.scoring.board import AccuracyBlock
from evaluator.scoring.stats import bootstrap_mean_interval
from evaluator.scoring.summary_shape import RepeatMetrics

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


def correctness_matrix(correct: Sequence[bool], k: int) -> np.ndarray:
    """Right/wrong per row (K consecutive rows per question, repeats in order) -> (questions x K) matrix."""
    flags = np.fromiter(correct, dtype=bool, count=len(correct))
    if len(correct) % k:
        raise ValueError(f"{len(correct)} rows is not a whole number of questions with {k} repeats each")
    return flags.reshape(-1, k)
