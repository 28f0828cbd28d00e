"""The run folder on disk: lock, append-only records, manifest, run_config.json.

Crash safety: each record is one line, written whole and fsynced before it counts as finished; a torn
last line (from a kill mid-write) is skipped and reported, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluator.core.atomic import no_follow, write_atomic
from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject, NotJSON, decode_line, decode_strict_lines, split_lines, utf8_json
from evaluator.core.records import Key, ResponseRecord
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.runfolder import selection
from evaluator.runfolder.selection import COLUMNS

PARTIAL = "responses.partial.jsonl"
MERGED = "responses.jsonl"
CONFIG = "run_config.json"
MANIFEST = "manifest.jsonl"
LOCK = ".lock"


class RunFolderError(UserError):
    pass


def linked(root: Path, name: str) -> RunFolderError:
    """A run folder file that is a symbolic link: refused, its target never written (a shared folder)."""
    return RunFolderError(
        f"{root / name} is a symbolic link; files the bundle writes are never opened through links: "
        "remove it (its target is untouched)"
    )


def refuse_links(folder: Path, names: Iterable[str]) -> None:
    """Refused when a file the bundle writes by name in `folder` (a sweep's logs) is a symbolic link."""
    for name in names:
        if (folder / name).is_symlink():
            raise linked(folder, name)


def ensure_run_root(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise RunFolderError(
            f"run root {path} is a file, not a folder; pass a folder with --run-root or --run-name"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.unlink(missing_ok=True)  # a link left there is removed, never written through
        with open(probe, "xb", opener=no_follow):
            pass
        probe.unlink()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise linked(path, probe.name) from None
        raise RunFolderError(
            f"run root {path} is not writable ({exc.strerror}); choose another --run-root"
        ) from None
    return path


def discard_unused(root: Path) -> bool:
    """Remove a run folder that holds nothing but its lock file (called with the lock held, by the
    invocation that created the folder, when nothing was sent); False when anything else is in it."""
    try:
        if [p.name for p in root.iterdir()] != [LOCK]:
            return False
        (root / LOCK).unlink()
        root.rmdir()  # fails, keeping the folder, if another process put anything in it meanwhile
    except OSError:
        return False
    return True


class RunLock:
    """An advisory lock the kernel drops when the holder dies, so a killed run never blocks forever."""

    def __init__(self, root: Path) -> None:
        self.path = root / LOCK
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise linked(self.path.parent, LOCK) from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise RunFolderError(
                f"run folder {self.path.parent} is in use by another evaluator ({holder}); wait for it to "
                "finish or stop that process, or use another --run-name"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode())
        except OSError as exc:  # e.g. a full disk: nothing has been written to the run folder yet
            os.close(fd)
            raise RunFolderError(
                f"cannot write {self.path} ({exc.strerror}); free disk space or fix permissions, "
                "or choose another --run-root"
            ) from None
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


@dataclass
class ReadReport:
    records: list[JSONObject] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)  # 1-based line numbers that were not JSON objects
    torn_tail: bool = False  # the last line had no newline and did not parse (a crash mid-write)
    lenient: set[int] = field(default_factory=set)  # indices into records read by json.loads (see jsonl)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while many records are decoded, merged and encoded: decoded JSON
    holds no cycles, but the collector walked the growing heap every few hundred dicts (half the decode)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_jsonl(path: Path) -> ReadReport:
    """The records of a JSONL file (none when it does not exist); see parse_jsonl."""
    return parse_jsonl(path.read_bytes()) if path.exists() else ReadReport()


def parse_jsonl(data: bytes) -> ReadReport:
    """Every JSON object line of `data`; other lines are reported by number, a torn last line as such."""
    report = ReadReport()
    with gc_paused():
        # A clean file (every line a strict-JSON object, no blank line) in one pass; else line by line.
        lines = split_lines(data)
        whole = decode_strict_lines(lines[:-1] if not lines[-1] else lines)
        if whole is not None and all(type(obj) is dict for obj in whole):
            report.records = whole
            return report
        for i, view in enumerate(lines):
            line = view.tobytes()
            if not line.strip():
                continue
            try:
                obj, lenient = decode_line(line)
            except NotJSON:
                obj, lenient = None, False
            if isinstance(obj, dict):
                if lenient:
                    report.lenient.add(len(report.records))
                report.records.append(obj)
            elif i == len(lines) - 1:  # no trailing newline: the write was cut short
                report.torn_tail = True
            else:
                report.bad_lines.append(i + 1)
    return report


def _done_ids_columnar(path: Path) -> set[Key] | None:
    """The done ids via pyarrow's JSON reader (C++, threaded), reading only the selection's fields; None
    (read line by line) unless every non-blank line is UTF-8 and one row of the expected types."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([(name, pa.type_for_alias(kind)) for name, kind in COLUMNS.items()])
    try:
        lines = 0
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    if not line.isascii():
                        line.decode("utf-8")
                    lines += 1
        if not lines:
            return None
        table = pj.read_json(
            path,
            read_options=pj.ReadOptions(block_size=16 << 20),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (OSError, UnicodeDecodeError, pa.ArrowException):
        return None
    if table.num_rows != lines:
        return None
    return selection.done_keys_from_columns({name: table.column(name).to_pylist() for name in COLUMNS})


def done_keys(root: Path) -> tuple[set[Key], ReadReport]:
    """The (sample id, repeat) whose latest valid record is done, and the read report (whose `records`
    stay empty when a clean file is read column-wise)."""
    path = root / PARTIAL
    fast = _done_ids_columnar(path) if path.exists() else None
    if fast is not None:
        return fast, ReadReport()
    report = read_jsonl(path)
    return selection.done_keys(report.records), report


class RecordWriter:
    """Appends records with group commit: a batch is written, flushed and fsynced, then acknowledged."""

    def __init__(self, root: Path) -> None:
        self.path = root / PARTIAL
        try:
            self._repair_torn_tail()
            self.file = open(self.path, "ab", buffering=0, opener=no_follow)  # noqa: SIM115 - closed in close()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise linked(root, PARTIAL) from None
            raise
        self.queue: asyncio.Queue[tuple[ResponseRecord, asyncio.Future[None]] | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.written = 0

    def _repair_torn_tail(self) -> None:
        """Terminate a torn last line so the next record starts on its own line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+", opener=no_follow) as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def write(self, record: ResponseRecord) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self.queue.put((record, fut))
        await fut

    def _write_batch(self, payload: bytes) -> None:
        view = memoryview(payload)
        while view:
            n = os.write(self.file.fileno(), view)
            view = view[n:]
        os.fsync(self.file.fileno())

    async def _run(self) -> None:
        while True:
            item = await self.queue.get()
            batch = [item]
            while not self.queue.empty():
                batch.append(self.queue.get_nowait())
            stop = any(i is None for i in batch)
            pending = [i for i in batch if i is not None]
            if pending:
                try:
                    payload = b"".join(rec.to_line() for rec, _ in pending)
                    await asyncio.to_thread(self._write_batch, payload)
                except Exception as exc:  # a disk error, or a bug: never leave a worker waiting forever
                    await self._refuse_from_now_on(pending, self._failure(exc), closing=stop)
                    return
                self.written += len(pending)
                for _, fut in pending:
                    if not fut.done():
                        fut.set_result(None)
            if stop:
                return

    def _failure(self, exc: Exception) -> RunFolderError:
        if isinstance(exc, OSError):
            return RunFolderError(
                f"cannot write {self.path} ({exc.strerror}); records already written stay valid. "
                "Free disk space or fix permissions, then re-run the same command to resume"
            )
        return RunFolderError(
            f"cannot write a record to {self.path} ({type(exc).__name__}: {exc}); records already written "
            "stay valid. Please report this; re-running the same command resumes"
        )

    async def _refuse_from_now_on(self, pending: list[Any], err: RunFolderError, closing: bool) -> None:
        """Fail this batch and everything queued after it: a half-written batch must not be followed."""
        for _, fut in pending:
            if not fut.done():
                fut.set_exception(err)
        while not closing:  # until close() (its None may already have come with this batch)
            item = await self.queue.get()
            if item is None:
                return
            if not item[1].done():
                item[1].set_exception(err)

    async def close(self) -> None:
        if self.task is not None:
            await self.queue.put(None)
            await self.task
            self.task = None
        self.file.close()


def _write(path: Path, data: bytes) -> None:
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise RunFolderError(
            f"cannot write {path} ({exc.strerror}); the files already there are unchanged. Free disk space "
            "or fix permissions, then re-run the same command"
        ) from None


def write_json_atomic(path: Path, obj: Any) -> None:
    _write(path, utf8_json(obj, indent=2, sort_keys=True) + b"\n")


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_manifest(root: Path, entries: list[ManifestEntry]) -> None:
    lines = "".join(json.dumps(e.to_dict(), sort_keys=True, ensure_ascii=False) + "\n" for e in entries)
    _write(root / MANIFEST, lines.encode("utf-8"))
