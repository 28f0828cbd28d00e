"""The shipped sweeps/doccount-readme.toml, its 8 recipes run against the 6 providers' emulators (each run
pointed at its provider's emulator, the URL's path kept), and the leaderboard page in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.browser import Browser, find_chromium, run_in_browser
from support.cli import REPO, sweep_cli
from support.datagen import doccount_rows, write_doccount
from support.provider_emulators import (
    AnthropicCompat,
    GeminiCompat,
    InlineThinkHost,
    Moonshot,
    OpenAIReasoning,
    OpenRouter,
    ProviderEmulator,
    Zhipu,
)

pytestmark = pytest.mark.timeout(300)

ROWS = doccount_rows(6)
KEY_VARS = ("MOONSHOT_API_KEY", "TOGETHER_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY")
KEY_VARS += ("ANTHROPIC_API_KEY", "ZHIPU_API_KEY", "GEMINI_API_KEY")
KEYS = {v: f"sk-emu-{v.lower().replace('_', '-')}-0123456789" for v in KEY_VARS}
# run -> (rules, wrong rows, cut-off rows (no answer, finish_reason length), unparsable rows)
PLAN: dict[str, tuple[Any, set[int], set[int], set[int]]] = {
    "kimi-k2.5": (Moonshot(), set(), set(), set()),
    "qwen3.6-35b-a3b": (InlineThinkHost(prefix="/v1"), {2}, set(), set()),
    "qwen3.5-397b-a17b": (OpenRouter(), {1}, set(), set()),
    "gpt-5.5": (OpenAIReasoning(), {1, 4}, set(), set()),
    "claude-sonnet-4.5": (AnthropicCompat(), {3}, {5}, set()),
    "gpt-5.2": (OpenAIReasoning(), {0}, {2}, set()),
    "glm-4.6v": (Zhipu(), {0, 2}, set(), {4}),
    # four rows wrong: whichever 4 rows the quota lets through (the order rows are sent in is the
    # scheduler's, and differs on a loaded machine), at most 2 are right and the run ranks last
    "gemma-4-31b-it": (GeminiCompat(), {0, 1, 3, 5}, set(), set()),
}
PRICING = '\n[pricing."gpt-5.5"]\ninput = 1.25\noutput = 10.0\ncached_input = 0.125\n'
PRICING += '\n[pricing."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15.0\n'


def replies(wrong: set[int], cut: set[int], unparsable: set[int]) -> tuple[dict[str, str], dict[str, str]]:
    answers, finish = {}, {}
    for i, r in enumerate(ROWS):
        n = r["answer"] + (1 if i in wrong else 0)
        answers[r["image_sha256"]] = f"I count {n} regions.\n<answer>{n}</answer>"
        if i in cut:
            answers[r["image_sha256"]] = "Counting region by region: first the header, then"
            finish[r["image_sha256"]] = "length"
        if i in unparsable:
            answers[r["image_sha256"]] = f"There are {n} of them."
    return answers, finish


def emulated_sweep(tmp: Path) -> tuple[Path, Any, list[dict[str, Any]]]:
    """The shipped file with each base_url's scheme and host replaced by its emulator's, run once."""
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", ROWS)
    text = (REPO / "sweeps" / "doccount-readme.toml").read_text()
    text = text.replace("# data_files =", f'data_files = "{tmp / "data" / "*.parquet"}"\n#', 1)
    emus = {}
    for name, (rules, wrong, cut, bad) in PLAN.items():
        answers, finish = replies(wrong, cut, bad)
        script = [None] * 4 + ["daily_quota"] * 20 if name == "gemma-4-31b-it" else None
        emus[name] = ProviderEmulator(rules, answers=answers, finish_reasons=finish, script=script).start()
    blocks = text.split("[[runs]]")
    for i, block in enumerate(blocks[1:], start=1):
        name = re.search(r'^name = "([^"]+)"', block, re.M).group(1)
        url = re.search(r'^base_url = "([^"]+)"', block, re.M).group(1)
        parts = urlsplit(url)
        local = emus[name].url + parts.path
        assert urlsplit(local).path.rstrip("/") == emus[name].rules.prefix  # the recipe's URL layout
        blocks[i] = block.replace(url, local)
        if name == "glm-4.6v":
            blocks[i] = blocks[i].rstrip() + "\nrepeats = 2\nseed = 1\n\n"  # sampled twice
    text = "[[runs]]".join(blocks).replace("[defaults]", PRICING + "\n[defaults]")
    sweep_file = tmp / "readme.toml"
    sweep_file.write_text(text)
    root = tmp / "runs"
    try:
        res = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), "--parallel", "4", env=KEYS)
    finally:
        for emu in emus.values():
            emu.stop()
    return root / "doccount-readme", res, [emus[n].requests() for n in PLAN]


@pytest.fixture(scope="module")
def readme_sweep(tmp_path_factory) -> tuple[Path, Any, list]:
    return emulated_sweep(tmp_path_factory.mktemp("readme-sweep"))


def test_the_readme_recipes_run_against_their_emulators(readme_sweep) -> None:
    folder, res, requests = readme_sweep
    assert res.returncode == 3, res.stderr  # gemma's daily quota ran out after 4 requests
    state = json.loads((folder / "sweep.json").read_text())
    assert {n: r["state"] for n, r in state["runs"].items()} == {
        n: ("failed" if n == "gemma-4-31b-it" else "done") for n in PLAN
    }
    board = json.loads((folder / "leaderboard" / "leaderboard.json").read_text())
    by = {e["name"]: e for e in board["runs"]}
    assert board["runs"][0]["name"] == "kimi-k2.5" and board["runs"][-1]["name"] == "gemma-4-31b-it"
    assert (
        by["claude-sonnet-4.5"]["outcomes"]["cut_off"] == 1
        and by["glm-4.6v"]["outcomes"]["parse_failure"] == 2
    )
    assert by["gemma-4-31b-it"]["complete"] is False and by["gemma-4-31b-it"]["questions"] == len(ROWS)
    assert by["glm-4.6v"]["repeats"]["k"] == 2 and by["gpt-5.5"]["cost_usd"] > 0
    assert by["kimi-k2.5"]["cost_usd"] is None
    assert len(board["pairwise"]) == 28
    md = (folder / "leaderboard" / "leaderboard.md").read_text()
    assert md.count("\n| ") >= 8 + 28
    # the README's results ride along as `published`: side by side, with the data's size against theirs
    pub = by["kimi-k2.5"]["published"]
    assert (pub["correct"], pub["questions"], pub["source"]) == (322, 442, "DocCount README, Results")
    assert pub["reproduced_questions"] == len(ROWS) and pub["p_value"] is not None
    assert pub["class_size_mismatches"] == [f"all: {len(ROWS)} questions here, 442 published"]
    assert "304 / 442" in by["qwen3.6-35b-a3b"]["published"]["note"]
    assert (
        "## Published and reproduced" in md
        and "| kimi-k2.5 | DocCount README, Results | 72.85 (322 / 442) |" in md
    )
    for reqs in requests:  # every chat request carried a key, and never another provider's
        assert len({r["headers"]["authorization_sha256"] for r in reqs if r.get("body")}) == 1


def test_the_leaderboard_page_in_chromium(readme_sweep, tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    folder, _, _ = readme_sweep
    page = folder / "leaderboard" / "index.html"
    url = page.resolve().as_uri()
    board = json.loads((folder / "leaderboard" / "leaderboard.json").read_text())

    async def scenario(b: Browser) -> dict[str, Any]:
        await b.open(url, width=1280, height=1100)
        out = {
            "runs": await b.js(
                "Array.from(document.querySelectorAll('#board tbody tr')).map(r => r.dataset.run)"
            ),
            "incomplete": await b.js(
                "Array.from(document.querySelectorAll('#board tr.incomplete')).map(r => r.dataset.run)"
            ),
            "links": await b.js("Array.from(document.querySelectorAll('#board a')).map(a => a.href)"),
            "cells": await b.js("document.querySelectorAll('#pairwise td[data-a]').length"),
            "width": await b.js("document.querySelector('#board').getBoundingClientRect().right"),
            "box": await b.js("document.querySelector('#board').parentElement.getBoundingClientRect().right"),
            "page_width": await b.js("document.documentElement.scrollWidth"),
            "all_visible": await b.js("document.querySelector('#board-all').checkVisibility()"),
            "all_columns": await b.js("document.querySelectorAll('#board-all thead th').length"),
            "main_columns": await b.js("document.querySelectorAll('#board thead th').length"),
            "forest": await b.js(FOREST),
            "published": await b.js(
                "Array.from(document.querySelectorAll('#published tbody tr')).map(r => r.dataset.run)"
            ),
            "diamonds": await b.js("document.querySelectorAll('#forest path.pub').length"),
        }
        await b.js("document.querySelector('#all-columns > summary').click()")
        out["all_shown"] = await b.js("document.querySelector('#board-all').checkVisibility()")
        shot = tmp_path / "leaderboard.png"
        await b.screenshot(shot, full_page=True)
        out["shot"] = str(shot)
        out["requests"] = b.requests(url)
        out["violations"] = await b.js("window.__cspViolations")
        out["errors"] = b.console_errors()
        return out

    out = run_in_browser(chromium, tmp_path, scenario)
    assert out["runs"] == [e["name"] for e in board["runs"]]
    assert out["incomplete"] == ["gemma-4-31b-it"]
    assert len(out["links"]) == 8 and all(Path(u.removeprefix("file://")).is_file() for u in out["links"])
    assert out["cells"] == 28
    assert out["requests"] == [] and out["violations"] == [] and out["errors"] == []
    assert Path(out["shot"]).stat().st_size > 20_000
    # at 1280 pixels the main table fits its box without a horizontal scroll; the rest is one click away
    assert out["width"] <= out["box"] and out["page_width"] <= 1280, out
    assert out["main_columns"] < out["all_columns"] and not out["all_visible"] and out["all_shown"]
    # the forest plot: one row per run in rank order, each point inside its interval, ordered on the axis
    forest = out["forest"]
    assert [f["label"] for f in forest] == [f"{e['rank']}. {e['name']}" for e in board["runs"]]
    for f, e in zip(forest, board["runs"], strict=True):
        assert f["lo"] <= f["x"] <= f["hi"] and f["lo"] < f["hi"], f
        assert f["title"].startswith(f"{e['name']}: {100 * e['accuracy']:.1f}%")
    assert out["published"] == [e["name"] for e in board["runs"]] and out["diamonds"] == 8
    xs = [f["x"] for f in forest]
    assert xs == sorted(xs, reverse=True)  # rank order is accuracy order: the points step left


FOREST = """Array.from(document.querySelectorAll('#forest g.run')).map(g => {
  const c = g.querySelector('circle.point'), l = g.querySelector('line.ci');
  const box = c.getBoundingClientRect(), lb = l.getBoundingClientRect();
  return {label: g.querySelector('text.label').textContent, x: box.x + box.width / 2, lo: lb.left, hi: lb.right,
          title: c.querySelector('title').textContent};
})"""
