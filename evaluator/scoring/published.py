"""A reproduced accuracy against the published one it reproduces (pure numbers for the leaderboard).

The published result is counts: `correct` of `questions`, optionally per class (`per_class = {"<class>":
[correct, questions]}`). The two accuracies are compared as two independent proportions:

* difference reproduced minus published, with Newcombe's hybrid score interval (his method 10: built
  from the two Wilson intervals, so it agrees with the Wilson intervals shown for each run);
* p: the two-sided two-proportion z-test with the pooled proportion (the same p as Pearson's chi-square
  test of the 2x2 table without continuity correction). p >= 0.05 reads "consistent".

The two runs answered the same questions, so they are not truly independent; a positive correlation
between them makes this test conservative (it says "consistent" more readily), which is the safe side
for a claim that a result did not reproduce.

Per class, the data's class sizes are compared with the published denominators: a mismatch means the
published numbers were measured on another release of the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from evaluator.scoring.stats import wilson_interval

ALPHA = 0.05
TEST = "two-sided two-proportion z-test, pooled (= chi-square without continuity correction)"
INTERVAL = "Newcombe hybrid score interval (method 10) from the two Wilson intervals"


def two_proportion_p(c1: int, n1: int, c2: int, n2: int) -> float | None:
    """Two-sided p of the pooled two-proportion z-test (None when undefined: n=0 or p pooled 0 or 1)."""
    if n1 <= 0 or n2 <= 0:
        return None
    pooled = (c1 + c2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var <= 0:
        return 1.0 if c1 * n2 == c2 * n1 else None
    z = (c1 / n1 - c2 / n2) / math.sqrt(var)
    return math.erfc(abs(z) / math.sqrt(2))


def newcombe_interval(c1: int, n1: int, c2: int, n2: int) -> tuple[float, float] | None:
    """95% interval of p1 - p2 (Newcombe 1998, method 10)."""
    w1, w2 = wilson_interval(c1, n1), wilson_interval(c2, n2)
    if w1 is None or w2 is None:
        return None
    p1, p2 = c1 / n1, c2 / n2
    d = p1 - p2
    lower = d - math.sqrt((p1 - w1[0]) ** 2 + (w2[1] - p2) ** 2)
    upper = d + math.sqrt((w1[1] - p1) ** 2 + (p2 - w2[0]) ** 2)
    return lower, upper


def compare_counts(correct: int, questions: int, pub_correct: int, pub_questions: int) -> dict[str, Any]:
    """Reproduced (correct/questions) against published: accuracies, difference, interval, p, verdict."""
    p = two_proportion_p(correct, questions, pub_correct, pub_questions)
    return {
        "accuracy": pub_correct / pub_questions if pub_questions else None,
        "correct": pub_correct,
        "questions": pub_questions,
        "reproduced_correct": correct,
        "reproduced_questions": questions,
        "reproduced_accuracy": correct / questions if questions else None,
        "difference": correct / questions - pub_correct / pub_questions
        if questions and pub_questions
        else None,
        "difference_ci95": newcombe_interval(correct, questions, pub_correct, pub_questions),
        "p_value": p,
        "consistent": None if p is None else p >= ALPHA,
    }


def published_block(
    published: Mapping[str, Any], correct: int, questions: int, per_group: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """leaderboard.json's `published` of one run. `per_group`: the run's {field: {value: accuracy block}}."""
    out = {"source": published.get("source"), **compare_counts(correct, questions, *_counts(published))}
    if published.get("note"):
        out["note"] = published["note"]
    classes = per_group.get("target_class") or next(iter(per_group.values()), {})
    per_class, mismatched = {}, []
    for name, pair in (published.get("per_class") or {}).items():
        mine = classes.get(name) or {}
        pub_c, pub_n = int(pair[0]), int(pair[1])
        n, c = mine.get("questions") or 0, mine.get("correct") or 0
        block = compare_counts(c, n, pub_c, pub_n)
        block["size_matches"] = n == pub_n
        if n != pub_n:
            mismatched.append(f"{name}: {n} questions here, {pub_n} published")
        per_class[name] = block
    if per_class:
        out["per_class"] = per_class
        out["class_sizes_match"] = not mismatched
        out["class_size_mismatches"] = mismatched
    if questions != out["questions"]:
        out.setdefault("class_size_mismatches", []).insert(
            0, f"all: {questions} questions here, {out['questions']} published"
        )
    return out


def _counts(published: Mapping[str, Any]) -> tuple[int, int]:
    return int(published["correct"]), int(published["questions"])
