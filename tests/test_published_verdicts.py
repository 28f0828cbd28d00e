"""Published numbers, like with like (issue #41, section 3): the verdict a published comparison gets,
the difference it could have detected, the reasoning modes of the two sides, and per-class p-values
Holm-adjusted within the run.

The leaderboards are built from one real scored run folder (evaluate + score through the CLI against the
loopback test server: 442 DocCount-schema questions in the paper's class sizes, 319 answered right), put
into a sweep folder with the sweep.json a sweep file makes (load_sweep, load_state), as a sweep does.
Oracles: statsmodels (power_proportions_2indep, NormalIndPower, multipletests) and scipy."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2_contingency
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import power_proportions_2indep, proportion_effectsize
from support.cli import eval_args, run_cli
from support.datagen import CLASSES, PROMPT_TEMPLATE, doccount_rows, write_doccount
from support.openai_test_server import TestServer
from support.oracles import holm_adjusted

from evaluator.report.leaderboard import write_leaderboard
from evaluator.scoring.published import min_detectable, published_block
from evaluator.study.sweep import load_state
from evaluator.study.sweep_file import SweepFileError, load_sweep

pytestmark = pytest.mark.timeout(300)

# The paper's class sizes (Brand Logo, Photograph, Table, Chart / Graph) and what the run gets right in
# each: 319 of 442, as the DocCount README reports for Qwen3.6-35B-A3B (the paper prints 304).
SIZES = (163, 180, 75, 24)
RIGHT = (130, 135, 38, 16)
# Kimi-K2.5 in the paper's Table 5: 322 of 442; its Brand Logo and Photograph are far from the run's.
KIMI_CLASSES = {
    "Brand Logo": [104, 163],
    "Photograph": [158, 180],
    "Table": [44, 75],
    "Chart / Graph": [16, 24],
}


def rows_and_replies() -> tuple[list[dict[str, Any]], dict[str, str]]:
    """442 rows in the paper's class sizes and the test server's replies (RIGHT[k] right per class)."""
    rows = doccount_rows(sum(SIZES))
    replies, i = {}, 0
    for cls, size, right in zip(CLASSES, SIZES, RIGHT, strict=True):
        for j in range(size):
            r = rows[i]
            definition = f"Definition of {cls} for the test set."
            prompt = PROMPT_TEMPLATE.format(
                target_class=cls, class_definition=definition, question=r["question"]
            )
            r.update(target_class=cls, class_definition=definition, prompt=prompt)
            n = r["answer"] + (0 if j < right else 1)
            replies[r["image_sha256"]] = f"I see {n} regions.\n<answer>{n}</answer>"
            i += 1
    return rows, replies


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory) -> Path:
    """One real run folder: 442 questions evaluated against the loopback server, then scored."""
    base = tmp_path_factory.mktemp("published-run")
    rows, replies = rows_and_replies()
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    run = base / "run"
    with TestServer() as server:
        server.set_config({"answers": replies})
        res = run_cli(
            "evaluate",
            *eval_args(server.base_url, str(base / "data" / "*.parquet"), run, model="qwen"),
            "--concurrency",
            "32",
            "--quiet",
            timeout=240,
        )
    assert res.returncode == 0, res.stderr
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    return run


SWEEP = """name = "{name}"
benchmark = "doccount"

