"""Batch-mode runs through the real CLI against the Files/Batches emulator: the evaluate command with
quick polling, the records and the batch ledger a run folder holds, an interrupted batch run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.batch_emulator import BatchEmulator
from support.cli import REPO, clean_env, run_cli

FAST = ["--batch-poll-s", "0.05", "--retry-backoff", "0.01", "--retry-max-wait", "0.05"]


def evaluate(base_url: str, data: str, root: Path, *extra: str, env: dict[str, str] | None = None):
    args = ["evaluate", "--model", "test-model", "--base-url", base_url, "--data-files", data]
    return run_cli(*args, "--run-root", str(root), *FAST, *extra, env=env)


def records(root: Path) -> list[dict[str, Any]]:
    path = root / "responses.partial.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def ledger(root: Path) -> dict[str, Any]:
    return json.loads((root / "batches.json").read_text())


def interrupt_batch_run(emu: BatchEmulator, data: str, root: Path) -> str:
    """`evaluate --batch` in the background, Ctrl-C once its first batch is in progress; its stderr."""
    cmd = [
        sys.executable,
        "-m",
        "evaluator.cli",
        "evaluate",
        "--model",
        "test-model",
        "--base-url",
        emu.base_url,
    ]
    cmd += ["--data-files", data, "--run-root", str(root), "--batch", *FAST]
    proc = subprocess.Popen(cmd, env=clean_env(), cwd=str(REPO), stderr=subprocess.PIPE, text=True)
    emu.wait_until(lambda s: s["batches"] and s["batches"][0]["status"] == "in_progress")
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    return err
