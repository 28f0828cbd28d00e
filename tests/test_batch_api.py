"""The batch API's calls (evaluator/request/batch_api.py) within a whole-request deadline (trust3 #5): each
attempt of a dripping GET /batches/{id} ends at --timeout (before: it hung for good)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest
from support.adversarial_server import RouteServer
from support.batch_emulator import BatchEmulator
from support.batchrun import evaluate

from evaluator.core.boundary import KeyFilter
from evaluator.request.batch_api import BatchAPI, BatchAPIError
from evaluator.request.client import make_client
from evaluator.request.ratelimit import RetryPolicy


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


def _api(base_url: str, timeout_s: float) -> BatchAPI:
    client = make_client(base_url, None, timeout_s, 1)
    return BatchAPI(client, base_url, KeyFilter(None), RetryPolicy(max_retries=0))


@pytest.mark.parametrize(
    ("how", "said"), [("drip", "no whole answer within the deadline"), ("huge", "over 8 MiB cap")]
)
def test_a_download_ends_at_its_deadline_or_cap(how: str, said: str) -> None:
    async def download(api: BatchAPI) -> None:
        try:
            with tempfile.TemporaryFile() as f:
                await api.download("file-1", f, 8 * 2**20)
        finally:
            await api.close()

    with RouteServer({"/v1/files/file-1/content": how}, huge_bytes=64 * 2**20) as srv:
        t0 = time.monotonic()
        with pytest.raises(BatchAPIError, match=said):
            asyncio.run(download(_api(srv.base_url, 1.0)))
        took = time.monotonic() - t0
    assert took < 1.0 + 3.0, took  # a drip: --timeout plus a second per MiB that came (bytes, here)
