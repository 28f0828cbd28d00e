"""Typed records: one JSON object per line in responses.partial.jsonl / responses.jsonl.

Field names are part of the outside contract (see README, "Response record").
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from evaluator.jsonl import utf8_json

Status = Literal["ok", "request_error", "data_error", "missing"]
# "missing" is written only by the scorer, for questions that have no record at all.
ParseStatus = Literal["ok", "no_tag", "multiple_tags", "not_final", "not_integer", "no_number", "no_response"]


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


@dataclass
class Sampling:
    temperature: float
    top_p: float
    max_tokens: int
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class RetryError:
    """One failed HTTP attempt (kept so a record shows every fault it survived)."""

    attempt: int
    kind: str  # connection, timeout, http_status, malformed_json, empty_content, ...
    message: str
    status_code: int | None = None
    retry_after_s: float | None = None
    at: str | None = None
    endpoint: str | None = None  # set when several endpoints share the run


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

    def to_json(self) -> str:
        """One line of JSON; group fields are also lifted to the top level (e.g. target_class)."""
        d = dataclasses.asdict(self)
        for k, v in self.groups.items():
            d.setdefault(k, v)
        return json.dumps(d, ensure_ascii=False, sort_keys=True)

    def to_line(self) -> bytes:
        """to_json() as one UTF-8 line with its newline.

        A lone surrogate (a server can send "\\ud800" in a JSON string) has no UTF-8 form; it is written
        as its JSON escape, which reads back to the same text (evaluator.jsonl.utf8_json).
        """
        d = dataclasses.asdict(self)
        for k, v in self.groups.items():
            d.setdefault(k, v)
        return utf8_json(d, sort_keys=True) + b"\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResponseRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["sampling"] = (
            Sampling(**kw["sampling"]) if isinstance(kw.get("sampling"), dict) else kw.get("sampling")
        )
        kw["usage"] = Usage(**(kw.get("usage") or {}))
        kw["retry_errors"] = [RetryError(**e) for e in kw.get("retry_errors") or []]
        kw["earlier_attempts"] = [
            ResponseAttempt(
                **{
                    **a,
                    "usage": Usage(**(a.get("usage") or {})),
                    "retry_errors": [RetryError(**e) for e in a.get("retry_errors") or []],
                }
            )
            for a in kw.get("earlier_attempts") or []
        ]
        return cls(**kw)

    @property
    def is_done(self) -> bool:
        """Finished for resumption: an ok response with a parsed answer."""
        return self.status == "ok" and self.parsed_answer is not None
