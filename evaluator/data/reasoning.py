"""The reasoning mode: what a run declared (`--reasoning on|off`) and what its responses show. Pure.

A response shows reasoning when it has any of three signals: a reasoning text apart from the answer
(vLLM's and OpenRouter's `reasoning`, older vLLM's and DeepSeek's `reasoning_content`: the record's
`reasoning_text`), reasoning tokens the server reports (`usage.completion_tokens_details.reasoning_tokens`
> 0: OpenAI and others hide the text and bill the tokens), or a think block in the visible text (a model
served without a reasoning parser; `<thought>` blocks too: Google's OpenAI compatibility layer returns
Gemini's thoughts so when asked with `include_thoughts`). A text or a think block that holds only whitespace does not count:
chat templates such as Qwen3's emit an empty `<think>\n\n</think>` when thinking is off.

The smoke check (`SmokeCheck`): with a declared mode, the first SMOKE_RESPONSES answered responses of an
invocation decide whether the run goes on; if all of them contradict the mode, the run stops
(`ReasoningMismatch`, exit 2 in evaluate, state "stopped" in a sweep).

Reasoning text that arrives inline in the visible content (`<think>...</think>`): a reasoning model
served without a reasoning parser (vLLM's --reasoning-parser) sends its thinking in `content`. Qwen3-style
chat templates open the block in the prompt, so the reply may hold only the closing `</think>` (vLLM's
qwen3 reasoning parser docs); both forms are flagged.

The format smoke check: a model whose answers never parse (a special token the server leaves after the
tag, thinking in the content with a quoted tag, every answer cut off at the output limit) would spend a
whole run on rows that all count as wrong. `FormatCheck` sees the first FORMAT_SMOKE_RESPONSES answered
responses (or all the invocation sends, when fewer): if every one failed the strict parser, or every one
was cut off at the output limit (finish_reason "length"), the run stops (`FormatMismatch`, exit 2 in
evaluate, state "stopped" in a sweep), with the parse statuses seen, the text that broke the rule and the fix.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, TypedDict

from evaluator.core.errors import UserError
from evaluator.core.records import ResponseRecord
from evaluator.data.parsing import strip_tokens

MODES = ("on", "off")
SMOKE_RESPONSES = 4
# Every smoke-stop line starts so (after "error: "); a sweep's unit learns of the stop from the outcome file.
STOP_LINE_START = "reasoning declared "
SIGNALS = ("a reasoning text", "reasoning tokens", "a <think> or <thought> block")
INLINE_TAGS = ("think", "thought")  # <thought>: Gemini's thoughts through Google's OpenAI layer


def inline_think_text(text: str | None) -> str:
    """The reasoning a visible text carries inline: what precedes the first `</think>` (after an opening
    tag when there is one), or what follows an unclosed `<think ...>`; the same for a `<thought>` block;
    empty without one."""
    for tag in INLINE_TAGS:
        found = _inline_block(text, tag)
        if found:
            return found
    return ""


def _inline_block(text: str | None, tag: str) -> str:
    if text is None or (f"<{tag}" not in text and f"</{tag}>" not in text):
        return ""
    head, closed, _ = text.partition(f"</{tag}>")
    start = head.find(f"<{tag}")
    if start >= 0:  # an opening tag: the block starts after its '>'
        opened = head.find(">", start)
        head = head[opened + 1 :] if opened >= 0 else ""
    elif not closed:
        return ""
    return head.strip()


def signals(reasoning_text: Any, reasoning_tokens: Any, response_text: Any) -> tuple[bool, bool, bool]:
    """Which of the three signals a response shows (SIGNALS' order); values of a wrong type show none."""
    text = isinstance(reasoning_text, str) and bool(reasoning_text.strip())
    tokens = (
        isinstance(reasoning_tokens, int) and not isinstance(reasoning_tokens, bool) and reasoning_tokens > 0
    )
    inline = isinstance(response_text, str) and bool(inline_think_text(response_text))
    return text, tokens, inline


def shows_reasoning(reasoning_text: Any, reasoning_tokens: Any, response_text: Any) -> bool:
    """Whether a response shows reasoning: any of the three signals."""
    return any(signals(reasoning_text, reasoning_tokens, response_text))


class ReasoningObserved(TypedDict):
    """summary.json `reasoning`."""

    declared: str | None
    with_reasoning: int
    answered: int
    observed_share: float | None
    observable: bool


def observed(declared: str | None, shown: Iterable[bool], observable: bool = True) -> ReasoningObserved:
    """summary.json `reasoning`: the declared mode (None: not declared) and, of the answered responses
    (`shown`: whether each showed reasoning), how many did; observed_share is None when none was answered,
    and when the provider cannot show reasoning at all (`observable` False: a preset says so)."""
    flags = list(shown)
    with_reasoning = sum(flags)
    return {
        "declared": declared,
        "with_reasoning": with_reasoning,
        "answered": len(flags),
        "observed_share": with_reasoning / len(flags) if flags and observable else None,
        "observable": observable,
    }


class SmokeStop(UserError):
    """A smoke check's stop: the first answers show the run would not count (exit 2, state "stopped")."""


class ReasoningMismatch(SmokeStop):
    """The first answered responses all contradict the declared mode: the run stops (exit 2)."""

    def __init__(self, declared: str, seen: list[tuple[bool, bool, bool]]) -> None:
        n = len(seen)
        shown = sum(1 for s in seen if any(s))
        if declared == "on":
            what = f"{shown} of {n} answered responses showed reasoning (no reasoning text, reasoning tokens or <think>/<thought> block)"
            fix = (
                "turn the model's reasoning on: serve it with a reasoning parser (vLLM --reasoning-parser), "
                'pass its chat-template kwargs (e.g. --extra-body-json \'{"chat_template_kwargs": '
                "{\"enable_thinking\": true}}') or set the provider's reasoning field (e.g. Anthropic's "
                "thinking, OpenAI's reasoning_effort); or declare --reasoning off"
            )
        else:
            counts = ", ".join(f"{sum(1 for s in seen if s[i])} with {w}" for i, w in enumerate(SIGNALS))
            what = f"{shown} of {n} answered responses showed reasoning ({counts})"
            fix = (
                "turn the model's reasoning off: its chat-template kwargs (e.g. --extra-body-json "
                '\'{"chat_template_kwargs": {"enable_thinking": false}}\') or the provider\'s reasoning field '
                "(leave out thinking, a lower reasoning_effort); or declare --reasoning on"
            )
        super().__init__(
            f"{STOP_LINE_START}{declared}, but {what}; no new request was sent. Fix: {fix}. The answered rows "
            "are saved; a changed request needs a new --run-name"
        )
        self.declared, self.seen = declared, seen


class SmokeCheck:
    """The first SMOKE_RESPONSES answered responses against the declared mode; `see` each recorded row."""

    def __init__(self, declared: str, needed: int = SMOKE_RESPONSES) -> None:
        if declared not in MODES:
            raise ValueError(f"the reasoning mode is on or off, not {declared!r}")
        self.declared, self.needed = declared, needed
        self.seen: list[tuple[bool, bool, bool]] = []

    def see(self, record: ResponseRecord) -> ReasoningMismatch | None:
        """The mismatch once the first answered responses all contradict the mode; None otherwise."""
        if record.status != "ok" or len(self.seen) >= self.needed:
            return None
        self.seen.append(signals(record.reasoning_text, record.usage.reasoning_tokens, record.response_text))
        if len(self.seen) < self.needed:
            return None
        reasoned = [any(s) for s in self.seen]
        contradicts = not any(reasoned) if self.declared == "on" else all(reasoned)
        return ReasoningMismatch(self.declared, self.seen) if contradicts else None


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


FORMAT_SMOKE_RESPONSES = 8
QUOTE_CHARS = 60  # the offending text is quoted up to this many characters
CLOSE_TAG = "</answer>"


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """`text` clipped to `limit` characters (an ellipsis after the quote marks the cut), as a JSON string:
    quoted, every control, non-ASCII and quote character escaped, so that it prints on one line whatever
    the server sent (no terminal escape, no bidi override)."""
    return json.dumps(text[:limit]) + ("…" if len(text) > limit else "")


def offending_text(text: str | None, status: str | None, finish_reason: str | None) -> str:
    """What broke the rule in one answer, for the stop line: the text after the tag (not_final), the end
    of a text with no tag, or the output limit."""
    if finish_reason == "length":
        return "finish_reason: length (cut off at the output limit)"
    body = text or ""
    if status == "not_final":  # what follows the tag's end (one search from the right: linear)
        end = body.rfind(CLOSE_TAG)
        after = body[end + len(CLOSE_TAG) :].strip() if end >= 0 else body
        return f"after the tag: {quoted(after)}"
    if status == "no_response":
        return "an empty answer"
    tail = body.strip()[-QUOTE_CHARS:]
    return f"{status or 'failed'}, ending {quoted(tail)}"


class FormatMismatch(SmokeStop):
    """The first answered responses all failed the strict parser (or were all cut off): the run stops."""

    def __init__(self, seen: list[tuple[str, str | None]], example: str) -> None:
        n = len(seen)
        statuses = Counter(status for status, _ in seen)
        cut = sum(1 for _, finish in seen if finish == "length")
        counts = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
        cut_note = f"; {cut} of {n} cut off at the output limit" if cut else ""
        fix = (
            "raise --max-tokens (and the server's --max-model-len) so that answers end, or serve the model "
            "with a reasoning parser (vLLM --reasoning-parser) so that thinking stays out of the answer"
            if cut == n
            else "remove the token the server leaves around the answer with --strip-token TOKEN (repeatable), "
            "serve the model with a reasoning parser (vLLM --reasoning-parser) so that thinking stays out of "
            "the answer, or give it room to finish (a larger --max-tokens / --max-model-len); "
            "--no-smoke-check scores the answers as they are"
        )
        super().__init__(
            f"format: the first {n} answered responses all failed the strict parser (parse status: {counts}"
            f"{cut_note}); e.g. {example}; no new request was sent. Fix: {fix}. The answered rows are saved; "
            "a changed request needs a new --run-name"
        )
        self.seen = seen


class FormatCheck:
    """The first `needed` answered responses against the strict parser; `see` each recorded row."""

    def __init__(self, needed: int = FORMAT_SMOKE_RESPONSES, strip: tuple[str, ...] = ()) -> None:
        self.needed = max(1, needed)
        self.strip = strip
        self.seen: list[tuple[str, str | None]] = []  # (parse status, finish reason)
        self.failed = 0
        self.example: str | None = None

    def see(self, record: ResponseRecord) -> FormatMismatch | None:
        """The stop once the first answered responses all failed (or were all cut off); None otherwise."""
        if record.status != "ok" or len(self.seen) >= self.needed:
            return None
        status = record.parse_status or "ok"
        self.seen.append((status, record.finish_reason))
        if record.parsed_answer is None:
            self.failed += 1
            if self.example is None:
                text = strip_tokens(record.response_text, self.strip)
                self.example = offending_text(text, status, record.finish_reason)
        if len(self.seen) < self.needed:
            return None
        cut = all(finish == "length" for _, finish in self.seen)
        if self.failed < self.needed and not cut:
            return None
        example = self.example or offending_text(None, None, "length")
        return FormatMismatch(self.seen, example)
