"""Settings are one value: the options a run records are declared where the option is (`Recorded`),
run_config.json is written from that declaration, the runner's settings and the reproduction's command
line are read back from run_config.json. Adding an option that changes a run's identity touches three
files (docs/development.md); the second test adds one to a copy of the package and follows it through."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.batchrun import records
from support.openai_test_server import TestServer

from evaluator.core.records import derive_seed
from evaluator.data.benchmarks import get_benchmark
from evaluator.evaluation.evaluate import parse_extra_body, run_settings
from evaluator.evaluation.options import options_from_args
from evaluator.evaluation.runner import settings_from_config
from evaluator.request.shape import load_preset, preset_names
from evaluator.runfolder.runconfig import RunConfig

REPO = Path(__file__).resolve().parents[1]
URL = "http://127.0.0.1:9/v1"

VALUES: dict[str, st.SearchStrategy[str]] = {
    "--benchmark": st.sampled_from(["doccount", "countqa"]),
    "--backend": st.sampled_from(["api", "vllm"]),
    "--temperature": st.sampled_from(["0", "0.7", "2", "none"]),
    "--top-p": st.sampled_from(["0.5", "1", "none"]),
    "--max-tokens": st.sampled_from(["1", "100", "none"]),
    "--max-tokens-field": st.sampled_from(["max_completion_tokens", "max_tokens"]),
    "--preset": st.sampled_from(preset_names()),
    "--reasoning": st.sampled_from(["on", "off"]),
    "--timeout": st.floats(0.001, 1e5).map(repr),
    "--max-retries": st.integers(0, 100).map(str),
    "--retry-backoff": st.floats(0, 100).map(repr),
    "--retry-max-wait": st.integers(0, 100).map(str),
    "--rate-limit-patience": st.floats(0.5, 1e4).map(repr),
    "--max-requests-per-minute": st.sampled_from(["60", "0.5"]),
    "--max-tokens-per-minute": st.sampled_from(["1000"]),
    "--max-total-tokens": st.sampled_from(["1", "1000"]),
    "--extra-body-json": st.sampled_from(['{"top_k": 20}', "{}", '{"a": [1, {"b": null}]}']),
    "--retry-parse-failures": st.integers(0, 100).map(str),
    "--seed": st.integers(-(2**40), 2**40).map(str),
    "--repeats": st.integers(1, 1000).map(str),
    "--concurrency": st.integers(1, 4096).map(str),
}
TOKENS = st.lists(st.sampled_from(["<|end|>", "</s>", "<|end_of_box|>"]), max_size=3)
FLAGS = st.sets(st.sampled_from(["--no-smoke-check", "--batch"]))


@st.composite
def evaluate_argv(draw: Any) -> list[str]:
    args = ["--model", draw(st.sampled_from(["m", "org/x"])), "--base-url", URL]
    for flag, values in VALUES.items():
        if draw(st.booleans()):
            args += [flag, draw(values)]
    for token in draw(TOKENS):
        args += ["--strip-token", token]
    return args + sorted(draw(FLAGS))


def recorded(argv: list[str]) -> dict[str, Any]:
    opts = options_from_args(argv)
    bench = get_benchmark(opts.benchmark)
    preset = load_preset(opts.preset) if opts.preset else None
    return run_settings(opts, bench, parse_extra_body(opts.extra_body_json), preset, batch_prepare=False)


@settings(max_examples=150, deadline=None)
@given(evaluate_argv())
# found by it: the preset's field name won over a default one given on the command line
@example(
    ["--model", "m", "--base-url", URL, "--max-tokens-field", "max_tokens", "--preset", "openai-reasoning"]
)
def test_the_reproduced_command_line_records_the_same_settings(argv: list[str]) -> None:
    from evaluator.archive.plan import evaluate_args

    first = recorded(argv)
    again = evaluate_args({**first, "data": {}}, ["--data-files", "d/*.parquet"], [URL], "r")
    second = recorded(again)
    # how rows are batched is the reproducer's choice, like pacing and the spend guard
    for side in (first, second):
        for key in ("batch", "max_requests_per_minute", "max_tokens_per_minute", "max_total_tokens"):
            side["request_policy"].pop(key, None)
    assert second == first
    # and the runner reads back what was recorded
    settings_ = settings_from_config(RunConfig.from_dict(first), None)
    opts = options_from_args(argv)
    assert (settings_.seed, settings_.repeats, settings_.timeout_s) == (opts.seed, opts.repeats, opts.timeout)
    assert settings_.strip_tokens == tuple(dict.fromkeys(opts.strip_token))
    assert settings_.smoke_check is not opts.no_smoke_check


# --------------------------------------------------------------------- an option added in three files

EDITS = {
    "evaluation/options.py": [
        (
            '    click.option(\n        "--seed",\n',
            '    click.option("--seed-offset", cls=Recorded, record="seed_offset", type=int, default=None),\n'
            '    click.option(\n        "--seed",\n',
        ),
        ("    seed: int | None\n", "    seed: int | None\n    seed_offset: int | None\n"),
    ],
    "runfolder/runconfig.py": [
        ('"retry_parse_failures", "seed",', '"retry_parse_failures", "seed", "seed_offset",'),
        ('OMITTED_WHEN_NONE = ("servers",', 'OMITTED_WHEN_NONE = ("seed_offset", "servers",'),
        (
            "    seed: int | None = None\n",
            "    seed: int | None = None\n    seed_offset: int | None = None\n",
        ),
    ],
    "evaluation/runner.py": [
        ("    seed: int | None = None  #", "    seed_offset: int = 0\n    seed: int | None = None  #"),
        (
            "        seed=config.seed,\n",
            "        seed=config.seed,\n        seed_offset=config.seed_offset or 0,\n",
        ),
        ("derive_seed(s.seed, sample.sample_id", "derive_seed(s.seed + s.seed_offset, sample.sample_id"),
    ],
}


def package_with_seed_offset(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "prompts", src / "prompts")
    shutil.copytree(
        REPO / "evaluator", src / "evaluator", symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    for name, edits in EDITS.items():
        path = src / "evaluator" / name
        text = path.read_text()
        for old, new in edits:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        path.write_text(text)
    return src


def changed_files(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = [str(Path(a.name) / n) for n in cmp.diff_files + cmp.left_only + cmp.right_only]
    for sub in cmp.common_dirs:
        out += [str(Path(a.name) / p) for p in changed_files(a / sub, b / sub)]
    return out


def test_an_identity_option_added_in_three_files_is_recorded_checked_reproduced_and_swept(
    tmp_path: Path, data12: str
) -> None:
    src = package_with_seed_offset(tmp_path)
    assert sorted(changed_files(REPO / "evaluator", src / "evaluator")) == [
        "evaluator/evaluation/options.py",
        "evaluator/evaluation/runner.py",
        "evaluator/runfolder/runconfig.py",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCCOUNT_", "MODEL_API"))}
    env["PYTHONPATH"] = str(src)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], cwd=src, env=env, capture_output=True, text=True, timeout=240
        )

    root = tmp_path / "runs" / "r"
    with TestServer() as srv:
        common = ["-m", "evaluator.cli", "evaluate", "--model", "m", "--base-url", srv.base_url]
        common += ["--data-files", data12, "--run-root", str(root), "--limit", "2", "--seed", "5"]
        got = run(*common, "--seed-offset", "3")
        assert got.returncode == 0, got.stderr
        seeds = {(r["body"]["seed"]) for r in srv.requests()}
        refused = run(*common, "--seed-offset", "4")
    ids = [r["sample_id"] for r in records(root)]
    assert seeds == {derive_seed(8, sid, 0) for sid in ids}, "the option reached the request bytes"
    assert json.loads((root / "run_config.json").read_text())["seed_offset"] == 3, "recorded"
    assert refused.returncode == 2 and "seed_offset" in refused.stderr, refused.stderr  # part of the identity
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        f'name = "s"\n\n[[runs]]\nname = "a"\nmodel = "m"\nbase_url = "{URL}"\nseed_offset = 3\n'
    )
    script = (
        "import json, sys\n"
        "from evaluator.archive.plan import evaluate_args\n"
        "from evaluator.cli.main import evaluate_cmd\n"
        "from evaluator.study.sweep_file import load_sweep, option_specs, run_args\n"
        "config = json.load(open(sys.argv[1]))\n"
        "specs = option_specs(evaluate_cmd.params)\n"
        "print(json.dumps([evaluate_args(config, [], ['URL'], 'new'),"
        " run_args(load_sweep(sys.argv[2], specs).runs[0], specs, '.')]))\n"
    )
    got = run("-c", script, str(root / "run_config.json"), str(sweep))
    assert got.returncode == 0, got.stderr
    reproduced, swept = json.loads(got.stdout)
    for argv in (reproduced, swept):
        assert argv[argv.index("--seed-offset") + 1] == "3", argv
