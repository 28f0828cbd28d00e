"""The inline think block (evaluator/data/reasoning.py): the first `<think ...>...</think>` found in time linear
in the reply (trust3 #4: the pattern it replaced, searched from every `<think`, was quadratic)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.measure import measured

from evaluator.data.reasoning import strip_think_block

# the reference: the pattern EvalScope's adapter uses, which the block finder replaced
_BLOCK = re.compile(r'<think(?:\s+signature="([^"]*)")?(?:\s+redacted="(true)")?\s*>(.*?)</think>', re.DOTALL)


def _reference(text: str | None) -> str | None:
    if not text:
        return text
    match = _BLOCK.search(text)
    return text if match is None else (text[: match.start()] + text[match.end() :]).strip()


_PIECES = st.sampled_from(
    [
        "<think",
        ">",
        "</think>",
        " ",
        "\n",
        'signature="',
        '"',
        'redacted="true"',
        'redacted="false"',
        "x",
        "<",
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_strip_think_block_equals_the_pattern(text: str) -> None:
    assert strip_think_block(text) == _reference(text)


@pytest.mark.parametrize(
    ("text", "left"),
    [
        ("<think>plan</think>\n<answer>3</answer>", "<answer>3</answer>"),
        ('a <think signature="s1" redacted="true" >b</think> c', "a  c"),
        ("</think>3", "</think>3"),  # a closing tag alone is no block (the reference adapter's rule)
        ("<think>open", "<think>open"),
    ],
)
def test_strip_think_block_cases(text: str, left: str) -> None:
    assert strip_think_block(text) == left


@pytest.mark.parametrize(
    "reply",
    [
        "'<think>' * 2_000_000",  # 14 MB of opening tags, none closed
        "'<think signature=\"' * 800_000",  # signatures that never close
        "'<think' + ' ' * 8_000_000 + '</think>' + '<think>' * 1_000_000",
        "'<think signature=\"x\"' * 500_000 + '</think>'",
    ],
)
def test_strip_think_block_is_linear_at_the_reply_cap(reply: str) -> None:
    cost = measured(
        f"from evaluator.data.reasoning import strip_think_block\ntext = {reply}",
        "strip_think_block(text)",
        deadline_s=30,
    )
    assert cost["cpu_s"] < 2.0, cost
