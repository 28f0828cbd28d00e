"""Issue 33, pricing (points 7 and 10): prices that are not finite or absurd in a sweep file or a hand-edited
sweep.json, and batch runs costed at the batch price and marked on the leaderboard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.boards import merged, row  # scored rows and merged runs built in memory
from support.cli import run_cli

from evaluator.core.jsonl import utf8_json
from evaluator.report.leaderboard import leaderboard_json, leaderboard_markdown
from evaluator.scoring.leaderboard import BoardRun, build_leaderboard
from evaluator.study.sweep_file import SweepFileError, load_sweep

BAD = ["inf", "-inf", "nan", "+inf", "1e308", "1e9", "-1.0", '"2.5"', "true", "[1]"]
KEYS = ["input", "output", "cached_input", "batch_input", "batch_output"]
SWEEP = """name = "t"
benchmark = "doccount"

[pricing."m-a"]
input = 2.0
output = 8.0
{extra}

[[runs]]
name = "a"
model = "m-a"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "A_KEY"
"""


@pytest.fixture(scope="module")
def specs():
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import option_specs

    return option_specs(evaluate_cmd.params)


def sweep_with(tmp_path: Path, key: str, value: str) -> Path:
    text = SWEEP.replace("input = 2.0\n", "") if key == "input" else SWEEP
    text = text.replace("output = 8.0\n", "") if key == "output" else text
    path = tmp_path / "s.toml"
    path.write_text(text.format(extra=f"{key} = {value}" if key not in ("input", "output") else "")
                    .replace('[pricing."m-a"]\n', f'[pricing."m-a"]\n{key} = {value}\n' if key in ("input", "output") else '[pricing."m-a"]\n'))  # fmt: skip
    return path


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(KEYS), value=st.sampled_from(BAD))
def test_a_price_that_is_not_a_finite_sane_number_is_refused_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, specs: Any, key: str, value: str
) -> None:
    path = sweep_with(tmp_path_factory.mktemp("p"), key, value)
    with pytest.raises(SweepFileError) as err:
        load_sweep(path, specs)
    assert f"`{key}`" in str(err.value) and "USD per 1M tokens" in str(err.value)


def test_the_sweep_command_refuses_an_infinite_price_with_exit_2(tmp_path: Path) -> None:
    res = run_cli(
        "sweep", str(sweep_with(tmp_path, "output", "inf")), "--plan", env={"A_KEY": "sk-" + "x" * 20}
    )
    assert res.returncode == 2, res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "`output`" in errors[0] and "Traceback" not in res.stderr


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e308, "3", None, [1]])
def test_a_hand_edited_pricing_table_never_puts_a_non_finite_number_into_json(value: Any) -> None:
    """sweep.json's pricing is read by `doccount leaderboard`: whatever it holds, the board is written."""
    runs = [BoardRun("a", merged([row(i, i % 2 == 0) for i in range(6)], model="m"))]
    board = build_leaderboard(runs, {"m": {"input": value, "output": 1.0}}, resamples=50)
    text = leaderboard_json(board).decode()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-finite {c} in leaderboard.json"))
    entry = board["runs"][0]
    assert entry["cost_usd"] is None or math.isfinite(entry["cost_usd"])
    leaderboard_markdown({**board, "title": "t"})  # renders without a TypeError


def test_the_json_writer_never_writes_a_non_finite_number() -> None:
    text = utf8_json({"a": math.inf, "b": [math.nan, -math.inf], "c": 1.5}).decode()
    assert json.loads(text) == {"a": None, "b": [None, None], "c": 1.5}


def batch_run(name: str, model: str = "m") -> BoardRun:
    m = merged([row(i, True) for i in range(4)], model=model)  # 4 x (100 prompt, 20 completion) tokens
    m.run_config.request_policy["batch"] = {"mode": "batch_api", "max_mb": 190, "poll_s": 30}
    return BoardRun(name, m)


def test_a_batch_run_is_costed_at_the_batch_price_and_marked() -> None:
    online = BoardRun("online", merged([row(i, True) for i in range(4)], model="m"))
    board = build_leaderboard(
        [online, batch_run("batched")], {"m": {"input": 2.0, "output": 8.0}}, resamples=50
    )
    by = {e["name"]: e for e in board["runs"]}
    full = (400 * 2.0 + 80 * 8.0) / 1e6
    assert by["online"]["cost_usd"] == pytest.approx(full) and not by["online"]["batch"]
    assert by["batched"]["cost_usd"] == pytest.approx(full / 2) and by["batched"]["batch"]
    price = by["batched"]["price"]
    assert price["batch_input"] == 1.0 and price["batch_output"] == 4.0 and price["batch_default"] is True
    md = leaderboard_markdown({**board, "title": "t"})
    line = next(x for x in md.splitlines() if "| batched |" in x or "batched" in x and "|" in x)
    assert "batch" in line.replace("batched", "") and "default" in line, line
    # a table's own batch prices win, and are not marked as the default
    board = build_leaderboard(
        [batch_run("batched")],
        {"m": {"input": 2.0, "output": 8.0, "batch_input": 1.5, "batch_output": 3.0}},
        resamples=50,
    )
    entry = board["runs"][0]
    assert entry["cost_usd"] == pytest.approx((400 * 1.5 + 80 * 3.0) / 1e6)
    assert entry["price"]["batch_default"] is False


def test_the_sweep_file_takes_batch_prices(tmp_path: Path, specs: Any) -> None:
    spec = load_sweep(sweep_with(tmp_path, "batch_input", "1.0"), specs)
    assert spec.pricing["m-a"].batch_input == 1.0 and spec.pricing["m-a"].batch_output is None
