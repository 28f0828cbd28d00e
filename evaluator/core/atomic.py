"""The one way files are written whole: into a hidden temporary file beside the target, flushed and
fsynced, then renamed over it. A reader sees the old file or the new one, never half of one; a failed
write removes the temporary file and leaves the target as it was."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def no_follow(path: str, flags: int) -> int:
    """An `opener` for open(): the file at `path` itself, never the target of a symbolic link put there
    (OSError ELOOP for a link), so a link planted in a shared folder cannot redirect a write."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def temp_path(path: Path) -> Path:
    """The temporary file `atomic_file` writes before the rename (hidden, ends in .tmp)."""
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file object whose content replaces `path` when the block ends without an exception."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        tmp.unlink(missing_ok=True)  # a link left there is removed, never written through
        with open(tmp, "xb", opener=no_follow) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically (see atomic_file)."""
    with atomic_file(path) as f:
        f.write(data)