[[runs]]
name = "qwen"
model = "qwen"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "A_KEY"
published = {published}
"""


def board_of(scored_run: Path, tmp: Path, published: str, declared: str | None = None) -> dict[str, Any]:
    """The sweep file's `published` (TOML inline table) through sweep.json to the leaderboard files, over
    a copy of the scored run (its run_config.json declaring `declared` as its reasoning mode, if given)."""
    spec = load_sweep(_write(tmp / "s.toml", SWEEP.format(name="t", published=published)), specs())
    folder = tmp / "runs" / "t"
    shutil.copytree(scored_run, folder / "qwen")
    if declared is not None:  # what `evaluate --reasoning` records
        config = json.loads((folder / "qwen" / "run_config.json").read_text())
        (folder / "qwen" / "run_config.json").write_text(json.dumps({**config, "reasoning": declared}))
    state = load_state(folder / "sweep.json", spec)
    (folder / "sweep.json").write_bytes(msgspec.json.encode(state))
    out = write_leaderboard([folder])
    return {
        "json": json.loads((out / "leaderboard.json").read_text()),
        "md": (out / "leaderboard.md").read_text(),
        "page": (out / "index.html").read_text(),
    }


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def specs():
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import option_specs

    return option_specs(evaluate_cmd.params)


def no_consistent(board: dict[str, Any]) -> None:
    for text in (board["md"], board["page"], json.dumps(board["json"])):
        assert "consistent" not in text.lower()


def main_row(page: str, run: str) -> str:
    """The run's row in the page's main table (#board), not the collapsed sections."""
    table = page[page.index('id="board"') : page.index("</table>", page.index('id="board"'))]
    return re.search(rf'<tr data-run="{run}"[^>]*>(.*?)</tr>', table, re.S).group(1)


def test_319_against_304_is_no_detectable_difference_and_says_what_could_be_detected(
    scored_run: Path, tmp_path: Path
) -> None:
    board = board_of(scored_run, tmp_path, '{ correct = 304, questions = 442, source = "the paper" }')
    pub = board["json"]["runs"][0]["published"]
    assert (pub["reproduced_correct"], pub["reproduced_questions"]) == (319, 442)
    assert pub["verdict"] == "no detectable difference" and pub["p_value"] == pytest.approx(0.2687, abs=1e-4)
    # 3.4 points observed, about 9 needed: the test could not have told them apart
    assert 8.5 < pub["min_detectable"] < 9.5 and 100 * pub["difference"] < pub["min_detectable"]
    for key in ("accuracy", "source", "difference", "difference_ci95", "p_value"):  # the earlier keys stay
        assert key in pub
    shown = f"no detectable difference (smallest detectable: {pub['min_detectable']:.1f} points)"
    assert shown == "no detectable difference (smallest detectable: 9.0 points)"
    assert f"| {shown} |" in board["md"]
    verdict = re.search(r'<td class="txt verdict-no-detectable-difference">(.*?)</td>', board["page"], re.S)
    text = " ".join(re.sub(r"<[^>]+>", " ", verdict.group(1)).split())
    assert text == "no detectable difference smallest detectable: 9.0 points"
    assert "at 442 against 442 questions it is about 9 points" in board["md"]
    assert "at 442 against 442 questions it is about 9 points" in board["page"]
    assert "reasoning mode unknown (the run declared none; the source states none)" in board["md"]
    no_consistent(board)


def test_a_clear_difference_differs(scored_run: Path, tmp_path: Path) -> None:
    board = board_of(scored_run, tmp_path, '{ correct = 269, questions = 442, source = "older" }')
    pub = board["json"]["runs"][0]["published"]
    assert pub["verdict"] == "differs" and pub["p_value"] < 0.001
    assert 100 * pub["difference"] > pub["min_detectable"]
    assert "differs (smallest detectable: " in board["md"] and 'class="txt verdict-differs"' in board["page"]
    assert "published 60.86: differs" in main_row(board["page"], "qwen")
    no_consistent(board)


def test_modes_that_differ_are_not_comparable(scored_run: Path, tmp_path: Path) -> None:
    published = f'{{ correct = 304, questions = 442, source = "paper", reasoning = "off", per_class = {_toml(KIMI_CLASSES)} }}'
    board = board_of(scored_run, tmp_path / "a", published, declared="on")
    pub = board["json"]["runs"][0]["published"]
    assert pub["verdict"] == "not comparable"
    assert (pub["reasoning"], pub["reproduced_reasoning"]) == ("off", "on")
    assert pub["p_value"] is None and pub["difference_ci95"] is None and pub["min_detectable"] is None
    assert all(b["p_value"] is None and b["p_holm"] is None for b in pub["per_class"].values())
    assert pub["classes_differ"] == []
    why = "the run declared reasoning on, the source ran with reasoning off"
    assert f"not comparable: {why}" in board["md"]
    assert f'verdict-not-comparable">not comparable\n<span class="sub">{why}</span>' in board["page"]
    line = next(x for x in board["md"].splitlines() if x.startswith("| qwen | paper |"))
    assert line.split(" | ")[5:7] == ["", ""]  # no p, no p (Holm)
    no_consistent(board)
    # the same mode on both sides: tested, and nothing said about an unknown mode
    same = board_of(scored_run, tmp_path / "b", published, declared="off")["json"]["runs"][0]["published"]
    assert same["verdict"] == "no detectable difference" and "reasoning_note" not in same
    # the source states a mode, the run none: tested, the mode said to be unknown
    unknown = board_of(scored_run, tmp_path / "c", published)
    assert unknown["json"]["runs"][0]["published"]["p_value"] is not None
    assert "reasoning mode unknown (the run declared none): compared as if alike" in unknown["page"]


def test_a_published_mode_is_on_or_off(tmp_path: Path) -> None:
    for bad in ('"maybe"', "true", '"ON"'):
        text = SWEEP.format(name="t", published=f"{{ correct = 3, questions = 4, reasoning = {bad} }}")
        with pytest.raises(SweepFileError) as info:
            load_sweep(_write(tmp_path / "s.toml", text), specs())
        msg = str(info.value)
        assert "\n" not in msg and 'run qwen: `published` `reasoning` must be "on" or "off"' in msg, msg
    res = run_cli("sweep", str(tmp_path / "s.toml"), "--plan")  # the last one, through the command line
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"error: {tmp_path / 's.toml'}:") and "run qwen" in res.stderr


