"""Archive layout constants, result types and small helpers shared by pack, verify and reproduce."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import evaluator
from evaluator.core.boundary import PIECE, KeyFilter
from evaluator.core.errors import UserError
from evaluator.core.jsonl import utf8_json
from evaluator.runfolder.files import CONFIG, LOCK, MANIFEST, MERGED, PARTIAL

FORMAT = "doccount-archive"
FORMAT_VERSION = 1
INDEX = "ARCHIVE.json"
SUMS = "SHA256SUMS"
REPRODUCE = "REPRODUCE.md"
DATASET = "dataset.json"
ENVIRONMENT = "environment.json"
PROMPTS = "prompts"
RUNS = "runs"
TOP_SUFFIX = ".archive"
# Bundle files archived from the checkout, with the run_config `environment.containers` key that
# records their hash (set by the Makefile / compose for containerised runs), when there is one.
BUNDLE_FILES: dict[str, str | None] = {
    "Dockerfile.eval": "DOCCOUNT_DOCKERFILE_EVAL_SHA256",
    "Dockerfile.vllm": "DOCCOUNT_DOCKERFILE_VLLM_SHA256",
    "Dockerfile.vllm-cpu": "DOCCOUNT_DOCKERFILE_VLLM_CPU_SHA256",
    "compose.yaml": "DOCCOUNT_COMPOSE_SHA256",
    "Makefile": None,
    "requirements.lock": "DOCCOUNT_LOCK_SHA256",
}
RUN_FILES = (CONFIG, MANIFEST, PARTIAL, MERGED)
# summary.json keys that depend on the plotting step or the written files, not on the records
PLOT_KEYS = ("plots", "outputs", "warnings")


class ArchiveError(UserError):
    """Bad input or a refused operation: one clear line, exit 2."""


@dataclass
class Problem:
    path: str  # the archive entry (relative to the top folder) that does not match
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# An entry read whole (JSON, SHA256SUMS, the manifest, a page): the largest, a full CountQA run's
# manifest.jsonl, is ~0.5 MB. Records and run archives are never read whole (streamed or copied).
WHOLE_BYTES = 64 * 1024 * 1024
JSON_DEPTH = 64  # nesting a doccount JSON file never comes near (a few levels)


class ArchiveLimitError(ArchiveError):
    """An archive past a limit: exit 2 with one line naming the member and the limit."""


def size_text(n: int) -> str:
    gib, mib = 1 << 30, 1 << 20
    return f"{n / gib:g} GiB" if n >= gib else f"{n / mib:g} MiB" if n >= mib else f"{n} bytes"


class Budget:
    """One budget of bytes for everything a command takes out of an archive: what its gzip and the archives
    nested in it unpack to, and every copy made of their members. Charged as the bytes come, never refunded,
    so a nested archive or a copy cannot multiply it."""

    def __init__(self, source: Path, total: int) -> None:
        self.source, self.total, self.used = source, total, 0

    def spend(self, n: int, what: str) -> None:
        self.used += n
        if self.used > self.total:
            raise ArchiveLimitError(
                f"{self.source} unpacks to more than {size_text(self.total)}, the limit of a doccount archive "
                f"(one budget for the archive, the run archives inside it and the copies verify makes; passed "
                f"at {what}); refusing to read it"
            )


class Members(Mapping[str, bytes]):
    """An archive's entries by name: small ones held in memory, larger ones in a temporary folder
    (removed by `close()`, which the archive's `with` block calls on every way out), each with the SHA-256
    and size measured as it was read. Copies made of them (`copy_to`) are charged to `budget`."""

    def __init__(self, budget: Budget | None = None) -> None:
        self._data: dict[str, bytes | Path] = {}
        self.sha256: dict[str, str] = {}
        self.size: dict[str, int] = {}
        self.budget = budget
        self._store: tempfile.TemporaryDirectory[str] | None = None
        self._spilled: list[Path] = []

    def spill(self, name: str) -> IO[bytes]:
        """A file to write a large member to (added with `add(name, None, ...)` once written)."""
        if self._store is None:
            self._store = tempfile.TemporaryDirectory(prefix="doccount-archive-")
        path = Path(self._store.name) / str(len(self._spilled))  # a duplicate name gets its own file
        self._spilled.append(path)
        self._data[name] = path
        return open(path, "wb")  # noqa: SIM115 - the caller closes it

    def close(self) -> None:
        """Remove the temporary folder of the large members now (idempotent; they cannot be read after)."""
        if self._store is not None:
            self._store.cleanup()
            self._store = None

    def add(self, name: str, data: bytes | None, sha256: str, size: int) -> None:
        if data is not None:
            self._data[name] = data
        self.sha256[name], self.size[name] = sha256, size

    def __getitem__(self, name: str) -> bytes:
        data = self._data[name]
        return data.read_bytes() if isinstance(data, Path) else data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def copy_to(self, name: str, dest: Path) -> None:
        if self.budget is not None:
            self.budget.spend(self.size.get(name, 0), f"a copy of {name}")
        data = self._data[name]
        if isinstance(data, Path):
            shutil.copyfile(data, dest)
        else:
            dest.write_bytes(data)

    def chunks(self, name: str, size: int, first: int = 0) -> Iterator[bytes]:
        """A member's bytes in chunks of `size`, never whole (only the first `first` bytes when given)."""
        data = self._data[name]
        if not isinstance(data, Path):
            yield data[:first] if first else data
            return
        with open(data, "rb") as f:
            if first:
                yield f.read(first)
                return
            while chunk := f.read(size):
                yield chunk


A = TypeVar("A", bound="Archive")


@dataclass(frozen=True)
class Archive:
    """An archive's entries as read (archive.read), relative to the top folder (parsed: OpenedArchive)."""

    source: Path
    top: str
    files: Members
    duplicates: list[str] = field(default_factory=list)

    def __enter__(self: A) -> A:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the temporary folder holding the large members now (read.read_archive spills them there)."""
        self.files.close()

    def sha256(self, name: str) -> str:
        return self.files.sha256[name]

    @property
    def budget(self) -> Budget | None:
        """The unpack budget this archive was read under (read.read_archive), shared with what it holds."""
        return self.files.budget

    def copy_to(self, name: str, dest: Path) -> None:
        """Write an entry to `dest` without holding it whole when it is large (charged to the budget)."""
        self.files.copy_to(name, dest)

    def extract(self, prefix: str, dest: Path) -> None:
        """Copy the entries under `prefix` into the folder `dest`, each as copy_to writes it."""
        for name in self.files:
            if name.startswith(prefix):
                target = dest / name[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                self.copy_to(name, target)

    def whole(self, name: str, default: bytes | None = None) -> bytes:
        """An entry read whole: ArchiveError when it is missing (no default) or past WHOLE_BYTES."""
        files = self.files
        if name not in files:
            if default is not None:
                return default
            raise ArchiveError(f"{name} is missing from the archive")
        size = files.size.get(name, 0)
        if size > WHOLE_BYTES:
            raise ArchiveError(
                f"{name} is {size} bytes, over the {WHOLE_BYTES >> 20} MiB limit of such an entry"
            )
        return files[name]

    def json(self, name: str, default: Any = None) -> Any:
        """An entry parsed as JSON, the one way an archive's JSON is read: ArchiveError when it is missing
        (and no default is given), larger than WHOLE_BYTES, not UTF-8 JSON, or nested deeper than JSON_DEPTH."""
        if default is not None and name not in self.files:
            return default
        return parse_json_bytes(self.whole(name), name)

    def json_object(self, name: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
        obj = self.json(name, default)
        if not isinstance(obj, dict):
            raise ArchiveError(f"{name} is not a JSON object")
        return obj


@dataclass
class VerifyResult:
    archive: Archive
    problems: list[Problem]
    checks: list[str]
    run_dir: Path | None  # the extracted, re-scored original run folder (inside the work dir)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class ArchiveInfo:
    output: Path
    entries: list[str]
    missing: dict[str, str]
    sha256: str
    size: int
    left_out: list[str] = field(default_factory=list)  # run folder files not archived (not the scorer's)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_bytes(obj: Any) -> bytes:
    return utf8_json(obj, indent=2, sort_keys=True) + b"\n"


def default_bundle_root() -> Path:
    """The checkout the evaluator runs from (editable install), else the current folder."""
    repo = Path(evaluator.__file__).resolve().parents[1]
    return repo if (repo / "pyproject.toml").exists() else Path.cwd()


def _depth(obj: Any) -> int:
    """The nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= JSON_DEPTH:
            children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def parse_json_bytes(data: bytes, what: str) -> Any:
    """JSON from an archive: ArchiveError (never RecursionError or UnicodeDecodeError) when it is not
    UTF-8 JSON nested at most JSON_DEPTH levels."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ArchiveError(f"{what} is nested too deeply to be a doccount file") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise ArchiveError(f"{what} is not valid JSON ({exc})") from None
    if _depth(obj) > JSON_DEPTH:
        raise ArchiveError(f"{what} is nested deeper than {JSON_DEPTH} levels, which no doccount file is")
    return obj


def read_json_bytes(data: bytes, what: str) -> dict[str, Any]:
    obj = parse_json_bytes(data, what)
    if not isinstance(obj, dict):
        raise ArchiveError(f"{what} is not a JSON object")
    return obj


def check_not_in_use(root: Path) -> None:
    """Refuse a run folder an evaluator is writing to (without writing anything ourselves)."""
    lock = root / LOCK
    if not lock.exists():
        return
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        raise ArchiveError(
            f"run folder {root} is in use by a running evaluator; wait for it to finish, score it, then archive"
        ) from None
    finally:
        os.close(fd)


def mismatched_keys(a: Mapping[str, Any], b: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k not in ignore and a.get(k) != b.get(k))


SWALLOWED = 4  # the most key characters one escape can take in: \\u then four hex digits


def secret_hits(entries: dict[str, bytes], secret: str | None) -> list[str]:
    """Entries that contain the secret in any form the boundary's filter knows (verbatim, JSON-escaped,
    URL-encoded, base64, and behind \\u escapes, percent-encoding, HTML references or double escaping)."""
    if not secret or not secret.strip():
        return []
    keys = [KeyFilter(secret)]
    # an escape started just before the key can swallow its first characters when decoded ("%" then a key
    # beginning "00..." reads as NUL): the key without its first SWALLOWED characters is looked for too
    if len(secret.strip()) - SWALLOWED >= PIECE:
        keys.append(KeyFilter(secret.strip()[SWALLOWED:]))
    return sorted(n for n, data in entries.items() if _holds(data.decode("utf-8", "replace"), keys))


def _holds(text: str, keys: list[KeyFilter]) -> bool:
    return any(k.found_in(text, False) for k in keys)
