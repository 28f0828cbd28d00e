"""Limits against a hostile server or archive: a slow drip, a huge reply, a decompression bomb.

Each case runs the real CLI in a subprocess and measures its peak memory (os.wait4's ru_maxrss for that
child alone). Figures seen on the 2-core test machine are in the issue #39 report.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.cli import clean_env, fast_eval_cmd
from support.datagen import doccount_rows, write_doccount

from evaluator.cli.main import main

MiB = 1024 * 1024
HUGE = 120 * MiB  # the reply the huge server sends (never built whole: written 1 MiB at a time)
DRIP_EVERY_S = 0.5


# A small parent for the measured child: a child forked from pytest itself would count pytest's own pages
# in its peak (ru_maxrss survives exec), so a fresh interpreter forks it and reports its peak alone.
MEASURE = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss * 1024))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_measured(cmd: list[str], timeout: float) -> tuple[int, str, float, int]:
    """Run a child; its exit code, stderr, wall time and peak RSS in bytes. Killed past `timeout`, so a
    hang fails the test instead of holding it."""
    with tempfile.NamedTemporaryFile(suffix=".rss") as rss:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", MEASURE, rss.name, *cmd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=clean_env(),
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            pytest.fail(f"still running after {timeout} s (killed): {err.decode(errors='replace')[-2000:]}")
        elapsed = time.monotonic() - t0
        peak = int(Path(rss.name).read_text() or 0)
    return proc.returncode, err.decode("utf-8", "replace"), elapsed, peak


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


# ----------------------------------------------------------------------------- archives


TOP = "bomb.archive"
BOMB = 3 * 1024 * MiB  # over the 2 GiB member limit


def zeros_gzip(n: int) -> bytes:
    """n zero bytes, gzipped: one 64 MiB block compressed once and repeated as concatenated gzip members
    (a gzip reader reads them as one stream), so a 3 GiB member takes well under a second to make."""
    block = 64 * MiB
    one = gzip.compress(bytes(block), compresslevel=1)
    full, rest = divmod(n, block)
    return one * full + (gzip.compress(bytes(rest), compresslevel=1) if rest else b"")


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=fmt)


def tar_end(size: int) -> bytes:
    """The padding after a member of `size` bytes, then the tar's two zero blocks."""
    return bytes(-size % 512) + bytes(1024)


def bomb(path: Path) -> Path:
    """One member of 3 GiB of zeros (an honest header), in a ~3 MB file."""
    name = f"{TOP}/runs/x/responses.partial.jsonl"
    path.write_bytes(gzip.compress(header(name, BOMB)) + zeros_gzip(BOMB) + gzip.compress(tar_end(BOMB)))
    return path


def verify_measured(path: Path) -> tuple[int, str, int]:
    code, err, _, peak = run_measured([sys.executable, "-m", "evaluator.cli", "verify", str(path)], 120)
    return code, err, peak


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


def test_a_decompression_bomb_is_refused_in_one_line_with_memory_bounded(tmp_path: Path) -> None:
    path = bomb(tmp_path / "bomb.tar.gz")
    code, err, peak = verify_measured(path)
    print(
        f"bomb: {path.stat().st_size} bytes holding a {BOMB} byte member; verify peak RSS {peak / MiB:.0f} MiB"
    )
    assert peak < 300 * MiB, peak
    assert code == 2, err
    line = one_error_line(err)
    assert "runs/x/responses.partial.jsonl" in line and "2 GiB member limit" in line, line


def crafted(path: Path, blob: bytes) -> Path:
    path.write_bytes(gzip.compress(blob, compresslevel=1))
    return path


def many_members(n: int) -> bytes:
    return b"".join(header(f"{TOP}/m{i}", 0) for i in range(n)) + bytes(1024)


@pytest.mark.parametrize(
    ("blob", "said"),
    [
        # a header claiming 5 GiB with nothing behind it: refused before anything is read
        (header(f"{TOP}/SHA256SUMS", 5 * 1024 * MiB) + bytes(2048), "2 GiB member limit"),
        # a header claiming 10 bytes with 50 MiB behind the tar's end: the stream is counted, not the header
        (header(f"{TOP}/SHA256SUMS", 10) + bytes(10) + tar_end(10) + b"\x01" * (50 * MiB), "after the end"),
        # a PAX header of 5 MiB (tarfile would read it whole before yielding the member)
        (header(f"{TOP}/" + "a" * (5 * MiB), 0) + bytes(1024), "1 MiB limit"),
        (many_members(10_001), "more than 10000 members"),
        (
            header(f"{TOP}/sparse", 0, tarfile.GNUTYPE_SPARSE, tarfile.GNU_FORMAT) + bytes(1024),
            "unexpected entry",
        ),
    ],
    ids=["header-5GiB", "data-after-end", "pax-5MiB", "10001-members", "sparse"],
)
def test_crafted_headers_are_refused_in_one_line(tmp_path: Path, blob: bytes, said: str) -> None:
    path = crafted(tmp_path / "c.tar.gz", blob)
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 2, result.output
    assert said in one_error_line(result.output), result.output


def test_the_total_limit_counts_the_unpacked_stream(tmp_path: Path) -> None:
    """Members each under the member limit, over the total together (smaller limits, same code)."""
    from evaluator.archive.read import ArchiveLimitError, Limits, read_archive  # new in issue 39

    blob = b"".join(header(f"{TOP}/m{i}", 3 * MiB) + bytes(3 * MiB) for i in range(4)) + bytes(1024)
    path = crafted(tmp_path / "t.tar.gz", blob)
    with pytest.raises(ArchiveLimitError, match="unpacks to more than 10 MiB"):
        read_archive(path, Limits(member_bytes=4 * MiB, total_bytes=10 * MiB))
