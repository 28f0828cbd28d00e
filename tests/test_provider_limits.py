"""Providers' rate-limit and quota replies, from their emulators, through the real CLI: a quota stops the
run (finished rows kept, a resume continues), Gemini's body-only retryDelay and OpenRouter's transient
402 with Retry-After are waited out."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import read_records
from support.datagen import write_doccount
from support.provider_emulators import GeminiCompat, OpenAIReasoning, OpenRouter, ProviderEmulator
from support.recipes import OPENAI_RECIPE, ROWS, assert_all_ok, chat_bodies, evaluate, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def data(tmp_path: Path) -> str:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", ROWS)
    return str(tmp_path / "data" / "*.parquet")


def first_retry(emu: ProviderEmulator) -> tuple[float, float]:
    """Arrival times of the first refused request and of the next request for the same image."""
    reqs = [q for q in emu.requests() if q["body"] is not None]
    refused = next(q for q in reqs if q["status"] != 200)
    again = next(q for q in reqs if q["n"] > refused["n"] and q["image_sha256"] == refused["image_sha256"])
    return refused["time"], again["time"]


def test_openai_exhausted_quota_stops_and_a_resume_continues(tmp_path: Path, data: str) -> None:
    run = tmp_path / "r"
    for emu in serve(OpenAIReasoning(), script=["insufficient_quota"] * 2):
        res = evaluate(emu, data, run, "gpt-5.5", *OPENAI_RECIPE)
        assert res.returncode != 0 and "quota" in res.stderr.strip().splitlines()[-1].lower(), res.stderr
        assert len(chat_bodies(emu)) <= 3  # not five retries per row
        assert not any(r["status"] == "ok" for r in read_records(run))
    for emu in serve(OpenAIReasoning()):
        res = evaluate(emu, data, run, "gpt-5.5", *OPENAI_RECIPE)
        assert res.returncode == 0, res.stderr
        done = {r["sample_id"] for r in read_records(run) if r["status"] == "ok"}
        assert done == {r["sample_id"] for r in ROWS}


@pytest.mark.parametrize("list_body", [False, True], ids=["object", "list"])
def test_gemini_retry_delay_in_the_body_is_honoured(tmp_path: Path, data: str, list_body: bool) -> None:
    rules = GeminiCompat(list_body=list_body, retry_delay="0.6s")
    for emu in serve(rules, script=["rate_limit"]):
        assert_all_ok(tmp_path / "r", evaluate(emu, data, tmp_path / "r", "gemma-4-31b-it"))
        refused_at, again_at = first_retry(emu)
        assert again_at - refused_at >= 0.5  # the body's 0.6 s, not the 0.01 s test backoff
        retried = [r for r in read_records(tmp_path / "r") if r["retry_errors"]]
        assert len(retried) == 1 and retried[0]["retry_errors"][0]["status_code"] == 429


def test_gemini_daily_quota_stops_the_run(tmp_path: Path, data: str) -> None:
    for emu in serve(GeminiCompat(retry_delay="0.1s"), script=["daily_quota"] * 3):
        res = evaluate(emu, data, tmp_path / "r", "gemma-4-31b-it")
        assert res.returncode != 0 and "quota" in res.stderr.lower(), res.stderr
        assert len(chat_bodies(emu)) <= 3
        assert not any(r["status"] == "ok" for r in read_records(tmp_path / "r"))


def test_openrouter_transient_402_is_retried_after_its_retry_after(tmp_path: Path, data: str) -> None:
    require = ("--extra-body-json", '{"provider": {"require_parameters": true}}')
    for emu in serve(OpenRouter(), script=["in_flight_budget"]):
        assert_all_ok(tmp_path / "r", evaluate(emu, data, tmp_path / "r", "qwen/qwen3.5-397b-a17b", *require))
        refused_at, again_at = first_retry(emu)
        assert again_at - refused_at >= 0.9  # Retry-After: 1
        retried = [r for r in read_records(tmp_path / "r") if r["retry_errors"]]
        assert len(retried) == 1 and retried[0]["retry_errors"][0]["status_code"] == 402
