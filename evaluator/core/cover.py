"""A cover: one byte per character of a text, 1 where the character is to be replaced (the key filter's
finds, core/boundary.py). Its memory is the text's length in bytes, however many finds cover it. Pure."""

from __future__ import annotations

import re

RUN = re.compile(rb"\x01+")  # a run of covered characters in a cover
_ONES = memoryview(b"\x01" * 65536)


def mark(cover: bytearray, start: int, end: int) -> None:
    """Cover characters start..end (a slice of _ONES at a time: the cover never changes length)."""
    while start < end:
        n = min(end - start, len(_ONES))
        cover[start : start + n] = _ONES[:n]
        start += n


def replaced(text: str, cover: bytearray, mark_text: str) -> str:
    """The text with each run of covered characters as one `mark_text`."""
    out, at = [], 0
    for run in RUN.finditer(cover):
        out += [text[at : run.start()], mark_text]
        at = run.end()
    out.append(text[at:])
    return "".join(out)
