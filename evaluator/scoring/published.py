"""A reproduced accuracy against the published one it reproduces (pure numbers for the leaderboard).

The two are compared as independent proportions: Newcombe's hybrid score interval (method 10) for the
difference, the pooled two-proportion z-test for p, Holm-adjusted within the run per class. "No detectable
difference" is no evidence that the two agree, so it comes with `min_detectable`, the smallest difference
the test detects with 80% power. Both runs answered the same questions, so they are not truly independent:
a positive correlation makes the test conservative, the safe side for a claim that a result did not
reproduce. The fields, the reasoning-mode rule and the class sizes: docs/sweeps.md ("Published results").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

from evaluator.core.vocab import DIFFERS, NO_DIFFERENCE, NOT_COMPARABLE
from evaluator.scoring.board import PublishedBlock
from evaluator.scoring.stats import holm, wilson_interval

ALPHA = 0.05
POWER = 0.80
MODES = ("on", "off")
TEST = "two-sided two-proportion z-test, pooled (= chi-square without continuity correction)"
INTERVAL = "Newcombe hybrid score interval (method 10) from the two Wilson intervals"
MIN_DETECTABLE = (
    "min_detectable: the smallest difference, in accuracy points, that the same test detects with 80% "
    "power at two-sided 5% for these two sizes, the published accuracy as the reference (per class: at "
    "5% / the number of classes tested, where Holm rejects it whatever the other classes do)"
)
PER_CLASS = (
    "per class: the same test, p-values Holm-adjusted within the run (p_holm); differs when p_holm < 0.05"
)


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


def two_proportion_power(diff: float, p2: float, n1: int, n2: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided pooled z-test when the truth is p1 = p2 + diff (n1 against n2 questions):
    the pooled variance under the null, the unpooled one under the alternative (the test as it runs)."""
    p1 = p2 + diff
    pooled = (n1 * p1 + n2 * p2) / (n1 + n2)
    se_null = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    se_alt = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    if se_alt == 0:
        return 1.0 if diff != 0 else 0.0
    z = NormalDist().inv_cdf(1 - alpha / 2)
    cdf = NormalDist().cdf
    return cdf((diff - z * se_null) / se_alt) + cdf((-diff - z * se_null) / se_alt)


