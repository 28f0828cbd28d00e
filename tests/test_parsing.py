"""The strict answer-tag parser, the diagnostic fallback and CountQA's rule, on tables of cases."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.measure import measured

from evaluator.data.parsing import ParseResult, last_integer_fallback, parse_answer_tag, parse_countqa

STRICT_CASES = [
    ("Counting.\n<answer>7</answer>", 7, "ok"),
    ("<answer>0</answer>", 0, "ok"),
    ("rationale\n<answer> 12 </answer>  \n\n", 12, "ok"),
    ("I see [[1]], [[2]].\nFinal:\n<answer>2</answer>", 2, "ok"),
    ("<answer>-1</answer>", -1, "ok"),  # an integer, just a wrong count
    ("The answer is 7.", None, "no_tag"),
    ("<answer>7</answer> because...", None, "not_final"),
    ("<answer>3</answer>\n<answer>4</answer>", None, "multiple_tags"),
    ("<answer>3.5</answer>", None, "not_integer"),
    ("<answer>three</answer>", None, "not_integer"),
    ("<answer></answer>", None, "not_integer"),
    ("<answer>1,000</answer>", None, "not_integer"),
    ("I start <answer> but rethink.\nFinal: <answer>4</answer>", None, "unclosed_tag"),
    ("<ANSWER>5</ANSWER>", None, "no_tag"),
    ("<answer>5", None, "no_tag"),
    ("", None, "no_response"),
    ("   \n", None, "no_response"),
    (None, None, "no_response"),
]


@pytest.mark.parametrize(("text", "answer", "status"), STRICT_CASES)
def test_strict_parser(text: str | None, answer: int | None, status: str) -> None:
    result = parse_answer_tag(text)
    assert (result.answer, result.status) == (answer, status)


FALLBACK_CASES = [
    ("There are 3 tables and 4 charts, so 7", 7),
    ("<answer>5</answer> wait, 6", 6),
    ("no digits here", None),
    ("minus -2", -2),
    (None, None),
]


@pytest.mark.parametrize(("text", "answer"), FALLBACK_CASES)
def test_last_integer_fallback(text: str | None, answer: int | None) -> None:
    assert last_integer_fallback(text) == answer


def test_fallback_never_used_as_primary() -> None:
    text = "I count 4 logos."
    assert parse_answer_tag(text).answer is None
    assert last_integer_fallback(text) == 4


COUNTQA_CASES = [
    ("12", 12, "ok"),
    ("  **12**  ", 12, "ok"),
    ("'7'.", 7, "ok"),
    ("_5_", 5, "ok"),
    ("There are 3 jackets, 4 hats", 3, "ok"),
    ("-3", 3, "ok"),  # sign is not understood, as in the reference
    ("1,000", 1, "ok"),  # thousands separators are not understood
    ("Total: 42;", 42, "ok"),
    ("none", None, "no_number"),
    ("", None, "no_response"),
]


@pytest.mark.parametrize(("text", "answer", "status"), COUNTQA_CASES)
def test_countqa_parser(text: str, answer: int | None, status: str) -> None:
    result = parse_countqa(text)
    assert (result.answer, result.status) == (answer, status)


# Linear in the reply (trust3 #4): the answer tag is found with str.find, not a non-greedy pattern searched
# from every opening tag (quadratic: 39 s for "<answer>" x 24,576; days at the 16 MiB reply cap).

_ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # the reference: what the parser was


def _reference_answer_tag(text: str | None) -> ParseResult:
    """parse_answer_tag as the pattern defined it (quadratic, fine on small texts)."""
    if text is None or not text.strip():
        return ParseResult(None, "no_response")
    tags = list(_ANSWER_PATTERN.finditer(text))
    if not tags:
        return ParseResult(None, "no_tag")
    if len(tags) > 1:
        return ParseResult(None, "multiple_tags")
    if text[tags[0].end() :].strip():
        return ParseResult(None, "not_final")
    inner = tags[0].group(1).strip()
    if "<answer>" in inner:
        return ParseResult(None, "unclosed_tag")
    if not re.fullmatch(r"[+-]?[0-9]+", inner) or len(inner) > 1000:
        return ParseResult(None, "not_integer")
    return ParseResult(int(inner), "ok")


_PIECES = st.sampled_from(
    ["<answer>", "</answer>", "<answer", "answer>", "</", "7", "-", " ", "\n", "x", "12"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_answer_tag_parser_equals_the_pattern(text: str) -> None:
    assert parse_answer_tag(text) == _reference_answer_tag(text)


@pytest.mark.parametrize(
    "reply",
    [
        "'<answer>' * 2_000_000",  # 16 MB of opening tags, none closed
        "'<answer>1</answer>' * 880_000",  # 16 MB of closed tags (multiple_tags)
        "'<answer>' * 1_000_000 + '</answer>' + 'x' * 7_000_000",
    ],
)
def test_answer_tag_parser_is_linear_at_the_reply_cap(reply: str) -> None:
    cost = measured(
        f"from evaluator.data.parsing import parse_answer_tag\ntext = {reply}",
        "parse_answer_tag(text)",
        deadline_s=30,
    )
    assert cost["cpu_s"] < 2.0, cost
