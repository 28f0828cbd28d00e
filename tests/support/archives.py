"""Archives for tests: real ones made once by the CLI, read a .tar.gz's members, tampered copies as someone
editing one would make, and `verify` or `reproduce` run with no terminal on stdin."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from evaluator.archive.base import INDEX, SUMS, json_bytes
from evaluator.archive.pack import write_tar_gz
from evaluator.archive.verify import read_archive
from support import launch
from support.cli import run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer


def run_and_sweep(base: Path) -> SimpleNamespace:
    """A run archive (run r, three rows, the first answered wrong) and the archive of a one-run sweep (sw:
    run a, test-model), both made by the CLI from real runs against the loopback test server. Read-only:
    built once a session (support.once.built_once) for test_verify_crafted and test_archive_paths, whose
    checks need a real run and a real sweep, not these in particular; the server is gone afterwards."""
    rows = doccount_rows(3)
    write_doccount(base / "data" / "test-0.parquet", rows)
    data = str(base / "data" / "test-*.parquet")
    with TestServer() as srv:
        srv.set_config({"answers": doccount_reply(rows, wrong={rows[0]["sample_id"]})})
        run = base / "runs" / "r"
        for args in (
            ["evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data,
             "--run-root", str(run), "--quiet"],
            ["score", "--run-root", str(run)],
            ["archive", "--run-root", str(run), "--output", str(base / "r.tar.gz")],
        ):  # fmt: skip
            res = run_cli(*args)
            assert res.returncode == 0, res.stderr
        sweep = base / "s.toml"
        sweep.write_text(
            f'name = "sw"\ndata_files = "{data}"\n\n[[runs]]\nname = "a"\nmodel = "test-model"\n'
            f'base_url = "{srv.base_url}"\n'
        )
        res = run_cli("sweep", str(sweep), "--run-root", str(base / "runs"))
        assert res.returncode == 0, res.stderr
        res = run_cli("archive", "--run-root", str(base / "runs" / "sw"), "--output", str(base / "sw.tar.gz"))
        assert res.returncode == 0, res.stderr
    return SimpleNamespace(
        base=base,
        run=(base / "r.tar.gz").read_bytes(),
        sweep=(base / "sw.tar.gz").read_bytes(),
        sweep_path=base / "sw.tar.gz",
    )


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def rewrite(src: Path, dst: Path, change: Callable[[dict[str, bytes]], None], resum: bool = False) -> Path:
    """A tampered copy: `change` edits entries (names relative to the top folder)."""
    files = members(src)
    top = next(iter(files)).split("/")[0]
    rel = {name.split("/", 1)[1]: data for name, data in files.items()}
    change(rel)
    if resum:
        rel["SHA256SUMS"] = "".join(
            f"{sha(rel[n])}  {n}\n" for n in sorted(rel) if n != "SHA256SUMS"
        ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(rel.items()):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dst.write_bytes(gzip.compress(buf.getvalue()))
    return dst


def sums(entries: dict[str, bytes]) -> bytes:
    return "".join(f"{hashlib.sha256(entries[n]).hexdigest()}  {n}\n" for n in sorted(entries)).encode()


def repacked(src: Path, dest: Path, change: dict[str, bytes]) -> Path:
    """The archive with some entries changed and its SHA256SUMS (and ARCHIVE.json's run hashes) recomputed,
    as someone who edits it would do."""
    archive = read_archive(src)
    files = {**archive.files, **change}
    index = json.loads(files[INDEX])
    for run in (index.get("runs") or {}).values():
        run["sha256"] = hashlib.sha256(files[run["archive"]]).hexdigest()
    files[INDEX] = json_bytes(index)
    files.pop(SUMS)
    files[SUMS] = sums(files)
    with open(dest, "wb") as raw:
        write_tar_gz(raw, archive.top, files)
    return dest


@contextlib.contextmanager
def _stdin_from_devnull() -> Iterator[None]:
    old = sys.stdin
    with open(os.devnull) as devnull:
        sys.stdin = devnull
        try:
            yield
        finally:
            sys.stdin = old


def no_terminal(
    cmd: Sequence[Any], *, env: dict[str, str], cwd: str | Path, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(cmd, stdin=DEVNULL, capture_output=True, text=True, ...): no terminal on stdin, as in
    CI, a pipe or a cron job (reproduce asks `sys.stdin.isatty()` before it offers a prompt). In this process
    where support/launch.py would run it here (sys.stdin on /dev/null for the call): a fresh interpreter
    costs about two seconds of CPU, and these tests are about what the command reads and sends, not the
    process; otherwise a process of its own with stdin from /dev/null."""
    if launch.in_this_process(cmd, env):
        with _stdin_from_devnull():
            return launch.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL, timeout=timeout
    )
