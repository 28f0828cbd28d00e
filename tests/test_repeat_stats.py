"""The repeat metrics and the response-identity comparison, checked against independent computations."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from scipy import stats as sps

from evaluator.scoring.identity import first_difference, response_identity, tokens
from evaluator.scoring.repeats import repeat_accuracy_block, repeat_metrics
from evaluator.scoring.row import ScoredRow, row_from_line
from evaluator.scoring.stats import bootstrap_mean_interval


def _matrix(seed: int, n: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, size=n)  # each question has its own chance of being right
    return rng.uniform(0, 1, size=(n, k)) < p[:, None]


@pytest.mark.parametrize(("n", "k"), [(50, 2), (200, 5), (7, 3)])
def test_repeat_metrics_match_a_plain_computation(n: int, k: int) -> None:
    m = _matrix(n * 10 + k, n, k)
    out = repeat_metrics(m)
    per = [sum(bool(m[i, r]) for i in range(n)) for r in range(k)]
    assert [p["correct"] for p in out["per_repeat"]] == per
    accs = [c / n for c in per]
    assert out["mean_accuracy"] == pytest.approx(statistics.fmean(accs), abs=1e-12)
    assert out["std_accuracy"] == pytest.approx(statistics.stdev(accs), abs=1e-12)
    right = [sum(bool(x) for x in m[i]) for i in range(n)]
    a = out["agreement"]
    assert a["always_right"] == right.count(k) and a["never_right"] == right.count(0)
    assert a["sometimes_right"] == n - right.count(k) - right.count(0)
    assert sum(a["right_count_histogram"].values()) == n
    assert out["majority_vote"]["correct"] == sum(1 for x in right if x > k / 2)
    assert "DIAGNOSTIC" in out["majority_vote"]["label"]
    # the interval: the documented recipe, redone here
    rng = np.random.default_rng(20240611)
    q = np.array(right) / k
    means = np.array([q[rng.integers(0, n, size=n)].mean() for _ in range(10_000)])
    low, high = np.percentile(means, [2.5, 97.5])
    assert out["ci95"] == pytest.approx([low, high], abs=1e-12)
    block = repeat_accuracy_block(m)
    assert block["accuracy"] == pytest.approx(statistics.fmean(accs), abs=1e-12)
    assert block["questions"] == n and block["responses"] == n * k and block["correct"] == sum(per)


def test_question_bootstrap_agrees_with_scipy_and_widens_with_noise() -> None:
    m = _matrix(3, 400, 4)
    q = m.mean(axis=1)
    ours = bootstrap_mean_interval(q)
    ref = sps.bootstrap((q,), np.mean, n_resamples=10_000, method="percentile", rng=np.random.default_rng(1))
    assert ours[0] == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert ours[1] == pytest.approx(ref.confidence_interval.high, abs=0.01)
    assert ours[0] < q.mean() < ours[1]
    assert bootstrap_mean_interval([]) is None


def test_tokens_and_first_difference() -> None:
    text = "I count 3 logos.\n<answer>3</answer>"
    assert "".join(tokens(text)) == text
    assert tokens("a, b") == ["a", ",", " ", "b"]
    assert first_difference(text, text) is None
    assert first_difference("one two three", "one two four") == (4, 8)
    assert first_difference("one two", "one two three") == (3, 7)  # the shorter text ends first
    assert first_difference(None, "x") == (0, 0)


def test_response_identity_pairs_by_question_and_repeat() -> None:
    def row(sid: str, rep: int | None, text: str | None, reasoning: str | None = None, status: str = "ok"):
        r = {"sample_id": sid, "status": status, "response_text": text, "reasoning_text": reasoning}
        if rep is not None:
            r["repeat"] = rep
        return r

    original = [
        row("a", 0, "x y"),
        row("a", 1, "x z"),
        row("b", 0, "p", "r1"),
        row("c", 0, None, status="request_error"),
    ]
    new = [row("a", 1, "x z"), row("a", 0, "x y"), row("b", 0, "p", "r2"), row("c", 0, "q")]
    c = response_identity(typed(original), typed(new))
    assert (c["paired"], c["compared"], c["identical"], c["differing"], c["without_response"]) == (
        4,
        3,
        2,
        1,
        1,
    )
    assert c["differences"] == [
        {"sample_id": "b", "repeat": 0, "field": "reasoning_text", "token": 0, "char": 0}
    ]
    # no repeat field is repeat 0
    assert response_identity(typed([row("a", None, "t")]), typed([row("a", 0, "t")]))["identical"] == 1


def typed(lines: list[dict]) -> list[ScoredRow]:
    return [r for line in lines if (r := row_from_line(line)) is not None]
