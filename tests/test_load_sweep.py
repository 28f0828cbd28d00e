"""A sweep file read by load_sweep (evaluator/study/sweep_file.py) and its key variables checked by
check_key_variables: `api_key_env` in [defaults] works as in a run, an unset one is one line from
`doccount sweep`, and a mistyped key inside a run gets a did-you-mean (study/schema_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli

from evaluator.cli.main import evaluate_cmd
from evaluator.study.sweep_file import SweepFileError, check_key_variables, load_sweep, option_specs

SWEEP = """name = "s"
benchmark = "doccount"

[defaults]
api_key_env = "NO_KEY_SET_HERE"
concurrency = 2
base_url = "http://127.0.0.1:9/v1"

[[runs]]
name = "a"
model = "m-a"

[[runs]]
name = "b"
model = "m-b"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "B_KEY"
"""


def _sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_api_key_env_in_defaults_works_like_in_a_run(tmp_path) -> None:
    specs = option_specs(evaluate_cmd.params)
    sweep = load_sweep(_sweep(tmp_path, SWEEP), specs)
    assert {r.name: r.api_key_env for r in sweep.runs} == {"a": "NO_KEY_SET_HERE", "b": "B_KEY"}
    check_key_variables(sweep, sweep.runs, {"NO_KEY_SET_HERE": "k" * 20, "B_KEY": "k" * 20})
    with pytest.raises(SweepFileError) as info:
        check_key_variables(sweep, sweep.runs, {})
    text = str(info.value)
    assert "\n" not in text
    assert "a (line 5: NO_KEY_SET_HERE)" in text and "b (line 17: B_KEY)" in text and "not set" in text


def test_an_unset_key_variable_is_one_line_from_the_command(tmp_path) -> None:
    res = run_cli("sweep", str(_sweep(tmp_path, SWEEP)), "--run-root", str(tmp_path / "runs"), "--only", "a")
    assert res.returncode == 2
    [line] = res.stderr.strip().splitlines()
    assert "NO_KEY_SET_HERE" in line and "not set" in line and "names a credential" not in line


def test_a_typo_inside_a_run_gets_a_did_you_mean(tmp_path) -> None:
    specs = option_specs(evaluate_cmd.params)
    with pytest.raises(SweepFileError) as info:
        load_sweep(_sweep(tmp_path, SWEEP.replace('model = "m-a"', 'modle = "m-a"')), specs)
    assert "s.toml:11:" in str(info.value) and "did you mean `model`?" in str(info.value)
