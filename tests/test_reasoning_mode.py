"""The reasoning mode, declared (`--reasoning on|off`) and observed (docs/evaluate.md "Reasoning mode").

Loopback stand-in servers for each signal a response can show reasoning by: a reasoning text apart
(`message.reasoning`, `message.reasoning_content`), an inline `<think>` block, hidden reasoning tokens in
`usage` only; and for none. The smoke stop (exit 2, one line, at most concurrency + 4 requests), runs that
go to the end, the summary's and the leaderboard's reasoning blocks, run_config.json, and the pure test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cli import FAST_RETRIES, eval_args, run_cli
from support.cli import read_records as records
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.core.records import ResponseRecord, Sampling, Usage

pytestmark = pytest.mark.timeout(240)

ROWS = doccount_rows(12)
HIDDEN = {"completion_tokens_details": {"reasoning_tokens": 37}}
THOUGHT = "Counting the tables one by one: the header, the body."
# the stand-in's config for each signal (openai_test_server: reasoning, reasoning_field, usage_extra)
SIGNALS: dict[str, dict[str, Any]] = {
    "reasoning": {"reasoning": THOUGHT},
    "reasoning_content": {"reasoning": THOUGHT, "reasoning_field": "reasoning_content"},
    "inline_think": {},  # the answers themselves start with a think block (thinking())
    "hidden_tokens": {"usage_extra": HIDDEN},
}


def thinking(rows: list[dict[str, Any]], block: str = f"<think>{THOUGHT}</think>\n") -> dict[str, str]:
    return {k: block + v for k, v in doccount_reply(rows).items()}


def serve(server: Any, signal: str | None) -> None:
    """Configure the stand-in to answer every row right, showing reasoning by `signal` (None: no reasoning)."""
    answers = thinking(ROWS) if signal == "inline_think" else doccount_reply(ROWS)
    server.set_config({"answers": answers, "latency_s": 0.05, **SIGNALS.get(signal or "", {})})


@pytest.fixture
def data(tmp_path: Path) -> str:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", ROWS)
    return str(tmp_path / "data" / "*.parquet")


def evaluate(server: Any, data: str, run: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
    return run_cli("evaluate", *eval_args(server.base_url, data, run), *FAST_RETRIES, *extra, env=env)


def chats(server: Any) -> list[dict[str, Any]]:
    return [r for r in server.requests() if r["path"].endswith("/chat/completions")]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def summary(run: Path) -> dict[str, Any]:
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    return json.loads((run / "scores" / "summary.json").read_text())


# ----------------------------------------------------------------------------- the smoke stop


def test_on_without_reasoning_stops_within_concurrency_plus_four_and_resumes(tmp_path, data, server) -> None:
    serve(server, None)
    run = tmp_path / "r"
    res = evaluate(server, data, run, "--reasoning", "on", "--concurrency", "3")
    assert res.returncode == 2, res.stderr
    [line] = error_lines(res.stderr)
    assert line.startswith("error: reasoning declared on, but 0 of 4 answered responses showed reasoning")
    assert "no new request was sent" in line
    assert "--reasoning-parser" in line and "enable_thinking" in line and "reasoning field" in line
    sent = chats(server)
    assert 4 <= len(sent) <= 3 + 4
    recs = records(run)  # every request sent is recorded (the ones in flight finished)
    assert len(recs) == len(sent) and all(r["status"] == "ok" for r in recs) and len(recs) < len(ROWS)
    # the server fixed (a reasoning parser now returns the reasoning apart): the same command resumes
    serve(server, "reasoning")
    server.reset()
    res = evaluate(server, data, run, "--reasoning", "on", "--concurrency", "3")
    assert res.returncode == 0, res.stderr
    assert len(chats(server)) == len(ROWS) - len(recs)  # answered rows were kept, not sent again
    assert summary(run)["reasoning"] == {
        "declared": "on",
        "with_reasoning": len(ROWS) - len(recs),
        "answered": len(ROWS),
        "observed_share": (len(ROWS) - len(recs)) / len(ROWS),
        "observable": True,
    }


@pytest.mark.parametrize("concurrency", [2, 8])
def test_the_stop_spends_at_most_concurrency_plus_four_requests(tmp_path, server, concurrency) -> None:
    rows = doccount_rows(60)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.set_config({"answers": doccount_reply(rows), "latency_s": 0.1})
    res = run_cli(
        "evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), tmp_path / "r"),
        "--reasoning", "on", "--concurrency", str(concurrency),
    )  # fmt: skip
    assert res.returncode == 2 and len(error_lines(res.stderr)) == 1, res.stderr
    assert 4 <= len(chats(server)) <= concurrency + 4
    assert len(records(tmp_path / "r")) == len(chats(server))


@pytest.mark.parametrize("signal", sorted(SIGNALS))
def test_on_with_each_signal_runs_to_the_end(tmp_path, data, server, signal) -> None:
    serve(server, signal)
    run = tmp_path / "r"
    res = evaluate(server, data, run, "--reasoning", "on", "--concurrency", "3")
    assert res.returncode == 0, res.stderr
    assert not error_lines(res.stderr) and len(chats(server)) == len(ROWS)
    assert all(r["correct"] for r in records(run))
    block = {"declared": "on", "with_reasoning": 12, "answered": 12, "observed_share": 1.0}
    block["observable"] = True
    assert summary(run)["reasoning"] == block


def test_off_with_reasoning_stops_naming_what_was_seen(tmp_path, data, server) -> None:
    serve(server, "reasoning_content")
    res = evaluate(server, data, tmp_path / "r", "--reasoning", "off", "--concurrency", "1")
    assert res.returncode == 2, res.stderr
    [line] = error_lines(res.stderr)
    assert line.startswith(
        "error: reasoning declared off, but 4 of 4 answered responses showed reasoning (4 with a reasoning "
        "text, 0 with reasoning tokens, 0 with a <think> or <thought> block)"
    )
    assert "enable_thinking" in line and "--reasoning on" in line
    assert len(chats(server)) == 4 and len(records(tmp_path / "r")) == 4  # concurrency 1: nothing more


def test_off_takes_an_empty_think_block_and_lying_types_as_no_reasoning(tmp_path, data, server) -> None:
    """Qwen3's template with thinking off leaves an empty block; a string or a bool is not a token count."""
    lying = {"completion_tokens_details": {"reasoning_tokens": "512"}}
    server.set_config({"answers": thinking(ROWS, "<think>\n\n</think>\n\n"), "usage_extra": lying})
    res = evaluate(server, data, tmp_path / "r", "--reasoning", "off")
    assert res.returncode == 0, res.stderr
    assert summary(tmp_path / "r")["reasoning"]["with_reasoning"] == 0


def test_on_is_not_met_by_one_reasoning_answer_after_the_first_four(tmp_path, server) -> None:
    """Only the first 4 answered responses decide; a later one that reasons does not matter, and request
    errors are not answered responses."""
    rows = doccount_rows(8)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    answers = doccount_reply(rows)
    answers[rows[6]["image_sha256"]] = f"<think>{THOUGHT}</think>" + answers[rows[6]["image_sha256"]]
    script = {rows[0]["image_sha256"]: ["500", "500"]}
    server.set_config({"answers": answers, "script": script})
    run = tmp_path / "r"
    res = run_cli(
        "evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), run),
        *FAST_RETRIES, "--max-retries", "1", "--reasoning", "on", "--concurrency", "1",
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    statuses = [r["status"] for r in records(run)]
    assert statuses == ["request_error", "ok", "ok", "ok", "ok"]


@pytest.mark.parametrize("signal", [None, "reasoning"])
def test_undeclared_never_stops(tmp_path, data, server, signal) -> None:
    serve(server, signal)
    run = tmp_path / "r"
    res = evaluate(server, data, run, "--concurrency", "2")
    assert res.returncode == 0, res.stderr
    assert len(chats(server)) == len(ROWS)
    config = json.loads((run / "run_config.json").read_text())
    assert "reasoning" not in config  # as before the option existed
    shown = 12 if signal else 0
    assert summary(run)["reasoning"] == {
        "declared": None,
        "with_reasoning": shown,
        "answered": 12,
        "observed_share": shown / 12,
        "observable": True,
    }


# ----------------------------------------------------------------------------- declared and recorded


def test_env_declares_and_run_config_keeps_one_mode_per_folder(tmp_path, data, server) -> None:
    serve(server, "hidden_tokens")
    run = tmp_path / "r"
    res = evaluate(server, data, run, "--limit", "6", env={"REASONING": "on"})
    assert res.returncode == 0, res.stderr
    assert json.loads((run / "run_config.json").read_text())["reasoning"] == "on"
    res = evaluate(server, data, run, "--reasoning", "off")
    assert res.returncode == 2
    [line] = error_lines(res.stderr)
    assert "declared reasoning mode (--reasoning on, now --reasoning off)" in line and "--run-name" in line
    res = evaluate(server, data, run, "--reasoning", "on")  # the same mode continues the folder
    assert res.returncode == 0, res.stderr
    assert len(records(run)) == 12


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_mode_that_is_not_on_or_off_is_refused(tmp_path, data, server, how) -> None:
    extra, env = (["--reasoning", "maybe"], None) if how == "flag" else ([], {"REASONING": "maybe"})
    res = evaluate(server, data, tmp_path / "r", *extra, env=env)
    assert res.returncode == 2
    assert "'maybe' is not one of 'on', 'off'" in res.stderr and not chats(server)


def test_a_sweep_file_passes_reasoning_on_and_refuses_another_word(tmp_path, data) -> None:
    sweep = tmp_path / "s.toml"
    body = f'name = "s"\ndata_files = "{data}"\n\n[defaults]\nreasoning = "on"\n'
    run = '\n[[runs]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
    sweep.write_text(body + run + 'reasoning = "sometimes"\n')
    res = run_cli("sweep", str(sweep), "--run-root", str(tmp_path / "runs"), "--plan")
    assert res.returncode == 2
    [line] = error_lines(res.stderr)
    assert f"{sweep}:11:" in line and "`reasoning`: 'sometimes' is not one of 'on', 'off'" in line
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import load_sweep, option_specs, run_args

    sweep.write_text(body + run)
    specs = option_specs(evaluate_cmd.params)
    args = run_args(load_sweep(sweep, specs).runs[0], specs, tmp_path)
    assert args[args.index("--reasoning") + 1] == "on"


# ----------------------------------------------------------------------------- the pure test (evaluator.data.reasoning)


def record(text: Any = None, reasoning: Any = None, tokens: Any = None, status: str = "ok") -> ResponseRecord:
    return ResponseRecord(
        sample_id="s", benchmark="doccount", groups={}, ground_truth=1, model="m", backend="api",
        sampling=Sampling(1.0, 0.95, 10), started_at="t", finished_at="t", status=status,  # type: ignore[arg-type]
        response_text=text, reasoning_text=reasoning, usage=Usage(reasoning_tokens=tokens),
    )  # fmt: skip


blank = st.text(alphabet=" \n\t\r", max_size=6)
words = st.text(min_size=1, max_size=40).filter(
    lambda t: t.strip() and "<think" not in t and "</think>" not in t and "thought>" not in t
)


@given(thought=words, answer=words, pad=blank)
def test_each_signal_alone_shows_reasoning(thought: str, answer: str, pad: str) -> None:
    from evaluator.data.reasoning import inline_think_text, shows_reasoning

    assert shows_reasoning(pad + thought, None, answer)
    assert shows_reasoning(None, 1, answer)
    assert shows_reasoning(None, None, f"<think>{pad}{thought}</think>{answer}")
    assert shows_reasoning(None, None, f"{thought}</think>{answer}")  # the block opened in the prompt
    assert shows_reasoning(None, None, f'<think signature="x">{thought}')  # cut off inside the block
    assert inline_think_text(f"<think>{pad}{thought}{pad}</think>{answer}") == thought.strip()


@given(answer=words, pad=blank, tokens=st.one_of(st.none(), st.integers(max_value=0), st.booleans(),
       st.floats(), st.text()), reasoning=st.one_of(st.none(), blank, st.integers(), st.lists(st.text())))  # fmt: skip
def test_blank_texts_empty_blocks_and_wrong_types_show_none(
    answer: str, pad: str, tokens: Any, reasoning: Any
) -> None:
    from evaluator.data.reasoning import shows_reasoning

    for content in (answer, f"<think>{pad}</think>{answer}", f"{pad}</think>{answer}", None, 3):
        assert not shows_reasoning(reasoning, tokens, content)


def test_smoke_check_decides_on_the_first_four_answered() -> None:
    from evaluator.data.reasoning import ReasoningMismatch, SmokeCheck

    on = SmokeCheck("on")
    assert on.see(record("a", status="request_error")) is None  # not an answered response
    assert [on.see(record("a")) for _ in range(3)] == [None] * 3
    stop = on.see(record("a"))
    assert isinstance(stop, ReasoningMismatch) and str(stop).startswith("reasoning declared on, but 0 of 4")
    assert on.see(record("a")) is None  # decided once
    on = SmokeCheck("on")
    assert [on.see(record(t)) for t in ("a", "a", "a", "<think>x</think>a")] == [None] * 4
    off = SmokeCheck("off")
    assert [off.see(record("a", tokens=t)) for t in (5, 5, 0, 5)] == [None] * 4
    off = SmokeCheck("off")
    seen = [off.see(record("a", reasoning="r", tokens=t)) for t in (5, 5, None, 5)]
    assert seen[:3] == [None] * 3 and "4 of 4" in str(seen[3]) and "3 with reasoning tokens" in str(seen[3])
    with pytest.raises(ValueError):
        SmokeCheck("maybe")


def test_verify_accepts_an_archive_scored_before_the_reasoning_key(tmp_path, data, server) -> None:
    """An archive whose summary.json has no `reasoning` (packed before the key existed) still verifies."""
    from support.archives import rewrite

    serve(server, None)
    run = tmp_path / "r"
    assert evaluate(server, data, run, "--quiet").returncode == 0
    assert "reasoning" in summary(run)
    (tmp_path / "bundle").mkdir()
    new = tmp_path / "new.tar.gz"
    res = run_cli(
        "archive", "--run-root", str(run), "--output", str(new), "--bundle-root", str(tmp_path / "bundle")
    )
    assert res.returncode == 0, res.stderr

    def drop_key(files: dict[str, bytes]) -> None:
        [name] = [n for n in files if n.endswith("scores/summary.json")]
        old = json.loads(files[name])
        del old["reasoning"]
        files[name] = json.dumps(old, sort_keys=True, indent=2).encode()

    old = rewrite(new, tmp_path / "old.tar.gz", drop_key, resum=True)
    res = run_cli("verify", str(old))
    assert res.returncode == 0, res.stdout + res.stderr


def test_reproduce_declares_the_archived_mode() -> None:
    from evaluator.archive.plan import evaluate_args

    config = {"benchmark": "doccount", "model": "m", "reasoning": "on"}
    args = evaluate_args(config, [], ["http://127.0.0.1:9/v1"], "r")
    assert args[args.index("--reasoning") + 1] == "on"
    assert "--reasoning" not in evaluate_args({"benchmark": "doccount", "model": "m"}, [], [], "r")


# ----------------------------------------------------------------------------- providers that show reasoning their way


GEMINI_THOUGHTS = json.dumps({"extra_body": {"google": {"thinking_config": {"include_thoughts": True}}}})
CLAUDE_THINKING = json.dumps({"thinking": {"type": "enabled", "budget_tokens": 2048}})


def test_gemini_thoughts_count_as_reasoning_shown(tmp_path, data) -> None:
    """Google's OpenAI layer returns Gemini's thoughts, when asked, as a <thought> block in the content
    (tests/support/provider_emulators.GeminiCompat): a run declared on goes to the end and counts them."""
    from support.provider_emulators import GeminiCompat, ProviderEmulator

    run = tmp_path / "r"
    with ProviderEmulator(GeminiCompat(), answers=doccount_reply(ROWS)) as emu:
        res = run_cli(
            "evaluate", *eval_args(emu.base_url, data, run, model="gemini-3-pro-preview"), *FAST_RETRIES,
            "--reasoning", "on", "--concurrency", "2", "--extra-body-json", GEMINI_THOUGHTS,
        )  # fmt: skip
        sent = [r for r in emu.requests() if r["path"].endswith("/chat/completions")]
    assert res.returncode == 0, res.stderr
    assert len(sent) == len(ROWS) and all(r["correct"] for r in records(run))
    assert records(run)[0]["response_text"].startswith("<thought>")
    block = summary(run)["reasoning"]
    assert block["with_reasoning"] == len(ROWS) and block["observable"] is True


def test_claude_through_its_preset_is_never_stopped_and_is_not_observable(tmp_path, data) -> None:
    """Anthropic's OpenAI SDK compatibility layer returns no thinking text and an empty
    completion_tokens_details (tests/support/provider_emulators.AnthropicCompat): through the
    anthropic-compat preset, a run declared on goes to the end; summary.json and the leaderboard say the
    mode cannot be observed. The same endpoint without the preset keeps the smoke stop."""
    from support.provider_emulators import AnthropicCompat, ProviderEmulator

    run, bare = tmp_path / "claude", tmp_path / "bare"
    with ProviderEmulator(AnthropicCompat(), answers=doccount_reply(ROWS)) as emu:
        common = [
            *FAST_RETRIES,
            "--reasoning",
            "on",
            "--concurrency",
            "2",
            "--extra-body-json",
            CLAUDE_THINKING,
        ]
        res = run_cli(
            "evaluate", *eval_args(emu.base_url, data, run, model="claude-opus-4-5"), *common,
            "--preset", "anthropic-compat",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert not error_lines(res.stderr)
        off = run_cli(
            "evaluate",
            *eval_args(emu.base_url, data, bare, model="claude-opus-4-5"),
            *common,
            "--top-p",
            "none",
        )
    assert off.returncode == 2 and error_lines(off.stderr)[0].startswith(
        "error: reasoning declared on, but 0 of 4"
    )
    assert len(records(run)) == len(ROWS)
    assert json.loads((run / "run_config.json").read_text())["preset"]["reasoning_observable"] is False
    assert summary(run)["reasoning"] == {
        "declared": "on",
        "with_reasoning": 0,
        "answered": len(ROWS),
        "observed_share": None,
        "observable": False,
    }
    assert "not observable" in (run / "scores" / "report.html").read_text()
    res = run_cli("leaderboard", str(run), "--output", str(tmp_path / "board"))
    assert res.returncode == 0, res.stderr
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert board["runs"][0]["reasoning"] == {"declared": "on", "observed_share": None, "observable": False}
    assert "on (not observable)" in (tmp_path / "board" / "index.html").read_text()


@given(thought=words, answer=words, pad=blank)
def test_a_thought_block_shows_reasoning_as_a_think_block_does(thought: str, answer: str, pad: str) -> None:
    from evaluator.data.reasoning import inline_think_text, shows_reasoning

    assert shows_reasoning(None, None, f"<thought>{pad}{thought}</thought>{answer}")
    assert inline_think_text(f"<thought>{pad}{thought}{pad}</thought>{answer}") == thought.strip()
    assert not shows_reasoning(None, None, f"<thought>{pad}</thought>{answer}")
