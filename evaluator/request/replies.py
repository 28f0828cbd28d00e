"""What came back from one chat-completions exchange, read through the trust boundary (core.boundary): a
200's body becomes a `Completion`, an HTTP error a `Failure` whose message and verdict (request.ratelimit)
are made from the redacted body and headers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import openai

from evaluator.core.boundary import (
    KeyFilter,
    ShapeError,
    body_text,
    clip,
    error_text,
    parse_json,
    safe_headers,
    sanitize_completion,
    sanitize_usage,
)
from evaluator.core.errors import EvaluatorError
from evaluator.core.records import Usage
from evaluator.request.pace import Ticket
from evaluator.request.ratelimit import Limits, Verdict, classify, limits_from_headers


@dataclass
class Completion:
    """What one successful HTTP exchange yielded (content may still fail to parse)."""

    response_text: str | None
    reasoning_text: str | None
    finish_reason: str | None
    response_id: str | None
    system_fingerprint: str | None
    usage: Usage
    latency_s: float
    anomalies: list[str] = field(default_factory=list)  # protocol anomalies (core.boundary)


class ResponseShapeError(EvaluatorError):
    pass


def completion_from_json(payload: Any, latency_s: float, keys: KeyFilter) -> Completion:
    """Pure: the fields we keep from a parsed chat.completion, typed and redacted (core.boundary)."""
    try:
        safe, _ = sanitize_completion(payload, keys)
    except ShapeError as exc:
        raise ResponseShapeError(str(exc)) from None
    return Completion(
        response_text=safe.response_text,
        reasoning_text=safe.reasoning_text,
        finish_reason=safe.finish_reason,
        response_id=safe.response_id,
        system_fingerprint=safe.system_fingerprint,
        usage=Usage(**safe.usage),
        latency_s=round(latency_s, 4),
        anomalies=list(safe.anomalies),
    )


def completion_from_bytes(raw: bytes, latency_s: float, keys: KeyFilter) -> Completion:
    """A 200's body through the boundary: the key removed from the raw text, then parsed and typed."""
    try:
        payload = parse_json(raw, keys)
    except ShapeError as exc:
        snippet = clip(body_text(raw, keys), 120)
        raise ResponseShapeError(f"{exc}: {snippet!r}") from None
    return completion_from_json(payload, latency_s, keys)


@dataclass
class Failure:
    """One failed exchange, as the record shows it, and what the classification made of it."""

    kind: str
    message: str
    retryable: bool
    status: int | None = None
    verdict: Verdict | None = None
    limits: Limits = field(default_factory=Limits)
    ticket: Ticket | None = None  # the gate's reservation this attempt was sent on
    usage: Usage | None = None  # a failed attempt's usage, when the server reported it


def limits_of(headers: Any, keys: KeyFilter) -> Limits:
    """The limits a response announces; most responses carry none, so look before building anything."""
    for key in headers:
        k = key.lower()
        if k.startswith("x-ratelimit-") or k.startswith("anthropic-ratelimit-"):
            return limits_from_headers(safe_headers(headers, keys))
    return Limits()


def status_failure(exc: openai.APIStatusError, keys: KeyFilter) -> Failure:
    """An HTTP error through the boundary: its body and headers redacted, then read."""
    status = exc.status_code
    headers = safe_headers(exc.response.headers, keys)
    message, body = error_message_and_body(exc, keys)
    verdict = classify(status, headers, body)
    usage = body.get("usage") if isinstance(body, dict) else None
    spent = Usage(**sanitize_usage(usage)[0]) if isinstance(usage, dict) else None
    return Failure(
        "http_status",
        f"HTTP {status}: {message}",
        verdict.retryable,
        status,
        verdict,
        limits_from_headers(headers) if status in (402, 429) else Limits(),
        usage=spent,
    )


def error_message_and_body(exc: openai.APIStatusError, keys: KeyFilter) -> tuple[str, Any]:
    """An error response's message (redacted, then clipped to 500) and its redacted JSON body, if any."""
    try:
        raw = exc.response.content
    except Exception:  # a stream that was never read
        return clip(keys(str(exc)), 500), None
    return error_text(raw, keys, 500)


def error_message(exc: openai.APIStatusError, keys: KeyFilter) -> str:
    return error_message_and_body(exc, keys)[0]
