"""The leaderboard's numbers (evaluator.scoring.leaderboard), from merged runs built in memory, and its ranks
as leaderboard.md and the page show them. Pure."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from support.boards import board, merged, row, typed
from support.oracles import holm_adjusted

from evaluator.data.benchmarks import get_benchmark
from evaluator.scoring import ScoreError, outcome_of
from evaluator.scoring.leaderboard import BoardRun, build_leaderboard, cost_of, holm, tokens_of


def test_ranked_by_accuracy_with_every_question_in_the_denominator() -> None:
    a = [row(i, i % 2 == 0) for i in range(8)]  # 4 / 8
    b = [row(i, True) for i in range(6)] + [
        row(6, False, status="missing"),
        row(7, False, status="request_error"),
    ]
    b[6]["parsed_answer"] = b[7]["parsed_answer"] = None
    out = board(("a", a), ("b", b))
    assert [e["name"] for e in out["runs"]] == ["b", "a"]
    top = out["runs"][0]
    assert (top["correct"], top["questions"], top["accuracy"]) == (6, 8, 0.75)
    assert top["complete"] is False and out["runs"][1]["complete"] is True
    assert top["outcomes"]["missing"] == 1 and top["outcomes"]["request_error"] == 1
    assert top["per_group"]["target_class"]["Brand Logo"]["questions"] == 2
    assert [r["rank"] for r in out["runs"]] == [1, 2]


def test_cut_off_answers_are_counted_apart_from_format_failures() -> None:
    rows = [row(i, True) for i in range(4)]
    rows[1].update(parsed_answer=None, finish_reason="length", parse_status="no_tag")
    rows[2].update(parsed_answer=None, finish_reason="stop", parse_status="no_tag")
    for r in rows:
        r["outcome"] = outcome_of(r)
    e = board(("x", rows))["runs"][0]
    assert e["outcomes"]["cut_off"] == 1 and e["outcomes"]["parse_failure"] == 1


def test_tokens_count_failed_and_earlier_attempts_and_the_cost_follows_the_price() -> None:
    failed = {
        "attempt": 1,
        "kind": "http_status",
        "message": "x",
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }
    earlier = {
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        "retry_errors": [failed],
    }
    r0 = row(0, True, retry_errors=[failed], earlier_attempts=[earlier])
    r0["usage"] = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "reasoning_tokens": 30,
        "cached_tokens": 60,
    }
    r1 = row(
        1, False, status="request_error", parsed_answer=None, retry_errors=[failed], usage=failed["usage"]
    )
    t = tokens_of(typed([r0, r1]))
    # r1's own usage is its last failed attempt's: counted once
    assert t == {"prompt": 100 + 7 + 5 + 7 + 7, "completion": 40 + 3 + 5 + 3 + 3, "reasoning": 30, "cached": 60,
                 "total": 140 + 10 + 10 + 10 + 10, "failed_attempts": 30}  # fmt: skip
    price = {"input": 2.0, "output": 10.0, "cached_input": 0.5}
    assert cost_of(t, price) == pytest.approx(((126 - 60) * 2.0 + 60 * 0.5 + 54 * 10.0) / 1e6)
    assert cost_of(t, {"input": 2.0, "output": 10.0}) == pytest.approx((126 * 2.0 + 54 * 10.0) / 1e6)
    assert cost_of(t, None) is None


def test_pricing_is_looked_up_by_model_id_and_blank_without_one() -> None:
    out = build_leaderboard(
        [
            BoardRun("a", merged([row(0, True)], model="gpt-x")),
            BoardRun("b", merged([row(0, True)], model="other")),
        ],
        pricing={"gpt-x": {"input": 1.0, "output": 1.0}},
        resamples=100,
    )
    costs = {e["name"]: e["cost_usd"] for e in out["runs"]}
    assert costs["a"] == pytest.approx(120 / 1e6) and costs["b"] is None


def test_pairs_over_different_question_sets_are_not_compared() -> None:
    a = [row(i, True) for i in range(6)]
    b = [row(i, i < 3) for i in range(6)]
    c = [row(i, True) for i in range(5)]
    out = board(("a", a), ("b", b), ("c", c))
    pairs = {(p["a"], p["b"]): p for p in out["pairwise"]}
    assert len(pairs) == 3
    assert pairs[("a", "b")]["comparable"] and pairs[("a", "b")]["table"]["only_a"] == 3
    assert pairs[("a", "b")]["p_value"] == pytest.approx(binomtest(0, 3, 0.5).pvalue)
    not_cmp = [p for p in out["pairwise"] if not p["comparable"]]
    assert {(p["a"], p["b"]) for p in not_cmp} == {("a", "c"), ("c", "b")}  # a and c tie at 100%: by name
    assert all(p["p_value"] is None and p["p_holm"] is None for p in not_cmp)


def test_runs_of_two_benchmarks_are_refused() -> None:
    m = merged([row(0, True)])
    m2 = merged([row(0, True)])
    m2.benchmark = get_benchmark("countqa")
    with pytest.raises(ScoreError, match="different benchmarks"):
        build_leaderboard([BoardRun("a", m), BoardRun("b", m2)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0, 1)), max_size=12))
def test_holm_agrees_with_statsmodels(ps: list[float | None]) -> None:
    """statsmodels' multipletests(method="holm") is the oracle (support/oracles.py); None is not a test and
    stays None."""
    adj = holm(ps)
    tested = [p for p in ps if p is not None]
    expected = iter(holm_adjusted(tested) if tested else [])
    for p, a in zip(ps, adj, strict=True):
        assert a is None if p is None else a == pytest.approx(next(expected), abs=1e-12)


def test_holm_on_a_hand_computed_case() -> None:
    # sorted 0.01, 0.02, 0.04 with m = 3: 3 x 0.01 = 0.03; max(0.03, 2 x 0.02) = 0.04; max(0.04, 1 x 0.04)
    assert holm([0.04, None, 0.01, 0.02]) == pytest.approx([0.04, None, 0.03, 0.04])  # type: ignore[list-item]
    assert holm([0.5, 0.6]) == [1.0, 1.0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=2, max_size=4))
def test_every_pair_once_in_rank_order(outcomes: list[list[bool]]) -> None:
    runs = [(f"r{k}", [row(i, c) for i, c in enumerate(o)]) for k, o in enumerate(outcomes)]
    out = board(*runs)
    names = [e["name"] for e in out["runs"]]
    accs = [e["accuracy"] for e in out["runs"]]
    assert accs == sorted(accs, reverse=True)
    assert [(p["a"], p["b"]) for p in out["pairwise"]] == list(itertools.combinations(names, 2))


def test_a_benchmark_s_other_metrics_get_a_column_in_both_renderings() -> None:
    from evaluator.report.leaderboard import leaderboard_markdown
    from evaluator.report.leaderboard_page import render_page

    def cq(i: int, answer: int) -> dict[str, Any]:
        r = row(i, True, groups={"is_focused": i % 2 == 0, "categories": ["food"]}, parsed_answer=answer)
        r.update(ground_truth=100, correct=answer == 100)
        return r

    m = merged([cq(0, 100), cq(1, 104), cq(2, 50)])  # exact 1/3; relaxed (within 5%) 2/3
    m.benchmark = get_benchmark("countqa")
    out = build_leaderboard([BoardRun("q", m)], resamples=100)
    assert out["runs"][0]["extra_metrics"] == {"relaxed_accuracy": pytest.approx(2 / 3)}
    out["title"] = "t"
    assert "| Relaxed accuracy % |" in leaderboard_markdown(out) and "| 66.67 |" in leaderboard_markdown(out)
    assert ">Relaxed accuracy %</th>" in render_page(out)


def test_pairs_of_repeated_runs_get_the_sign_flip_p() -> None:
    from evaluator.scoring.leaderboard import pair_p

    a, b = [1.0, 0.5, 1.0, 0.5, 1.0, 0.0], [0.0, 0.5, 0.5, 0.0, 0.5, 0.0]
    out = pair_p(a, b, None, 2000, 1)
    assert out["p_test"] == "sign_flip" and out["p_value"] == pytest.approx(2 / 16)  # 4 ups of 4: 2 of 16
    assert pair_p([True], [False], 1.0, 2000, 1) == {"p_value": 1.0, "p_test": "mcnemar_exact"}


def test_leaderboard_md_and_the_page_show_the_same_table() -> None:
    """Each column is declared once (report/board_columns.py): the page's every-column table and
    leaderboard.md have the same headings, and each Markdown cell says what the page's cell says."""
    import html
    import re

    from evaluator.report.leaderboard import leaderboard_markdown
    from evaluator.report.leaderboard_page import render_page

    runs = [("a", [row(i, i % 3 != 0) for i in range(9)]), ("b", [row(i, i % 2 == 0) for i in range(9)])]
    out = board(*runs)
    out["title"] = "t"
    md_lines = [x for x in leaderboard_markdown(out).splitlines() if x.startswith("| ")]
    md_head = [c.strip() for c in md_lines[0].strip("|").split("|")]
    page = render_page(out)
    table = page[page.index('id="board-all"') :]
    page_head = [
        html.unescape(h) for h in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table[: table.index("</thead>")])
    ]
    assert md_head == page_head
    for expected in ("Model / provider", "Reasoning declared / seen", "Accuracy % [95% CI]"):
        assert expected in md_head
    first = [c.strip() for c in md_lines[2].strip("|").split("|")]
    body = html.unescape(
        re.sub(r"<[^>]+>", " ", table[table.index("<tbody>") : table.index("</tr>", table.index("<tbody>"))])
    )
    for text in first:
        plain = re.sub(r"\\(.)", r"\1", text).replace("[report](./a/scores/report.html)", "report")
        for word in plain.replace("(", " ").replace(")", " ").split():
            assert word in body, (word, text)


def test_identical_results_share_a_rank_everywhere() -> None:
    from evaluator.report.leaderboard import leaderboard_markdown
    from evaluator.report.leaderboard_page import render_page

    same = [row(i, i % 2 == 0) for i in range(8)]
    out = board(("b", same), ("a", list(same)), ("c", [row(i, i < 2) for i in range(8)]))
    assert [(e["name"], e["rank"]) for e in out["runs"]] == [("a", 1), ("b", 1), ("c", 3)]
    out["title"] = "t"
    md = leaderboard_markdown(out)
    assert len(re.findall(r"^\| 1 \| ", md, re.M)) == 2 and re.search(r"^\| 3 \| ", md, re.M)
    assert "| 2 | " not in md
    page = render_page(out)
    assert page.count(">1</td>") >= 2 and ">2</td>" not in page
