"""Reasoning text that arrives inline in the visible content (`<think>...</think>`). Pure.

A reasoning model served without a reasoning parser (vLLM's --reasoning-parser) sends its thinking in
`content`. Qwen3-style chat templates open the block in the prompt, so the reply may hold only the
closing `</think>` (vLLM's qwen3 reasoning parser docs); both forms are flagged.
"""

from __future__ import annotations

import re

# The block EvalScope cleaves off a reply before its adapters parse it: the first <think ...>...</think>
# (with optional signature/redacted attributes), wherever it starts; the rest is whitespace-stripped
# (modelscope/evalscope, evalscope/api/messages/utils.py parse_content_with_reasoning).
# Found without one pattern over the whole text (`<think ...>(.*?)</think>` searched from every `<think` to
# the end is quadratic on a text of many unclosed tags): each opening tag is read with the short patterns
# below, and it opens a block when a closing tag follows it, which one rfind tells.
_SIGNATURE = re.compile(r'\s+signature="[^"]*"')
_REDACTED = re.compile(r'\s+redacted="true"')
_TAG_END = re.compile(r"\s*>")
OPEN, CLOSE = "<think", "</think>"


def has_inline_think(text: str | None) -> bool:
    """True when the visible text carries a think block (an opening or a closing tag)."""
    return text is not None and ("<think" in text or "</think>" in text)


def strip_think_block(text: str | None) -> str | None:
    """The text without its first think block, as the reference adapter parses it; unchanged without one."""
    if not text:
        return text
    block = first_block(text)
    if block is None:
        return text
    return (text[: block[0]] + text[block[1] :]).strip()


def opening_tag_end(text: str, start: int) -> int | None:
    """Where the opening tag `<think` at `start` ends (after its `>`), with its optional signature and
    redacted attributes in that order; None when it is not such a tag. Each part is read once: a signature
    runs to the next quote, so the scans of different tags never overlap."""
    at = start + len(OPEN)
    for part in (_SIGNATURE, _REDACTED):
        found = part.match(text, at)
        if found:
            at = found.end()
    end = _TAG_END.match(text, at)
    return end.end() if end else None


def first_block(text: str) -> tuple[int, int] | None:
    """The (start, end) of the first think block: the first opening tag with a `</think>` after it, up to
    that closing tag. Linear in the text's length."""
    last_close = text.rfind(CLOSE)
    start = text.find(OPEN)
    while 0 <= start <= last_close:
        body = opening_tag_end(text, start)
        if body is not None and body <= last_close:
            return start, text.find(CLOSE, body) + len(CLOSE)
        start = text.find(OPEN, start + 1)
    return None


def inline_think_count(rows: list[dict]) -> dict[str, int]:
    """Summary entry: how many answered rows carry inline reasoning (left out when none does)."""
    n = sum(1 for r in rows if r.get("inline_think") is True)
    return {"inline_think_responses": n} if n else {}


def inline_think_warnings(rows: list[dict]) -> list[str]:
    n = inline_think_count(rows).get("inline_think_responses")
    if not n:
        return []
    return [
        f"{n} response(s) carry a <think> block in the visible text (flagged inline_think in the records): the "
        "server returns its reasoning inline; serve the model with a reasoning parser (vLLM --reasoning-parser, "
        "REASONING_PARSER for scripts/serve_vllm.sh) so that only the answer is parsed"
    ]
