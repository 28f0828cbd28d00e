"""Pure record building: a response record is made from the run's fixed fields and exactly one
attempt's outcome (evaluator.request.client.SendOutcome), never filled in field by field across attempts.

Every string a server sent (content, reasoning, ids, finish reason) passes through the run's Redactor
before a record holds it, so an echoed API key is never stored, printed or archived.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from evaluator.core.records import RECORD_SCHEMA_VERSION, ResponseAttempt, ResponseRecord, Sampling
from evaluator.core.secrets import Redactor
from evaluator.data.benchmarks.base import Benchmark, ManifestEntry, Sample
from evaluator.data.parsing import strip_tokens
from evaluator.data.reasoning import has_inline_think
from evaluator.request.client import Completion, SendOutcome

# the strings of a completion the server sent (redacted), and what an empty answer's record keeps of it
SENT_TEXTS = ("response_text", "reasoning_text", "finish_reason", "response_id", "system_fingerprint")
EMPTY_KEPT = ("finish_reason", "usage", "response_id", "reasoning_text", "response_text")


def base_record(
    sample: Sample | ManifestEntry,
    benchmark: str,
    model: str,
    backend: str,
    sampling: Sampling,
    started_at: str,
) -> ResponseRecord:
    """The fields every record of this question has, whatever happens to its request (from the sample, or
    from its manifest entry when a batch's answer is recorded without reading the data again)."""
    return ResponseRecord(
        sample_id=sample.sample_id,
        benchmark=benchmark,
        groups=sample.groups,
        ground_truth=sample.ground_truth,
        model=model,
        backend=backend,
        sampling=sampling,
        started_at=started_at,
        finished_at=started_at,
        status="data_error",
        schema_version=RECORD_SCHEMA_VERSION,
        endpoint=None,
        image_sha256=sample.image_sha256,
    )


def data_error_record(base: ResponseRecord, error: str, finished_at: str) -> ResponseRecord:
    """A sample that is never sent (bad image bytes, hash mismatch, ...)."""
    return msgspec.structs.replace(base, status="data_error", data_error=error, finished_at=finished_at)


def evaluator_error_record(base: ResponseRecord, message: str, finished_at: str) -> ResponseRecord:
    """A bug in the evaluator costs one row (a request error, retried on resume), not the run."""
    return msgspec.structs.replace(
        base, status="request_error", request_error=message, finished_at=finished_at
    )


def _redacted(text: str | None, redact: Redactor) -> str | None:
    return redact(text) if isinstance(text, str) else text


def redact_completion(completion: Completion | None, redact: Redactor) -> Completion | None:
    """The completion with the key removed from every string the server sent."""
    if completion is None or redact.secret is None:
        return completion
    texts: dict[str, Any] = {f: _redacted(getattr(completion, f), redact) for f in SENT_TEXTS}
    return dataclasses.replace(completion, **texts)


def redact_outcome(outcome: SendOutcome, redact: Redactor) -> SendOutcome:
    """The outcome with its completions redacted (error texts are redacted where they are made)."""
    if redact.secret is None:
        return outcome
    return dataclasses.replace(
        outcome,
        completion=redact_completion(outcome.completion, redact),
        last_empty=redact_completion(outcome.last_empty, redact),
        error=_redacted(outcome.error, redact),
    )


def record_from_outcome(
    base: ResponseRecord,
    outcome: SendOutcome,
    benchmark: Benchmark,
    earlier: list[ResponseAttempt],
    strip: tuple[str, ...] = (),
) -> ResponseRecord:
    """The record of one (redacted) send: every field from this outcome, earlier attempts kept whole.
    `strip` (--strip-token) is removed from the text the parser reads; the record keeps the raw text."""
    common = {
        "protocol_anomalies": list(outcome.anomalies),
        "attempts": outcome.attempts,
        "endpoint": outcome.endpoint,
        "retry_errors": outcome.retry_errors,
        "finished_at": outcome.finished_at,
        "earlier_attempts": list(earlier),
    }
    c = outcome.completion
    if c is None:
        empty = outcome.last_empty  # an empty answer's metadata says why it was empty
        seen = {f: getattr(empty, f) for f in EMPTY_KEPT} if empty is not None else {}
        return msgspec.structs.replace(
            base, status="request_error", request_error=outcome.error, **common, **seen
        )
    parsed_text = strip_tokens(c.response_text, strip)
    parsed = benchmark.parse(parsed_text)
    return msgspec.structs.replace(
        base,
        status="ok",
        response_text=c.response_text,
        reasoning_text=c.reasoning_text,
        finish_reason=c.finish_reason,
        response_id=c.response_id,
        system_fingerprint=c.system_fingerprint,
        usage=c.usage,
        latency_s=c.latency_s,
        parsed_answer=parsed.answer,
        parse_status=parsed.status,
        fallback_answer=benchmark.fallback(parsed_text),
        correct=benchmark.is_correct(parsed.answer, base.ground_truth),
        inline_think=has_inline_think(c.response_text),
        **common,
    )


def attempt_of(outcome: SendOutcome, record: ResponseRecord) -> ResponseAttempt:
    """A parse-failed send, kept whole in the next record's earlier_attempts."""
    c = outcome.completion
    assert c is not None
    return ResponseAttempt(
        response_text=c.response_text,
        reasoning_text=c.reasoning_text,
        parse_status=record.parse_status,
        finish_reason=c.finish_reason,
        response_id=c.response_id,
        usage=c.usage,
        latency_s=c.latency_s,
        attempts=outcome.attempts,
        retry_errors=outcome.retry_errors,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
    )