def test_per_class_p_values_are_holm_adjusted_within_the_run(scored_run: Path, tmp_path: Path) -> None:
    published = f'{{ correct = 322, questions = 442, source = "paper", per_class = {_toml(KIMI_CLASSES)} }}'
    pub = board_of(scored_run, tmp_path, published)["json"]["runs"][0]["published"]
    names = list(KIMI_CLASSES)
    ps = []
    for name, size, right in zip(CLASSES, SIZES, RIGHT, strict=True):
        c, n = KIMI_CLASSES[name]
        table = [[right, size - right], [c, n - c]]
        ps.append(chi2_contingency(table, correction=False)[1])
        assert pub["per_class"][name]["p_value"] == pytest.approx(ps[-1], rel=1e-9)
    expected = holm_adjusted(ps)
    assert [pub["per_class"][n]["p_holm"] for n in names] == pytest.approx(list(expected), rel=1e-12)
    assert pub["classes_differ"] == [n for n, p in zip(names, expected, strict=True) if p < 0.05]
    assert pub["classes_differ"] == ["Brand Logo", "Photograph"]


def test_a_class_that_differs_shows_on_the_run_s_main_row(scored_run: Path, tmp_path: Path) -> None:
    published = f'{{ correct = 322, questions = 442, source = "paper", per_class = {_toml(KIMI_CLASSES)} }}'
    board = board_of(scored_run, tmp_path, published)
    assert board["json"]["runs"][0]["published"]["verdict"] == "no detectable difference"  # overall
    row = main_row(board["page"], "qwen")
    assert "published 72.85: no detectable difference" in row
    assert '<span class="sub flag">classes differ: Brand Logo, Photograph</span>' in row
    md_row = next(x for x in board["md"].splitlines() if x.startswith("| 1 | qwen |"))
    # the same cell as the page's (report/board_columns.py): the verdict and the classes that differ
    assert "(published 72.85: no detectable difference; classes differ: Brand Logo, Photograph)" in md_row
    no_consistent(board)


