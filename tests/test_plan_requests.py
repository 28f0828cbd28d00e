"""The request side of `doccount sweep --plan` (evaluator/study/plan_text.py): what each run sends and
the rate each request needs, through the command line and on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cli import REPO, run_cli

from evaluator.study.plan_text import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    request_lines,
    request_side,
)

SWEEP = """name = "req"
benchmark = "doccount"
[defaults]
concurrency = 16
reasoning = "on"
[serve]
gpus = [0]
command = ["vllm", "serve"]

[[runs]]
name = "mimo"
model = "org/mimo"
max_tokens = 24576
serve = { gpus = 1, args = ["--max-model-len", "32768"] }

[[runs]]
name = "gpt"
model = "gpt-5.2"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
preset = "openai-reasoning"
extra_body = { reasoning_effort = "medium" }

[[runs]]
name = "slow"
model = "m"
base_url = "http://127.0.0.1:9/v1"
reasoning = "off"
concurrency = 4
timeout = 300
max_tokens = "none"
"""


def rows(out: str) -> dict[str, list[str]]:
    lines = out.split("requests:", 1)[1].splitlines()
    return {ln.split()[0]: ln.split() for ln in lines if ln.startswith("  ") and not ln.startswith("   ")}


def test_the_plan_shows_each_runs_request_side(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--plan")
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    assert got["run"] == [
        "run",
        "max_tokens",
        "reasoning",
        "preset",
        "at",
        "once",
        "timeout",
        "tokens/s",
        "all",
    ]
    # the lowered max_tokens: 24,576 in 600 s is 41.0 tokens/s, 655 over 16 at once
    assert got["mimo"] == ["mimo", "24576", "on", "-", "16", "600", "s", "41.0", "655"]
    # the preset's field, and the effort sent in the extra body, on the line under the run
    assert "      max_tokens sent as: max_completion_tokens" in res.stdout.splitlines()
    assert got["gpt"] == [
        "gpt",
        "32768",
        "on",
        "openai-reasoning",
        "16",
        "600",
        "s",
        "54.6",
        "874",
    ]
    assert '      extra body: {"reasoning_effort":"medium"}' in res.stdout.splitlines()
    assert got["slow"] == ["slow", "none", "off", "-", "4", "300", "s", "-", "-"]
    assert all(len(ln) <= 100 for ln in res.stdout.split("requests:", 1)[1].splitlines())


def test_the_shipped_table5_plan_shows_what_makes_its_numbers_comparable() -> None:
    res = run_cli(
        "sweep", str(REPO / "sweeps" / "doccount-paper-table5.toml"), "--plan", "--run-root", "/nonexistent/r"
    )
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    assert got["mimo-vl-7b"][1] == "24576" and got["internvl3.5-30b-a3b"][2] == "off"
    assert (
        got["claude-sonnet-4.5"][3] == "anthropic-compat" and "sent as: max_completion_tokens" in res.stdout
    )
    assert '"budget_tokens":16000' in res.stdout


def test_strip_tokens_and_extra_body_are_escaped_for_a_terminal() -> None:
    side = request_side("r", {"strip_token": ["<|end_of_box|>", "\x1b[2J"], "extra_body": {"k\n": "\x07"}})
    lines = request_lines([side])
    assert '      strip tokens: "<|end_of_box|>" "\\u001b[2J"' in lines
    assert '      extra body: {"k\\n":"\\u0007"}' in lines  # keys are JSON too
    assert not any(ch in "".join(lines) for ch in "\x1b\x07")


def test_the_defaults_are_evaluates_own() -> None:
    from evaluator.cli.main import evaluate_cmd

    defaults = {p.name: p.default for p in evaluate_cmd.params}
    assert defaults["concurrency"] == DEFAULT_CONCURRENCY and defaults["timeout"] == DEFAULT_TIMEOUT
    side = request_side("r", {})
    assert (side.max_tokens, side.concurrency, side.timeout_s, side.reasoning) == (32768, 16, 600.0, None)


@settings(max_examples=100, deadline=None)
@given(max_tokens=st.integers(1, 1 << 20), timeout=st.floats(0.5, 7200), concurrency=st.integers(1, 4096))
def test_the_rate_finishes_max_tokens_within_the_timeout(
    max_tokens: int, timeout: float, concurrency: int
) -> None:
    side = request_side("r", {"max_tokens": max_tokens, "timeout": timeout, "concurrency": concurrency})
    assert side.tokens_per_s is not None
    assert side.tokens_per_s * timeout == pytest.approx(max_tokens)
