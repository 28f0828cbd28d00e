"""Escape decoding for the trust boundary (evaluator/core/boundary.py). Pure.

A key can hide behind JSON's \\u escapes, percent-encoding or HTML character references, even several
times over. `decoded_views` gives a text with those escapes decoded, round after round, and each view maps
a span back to where it came from in the source, so that the boundary redacts the key where it sits.
"""

from __future__ import annotations

import re
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
    def _map(self) -> tuple[list[int], list[int]]:
        # built once per view: a key found as many pieces maps each of them back through the same map
        return _positions(self.source, self.rounds)

    def original(self, start: int, end: int) -> tuple[int, int]:
        starts, ends = self._map
        return starts[start], ends[end - 1]


def _positions(source: str, rounds: int) -> tuple[list[int], list[int]]:
    """For each character of `source` decoded `rounds` times, the (start, end) of what it came from."""
    text = source
    starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
    for _ in range(rounds):
        chars: list[str] = []
        new_s: list[int] = []
        new_e: list[int] = []
        at = 0
        for m in _ESCAPE.finditer(text):
            chars.append(text[at : m.start()])
            new_s += starts[at : m.start()]
            new_e += ends[at : m.start()]
            chars.append(_unescape(m))
            new_s.append(starts[m.start()])
            new_e.append(ends[m.end() - 1])
            at = m.end()
        chars.append(text[at:])
        new_s += starts[at:]
        new_e += ends[at:]
        text, starts, ends = "".join(chars), new_s, new_e
    return starts, ends


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
