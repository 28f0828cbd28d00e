"""Response identity between an original run and its reproduction, response by response. Pure.

Rows are paired by (sample_id, repeat). A pair is *identical* when `response_text` and
`reasoning_text` are the same strings (the same UTF-8 bytes; a missing reasoning text on both sides
counts as the same). Otherwise it *differs*, and the first differing token is named.

A "token" here is not the model's tokenizer (the evaluator does not have it): the text is cut into
maximal runs of word characters (`\\w+`), maximal runs of whitespace (`\\s+`), and single other
characters (each punctuation mark or symbol alone), left to right; the concatenation of the tokens
is the text. The position is the 0-based index of the first token that differs (a token the shorter
text lacks counts as differing), with its character offset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from evaluator.scoring.row import ScoredRow

TOKEN = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)
TOKEN_DEFINITION = "regex tokens: maximal \\w+ runs, maximal \\s+ runs, or one other character"
TEXT_FIELDS = ("response_text", "reasoning_text")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@dataclass(frozen=True)
class FirstDifference:
    field: str
    token: int  # 0-based index of the first differing token
    char: int  # its character offset in the text


def first_difference(a: str | None, b: str | None) -> tuple[int, int] | None:
    """(token index, character offset) of the first difference between two texts; None when equal."""
    if a == b:
        return None
    ta, tb = tokens(a or ""), tokens(b or "")
    offset = 0
    for i, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if x != y:
            return i, offset
        offset += len(x)
    return min(len(ta), len(tb)), offset


def compare_responses(a: ScoredRow, b: ScoredRow) -> FirstDifference | None:
    """None when both rows carry the same texts; else where they first differ (response text first)."""
    for name in TEXT_FIELDS:
        diff = first_difference(getattr(a, name), getattr(b, name))
        if diff is not None:
            return FirstDifference(name, *diff)
    return None


def _has_response(row: ScoredRow) -> bool:
    return row.status == "ok" and row.response_text is not None


class Difference(TypedDict):
    """Where a pair of responses first differs (0-based token and character)."""

    sample_id: str
    repeat: int
    field: str
    token: int
    char: int


class Identity(TypedDict):
    """response_identity: the reproduced responses against the original ones."""

    paired: int
    compared: int
    identical: int
    differing: int
    without_response: int
    token_definition: str
    differences: list[Difference]


def response_identity(original: list[ScoredRow], new: list[ScoredRow]) -> Identity:
    """How many paired responses came back byte-identical, how many differ, and where.

    `compared` counts pairs where both sides have a response (status ok); pairs where either side
    has none are `without_response` and are neither identical nor differing.
    """
    by_key = {r.key: r for r in new}
    identical = without = paired = 0
    differing: list[Difference] = []
    for o in original:
        key = o.key
        r = by_key.get(key)
        if r is None:
            continue
        paired += 1
        if not (_has_response(o) and _has_response(r)):
            without += 1
            continue
        diff = compare_responses(o, r)
        if diff is None:
            identical += 1
        else:
            differing.append(
                {
                    "sample_id": key[0],
                    "repeat": key[1],
                    "field": diff.field,
                    "token": diff.token,
                    "char": diff.char,
                }
            )
    return {
        "paired": paired,
        "compared": identical + len(differing),
        "identical": identical,
        "differing": len(differing),
        "without_response": without,
        "token_definition": TOKEN_DEFINITION,
        "differences": differing,
    }


def render_identity(c: Identity, limit: int = 20) -> str:
    n = c["compared"]
    without = c["without_response"]
    tail = f"; {without} pair(s) without a response on one side" if without else ""
    out = [
        f"Byte-identical responses (response_text and reasoning_text): {c['identical']} / {n}; "
        f"differing: {c['differing']} / {n}{tail}."
    ]
    if c["differences"]:
        out += [
            "",
            f"First differing token ({c['token_definition']}), 0-based:",
            "",
            "| sample_id | repeat | field | token | char |",
            "| --- | ---: | --- | ---: | ---: |",
        ]
        for d in c["differences"][:limit]:
            out.append(f"| {d['sample_id']} | {d['repeat']} | {d['field']} | {d['token']} | {d['char']} |")
        if len(c["differences"]) > limit:
            out.append(f"| ... {len(c['differences']) - limit} more | | | | |")
    return "\n".join(out) + "\n"
