"""`check-endpoint` (evaluator/evaluation/check.py) bounds its one request as a run does (trust3 #5):
a dripping reply ends at --timeout and a huge one at the reply cap, each reported in the exchange, no
traceback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.adversarial_server import RouteServer
from support.cli import eval_args, run_cli
from support.datagen import doccount_rows, write_doccount


@pytest.mark.parametrize(("how", "said"), [("drip", "request timed out"), ("huge", "reply over 16 MiB cap")])
def test_check_endpoint_ends_a_dripping_or_huge_reply(tmp_path: Path, how: str, said: str) -> None:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(1))
    with RouteServer({"/v1/chat/completions": how}, huge_bytes=64 * 2**20) as srv:
        t0 = time.monotonic()
        res = run_cli(
            "check-endpoint",
            *eval_args(srv.base_url, str(tmp_path / "data" / "*.parquet"), tmp_path / "r"),
            "--timeout",
            "3",
            timeout=60,
        )
        took = time.monotonic() - t0
    assert res.returncode == 3, res.stderr[-2000:]
    assert "Traceback" not in res.stderr + res.stdout
    assert said in res.stdout + res.stderr, (res.stdout[-2000:], res.stderr[-2000:])
    assert took < 3 + 25, took
