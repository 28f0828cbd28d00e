"""The format smoke check: the first answers of an invocation against the strict parser. Pure.

A model whose answers never parse (a special token the server leaves after the tag, thinking in the
content with a quoted tag, every answer cut off at the output limit) would spend a whole run on rows that
all count as wrong. `FormatCheck` sees the first FORMAT_SMOKE_RESPONSES answered responses (or all the
invocation sends, when fewer): if every one failed the strict parser, or every one was cut off at the
output limit (finish_reason "length"), the run stops (`FormatMismatch`, exit 2 in evaluate, state
"stopped" in a sweep), with the parse statuses seen, the text that broke the rule and the fix.
"""

from __future__ import annotations

import json
from collections import Counter

from evaluator.core.records import ResponseRecord
from evaluator.data.parsing import strip_tokens
from evaluator.data.reasoning import SmokeStop

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
