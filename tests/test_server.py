"""A served run's readiness polls (evaluator/study/server.py): each GET /health within a whole-request
deadline and a size cap (trust3 #5); a server dripping its /health no longer holds the sweep."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.adversarial_server import RouteServer

from evaluator.study.server import Server, ServerFailure


def test_a_dripping_health_check_ends_at_the_readiness_deadline(tmp_path: Path) -> None:
    with RouteServer({"/health": "drip"}) as srv:
        server = Server(None, "r", [], tmp_path / "log", {})  # type: ignore[arg-type]  # no launch here
        server.port = srv.server_address[1]
        server.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            t0 = time.monotonic()
            with pytest.raises(ServerFailure, match="not ready within 2 s"):
                server.wait_ready(2.0, threading.Event())
            took = time.monotonic() - t0
        finally:
            server.proc.kill()
            server.proc.wait()
    assert took < 5.0 + 4.0, took  # one poll of at most 5 s past the 2 s (the drip alone: 5 minutes)
