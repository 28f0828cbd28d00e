"""Limits against a hostile server or archive: a slow drip, a huge reply, a decompression bomb.

Each case runs the real CLI in a subprocess and measures its peak memory (os.wait4's ru_maxrss for that
child alone). Figures seen on the 2-core test machine are in the issue #39 report.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import clean_env, fast_eval_cmd
from datagen import doccount_rows, write_doccount

MiB = 1024 * 1024
HUGE = 120 * MiB  # the reply the huge server sends (never built whole: written 1 MiB at a time)
DRIP_EVERY_S = 0.5


def run_measured(cmd: list[str], timeout: float) -> tuple[int, str, float, int]:
    """Run a child; its exit code, stderr, wall time and peak RSS in bytes. Killed past `timeout`, so a
    hang fails the test instead of holding it."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env(), start_new_session=True
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - t0
    assert elapsed < timeout, f"still running after {timeout} s (killed): {err[-2000:]}"
    return proc.returncode, err, elapsed, usage.ru_maxrss * 1024


class Handler(BaseHTTPRequestHandler):
    """/models answers; a chat completion gets what the server's `reply` writes."""

    reply: Callable[[BaseHTTPRequestHandler], None]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = json.dumps({"object": "list", "data": [{"id": "test-model", "object": "model"}]}).encode()
        self.send_response(200 if self.path.endswith("/models") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with contextlib.suppress(OSError):  # the client gave up on us: the point of these tests
            type(self).reply(self)


def drip(h: BaseHTTPRequestHandler) -> None:
    """200 with a plausible length, then one byte every 0.5 s for up to a minute."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "1000")
    h.end_headers()
    h.wfile.flush()
    for _ in range(120):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(DRIP_EVERY_S)


def huge(h: BaseHTTPRequestHandler) -> None:
    """A 200 chat.completion whose content is HUGE bytes of text, generated as it is written."""
    head = b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "'
    tail = b'"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}'
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(head) + HUGE + len(tail)))
    h.end_headers()
    h.wfile.write(head)
    chunk = b"7" * MiB
    for _ in range(HUGE // MiB):
        h.wfile.write(chunk)
    h.wfile.write(tail)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("H", (Handler,), {"reply": staticmethod(request.param)})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def records(root: Path) -> list[dict]:
    lines = (root / "responses.partial.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def data_dir(tmp_path: Path, n: int) -> Path:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(n))
    return tmp_path / "data"


def seconds(a: str, b: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


@pytest.mark.parametrize("server", [drip], indirect=True)
def test_a_slow_drip_ends_the_attempt_at_the_timeout(server: str, tmp_path: Path) -> None:
    root = tmp_path / "run"
    cmd = fast_eval_cmd(server, data_dir(tmp_path, 1), root, timeout=2, max_retries=1)
    code, err, elapsed, _ = run_measured(cmd, timeout=45)
    rows = records(root)
    assert len(rows) == 1, err[-2000:]
    row = rows[0]
    assert row["status"] == "request_error", row
    kinds = [e["kind"] for e in row.get("retry_errors") or []]
    assert kinds == ["timeout", "timeout"], row  # the first attempt and its one retry (--max-retries 1)
    # two attempts of 2 s each and a short retry wait: the drip alone would take 500 s per attempt
    took = seconds(row["started_at"], row["finished_at"])
    assert 2 * 2 - 0.2 < took < 2 * 2 + 1.0, row
    print(f"drip: row ended after {took:.2f} s (2 attempts x --timeout 2), run {elapsed:.1f} s, exit {code}")


@pytest.mark.parametrize("server", [huge], indirect=True)
def test_a_huge_reply_is_the_rows_error_and_never_held_whole(server: str, tmp_path: Path) -> None:
    root = tmp_path / "run"
    cmd = fast_eval_cmd(server, data_dir(tmp_path, 1), root, timeout=60, max_retries=2)
    code, err, elapsed, peak = run_measured(cmd, timeout=120)
    rows = records(root)
    assert len(rows) == 1, err[-2000:]
    size = (root / "responses.partial.jsonl").stat().st_size
    print(
        f"huge reply: record file {size} bytes, peak RSS {peak / MiB:.0f} MiB, {elapsed:.1f} s, exit {code}"
    )
    row = rows[0]
    assert row["status"] == "request_error", str(row)[:2000]
    assert "over 16 MiB cap (read " in row["request_error"], row["request_error"]
    assert [e["kind"] for e in row["retry_errors"]] == ["response_too_large"]  # not sent again
    assert size < 64 * 1024, size
    assert peak < 300 * MiB, peak
