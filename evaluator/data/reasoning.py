"""The reasoning mode: what a run declared (`--reasoning on|off`) and what its responses show. Pure.

A response shows reasoning when it has any of three signals: a reasoning text apart from the answer
(vLLM's and OpenRouter's `reasoning`, older vLLM's and DeepSeek's `reasoning_content`: the record's
`reasoning_text`), reasoning tokens the server reports (`usage.completion_tokens_details.reasoning_tokens`
> 0: OpenAI and others hide the text and bill the tokens), or a think block in the visible text (a model
served without a reasoning parser; `<thought>` blocks too: Google's OpenAI compatibility layer returns
Gemini's thoughts so when asked with `include_thoughts`). A text or a think block that holds only whitespace does not count:
chat templates such as Qwen3's emit an empty `<think>\\n\\n</think>` when thinking is off.

The smoke check (`SmokeCheck`): with a declared mode, the first SMOKE_RESPONSES answered responses of an
invocation decide whether the run goes on; if all of them contradict the mode, the run stops
(`ReasoningMismatch`, exit 2 in evaluate, state "stopped" in a sweep).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

from evaluator.core.errors import UserError
from evaluator.core.records import ResponseRecord

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


def record_signals(record: ResponseRecord) -> tuple[bool, bool, bool]:
    return signals(record.reasoning_text, record.usage.reasoning_tokens, record.response_text)


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
        self.seen.append(record_signals(record))
        if len(self.seen) < self.needed:
            return None
        reasoned = [any(s) for s in self.seen]
        contradicts = not any(reasoned) if self.declared == "on" else all(reasoned)
        return ReasoningMismatch(self.declared, self.seen) if contradicts else None