def _toml(classes: dict[str, list[int]]) -> str:
    return "{ " + ", ".join(f'"{k}" = [{c}, {n}]' for k, (c, n) in classes.items()) + " }"


# ----------------------------------------------------------------------------- min_detectable


def _power(diff: float, p2: float, n1: int, n2: int, alpha: float = 0.05) -> float:
    return float(power_proportions_2indep(diff, p2, n1, ratio=n2 / n1, alpha=alpha, return_results=False))


@settings(max_examples=150, deadline=None)
@given(st.integers(20, 3000), st.integers(20, 3000), st.integers(1, 99), st.sampled_from([0.05, 0.0125]))
def test_min_detectable_is_where_statsmodels_power_reaches_80_percent(n1, n2, pct, alpha) -> None:
    """statsmodels' power of the same pooled z-test is >= 80% at min_detectable in each direction that
    fits in [0, 1], and below 80% (in the direction that needs the most) 0.01 points short of it."""
    p2 = pct / 100
    d = min_detectable(p2, n1, n2, alpha)
    if d is None:  # neither direction reaches 80%: statsmodels agrees at the far ends
        assert _power(1 - p2, p2, n1, n2, alpha) < 0.8 and _power(-p2, p2, n1, n2, alpha) < 0.8
        return
    fits = [s for s in (1, -1) if 0 <= p2 + s * d / 100 <= 1]
    powers = {s: _power(s * d / 100, p2, n1, n2, alpha) for s in fits}
    reach = [s for s in fits if powers[s] >= 0.8 - 1e-6]
    assert reach, powers
    short = (d - 0.01) / 100
    assert min(_power(s * short, p2, n1, n2, alpha) for s in reach) < 0.8


def test_min_detectable_at_442_is_about_9_points_and_near_cohen_s_h() -> None:
    for correct in (304, 322, 221):
        p2 = correct / 442
        d = min_detectable(p2, 442, 442)
        assert 8.5 < d < 9.5, (correct, d)
        # NormalIndPower on Cohen's arcsine h: another approximation of the same power, within 0.3 points
        h = NormalIndPower().solve_power(effect_size=None, nobs1=442, alpha=0.05, power=0.8, ratio=1.0)
        up = next(x / 1000 for x in range(1, 1000) if proportion_effectsize(p2 + x / 1000, p2) >= h)
        down = next(x / 1000 for x in range(1, 1000) if proportion_effectsize(p2, p2 - x / 1000) >= h)
        assert abs(d - 100 * max(up, down)) < 0.3, (correct, d, up, down)


COUNTS = st.tuples(st.integers(1, 200), st.floats(0, 1))  # questions, share right


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(COUNTS, COUNTS), min_size=1, max_size=6))
def test_per_class_holm_agrees_with_statsmodels(classes) -> None:
    """Any class counts: p_holm is multipletests(method="holm") over the run's class p-values."""
    counts = [[(round(f * n), n) for n, f in pair] for pair in classes]
    per_group = {
        "target_class": {f"c{i}": {"correct": c, "questions": n} for i, ((c, n), _) in enumerate(counts)}
    }
    published = {
        "correct": 1,
        "questions": 2,
        "per_class": {f"c{i}": list(p) for i, (_, p) in enumerate(counts)},
    }
    block = published_block(published, 1, 2, per_group)
    ps = [block["per_class"][f"c{i}"]["p_value"] for i in range(len(classes))]
    assert all(p is not None for p in ps)
    expected = holm_adjusted(ps)
    got = [block["per_class"][f"c{i}"]["p_holm"] for i in range(len(classes))]
    assert got == pytest.approx(list(expected), rel=1e-9, abs=1e-15)
    for p, b in zip(expected, block["per_class"].values(), strict=True):
        assert b["verdict"] == ("differs" if p < 0.05 else "no detectable difference")
