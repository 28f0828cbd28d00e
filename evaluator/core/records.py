"""Typed records: one JSON object per line in responses.partial.jsonl / responses.jsonl.

Field names are part of the outside contract (see README, "Response record").
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from evaluator.core.jsonl import utf8_json

Status = Literal["ok", "request_error", "data_error", "missing"]
# "missing" is written only by the scorer, for questions that have no record at all.
ParseStatus = Literal[
    "ok", "no_tag", "multiple_tags", "unclosed_tag", "not_final", "not_integer", "no_number", "no_response"
]


# A field with this metadata is left out of the JSON while it holds its default, so records and configs
# made without the feature keep their bytes (see to_dict).
OMIT_DEFAULT = {"omit_default": True}

MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    # usage.completion_tokens_details.reasoning_tokens / usage.prompt_tokens_details.cached_tokens
    reasoning_tokens: int | None = field(default=None, metadata=OMIT_DEFAULT)
    cached_tokens: int | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass
class Sampling:
    """The sampling fields of every request. None: the field is left out of the request."""

    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    extra_body: dict[str, Any] = field(default_factory=dict)
    max_tokens_field: str = field(default="max_tokens", metadata=OMIT_DEFAULT)  # or max_completion_tokens


@dataclass
class RetryError:
    """One failed HTTP attempt (kept so a record shows every fault it survived)."""

    attempt: int
    kind: (
        str  # connection, timeout, http_status, malformed_response, empty_content (evaluator.request.client)
    )
    message: str
    status_code: int | None = None
    retry_after_s: float | None = None
    at: str | None = None
    endpoint: str | None = None  # set when several endpoints share the run
    usage: Usage | None = field(default=None, metadata=OMIT_DEFAULT)  # when the failed reply reported it
    # the pause before the next attempt (for a rate limit: every worker's), and whether the attempt was a
    # rate-limit refusal with a wait, not charged to the row's --max-retries
    wait_s: float | None = field(default=None, metadata=OMIT_DEFAULT)
    paced: bool | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass
class ResponseAttempt:
    """An earlier completed response that failed to parse (kept with --retry-parse-failures)."""

    response_text: str | None
    reasoning_text: str | None
    parse_status: str
    finish_reason: str | None
    response_id: str | None
    usage: Usage
    latency_s: float | None
    attempts: int
    retry_errors: list[RetryError] = field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None


@dataclass
class ResponseRecord:
    sample_id: str
    benchmark: str
    groups: dict[str, Any]  # subgroup fields, e.g. {"target_class": "Table"}
    ground_truth: int | None
    model: str
    backend: str
    sampling: Sampling
    started_at: str
    finished_at: str
    status: Status
    response_text: str | None = None
    reasoning_text: str | None = None
    parsed_answer: int | None = None
    parse_status: str = "no_response"
    correct: bool = False
    fallback_answer: int | None = None  # diagnostic only, never the primary answer
    finish_reason: str | None = None
    latency_s: float | None = None
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None
    system_fingerprint: str | None = None
    endpoint: str | None = None
    attempts: int = 0
    retry_errors: list[RetryError] = field(default_factory=list)
    earlier_attempts: list[ResponseAttempt] = field(default_factory=list)
    request_error: str | None = None
    data_error: str | None = None
    request_sha256: str | None = None
    image_sha256: str | None = None
    inline_think: bool = field(default=False, metadata=OMIT_DEFAULT)  # <think> block in the visible text
    # Only with --seed / --repeats; left out of the line otherwise, so such records stay as they were.
    seed: int | None = field(default=None, metadata=OMIT_DEFAULT)
    repeat: int | None = field(default=None, metadata=OMIT_DEFAULT)
    # The batch that answered the row (--batch, or `doccount batch collect`); absent for online records.
    batch_id: str | None = field(default=None, metadata=OMIT_DEFAULT)
    # What the server sent that broke the protocol (a count that is not an integer, an id that is not a
    # string: core.boundary); field names and JSON types only. Left out when there were none.
    protocol_anomalies: list[str] = field(default_factory=list, metadata=OMIT_DEFAULT)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data; group fields are also lifted to the top level."""
        d = to_dict(self)
        for k, v in self.groups.items():
            d.setdefault(k, v)
        return d

    def to_json(self) -> str:
        """One line of JSON; group fields are also lifted to the top level (e.g. target_class)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    def to_line(self) -> bytes:
        """to_json() as one UTF-8 line with its newline.

        A lone surrogate (a server can send "\\ud800" in a JSON string) has no UTF-8 form; it is written
        as its JSON escape, which reads back to the same text (evaluator.core.jsonl.utf8_json).
        """
        return utf8_json(self.to_dict(), sort_keys=True) + b"\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResponseRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["sampling"] = (
            Sampling(**kw["sampling"]) if isinstance(kw.get("sampling"), dict) else kw.get("sampling")
        )
        kw["usage"] = Usage(**(kw.get("usage") or {}))
        kw["retry_errors"] = [_retry_error(e) for e in kw.get("retry_errors") or []]
        kw["earlier_attempts"] = [
            ResponseAttempt(
                **{
                    **a,
                    "usage": Usage(**(a.get("usage") or {})),
                    "retry_errors": [_retry_error(e) for e in a.get("retry_errors") or []],
                }
            )
            for a in kw.get("earlier_attempts") or []
        ]
        return cls(**kw)


def _retry_error(d: dict[str, Any]) -> RetryError:
    usage = d.get("usage")
    return RetryError(**{**d, "usage": Usage(**usage) if isinstance(usage, dict) else None})


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def to_dict(obj: Any) -> Any:
    """dataclasses.asdict, except that fields marked OMIT_DEFAULT are left out while they hold their default."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("omit_default") and value == _default(f):
                continue
            out[f.name] = to_dict(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj
