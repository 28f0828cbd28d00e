"""docs/providers.md's recipes, run by the real CLI against each provider's loopback emulator.

Each recipe must complete (every row ok, the records right); each provider's default command, where
the provider refuses the protocol's request shape, must stop at once with one line that quotes the
server and names the fixing flag.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import launch
from support.cli import REPO, SCORE, read_records
from support.datagen import (
    countqa_rows,
    doccount_row,
    image_bytes,
    write_countqa,
    write_doccount,
)
from support.provider_emulators import (
    VLLM,
    AnthropicCompat,
    GeminiCompat,
    InlineThinkHost,
    Moonshot,
    OpenAIReasoning,
    OpenRouter,
    ProviderEmulator,
    Rules,
    Zhipu,
)
from support.recipes import OPENAI_RECIPE, ROWS, assert_all_ok, chat_bodies, evaluate, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def data(tmp_path: Path) -> str:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", ROWS)
    return str(tmp_path / "data" / "*.parquet")


def test_moonshot_kimi_default_command_completes_with_reasoning_content(tmp_path: Path, data: str) -> None:
    for emu in serve(Moonshot()):
        res = evaluate(emu, data, tmp_path / "r", "kimi-k2.5", "--concurrency", "1")
        records = assert_all_ok(tmp_path / "r", res)
        assert all(r["reasoning_text"].startswith("I scan") for r in records)
        bodies = chat_bodies(emu)
        assert all((b["temperature"], b["top_p"], b["max_tokens"]) == (1, 0.95, 32768) for b in bodies)


def test_vllm_with_reasoning_parser_separates_the_reasoning(tmp_path: Path, data: str) -> None:
    for emu in serve(VLLM(reasoning_parser=True)):
        res = evaluate(emu, data, tmp_path / "r", "Qwen/Qwen3.6-35B-A3B", backend="vllm")
        records = assert_all_ok(tmp_path / "r", res)
        assert all(r["reasoning_text"].startswith("I scan") for r in records)
        assert all(r["response_text"].startswith("I see ") for r in records)


@pytest.mark.parametrize(
    "rules",
    [VLLM(reasoning_parser=False), InlineThinkHost(prefix="/v1"), InlineThinkHost(prefix="/inference/v1")],
    ids=["vllm-no-parser", "together", "fireworks"],
)
def test_inline_think_replies_keep_the_visible_text_as_sent(tmp_path: Path, data: str, rules: Rules) -> None:
    for emu in serve(rules):
        res = evaluate(emu, data, tmp_path / "r", "Qwen/Qwen3.6-35B-A3B")
        records = assert_all_ok(tmp_path / "r", res)
        for r in records:
            assert r["response_text"].startswith("<think>\nI scan") and r["reasoning_text"] is None
            assert r["inline_think"] is True
        config = json.loads((tmp_path / "r" / "run_config.json").read_text())
        assert config["backend"] == "api"


def test_vllm_qwen35_without_parser_is_flagged_by_its_lone_closing_tag(tmp_path: Path, data: str) -> None:
    for emu in serve(VLLM(reasoning_parser=False, template="qwen3.5")):
        res = evaluate(emu, data, tmp_path / "r", "Qwen/Qwen3.5-397B-A17B", backend="vllm")
        records = assert_all_ok(tmp_path / "r", res)
        assert all(r["inline_think"] and "<think>" not in r["response_text"] for r in records)
        score = launch.run(
            [*SCORE, "--run-root", str(tmp_path / "r")],
            capture_output=True,
            text=True,
            cwd=str(REPO),
            timeout=100,
        )
        assert score.returncode == 0, score.stderr
        summary = (tmp_path / "r" / "scores" / "summary.md").read_text()
        assert "3 response(s) carry a &lt;think> block" in summary and "--reasoning-parser" in summary


# --------------------------------------------------------------------------- refused defaults


def assert_stopped_fast(
    run: Path, res: subprocess.CompletedProcess[str], emu: ProviderEmulator, *expect: str
) -> None:
    """The run stopped after at most the concurrency's worth of requests, with one line naming the fix."""
    assert res.returncode != 0
    assert len(chat_bodies(emu)) <= 2  # --concurrency 2
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("error: stopped before any request succeeded"), res.stderr
    for text in expect:
        assert text in line, line
    records = read_records(run)
    assert len(records) <= 2 and not any(r["status"] == "ok" for r in records)


@pytest.mark.parametrize("model", ["gpt-5.5", "gpt-5.2"])
def test_openai_default_command_stops_with_the_fixing_flag(tmp_path: Path, data: str, model: str) -> None:
    for emu in serve(OpenAIReasoning()):
        res = evaluate(emu, data, tmp_path / "r", model)
        assert_stopped_fast(
            tmp_path / "r",
            res,
            emu,
            "HTTP 400",
            "Unsupported parameter: 'max_tokens' is not supported with this model.",
            "--max-tokens-field max_completion_tokens",
        )
    for emu in serve(OpenAIReasoning()):  # fixing only the field name brings the next refusal, and its flag
        res = evaluate(emu, data, tmp_path / "r2", model, "--max-tokens-field", "max_completion_tokens")
        assert_stopped_fast(tmp_path / "r2", res, emu, "'top_p' is not supported", "--top-p none")


@pytest.mark.parametrize("model", ["gpt-5.5", "gpt-5.2"])
@pytest.mark.parametrize("flags", [OPENAI_RECIPE, ("--preset", "openai-reasoning")], ids=["flags", "preset"])
def test_openai_recipe_completes_with_reasoning_tokens(tmp_path: Path, data: str, model: str, flags) -> None:
    for emu in serve(OpenAIReasoning()):
        records = assert_all_ok(tmp_path / "r", evaluate(emu, data, tmp_path / "r", model, *flags))
        for body in chat_bodies(emu):
            assert body["max_completion_tokens"] == 32768 and body["temperature"] == 1
            assert "max_tokens" not in body and "top_p" not in body
        for r in records:
            assert r["reasoning_text"] is None
            assert r["usage"]["reasoning_tokens"] == 48 and r["usage"]["cached_tokens"] == 0
        sampling = json.loads((tmp_path / "r" / "run_config.json").read_text())["sampling"]
        assert sampling["top_p"] is None and sampling["max_tokens_field"] == "max_completion_tokens"


def test_anthropic_default_stops_and_recipe_completes(tmp_path: Path, data: str) -> None:
    for emu in serve(AnthropicCompat()):
        res = evaluate(emu, data, tmp_path / "r", "claude-sonnet-4-5")
        assert_stopped_fast(tmp_path / "r", res, emu, "cannot both be specified", "--top-p none")
    for emu in serve(AnthropicCompat()):
        records = assert_all_ok(
            tmp_path / "ok", evaluate(emu, data, tmp_path / "ok", "claude-sonnet-4-5", "--top-p", "none")
        )
        assert all(
            "top_p" not in b and b["temperature"] == 1 and b["max_tokens"] == 32768 for b in chat_bodies(emu)
        )
        assert all(r["reasoning_text"] is None for r in records)


@pytest.mark.parametrize(
    ("rules", "model"), [(GeminiCompat(), "gemma-4-31b-it"), (Zhipu(), "glm-4.6v")], ids=["gemini", "zhipu"]
)
def test_path_base_urls_are_used_as_given(tmp_path: Path, data: str, rules: Rules, model: str) -> None:
    for emu in serve(rules):
        records = assert_all_ok(tmp_path / "r", evaluate(emu, data, tmp_path / "r", model))
        chat = [q["path"] for q in emu.requests() if q["body"] is not None]
        assert set(chat) == {rules.prefix + "/chat/completions"} and len(chat) == len(ROWS)
        assert all(
            (b["temperature"], b["top_p"], b["max_tokens"]) == (1, 0.95, 32768) for b in chat_bodies(emu)
        )
        want = "I scan" if rules.reasoning_style else None
        assert all(
            (r["reasoning_text"] or None if want is None else r["reasoning_text"][:6]) == want
            for r in records
        )


