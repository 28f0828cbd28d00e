"""`doccount verify` and `doccount reproduce` (evaluator/cli/archive.py) leave nothing in TMPDIR, whatever the
way out: an archive's large members are spilled to a temporary folder while it is read, and that folder is
removed after a success, after a user error and after SIGTERM or SIGINT of the real process (a `with`
block, not a finalizer that an exit can skip)."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.cli import FAST_RETRIES, REPO, clean_env, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive.read import LIMITS

pytestmark = pytest.mark.timeout(300)
N = 3
# a reasoning text this long makes each record file of the run larger than what stays in memory
REASONING = "step " * (LIMITS.in_memory // 8)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """A real run archive whose record files are spilled to disk when read."""
    base = tmp_path_factory.mktemp("spill")
    rows = doccount_rows(N)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    data = str(base / "data" / "test-*.parquet")
    with TestServer({"answers": doccount_reply(rows), "reasoning": REASONING}) as srv:
        run = base / "orig"
        res = run_cli(
            "evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data,
            "--run-root", str(run), "--quiet", *FAST_RETRIES,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert run_cli("score", "--run-root", str(run), "--no-report").returncode == 0
        assert (run / "responses.jsonl").stat().st_size > LIMITS.in_memory
        archive = base / "orig.tar.gz"
        res = run_cli("archive", "--run-root", str(run), "--output", str(archive))
        assert res.returncode == 0, res.stderr
        yield SimpleNamespace(base=base, data=data, archive=archive, server=srv)


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command in its own process, with its own empty TMPDIR (the process boundary is the point:
    what an exit skips is only seen there)."""
    return subprocess.run(
        [sys.executable, "-m", "evaluator.cli", *args],
        capture_output=True,
        text=True,
        env=clean_env(TMPDIR=str(tmp)),
        cwd=str(REPO),
        timeout=240,
    )


def empty_tmp(tmp_path: Path) -> Path:
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    return tmp


def test_verify_of_an_archive_with_large_members_leaves_tmpdir_empty(
    made: SimpleNamespace, tmp_path: Path
) -> None:
    tmp = empty_tmp(tmp_path)
    res = cli(tmp, "verify", str(made.archive))
    assert res.returncode == 0 and f"OK: {made.archive} verified" in res.stdout, res.stderr
    assert list(tmp.iterdir()) == []


def test_reproduce_leaves_tmpdir_empty(made: SimpleNamespace, tmp_path: Path) -> None:
    tmp = empty_tmp(tmp_path)
    res = cli(
        tmp, "reproduce", str(made.archive), "--base-url", made.server.base_url,
        "--data-files", made.data, "--run-root", str(tmp_path / "again"), "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert list(tmp.iterdir()) == []


def test_a_user_error_after_the_large_members_leaves_tmpdir_empty(
    made: SimpleNamespace, tmp_path: Path
) -> None:
    tmp = empty_tmp(tmp_path)
    # reproduce refuses a run's archive given a sweep's --base-url RUN=URL once it has read the archive
    res = cli(tmp, "reproduce", str(made.archive), "--base-url", "a=http://127.0.0.1:9/v1")
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: --base-url a=URL names a run of a sweep archive"), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert list(tmp.iterdir()) == []
    # an archive cut short in its last large member: refused with one line
    cut = tmp_path / "cut.tar.gz"
    whole = gzip.decompress(made.archive.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        last = [m for m in tar if m.size > LIMITS.in_memory][-1]
    cut.write_bytes(gzip.compress(whole[: last.offset_data + last.size // 2]))
    res = cli(tmp, "verify", str(cut))
    assert res.returncode == 2 and res.stderr.startswith("error: "), res.stderr
    assert list(tmp.iterdir()) == []


class Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def big_archive(path: Path, members: int, size: int) -> Path:
    """An archive with `members` large members (zeros, a few KB of gzip each): reading it takes a while."""
    with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in (("x/SHA256SUMS", b""), ("x/ARCHIVE.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for i in range(members):
            info = tarfile.TarInfo(f"x/big{i}.bin")
            info.size = size
            tar.addfile(info, io.BufferedReader(Zeros(size)))
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_archive(tmp_path_factory.mktemp("big") / "big.tar.gz", 8, 64 << 20)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("command", ["verify", "reproduce"])
def test_a_signal_while_large_members_are_read_leaves_tmpdir_empty(
    big: Path, tmp_path: Path, sig: signal.Signals, command: str
) -> None:
    tmp = empty_tmp(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "evaluator.cli", command, str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(TMPDIR=str(tmp)),
        cwd=str(REPO),
    )
    deadline = time.monotonic() + 60
    while not any(tmp.glob("doccount-archive-*/*")) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert child.poll() is None, "the command ended before its spill folder was seen"
    os.kill(child.pid, sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted"], err
    assert list(tmp.iterdir()) == []
