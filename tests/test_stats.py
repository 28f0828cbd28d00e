"""evaluator.scoring.stats against independent implementations (scipy, numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from evaluator.scoring import stats

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("n", [1, 2, 5, 12, 37, 442, 1528])
def test_wilson_matches_scipy(n: int) -> None:
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        if not 0 <= k <= n:
            continue
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        low, high = stats.wilson_interval(k, n)
        assert low == pytest.approx(float(ci.low), abs=1e-12)
        assert high == pytest.approx(float(ci.high), abs=1e-12)
        assert 0.0 <= low <= k / n <= high <= 1.0


def test_wilson_edges() -> None:
    assert stats.wilson_interval(0, 0) is None
    assert stats.wilson_interval(0, 10)[0] == 0.0
    assert stats.wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        stats.wilson_interval(11, 10)


@pytest.mark.parametrize(
    "b,c", [(0, 0), (0, 1), (1, 0), (3, 1), (1, 3), (5, 5), (0, 12), (7, 20), (40, 61), (150, 120)]
)
def test_mcnemar_matches_scipy_binomtest(b: int, c: int) -> None:
    expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
    assert stats.mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert stats.mcnemar_exact(b, c) == stats.mcnemar_exact(c, b)


def _numpy_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """The documented recipe, written out with numpy in one call."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(resamples, len(a)))
    diffs = a[idx].mean(axis=1) - b[idx].mean(axis=1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


def test_paired_bootstrap_reproduces_documented_recipe() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(300) < 0.7
    b = rng.random(300) < 0.6
    got = stats.paired_bootstrap_diff(a.tolist(), b.tolist(), resamples=2500, seed=7)
    want = _numpy_bootstrap(a.astype(float), b.astype(float), 2500, 7)
    assert got == pytest.approx(want, abs=1e-12)
    # Default parameters are fixed: the same inputs give the same interval every time.
    assert stats.paired_bootstrap_diff(a, b) == stats.paired_bootstrap_diff(a, b)
    assert stats.BOOTSTRAP_RESAMPLES == 10_000


def test_paired_bootstrap_close_to_an_independent_seed_and_normal_approximation() -> None:
    rng = np.random.default_rng(2)
    a = rng.random(442) < 0.72
    b = rng.random(442) < 0.66
    lo, hi = stats.paired_bootstrap_diff(a, b)
    other = _numpy_bootstrap(a.astype(float), b.astype(float), 20_000, 12345)
    assert lo == pytest.approx(other[0], abs=0.01) and hi == pytest.approx(other[1], abs=0.01)
    d = a.astype(float) - b.astype(float)
    se = d.std(ddof=1) / math.sqrt(len(d))
    assert lo == pytest.approx(d.mean() - 1.96 * se, abs=0.012)
    assert hi == pytest.approx(d.mean() + 1.96 * se, abs=0.012)


def test_paired_bootstrap_degenerate_inputs() -> None:
    assert stats.paired_bootstrap_diff([], []) is None
    assert stats.paired_bootstrap_diff([True, False], [True, False]) == (0.0, 0.0)
    with pytest.raises(ValueError):
        stats.paired_bootstrap_diff([True], [True, False])


def test_percentile_matches_numpy_linear() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 2, 3, 10, 101):
        values = rng.exponential(2.0, size).tolist()
        for q in (0, 1, 25, 50, 90, 95, 99, 100):
            assert stats.percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert stats.percentile([], 50) is None


def test_describe() -> None:
    d = stats.describe([3, 1, 2, 10], with_sum=True)
    assert d["n"] == 4 and d["sum"] == 16 and isinstance(d["sum"], int)
    assert d["mean"] == 4.0 and d["min"] == 1.0 and d["max"] == 10.0
    assert d["p50"] == pytest.approx(np.percentile([3, 1, 2, 10], 50))
    assert d["p99"] == pytest.approx(np.percentile([3, 1, 2, 10], 99))
    empty = stats.describe([], with_sum=True)
    assert empty["n"] == 0 and empty["sum"] == 0 and empty["mean"] is None and empty["p95"] is None


@pytest.mark.parametrize("only_a,only_b,ties", [(0, 0, 5), (3, 0, 2), (5, 2, 10), (8, 8, 0), (1, 12, 3)])
def test_sign_flip_on_right_wrong_outcomes_is_mcnemar(only_a: int, only_b: int, ties: int) -> None:
    diffs = [1.0] * only_a + [-1.0] * only_b + [0.0] * ties
    assert stats.sign_flip_p(diffs) == pytest.approx(stats.mcnemar_exact(only_a, only_b))


def test_sign_flip_on_mean_correctness_exact_and_sampled() -> None:
    rng = np.random.default_rng(3)
    diffs = list(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size=14, p=[0.1, 0.15, 0.3, 0.25, 0.2]))
    exact = stats.sign_flip_p(diffs)
    nonzero = [d for d in diffs if d]
    # by hand: the share of the 2**n sign patterns whose |sum| reaches the observed one
    hits = sum(
        abs(sum(d if (m >> i) & 1 else -d for i, d in enumerate(nonzero))) >= abs(sum(nonzero)) - 1e-9
        for m in range(2 ** len(nonzero))
    )
    assert exact == pytest.approx(hits / 2 ** len(nonzero))
    many = diffs * 3  # 3x the non-zero differences: past the exact limit, seeded Monte Carlo
    p1, p2 = stats.sign_flip_p(many, resamples=20_000), stats.sign_flip_p(many, resamples=20_000)
    assert p1 == p2  # repeatable (seeded)
    # the exact p of the 2**n flips, counted by convolution over half-unit sums (every difference is k/2)
    halves = [round(2 * abs(d)) for d in many if d]
    counts = {0: 1}
    for h in halves:
        nxt: dict[int, int] = {}
        for total, c in counts.items():
            for step in (h, -h):
                nxt[total + step] = nxt.get(total + step, 0) + c
        counts = nxt
    observed = abs(sum(round(2 * d) for d in many if d))
    exact_many = sum(c for total, c in counts.items() if abs(total) >= observed) / 2 ** len(halves)
    assert exact_many < exact  # more data of the same lean is more significant
    assert p1 == pytest.approx(exact_many, abs=4 * (exact_many * (1 - exact_many) / 20_000) ** 0.5 + 1e-4)


def test_sign_flip_of_no_difference_is_one() -> None:
    assert stats.sign_flip_p([0.0, 0.0]) == 1.0 and stats.sign_flip_p([]) == 1.0
