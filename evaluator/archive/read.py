"""Read an archive within limits: members streamed out of the gzip one at a time, hashed in 1 MiB chunks,
small ones kept in memory and larger ones spilled to a temporary folder, so neither memory nor the
temporary disk grows past the limits whatever the archive's headers claim.

The limits are checked against each tar header before a member is read (its size, an extended header's
size, the number of members) and again while the bytes stream (every byte the gzip gives out counts
against the total, and the bytes after the tar's end are bounded), because a header can lie.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from evaluator.archive.base import (
    INDEX,
    SUMS,
    Archive,
    ArchiveError,
    ArchiveLimitError,
    Budget,
    Members,
    size_text,
)
from evaluator.archive.opened import OpenedArchive, parse_archive

MiB, GiB = 1024 * 1024, 1024 * 1024 * 1024
CHUNK = MiB


@dataclass(frozen=True)
class Limits:
    """What `verify` and `reproduce` read of one archive (docs/archive.md gives the reasoning)."""

    members: int = 10_000  # tar entries, folders included
    member_bytes: int = 2 * GiB  # one member, unpacked
    total_bytes: int = 8 * GiB  # the budget: what the gzip, nested archives and verify's copies unpack to
    header_bytes: int = MiB  # one PAX or long-name header (read whole by tarfile)
    trailing_bytes: int = MiB  # after the tar's end (tar pads to 10 KiB)
    in_memory: int = MiB  # members up to this size stay in memory; larger ones go to disk


LIMITS = Limits()
_EXTENDED = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


class _Counted:
    """The gzip stream as tarfile reads it, every byte charged to the budget (base.Budget: one for the
    archive, the archives nested in it and the copies made of their members)."""

    def __init__(self, raw: gzip.GzipFile, path: Path, budget: Budget) -> None:
        self.raw, self.path, self.budget, self.count = raw, path, budget, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n if n >= 0 else CHUNK)
        self.count += len(data)
        self.budget.spend(len(data), str(self.path))
        return data


def _info_class(path: Path, limits: Limits) -> type[tarfile.TarInfo]:
    class Info(tarfile.TarInfo):
        # tarfile reads an extended header's body whole before any member is yielded: check it first
        def _proc_member(self, tar: tarfile.TarFile) -> Any:
            if self.type in _EXTENDED and self.size > limits.header_bytes:
                raise ArchiveLimitError(
                    f"{path}: a header before {self.name!r} is {self.size} bytes, over the "
                    f"{size_text(limits.header_bytes)} limit of a doccount archive; refusing to read it"
                )
            return super()._proc_member(tar)  # type: ignore[misc]

    return Info


def _safe_parts(name: str) -> list[str] | None:
    p = PurePosixPath(name)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts):
        return None
    return list(p.parts)


def _check_member(path: Path, member: tarfile.TarInfo, n: int, limits: Limits) -> list[str]:
    """The member's path parts, once its header is within the limits and its type one an archive has."""
    if n > limits.members:
        raise ArchiveLimitError(
            f"{path} has more than {limits.members} members (at {member.name!r}), the limit of a doccount "
            "archive; refusing to read it"
        )
    parts = _safe_parts(member.name)
    regular = member.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
    if parts is None or not (regular or member.isdir()):
        raise ArchiveError(
            f"{path} is not a doccount archive (unexpected entry {member.name!r}); refusing to read it"
        )
    if member.size > limits.member_bytes:
        raise ArchiveLimitError(
            f"{path}: member {member.name!r} is {member.size} bytes unpacked, over the "
            f"{size_text(limits.member_bytes)} member limit of a doccount archive; refusing to read it"
        )
    return parts