def test_openrouter_require_parameters(tmp_path: Path, data: str) -> None:
    require = ("--extra-body-json", '{"provider": {"require_parameters": true}}')
    for emu in serve(OpenRouter()):
        records = assert_all_ok(
            tmp_path / "r", evaluate(emu, data, tmp_path / "r", "qwen/qwen3.5-397b-a17b", *require)
        )
        assert all(
            r["reasoning_text"].startswith("I scan") and r["usage"]["reasoning_tokens"] == 48 for r in records
        )
        assert all(q["dropped"] == [] for q in emu.requests() if q["body"] is not None)
    # a routed model without top_p: the refusal names the flags to choose from, instead of a silent drop
    for emu in serve(OpenRouter(supported=frozenset({"temperature", "max_tokens"}))):
        res = evaluate(emu, data, tmp_path / "r2", "openai/gpt-5.2", *require)
        assert_stopped_fast(tmp_path / "r2", res, emu, "HTTP 404", "No endpoints found", "--top-p none")
        records = assert_all_ok(
            tmp_path / "r3",
            evaluate(emu, data, tmp_path / "r3", "openai/gpt-5.2", *require, "--top-p", "none"),
        )


# --------------------------------------------------------------------------- CountQA defaults


@pytest.fixture
def countqa_data(tmp_path: Path) -> str:
    write_countqa(tmp_path / "cqa" / "test-0.parquet", countqa_rows(2))
    return str(tmp_path / "cqa" / "*.parquet")


def test_countqa_sends_the_reference_adapters_defaults(tmp_path: Path, countqa_data: str) -> None:
    for emu in serve(VLLM(reasoning_parser=False), default_reply="10", reasoning="Row 1 has 12."):
        res = evaluate(emu, countqa_data, tmp_path / "r", "Qwen/Qwen3.6-35B-A3B", "--benchmark", "countqa")
        assert res.returncode == 0, res.stderr
        for body in chat_bodies(emu):  # EvalScope's service default: {"temperature": 0.0}, nothing else
            assert {k: v for k, v in body.items() if k not in ("model", "messages")} == {"temperature": 0.0}
        records = read_records(tmp_path / "r")
        assert len(records) == 3 and all(r["status"] == "ok" for r in records)
        # the leading think block is stripped before parsing, as the reference adapter does
        assert [r["parsed_answer"] for r in records] == [10, 10, 10]
        assert all(r["response_text"].startswith("<think>\nRow 1 has 12.") for r in records)  # kept as sent
        assert [r["sample_id"] for r in records if r["correct"]] == ["countqa-00001-q0"]  # its truth is 10


def test_countqa_on_an_openai_reasoning_model_needs_temperature_none(
    tmp_path: Path, countqa_data: str
) -> None:
    for emu in serve(OpenAIReasoning()):
        res = evaluate(emu, countqa_data, tmp_path / "r", "gpt-5.5", "--benchmark", "countqa")
        assert_stopped_fast(tmp_path / "r", res, emu, "does not support 0.0", "--temperature none")
    for emu in serve(OpenAIReasoning(), default_reply="12"):
        flags = ("--benchmark", "countqa", "--temperature", "none")
        res = evaluate(emu, countqa_data, tmp_path / "ok", "gpt-5.5", *flags)
        assert res.returncode == 0, res.stderr
        assert all(set(b) == {"model", "messages"} for b in chat_bodies(emu))


def test_claude_refusing_one_oversized_page_fails_that_row_only(tmp_path: Path) -> None:
    rows = [*ROWS[:2], doccount_row(2, image_bytes(2, size=(16, 8001)))]
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    for emu in serve(AnthropicCompat()):
        res = evaluate(
            emu,
            str(tmp_path / "d" / "*.parquet"),
            tmp_path / "r",
            "claude-sonnet-4-5",
            "--top-p",
            "none",
            "--concurrency",
            "1",
        )
        by_id = {r["sample_id"]: r for r in read_records(tmp_path / "r")}
        assert [by_id[r["sample_id"]]["status"] for r in rows] == ["ok", "ok", "request_error"], res.stderr
        assert "exceed max allowed size: 8000 pixels" in by_id[rows[2]["sample_id"]]["request_error"]
        assert "stopped before any request succeeded" not in res.stderr
