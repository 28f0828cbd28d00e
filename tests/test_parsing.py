"""The strict answer-tag parser, the diagnostic fallback and CountQA's rule, on tables of cases."""

from __future__ import annotations

import pytest

from evaluator.data.parsing import last_integer_fallback, parse_answer_tag, parse_countqa

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
