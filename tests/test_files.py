"""Issue #46 point 11: a run folder's files are opened without following symbolic links. A link planted
in a shared run folder (`.lock`, the write probe, the records file, an atomic write's temporary file, a
batch input name) never gets its target written: the folder is refused with one line, or the link is
removed and the file made anew. And a run that sent nothing leaves no folder it made behind
(runfolder.files.discard_unused), while a folder that was there before stays as it was."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from support.answered import answered_run_fixture  # noqa: F401  (the `answered_run` fixture)
from support.cli import eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.core.atomic import temp_path, write_atomic
from evaluator.runfolder.batches import Ledger, input_path
from evaluator.runfolder.files import (
    LOCK,
    PARTIAL,
    RecordWriter,
    RunFolderError,
    RunLock,
    ensure_run_root,
    refuse_links,
)

SECRET = b"the victim's own content\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(SECRET)
    return victim


def test_a_planted_lock_link_refuses_evaluate_and_leaves_its_target(tmp_path: Path) -> None:
    rows = doccount_rows(2)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    run = tmp_path / "run"
    run.mkdir()
    victim = _victim(tmp_path)
    (run / LOCK).symlink_to(victim)
    with TestServer({"answers": doccount_reply(rows)}) as server:
        data = str(tmp_path / "d" / "*.parquet")
        res = run_cli("evaluate", *eval_args(server.base_url, data, run), env={"MODEL_API_KEY": "EMPTY"})
        sent = server.requests()
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error:") and ".lock is a symbolic link" in lines[-1], res.stderr
    assert "Traceback" not in res.stderr
    assert victim.read_bytes() == SECRET  # not "pid N on host"
    assert sent == []


def test_run_lock_refuses_a_link_even_a_dangling_one(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    for target in (victim, tmp_path / "not-yet"):
        folder = tmp_path / f"run-{target.name}"
        folder.mkdir()
        (folder / LOCK).symlink_to(target)
        with pytest.raises(RunFolderError, match="symbolic link"), RunLock(folder):
            pass
    assert victim.read_bytes() == SECRET
    assert not (tmp_path / "not-yet").exists()


def test_the_write_probe_never_writes_through_a_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    root = tmp_path / "runs"
    root.mkdir()
    (root / ".write-test").symlink_to(victim)
    assert ensure_run_root(root) == root
    assert victim.read_bytes() == SECRET
    assert not (root / ".write-test").exists()


def test_the_records_file_is_never_appended_through_a_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / PARTIAL).symlink_to(victim)
    with pytest.raises(RunFolderError, match="symbolic link"):
        RecordWriter(tmp_path)
    assert victim.read_bytes() == SECRET


def test_an_atomic_write_never_writes_through_a_planted_temporary_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "run_config.json"
    temp_path(target).symlink_to(victim)
    write_atomic(target, b"{}\n")
    assert target.read_bytes() == b"{}\n" and not target.is_symlink()
    assert victim.read_bytes() == SECRET
    assert not temp_path(target).exists()


def test_a_batch_input_name_held_by_a_dangling_link_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "batch").mkdir()
    (tmp_path / "batch" / "in-0001.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    path = input_path(tmp_path, Ledger(), "in")
    assert path.name == "in-0002.jsonl"


def test_a_record_writer_still_appends_to_a_real_file(tmp_path: Path) -> None:
    """The plain case is unchanged: the records file is created, then appended to."""
    (tmp_path / PARTIAL).write_bytes(b'{"a": 1}')  # a torn last line gets its newline

    async def go() -> None:
        writer = RecordWriter(tmp_path)
        await writer.close()

    asyncio.run(go())
    assert (tmp_path / PARTIAL).read_bytes() == b'{"a": 1}\n'


def test_refuse_links_names_only_the_files_written_by_name(tmp_path: Path) -> None:
    """A sweep's own links (a Slurm sweep's logs/<run>.job.out) stay; a link where a log is written is refused."""
    victim = _victim(tmp_path)
    (tmp_path / "a.job.out").symlink_to(victim)
    refuse_links(tmp_path, ["a.log", "a.server.log"])
    (tmp_path / "a.server.log").symlink_to(victim)
    with pytest.raises(RunFolderError, match="a.server.log is a symbolic link"):
        refuse_links(tmp_path, ["a.log", "a.server.log"])
    assert victim.read_bytes() == SECRET


def _data(tmp_path: Path, n: int = 4) -> tuple[str, list[dict[str, Any]]]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


def _free_port() -> int:
    """A port nothing listens on (bound by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_answered_leaves_no_folder_behind(tmp_path) -> None:
    data, _ = _data(tmp_path)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    res = run_cli("evaluate", *eval_args(url, data, tmp_path / "runs" / "x"))
    assert res.returncode == 3 and "nothing answered" in res.stderr
    assert not (tmp_path / "runs" / "x").exists()
    res = run_cli("score", str(tmp_path / "runs" / "x"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "run_config" not in res.stderr


def test_a_folder_that_was_there_stays_as_it_is(tmp_path, answered_run) -> None:
    data = str(tmp_path / "d" / "*.parquet")
    before = {p.name: p.read_bytes() for p in answered_run.iterdir() if p.is_file() and p.name != ".lock"}
    url = f"http://127.0.0.1:{_free_port()}/v1"
    res = run_cli("evaluate", *eval_args(url, data, answered_run))
    assert res.returncode == 3
    after = {p.name: p.read_bytes() for p in answered_run.iterdir() if p.is_file() and p.name != ".lock"}
    assert after == before
    empty = tmp_path / "mine"
    empty.mkdir()  # the user's own (empty) folder is not this command's to remove
    assert run_cli("evaluate", *eval_args(url, data, empty)).returncode == 3
    assert empty.is_dir()
