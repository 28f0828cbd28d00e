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
_BLOCK = re.compile(r'<think(?:\s+signature="([^"]*)")?(?:\s+redacted="(true)")?\s*>(.*?)</think>', re.DOTALL)


def has_inline_think(text: str | None) -> bool:
    """True when the visible text carries a think block (an opening or a closing tag)."""
    return text is not None and ("<think" in text or "</think>" in text)


def strip_think_block(text: str | None) -> str | None:
    """The text without its first think block, as the reference adapter parses it; unchanged without one."""
    if not text:
        return text
    match = _BLOCK.search(text)
    if match is None:
        return text
    return (text[: match.start()] + text[match.end() :]).strip()


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
