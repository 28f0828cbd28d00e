"""Archive layout constants, result types and small helpers shared by pack, verify and reproduce."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import evaluator
from evaluator.core.boundary import KeyFilter
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
MAX_IN_MEMORY = 256 * 1024 * 1024  # the decompressed tar spills to disk above this
# summary.json keys that depend on the plotting step or the written files, not on the records
PLOT_KEYS = ("plots", "outputs", "warnings")


class ArchiveError(Exception):
    """Bad input or a refused operation: one clear line, exit 2."""


@dataclass
class Problem:
    path: str  # the archive entry (relative to the top folder) that does not match
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class Archive:
    """An archive read into memory: entries relative to the top folder."""

    source: Path
    top: str
    files: dict[str, bytes]
    duplicates: list[str] = field(default_factory=list)

    @property
    def index(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.files[INDEX])
        except (KeyError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def run_name(self) -> str | None:
        idx = self.index
        name = idx.get("run_name") if idx else None
        if isinstance(name, str) and f"{RUNS}/{name}/{CONFIG}" in self.files:
            return name
        found = sorted(
            p.split("/")[1] for p in self.files if p.startswith(f"{RUNS}/") and p.endswith(f"/{CONFIG}")
        )
        return found[0] if len(found) == 1 else None


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


# ----------------------------------------------------------------------------- helpers


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_bytes(obj: Any) -> bytes:
    return utf8_json(obj, indent=2, sort_keys=True) + b"\n"


def default_bundle_root() -> Path:
    """The checkout the evaluator runs from (editable install), else the current folder."""
    repo = Path(evaluator.__file__).resolve().parents[1]
    return repo if (repo / "pyproject.toml").exists() else Path.cwd()


def read_json_bytes(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise ArchiveError(f"{what} is not valid JSON ({exc})") from None
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


def mismatched_keys(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k not in ignore and a.get(k) != b.get(k))


def secret_hits(entries: dict[str, bytes], secret: str | None) -> list[str]:
    """Entries that contain the secret in any form the boundary's filter knows (verbatim, JSON-escaped,
    URL-encoded, base64, and behind \\u escapes, percent-encoding, HTML references or double escaping)."""
    if not secret or not secret.strip():
        return []
    keys = KeyFilter(secret)
    return sorted(n for n, data in entries.items() if keys.found_in(data.decode("utf-8", "replace"), False))
