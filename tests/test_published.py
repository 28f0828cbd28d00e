"""Published against reproduced (evaluator.scoring.published) and the leaderboard's latency, checked
against outside oracles: scipy's chi-square test of the 2x2 table, numpy's percentiles, and the
worked examples of Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chi2_contingency
from support.boards import CLASSES, merged, row

from evaluator.report.leaderboard import leaderboard_markdown
from evaluator.report.leaderboard_page import render_page
from evaluator.scoring.leaderboard import BoardRun, build_leaderboard
from evaluator.scoring.published import newcombe_interval, published_block, two_proportion_p


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((56, 70, 48, 80), (0.0524, 0.3339)),  # Newcombe's example (a)
        ((9, 10, 3, 10), (0.1705, 0.8090)),  # example (c)
    ],
)
def test_the_difference_interval_is_newcombe_s_method_10(counts, expected) -> None:
    lo, hi = newcombe_interval(*counts)
    assert (round(lo, 4), round(hi, 4)) == expected


@given(
    st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
)
def test_the_p_value_is_the_chi_square_test_without_continuity_correction(a, b) -> None:
    (c1, n1), (c2, n2) = a, b
    table = [[c1, n1 - c1], [c2, n2 - c2]]
    p = two_proportion_p(c1, n1, c2, n2)
    if 0 < c1 + c2 < n1 + n2:
        assert p == pytest.approx(chi2_contingency(table, correction=False)[1], rel=1e-6, abs=1e-12)


def test_a_reproduction_of_the_readme_numbers() -> None:
    # 319 reproduced against the 322 published: no detectable difference; 269 against 322: differs
    close = published_block({"correct": 322, "questions": 442, "source": "README"}, 319, 442, {})
    assert close["verdict"] == "no detectable difference" and close["difference"] == pytest.approx(-3 / 442)
    far = published_block({"correct": 322, "questions": 442}, 269, 442, {})
    assert far["verdict"] == "differs" and far["p_value"] < 0.001
    assert far["difference_ci95"][1] < 0 < close["difference_ci95"][1]


def test_class_sizes_are_compared_with_the_published_denominators() -> None:
    rows = [row(i, i % 3 != 0) for i in range(40)]  # 10 questions in each class
    per_class = {c: [5, 10] for c in CLASSES} | {"Table": [5, 12]}
    published = {"correct": 20, "questions": 40, "source": "paper", "per_class": per_class}
    board = build_leaderboard([BoardRun("a", merged(rows), published=published)], resamples=200)
    pub = board["runs"][0]["published"]
    assert pub["class_sizes_match"] is False
    assert pub["class_size_mismatches"] == ["Table: 10 questions here, 12 published"]
    assert pub["per_class"]["Brand Logo"]["size_matches"] is True
    assert pub["per_class"]["Table"]["size_matches"] is False
    md = leaderboard_markdown({**board, "title": "t"})
    assert "## Published and reproduced" in md and "class sizes differ (Table: 10 questions here" in md
    page = render_page({**board, "title": "t"})
    assert "class sizes differ: Table: 10 questions here, 12 published" in page
    assert "published 50.00" in page  # beside the reproduced accuracy in the main table


def test_latency_is_the_median_and_95th_percentile_per_response() -> None:
    lat = [0.5 * (i + 1) for i in range(20)]
    rows = [row(i, True, latency_s=lat[i]) for i in range(20)]
    rows[3]["latency_s"] = None  # a response without a latency is not counted
    board = build_leaderboard([BoardRun("a", merged(rows))], resamples=200)
    got = board["runs"][0]["latency_s"]
    kept = [x for i, x in enumerate(lat) if i != 3]
    assert got["responses"] == 19
    assert got["median"] == pytest.approx(np.percentile(kept, 50))
    assert got["p95"] == pytest.approx(np.percentile(kept, 95))
    assert f"{np.percentile(kept, 50):.2f} / {np.percentile(kept, 95):.2f}" in render_page(
        {**board, "title": "t"}
    )
