"""Statistics for scoring and comparing runs. Pure functions: numbers in, numbers out (no files).

The bootstraps and the sign-flip test are seeded, so the same inputs always give the same numbers;
percentiles interpolate linearly between order statistics (numpy's default method).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

CONFIDENCE = 0.95
# Two-sided 95% standard-normal quantile, Phi^-1(0.975).
Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20240611
_BOOTSTRAP_CELLS = 2_000_000  # indices drawn per numpy call (the draws do not depend on the chunk size)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for successes/n; None when n == 0 (no questions, no interval)."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts (A right/B wrong, A wrong/B right).

    Under the null each discordant pair is a fair coin: p = min(1, 2 * P[X <= min(b, c)]),
    X ~ Binomial(b + c, 1/2). No discordant pairs gives p = 1. Computed with exact integers.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError("discordant counts must be non-negative")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def bootstrap_mean_interval(
    values: Sequence[float] | np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """Percentile interval of the mean of per-question values, resampling questions with replacement.

    The one bootstrap: a run's accuracy over repeats (each value one question's mean correctness, so a
    resampled question brings all its repeats along) and, in `paired_bootstrap_diff`, a difference of two
    runs (each value one question's difference). Recipe (reproducible with numpy alone):
    ``rng = numpy.random.default_rng(seed)``; draw an index matrix ``rng.integers(0, n, size=(resamples,
    n))`` (drawn in row chunks, which yields the same numbers); each row's mean ``values[idx].mean()``;
    the interval is ``numpy.percentile(means, [2.5, 97.5])`` (linear interpolation). None without values.
    """
    # float64: exact for 0/1 outcomes (sums stay far below 2**53) and their per-question means
    m = np.asarray(values, dtype=np.float64)
    n = m.size
    if n == 0:
        return None
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, _BOOTSTRAP_CELLS // n)
    done = 0
    while done < resamples:
        rows = min(chunk, resamples - done)
        means[done : done + rows] = m[rng.integers(0, n, size=(rows, n))].sum(axis=1) / n
        done += rows
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def paired_bootstrap_diff(
    correct_a: Sequence[bool] | Sequence[float],
    correct_b: Sequence[bool] | Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """Percentile interval of accuracy(A) - accuracy(B), resampling paired questions: the bootstrap of the
    mean of the per-question differences (bootstrap_mean_interval). None when there are no questions."""
    if len(correct_a) != len(correct_b):
        raise ValueError("paired bootstrap needs the same questions in both runs")
    d = np.asarray(correct_a, dtype=np.float64) - np.asarray(correct_b, dtype=np.float64)
    return bootstrap_mean_interval(d, resamples, seed, confidence)


SIGN_FLIP_EXACT_MAX = 16  # up to 2**16 sign patterns are enumerated; more are sampled


def sign_flip_p(
    diffs: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> float:
    """Two-sided p of a paired sign-flip test: under the null each question's difference is as likely
    negative as positive, so |sum| is compared with its value under every flip of the signs (all of them
    for at most SIGN_FLIP_EXACT_MAX non-zero differences, else `resamples` seeded draws, counted as
    (1 + hits) / (1 + resamples)). Zero differences carry no sign and are left out."""
    d = np.asarray([x for x in diffs if x != 0], dtype=float)
    if d.size == 0:
        return 1.0
    observed = abs(d.sum()) - 1e-12 * d.size  # a tie with the observed sum counts as at least as extreme
    if d.size <= SIGN_FLIP_EXACT_MAX:
        patterns = ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1) * 2 - 1
        return float(np.mean(np.abs(patterns @ d) >= observed))
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(resamples, d.size))
    hits = int(np.sum(np.abs(signs @ d) >= observed))
    return (1 + hits) / (1 + resamples)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    return _percentile_of_sorted(sorted(values), q)


def _percentile_of_sorted(s: Sequence[float], q: float) -> float | None:
    if not s:
        return None
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    frac = pos - lo
    return s[lo] + (s[hi] - s[lo]) * frac


PERCENTILES = (50, 90, 95, 99)


def describe(values: Sequence[float], with_sum: bool = False) -> dict[str, float | int | None]:
    """n, mean, min, p50/p90/p95/p99, max (and sum) of the values; None entries when empty."""
    vals = [float(v) for v in values]
    out: dict[str, float | int | None] = {"n": len(vals)}
    if with_sum:
        out["sum"] = sum(values)  # stays an integer for token counts
    out["mean"] = sum(vals) / len(vals) if vals else None
    out["min"] = min(vals) if vals else None
    ordered = sorted(vals)  # sorted once for all the percentiles (percentile() sorts its own copy)
    for q in PERCENTILES:
        out[f"p{q}"] = _percentile_of_sorted(ordered, q)
    out["max"] = max(vals) if vals else None
    return out


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni step-down adjusted p-values (None stays None and does not count as a test)."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(tested)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
