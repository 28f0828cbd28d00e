"""The batch API's calls (evaluator/request/batch_api.py) within a whole-request deadline (trust3 #5): each
attempt of a dripping GET /batches/{id} ends at --timeout (before: it hung for good)."""

from __future__ import annotations

import time
from pathlib import Path

from support.batch_emulator import BatchEmulator
from support.batchrun import evaluate


def test_a_dripping_poll_is_a_timeout_of_each_attempt(tmp_path: Path, data12: str) -> None:
    with BatchEmulator({"step_s": 0.02, "drip_polls": True}) as emu:
        root = tmp_path / "run"
        t0 = time.monotonic()
        res = evaluate(emu.base_url, data12, root, "--batch", "--timeout", "1", "--max-retries", "1")
        took = time.monotonic() - t0
    assert res.returncode == 3, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert "polling batch" in res.stderr and "no whole answer within the deadline" in res.stderr, res.stderr
    assert took < 2 * 1 + 20, took
