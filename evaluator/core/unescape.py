"""Escape decoding for the trust boundary (evaluator/core/boundary.py). Pure.

A key can hide behind JSON's \\u escapes, percent-encoding or HTML character references, even several
times over. `decoded_views` gives a text with those escapes decoded, round after round, and each view maps
a span back to where it came from in the source, so that the boundary redacts the key where it sits.

A cover: one byte per character of a text, 1 where the character is to be replaced (the key filter's
finds, core/boundary.py). Its memory is the text's length in bytes, however many finds cover it. Pure.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property

# The escapes a text can hide the key behind, decoded before matching, repeatedly (a JSON string may hold
# a \\u escape; a percent sign may itself be percent-encoded): JSON's \\uXXXX, \\\\, \\/ and \\";
# percent-encoding; HTML's numeric character references.
_ESCAPE = re.compile(
    r'\\u([0-9a-fA-F]{4})|\\([\\/"])|%([0-9a-fA-F]{2})|&#([0-9]{1,7});|&#[xX]([0-9a-fA-F]{1,6});'
)
_ROUNDS = 4  # "%25252573" is "s" percent-encoded four times


def _unescape(m: re.Match[str]) -> str:
    u, char, pct, dec, hexa = m.groups()
    if char:
        return char
    code = int(dec) if dec else int(u or pct or hexa, 16)
    return chr(code) if code <= 0x10FFFF else "\ufffd"


@dataclass
class DecodedView:
    """A text with its escapes decoded `rounds` times; `original` maps a span of it back to the source
    (so that a key found in the view is redacted where it sits in the source)."""

    text: str
    source: str
    rounds: int

    @cached_property
    def _rounds(self) -> list[_Round]:
        # built once per view: a key found as many pieces maps each of them back through the same tables
        return _rounds(self.source, self.rounds)

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the source that the view's characters start..end came from."""
        last = end - 1
        for escapes in reversed(self._rounds):
            start, last = escapes.back(start)[0], escapes.back(last)[1] - 1
        return start, last + 1


@dataclass
class _Round:
    """Where one round of decoding put the characters its escapes became: `at` (positions in the decoded
    text, ascending) and the span of the text before the round each came from. Memory grows with the
    escapes, not with the text (a table per character took gigabytes at the reply size cap)."""

    at: array[int]
    starts: array[int]
    ends: array[int]

    def back(self, char: int) -> tuple[int, int]:
        """The span of the text before this round that character `char` of its result came from."""
        i = bisect_right(self.at, char) - 1
        if i >= 0 and self.at[i] == char:
            return self.starts[i], self.ends[i]
        # what the escapes before it took up, less 1 each
        shift = self.ends[i] - self.at[i] - 1 if i >= 0 else 0
        return char + shift, char + shift + 1


def _rounds(source: str, rounds: int) -> list[_Round]:
    """The escapes of each of `rounds` rounds of decoding `source`."""
    text, out = source, []
    for _ in range(rounds):
        escapes = _Round(array("q"), array("q"), array("q"))
        removed = 0
        for m in _ESCAPE.finditer(text):
            escapes.at.append(m.start() - removed)
            escapes.starts.append(m.start())
            escapes.ends.append(m.end())
            removed += m.end() - m.start() - 1
        out.append(escapes)
        text = _ESCAPE.sub(_unescape, text)
    return out


def decoded_views(text: str) -> list[DecodedView]:
    """The text decoded once, twice, ... until no escape is left (at most _ROUNDS times); [] without any."""
    views: list[DecodedView] = []
    current = text
    for rounds in range(1, _ROUNDS + 1):
        if "\\" not in current and "%" not in current and "&#" not in current:
            break
        decoded = _ESCAPE.sub(_unescape, current)
        if decoded == current:
            break
        views.append(DecodedView(decoded, text, rounds))
        current = decoded
    return views


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
