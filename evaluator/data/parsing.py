"""Answer parsers. Pure functions: text in, (answer, status) out."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

OPEN_TAG, CLOSE_TAG = "<answer>", "</answer>"
STRICT_INTEGER = re.compile(r"[+-]?[0-9]+")
_LAST_INTEGER_REVERSED = re.compile(r"[0-9]+-?")  # -?[0-9]+ read backwards
DIGIT_RUN = re.compile(r"\d+")
# No count has this many digits; a longer run is degenerate output (a model looping until max_tokens),
# and int() refuses more than 4300 digits by default: such a run is a parse failure, never an exception.
MAX_ANSWER_DIGITS = 1000


@dataclass(frozen=True)
class ParseResult:
    answer: int | None
    status: str  # "ok" or the reason it failed

    @property
    def ok(self) -> bool:
        return self.answer is not None


def next_tag(text: str, pos: int) -> tuple[int, int] | None:
    """The (start, end) of the first <answer>...</answer> at or after `pos`: the first opening tag and the
    first closing tag after it (what the non-greedy pattern <answer>(.*?)</answer> matches), found with two
    str.find calls, so reading every tag of a text stays linear in its length (the pattern's search is
    quadratic on a text of many unclosed opening tags)."""
    start = text.find(OPEN_TAG, pos)
    if start < 0:
        return None
    close = text.find(CLOSE_TAG, start + len(OPEN_TAG))
    return None if close < 0 else (start, close + len(CLOSE_TAG))


def parse_answer_tag(text: str | None) -> ParseResult:
    """DocCount's primary parser.

    Exactly one <answer>N</answer> tag, N an integer (surrounding spaces allowed), and the tag is
    the final non-whitespace content. Anything else is a parse failure.
    """
    if text is None or not text.strip():
        return ParseResult(None, "no_response")
    first = next_tag(text, 0)
    if first is None:
        return ParseResult(None, "no_tag")
    start, end = first
    if next_tag(text, end) is not None:
        return ParseResult(None, "multiple_tags")
    if text[end:].strip():
        return ParseResult(None, "not_final")
    inner = text[start + len(OPEN_TAG) : end - len(CLOSE_TAG)].strip()
    if "<answer>" in inner:  # an <answer> opened earlier and never closed: the tag runs from there
        return ParseResult(None, "unclosed_tag")
    if not STRICT_INTEGER.fullmatch(inner) or len(inner) > MAX_ANSWER_DIGITS:
        return ParseResult(None, "not_integer")
    return ParseResult(int(inner), "ok")


def last_integer_fallback(text: str | None) -> int | None:
    """Diagnostic only: the last integer anywhere in the visible text (never the primary answer).

    The last match of -?[0-9]+, found by searching the reversed text (digits, then an optional minus):
    answers sit at the end, so this reads a few characters instead of the whole response.
    """
    if not text:
        return None
    found = _LAST_INTEGER_REVERSED.search(text[::-1])
    return int(found.group(0)[::-1]) if found and len(found.group(0)) <= MAX_ANSWER_DIGITS else None


_COUNTQA_STRIP = "*_\"'`.,:; \t\r\n\u201c\u201d\u2018\u2019"


def parse_countqa(text: str | None) -> ParseResult:
    """CountQA's reference rule: a bare integer after stripping decoration, else the first digit run.

    Sign and thousands separators are deliberately not understood ("-3" reads 3, "1,000" reads 1),
    matching the reference implementation.
    """
    if text is None or not text.strip():
        return ParseResult(None, "no_response")
    stripped = text.strip(_COUNTQA_STRIP)
    if DIGIT_RUN.fullmatch(stripped) and len(stripped) <= MAX_ANSWER_DIGITS:
        return ParseResult(int(stripped), "ok")
    first = DIGIT_RUN.search(text)
    if first is None:
        return ParseResult(None, "no_number")
    if len(first.group(0)) > MAX_ANSWER_DIGITS:
        return ParseResult(None, "not_integer")
    return ParseResult(int(first.group(0)), "ok")


# --strip-token: exact strings a server leaks around the answer (GLM-4.6V's <|begin_of_box|> /
# <|end_of_box|> kept by a reasoning parser that does not skip special tokens) removed before the strict
# parser. A token that could change a count is refused: one holding a digit or an answer tag's start.
STRIP_TOKEN_REFUSED = ("<answer", "</answer")


def strip_token_problem(token: str) -> str | None:
    """Why `token` may not be stripped (it could change a count, or strips nothing); None when it may."""
    if not token:
        return "an empty token strips nothing"
    if any(c.isdigit() for c in token):
        return f"{token!r} holds a digit: removing it could change a count"
    lowered = token.lower()
    for tag in STRIP_TOKEN_REFUSED:
        if tag in lowered:
            return f"{token!r} holds {tag!r}: removing it could change which answer is read"
    for tag in ("<answer>", "</answer>"):
        if _overlaps(token, tag):
            return f"{token!r} could cut into an {tag} tag: removing it could change which answer is read"
    return None


def _overlaps(token: str, tag: str) -> bool:
    """Whether an occurrence of `token` can share characters with one of `tag` (one inside the other, or
    the end of one being the start of the other)."""
    if token in tag:
        return True
    shorter = min(len(token), len(tag))
    return any(token[-k:] == tag[:k] or tag[-k:] == token[:k] for k in range(1, shorter))


def strip_tokens(text: str | None, tokens: tuple[str, ...] | list[str]) -> str | None:
    """`text` with every occurrence of each token removed, in one left-to-right pass (the longest token
    first where two start at the same place); None and an empty token list leave it unchanged."""
    if not text or not tokens:
        return text
    pattern = _strip_pattern(tuple(tokens))
    return text if pattern is None else pattern.sub("", text)


@functools.lru_cache(maxsize=16)
def _strip_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    alternatives = sorted({t for t in tokens if t}, key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in alternatives)) if alternatives else None
