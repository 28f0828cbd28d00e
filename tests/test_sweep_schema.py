"""The sweep file's schema (evaluator.study.sweep_file, msgspec Structs): a wrong type or an unknown key
anywhere in a valid file is one line that names the file and the very line, and a word outside a closed
vocabulary lists the words allowed. Pure: real files, no server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator.study.secrets import secret_problem
from evaluator.study.sweep_file import SWEEP_OWNED, SweepFileError, load_sweep, option_specs

GOOD = """name = "t"
benchmark = "doccount"

[defaults]
concurrency = 4
base_url = "http://127.0.0.1:9/v1"
api_key_env = "A_KEY"

[pricing."m-a"]
input = 1.0
output = 2.0

[serve]
executor = "local"
gpus = [0, 1]
command = ["vllm", "serve"]

[[runs]]
name = "a"
model = "m-a"
max_tokens = 100
published = { correct = 3, questions = 4, source = "paper", reasoning = "on" }

[[runs]]
name = "b"
model = "org/m-b"
serve = { gpus = 1, args = ["--x"] }
served_model_name = "mb"
"""
LINES = GOOD.splitlines()
VALUE_LINES = [i for i, line in enumerate(LINES) if re.match(r"^\w+ = ", line)]
# a value no key of GOOD takes: no flag or free-form table is in it
WRONG = ["true", "1979-05-27", "[[1]]", "{ zz = 1 }"]


@pytest.fixture(scope="module")
def specs():
    from evaluator.cli.main import evaluate_cmd

    return option_specs(evaluate_cmd.params)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def refused(tmp: Path, specs, text: str) -> str:
    path = tmp / "s.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SweepFileError) as info:
        load_sweep(path, specs)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}:"), msg
    return msg


def test_the_valid_file_loads(tmp_path: Path, specs) -> None:
    (tmp_path / "s.toml").write_text(GOOD)
    sweep = load_sweep(tmp_path / "s.toml", specs)
    assert [r.name for r in sweep.runs] == ["a", "b"] and sweep.serve.gpus == ["0", "1"]
    assert sweep.runs[0].api_key_env == "A_KEY" and sweep.runs[1].serve.served_name == "mb"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(VALUE_LINES), st.sampled_from(WRONG))
def test_a_wrong_type_anywhere_names_its_line_and_key(tmp_path: Path, specs, index: int, wrong: str) -> None:
    key = LINES[index].split(" = ")[0]
    lines = [*LINES]
    lines[index] = f"{key} = {wrong}"
    msg = refused(tmp_path, specs, "\n".join(lines) + "\n")
    assert f"s.toml:{index + 1}: " in msg and key in msg, msg


FILE_KEYS = [
    "name",
    "api_key_env",
    "serve",
    "served_model_name",
    "published",
    "defaults",
    "pricing",
    "runs",
    "extra_body",
    "input",
    "output",
    "cached_input",
    "batch_input",
    "batch_output",
    "correct",
    "questions",
    "source",
    "reasoning",
    "per_class",
    "note",
    "revision",
    "gpus",
    "args",
    "executor",
    "command",
    "launcher",
    "image",
    "runtime",
    "partition",
    "account",
    "qos",
    "constraint",
    "reservation",
    "time",
    "gpus_per_node",
    "cpus_per_gpu",
    "mem_per_gpu",
    "setup",
]


def _valid_keys(specs) -> set[str]:
    return {*FILE_KEYS, *specs, *SWEEP_OWNED}


NAMES = st.from_regex(r"\A[a-z][a-z_]{2,12}\Z")
PLACES = [i for i, line in enumerate(LINES) if line and not line.startswith("[[")] + [len(LINES) - 1]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PLACES), NAMES)
def test_an_unknown_key_anywhere_names_its_line_and_the_valid_keys(
    tmp_path: Path, specs, after: int, name: str
) -> None:
    if name in _valid_keys(specs) or secret_problem(name, 1):
        return
    lines = [*LINES[: after + 1], f"{name} = 1", *LINES[after + 1 :]]
    msg = refused(tmp_path, specs, "\n".join(lines) + "\n")
    assert f"s.toml:{after + 2}: unknown key `{name}` in " in msg and "(valid keys: " in msg, msg


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        ('executor = "local"', 'executor = "k8s"', '"local" or "slurm"'),
        ("gpus = [0, 1]\n", 'gpus = [0, 1]\nlauncher = "vm"\n', '"process" or "container"'),
        ('reasoning = "on"', 'reasoning = "yes"', '"on" or "off"'),
    ],
)
def test_a_word_outside_a_vocabulary_lists_the_words_allowed(
    tmp_path: Path, specs, old: str, new: str, allowed: str
) -> None:
    text = GOOD.replace(old, new)
    line = line_of(text, new.strip().splitlines()[-1])
    msg = refused(tmp_path, specs, text)
    assert f"s.toml:{line}: " in msg and f"must be {allowed}" in msg, msg


def test_a_nested_mistake_names_the_table_key_and_the_fix(tmp_path: Path, specs) -> None:
    at = {k: line_of(GOOD, k) for k in ("serve = {", "output =", "[pricing", "gpus = [")}
    msg = refused(tmp_path, specs, GOOD.replace('gpus = 1, args = ["--x"]', 'gpus = 1, args = "--x"'))
    assert f"s.toml:{at['serve = {']}: run b: serve.args must be a list of strings" in msg, msg
    msg = refused(tmp_path, specs, GOOD.replace("output = 2.0", "output = -2"))
    assert f's.toml:{at["output ="]}: [pricing."m-a"] `output` must be a finite number from 0' in msg, msg
    msg = refused(tmp_path, specs, GOOD.replace('[pricing."m-a"]\ninput = 1.0\n', '[pricing."m-a"]\n'))
    assert f's.toml:{at["[pricing"]}: [pricing."m-a"] needs `input`: a finite number' in msg, msg
    msg = refused(tmp_path, specs, GOOD.replace("gpus = [0, 1]", 'gpus = [0, "  "]'))
    assert f"s.toml:{at['gpus = [']}: [serve] `gpus` must be a list of distinct GPU ids" in msg, msg


@pytest.mark.parametrize("runs", ["runs = [1]", "runs = [[1]]", 'runs = "a"', "runs = []"])
def test_runs_that_are_not_tables_are_one_line(tmp_path: Path, specs, runs: str) -> None:
    msg = refused(tmp_path, specs, f'name = "t"\n{runs}\n')
    assert "s.toml:2: " in msg and "runs" in msg, msg


def test_a_wrong_type_through_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evaluator.cli.main import main

    path = tmp_path / "s.toml"
    path.write_text(GOOD.replace("max_tokens = 100", "max_tokens = true"))
    res = CliRunner().invoke(main, ["sweep", str(path), "--plan"], env={"A_KEY": "k" * 20})  # in-process
    assert res.exit_code == 2, res.stderr
    line = line_of(GOOD, "max_tokens")
    assert res.stderr.splitlines() == [
        f"error: {path}:{line}: run a: `max_tokens` must be a string or a number"
    ]