def min_detectable(p2: float, n1: int, n2: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest |p1 - p2| the test detects with `power`, in accuracy points: the larger of the two
    directions (a difference this size either way is detected), a direction that leaves [0, 1] skipped.
    None when no difference can be detected (no questions, or neither direction reaches the power)."""
    if n1 <= 0 or n2 <= 0:
        return None
    found = []
    for sign, room in ((1, 1 - p2), (-1, p2)):
        if room <= 0 or two_proportion_power(sign * room, p2, n1, n2, alpha) < power:
            continue
        lo, hi = 0.0, room  # power rises with the distance from p2: bisect to 1e-12
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if two_proportion_power(sign * mid, p2, n1, n2, alpha) >= power else (mid, hi)
        found.append(hi)
    return 100 * max(found) if found else None


def declared_mode(value: Any) -> str | None:
    """A reasoning mode as stated ("on" / "off"); anything else (absent, a hand-edited value): None."""
    return value if isinstance(value, str) and value in MODES else None


def compare_counts(
    correct: int,
    questions: int,
    pub_correct: int,
    pub_questions: int,
    not_comparable: str | None = None,
    alpha: float = ALPHA,
) -> PublishedBlock:
    """Reproduced (correct/questions) against published: accuracies, difference, interval, p, verdict.
    `not_comparable`: why the two may not be tested (then no interval, no p, no min_detectable)."""
    if not not_comparable and questions <= 0:
        not_comparable = "no reproduced questions"
    p = None if not_comparable else two_proportion_p(correct, questions, pub_correct, pub_questions)
    pub_acc = pub_correct / pub_questions if pub_questions else None
    out: PublishedBlock = {
        "accuracy": pub_acc,
        "correct": pub_correct,
        "questions": pub_questions,
        "reproduced_correct": correct,
        "reproduced_questions": questions,
        "reproduced_accuracy": correct / questions if questions else None,
        "difference": correct / questions - pub_acc if questions and pub_acc is not None else None,
        "difference_ci95": None
        if not_comparable
        else newcombe_interval(correct, questions, pub_correct, pub_questions),
        "p_value": p,
        "verdict": NOT_COMPARABLE if p is None else DIFFERS if p < ALPHA else NO_DIFFERENCE,
        "min_detectable": None
        if p is None or pub_acc is None
        else min_detectable(pub_acc, questions, pub_questions, alpha),
    }
    if p is None:
        out["not_comparable"] = not_comparable or "no test possible"
    return out


def mode_check(source: Any, run: Any) -> tuple[str | None, str | None]:
    """(why the two are not comparable, a note when a mode is unknown) from the two declared modes."""
    src, mine = declared_mode(source), declared_mode(run)
    if src and mine and src != mine:
        return f"the run declared reasoning {mine}, the source ran with reasoning {src}", None
    if src and mine:
        return None, None
    unknown = [w for w, m in (("the run declared none", mine), ("the source states none", src)) if not m]
    return None, f"reasoning mode unknown ({'; '.join(unknown)}): compared as if alike"


def published_block(
    published: Mapping[str, Any],
    correct: int,
    questions: int,
    per_group: Mapping[str, Mapping[str, Any]],
    declared: Any = None,
) -> PublishedBlock:
    """leaderboard.json's `published` of one run. `per_group`: the run's {field: {value: accuracy block}};
    `declared`: the run's declared reasoning mode (run_config.json `reasoning`)."""
    reason, mode_note = mode_check(published.get("reasoning"), declared)
    out: PublishedBlock = {
        "source": published.get("source"),
        **compare_counts(correct, questions, int(published["correct"]), int(published["questions"]), reason),
        "reasoning": declared_mode(published.get("reasoning")),
        "reproduced_reasoning": declared_mode(declared),
    }
    if mode_note:
        out["reasoning_note"] = mode_note
    if published.get("note"):
        out["note"] = published["note"]
    per_class, mismatched = _per_class(published, per_group, reason)
    if per_class:
        out["per_class"] = per_class
        out["class_sizes_match"] = not mismatched
        out["class_size_mismatches"] = mismatched
        out["classes_differ"] = [n for n, b in per_class.items() if b["verdict"] == DIFFERS]
    if questions != out["questions"]:
        out.setdefault("class_size_mismatches", []).insert(
            0, f"all: {questions} questions here, {out['questions']} published"
        )
    return out


def _per_class(
    published: Mapping[str, Any], per_group: Mapping[str, Mapping[str, Any]], reason: str | None
) -> tuple[dict[str, PublishedBlock], list[str]]:
    """Each published class against the run's, Holm-adjusted within the run; and the size mismatches."""
    classes = per_group.get("target_class") or next(iter(per_group.values()), {})
    pairs = published.get("per_class") or {}
    alpha = ALPHA / max(1, len(pairs))  # min_detectable per class: where Holm rejects in any case
    per_class: dict[str, PublishedBlock] = {}
    mismatched: list[str] = []
    for name, pair in pairs.items():
        mine = classes.get(name) or {}
        pub_c, pub_n = int(pair[0]), int(pair[1])
        n, c = mine.get("questions") or 0, mine.get("correct") or 0
        block = compare_counts(c, n, pub_c, pub_n, reason, alpha)
        block["size_matches"] = n == pub_n
        if n != pub_n:
            mismatched.append(f"{name}: {n} questions here, {pub_n} published")
        per_class[name] = block
    adjusted = holm([b["p_value"] for b in per_class.values()])
    for block, adj in zip(per_class.values(), adjusted, strict=True):
        block["p_holm"] = adj
        if adj is not None:
            block["verdict"] = DIFFERS if adj < ALPHA else NO_DIFFERENCE
    return per_class, mismatched
