"""docs/providers.md's recipes against the provider emulators: the evaluate command line, the emulator
serving ROWS, and the checks every recipe test makes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import launch
from support.cli import EVALUATE, FAST_RETRIES, REPO, clean_env, eval_args, read_records
from support.datagen import doccount_reply, doccount_rows
from support.provider_emulators import ProviderEmulator, Rules

ROWS = doccount_rows(3)


def evaluate(emu: ProviderEmulator, data: str, run: Path, model: str, *flags: str, backend: str = "api"):
    cmd = [*EVALUATE, "--backend", backend, *eval_args(emu.base_url, data, run, model), *FAST_RETRIES]
    cmd += ["--concurrency", "2", "--timeout", "20", *flags]
    env = clean_env(MODEL_API_KEY="sk-emulator-SECRET-key")
    return launch.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO), timeout=100)


def serve(rules: Rules, **kw: Any) -> Iterator[ProviderEmulator]:
    with ProviderEmulator(rules, answers=doccount_reply(ROWS), **kw) as emu:
        yield emu


def chat_bodies(emu: ProviderEmulator) -> list[dict[str, Any]]:
    return [q["body"] for q in emu.requests() if q["path"].endswith("/chat/completions")]


def assert_all_ok(
    run: Path, res: subprocess.CompletedProcess[str], n: int = len(ROWS)
) -> list[dict[str, Any]]:
    assert res.returncode == 0, res.stderr
    records = read_records(run)
    assert len(records) == n and {r["sample_id"] for r in records} == {r["sample_id"] for r in ROWS}
    assert all(r["status"] == "ok" and r["correct"] for r in records), records
    assert "sk-emulator-SECRET-key" not in (run / "run_config.json").read_text()
    return records


OPENAI_RECIPE = ("--top-p", "none", "--max-tokens-field", "max_completion_tokens")