def _copy_member(
    path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo, rel: str, members: Members, limits: Limits
) -> None:
    """Stream one member into `members`: hashed in chunks, in memory when small, else on disk."""
    fobj = tar.extractfile(member)
    digest = hashlib.sha256()
    seen = 0
    with io.BytesIO() if member.size <= limits.in_memory else members.spill(rel) as out:
        while fobj is not None and (chunk := fobj.read(CHUNK)):
            seen += len(chunk)
            if seen > member.size:  # tarfile stops at the header's size; never trust that alone
                raise ArchiveLimitError(f"{path}: member {member.name!r} is longer than its header says")
            digest.update(chunk)
            out.write(chunk)
        data = out.getvalue() if isinstance(out, io.BytesIO) else None
    if seen != member.size:
        raise ArchiveError(f"{path} is truncated or damaged (entry {member.name} is cut short)")
    members.add(rel, data, digest.hexdigest(), seen)


def _read_members(
    path: Path, counted: _Counted, limits: Limits, members: Members
) -> tuple[set[str], list[str]]:
    duplicates: list[str] = []
    tops: set[str] = set()
    kinds: dict[str, bool] = {}  # every path seen -> is it a folder
    with tarfile.open(fileobj=counted, mode="r|", tarinfo=_info_class(path, limits)) as tar:  # type: ignore[call-overload]
        for n, member in enumerate(tar, 1):
            parts = _check_member(path, member, n, limits)
            tar.members = []  # stream mode keeps every header otherwise
            _check_kinds(path, parts, member.isdir(), kinds)
            tops.add(parts[0])
            if member.isdir() or len(parts) == 1:
                continue
            rel = "/".join(parts[1:])
            if rel in members:
                duplicates.append(rel)
            _copy_member(path, tar, member, rel, members, limits)
    return tops, duplicates


def _check_kinds(path: Path, parts: list[str], is_dir: bool, kinds: dict[str, bool]) -> None:
    """A name is a file or a folder, never both: `scores` beside `scores/summary.json` cannot be unpacked."""
    for i in range(1, len(parts) + 1):
        name = "/".join(parts[:i])
        folder = is_dir or i < len(parts)
        if kinds.setdefault(name, folder) != folder:
            raise ArchiveError(
                f"{path} is not a doccount archive ({name!r} is both a file and a folder); refusing to read it"
            )


def read_archive(path: Path, limits: Limits = LIMITS, budget: Budget | None = None) -> OpenedArchive:
    """Read a doccount archive whole, within `limits` (so truncation is always noticed), and parse it once;
    ArchiveError on bad input. `budget`: the one of the archive this one is nested in. Use it in a `with`
    block: its large members are in a temporary folder, removed when the block ends (or reading fails)."""
    path = Path(path)
    budget = budget if budget is not None else Budget(path, limits.total_bytes)
    members = Members(budget)
    try:
        return _read_archive(path, limits, members, budget)
    except BaseException:
        members.close()
        raise


def _read_archive(path: Path, limits: Limits, members: Members, budget: Budget) -> OpenedArchive:
    if not path.exists():
        raise ArchiveError(f"{path} does not exist")
    if path.is_dir():
        raise ArchiveError(f"{path} is a folder; pass the .tar.gz file written by doccount archive")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"\x1f\x8b":
        raise ArchiveError(
            f"{path} is not a gzip file, so not a doccount archive (expected the .tar.gz of doccount archive)"
        )
    try:
        with gzip.open(path, "rb") as gz:
            counted = _Counted(gz, path, budget)
            tops, duplicates = _read_members(path, counted, limits, members)
            after = counted.count
            while counted.read(CHUNK):
                if counted.count - after > limits.trailing_bytes:
                    raise ArchiveLimitError(
                        f"{path} has more than {size_text(limits.trailing_bytes)} after the end of its tar "
                        "archive (a header that hides data?); refusing to read it"
                    )
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ArchiveError(f"{path} is truncated or damaged ({exc}); copy the archive again") from None
    except tarfile.TarError as exc:
        raise ArchiveError(f"{path} is a gzip file but not a readable tar archive ({exc})") from None
    except OSError as exc:
        raise ArchiveError(f"{path} cannot be read ({exc}); copy the archive again") from None
    if len(tops) != 1 or SUMS not in members or INDEX not in members:
        raise ArchiveError(
            f"{path} is not a doccount archive (no {SUMS} and {INDEX} under one top folder); "
            "archives are written by doccount archive"
        )
    return parse_archive(Archive(path, tops.pop(), members, duplicates))
