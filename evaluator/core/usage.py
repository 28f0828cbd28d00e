"""Token usage: read from a response, counted per record, totalled for the summary. Pure.

Besides prompt/completion/total tokens, a server may report
`usage.completion_tokens_details.reasoning_tokens` (hidden reasoning, most of a reasoning model's
bill) and `usage.prompt_tokens_details.cached_tokens`; both are kept when reported, left out when not.
A failed attempt's usage (an empty reply, an error body that carries usage) is kept on its
`retry_errors` entry, so the tokens spent on retries stay visible.
"""

from __future__ import annotations

from typing import Any, TypedDict

from evaluator.core.jsonl import JSONObject
from evaluator.core.records import ResponseRecord, Usage


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def total_of(usage: Any) -> int:
    """total_tokens of a usage dict or Usage (prompt + completion when the total is missing); 0 if none."""
    if isinstance(usage, Usage):
        usage = {k: getattr(usage, k) for k in ("total_tokens", "prompt_tokens", "completion_tokens")}
    if not isinstance(usage, dict):
        return 0
    total = _count(usage.get("total_tokens"))
    if total is not None:
        return total
    return (_count(usage.get("prompt_tokens")) or 0) + (_count(usage.get("completion_tokens")) or 0)


def record_tokens(record: ResponseRecord) -> int:
    """Every token a record reports having spent: its answer, its failed attempts, its earlier attempts.

    A request_error row's own usage is its last failed attempt's, which its retry_errors already hold.
    """
    spent = sum(total_of(e.usage) for e in record.retry_errors)
    if record.status == "ok":
        spent += total_of(record.usage)
    for a in record.earlier_attempts:
        spent += total_of(a.usage) + sum(total_of(e.usage) for e in a.retry_errors)
    return spent


def retry_errors_of(row: JSONObject) -> list[JSONObject]:
    """A record's retry_errors, its earlier (parse-retried) attempts' included."""
    errors = [e for e in row.get("retry_errors") or [] if isinstance(e, dict)]
    for a in row.get("earlier_attempts") or []:
        if isinstance(a, dict):
            errors += [e for e in a.get("retry_errors") or [] if isinstance(e, dict)]
    return errors


class TokenSum(TypedDict):
    n: int
    sum: int


class FailedUsage(TypedDict):
    attempts_with_usage: int
    total_tokens: int
    completion_tokens: int


class UsageExtras(TypedDict, total=False):
    """summary.json usage entries that are there only when reported (extra_usage_stats)."""

    reasoning_tokens: TokenSum
    cached_tokens: TokenSum
    failed_attempts: FailedUsage


def extra_usage_stats(answers: list[Usage | None], failed: list[Usage]) -> UsageExtras:
    """Summary entries for reasoning/cached tokens (over the answers' usage) and failed attempts' tokens
    (over the usage their retry errors report); empty when none is reported.

    (Left out rather than zero so that the summary of a run without them keeps its bytes.)
    """
    out: UsageExtras = {}
    for key in ("reasoning_tokens", "cached_tokens"):
        values = [v for u in answers if u is not None and (v := _count(getattr(u, key))) is not None]
        if values:
            out[key] = {"n": len(values), "sum": sum(values)}
    if failed:
        out["failed_attempts"] = {
            "attempts_with_usage": len(failed),
            "total_tokens": sum(total_of(u) for u in failed),
            "completion_tokens": sum(_count(u.completion_tokens) or 0 for u in failed),
        }
    return out


def usage_markdown(usage: UsageExtras) -> list[str]:
    """summary.md lines for extra_usage_stats' entries (none when they are absent)."""
    parts = [
        f"{key.replace('_', ' ')} {usage[key]['sum']} ({usage[key]['n']} responses)"
        for key in ("reasoning_tokens", "cached_tokens")
        if key in usage
    ]
    lines = [f"Reported by the server: {', '.join(parts)}.", ""] if parts else []
    f = usage.get("failed_attempts")
    if f:
        lines += [
            f"Failed or retried attempts that reported usage: {f['attempts_with_usage']}, {f['total_tokens']} "
            f"total tokens ({f['completion_tokens']} completion), not counted in the table above unless the row "
            "itself failed.",
            "",
        ]
    return lines
