"""Archives for tests: read a .tar.gz's members, and tampered copies as someone editing one would make."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

from evaluator.archive.base import INDEX, SUMS, json_bytes
from evaluator.archive.pack import write_tar_gz
from evaluator.archive.verify import read_archive


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
