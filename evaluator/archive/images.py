"""No image of the data in an archive, whatever a member's name (DocCount's licence does not allow passing
the images on; docs/archive.md). The only images an archive holds are the score plots (scores/<plot>.png),
embedded again in the archive's own report.html; any other member that carries image data (a data: URL,
an image signature, raw or in base64) is refused by `archive` and reported by `verify`. The scan reads
large members in chunks (an overlap carries a mark that straddles two).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import PurePosixPath

from evaluator.archive.base import WHOLE_BYTES, Archive, Members, Problem
from evaluator.report.base import REPORT_FILE
from evaluator.scoring.base import SCORES_DIR
from evaluator.scoring.plot_worker import PLOT_GROUPS, PLOT_PRED_TRUE

PLOTS = (PLOT_GROUPS, PLOT_PRED_TRUE)
PNG = b"\x89PNG\r\n\x1a\n"
# data: URLs of images; JPEG, PNG, GIF and WebP signatures raw; the base64 of a JPEG, PNG or GIF start
MARK = re.compile(
    rb"data:\s*image/|\xff\xd8\xff|\x89PNG\r\n\x1a\n|GIF8[79]a|RIFF.{4}WEBP|iVBORw0KGgo|/9j/[4-7]|R0lGOD[dl]h",
    re.IGNORECASE | re.DOTALL,
)
PLOT_URL = re.compile(rb"data:image/png;base64,([A-Za-z0-9+/]+={0,2})")
OVERLAP = 32  # longer than any mark
CHUNK = 1 << 20


def is_plot(name: str) -> bool:
    """A score plot of a run folder: runs/<run>/scores/<plot>.png."""
    parts = PurePosixPath(name).parts
    return len(parts) == 4 and parts[0] == "runs" and parts[2] == "scores" and parts[3] in PLOTS


def is_report(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return len(parts) == 4 and parts[0] == "runs" and parts[2] == SCORES_DIR and parts[3] == REPORT_FILE


def has_mark(chunks: Iterable[bytes]) -> bool:
    """Whether the bytes, given in chunks, hold image data."""
    tail = b""
    for chunk in chunks:
        window = tail + chunk
        if MARK.search(window):
            return True
        tail = window[-OVERLAP:]
    return False


def _report_problem(page: bytes, plots: set[bytes]) -> str | None:
    """The archive's report.html may embed the archived plots, and no other image."""
    rest, start = [], 0
    for found in PLOT_URL.finditer(page):
        try:
            image = base64.b64decode(found.group(1), validate=True)
        except ValueError:
            return "embeds an image that is not valid base64"
        if image not in plots:
            return "embeds an image that is not one of the archived score plots"
        rest.append(page[start : found.start()])
        start = found.end()
    rest.append(page[start:])
    return "holds image data besides the score plots" if has_mark(rest) else None


def image_problems(files: Mapping[str, bytes], skip: Iterable[str] = ()) -> list[Problem]:
    """A Problem for each member (but `skip`) that holds an image other than a score plot."""
    skipped = set(skip)
    small = {n for n in files if _size(files, n) <= WHOLE_BYTES}
    plots = {files[n] for n in files if is_plot(n) and n in small and n not in skipped}
    problems = []
    for name in sorted(files):
        if name in skipped:
            continue
        if is_plot(name):
            if name not in small or not next(_chunks(files, name, 8), b"").startswith(PNG):
                problems.append(Problem(name, "is not a PNG of a plot's size, so not a score plot"))
        elif is_report(name):
            why = _report_problem(files[name], plots) if name in small else "is too large to be a report"
            if why:
                problems.append(Problem(name, why))
        elif has_mark(_chunks(files, name)):
            problems.append(Problem(name, "holds image data; an archive holds no image of the data"))
    return problems


def _size(files: Mapping[str, bytes], name: str) -> int:
    return files.size.get(name, 0) if isinstance(files, Members) else len(files[name])


def _chunks(files: Mapping[str, bytes], name: str, first: int = 0) -> Iterator[bytes]:
    """A member's bytes in chunks, a spilled one read from disk (only its first `first` bytes if given)."""
    if isinstance(files, Members):
        yield from files.chunks(name, CHUNK, first)
        return
    data = files[name]
    if first:
        yield data[:first]
        return
    for i in range(0, max(len(data), 1), CHUNK):
        yield data[i : i + CHUNK]


def check_images(
    archive: Archive, problems: list[Problem], checks: list[str], skip: Iterable[str] = ()
) -> None:
    """verify's check: no member holds an image of the data."""
    found = image_problems(archive.files, skip)
    problems += found
    if not found:
        checks.append("images: none but the score plots")
