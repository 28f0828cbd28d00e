"""OpenAI-format batch files, line by line. Pure: no I/O, no HTTP.

Input line: ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": <request body>}``, the
body spliced in as the exact bytes the online path sends (request.body.request_bytes), so it hashes to the
record's request_sha256. Output and error lines (OpenAI's, `vllm run-batch`'s): ``{"id", "custom_id",
"response": {"status_code", "request_id", "body"} | null, "error": {"code", "message"} | str | null}``.
Files are split so that neither `MAX_LINES` nor --batch-max-mb (10^6 bytes) is passed (OpenAI's Batch API
allows 50,000 requests and 200 MB per input file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from evaluator.core.boundary import KeyFilter, clip
from evaluator.core.records import RetryError, Usage
from evaluator.request.replies import Completion, ResponseShapeError, completion_from_json

BATCH_URL: Final = "/v1/chat/completions"
MAX_LINES = 50_000
MB = 1_000_000  # --batch-max-mb counts 10^6 bytes
# Error codes of lines that never ran: the batch expired or was cancelled first. A resend of them does not
# spend the row's --max-retries (OpenAI's BatchRequestOutput error codes).
UNFINISHED_CODES = frozenset({"batch_expired", "batch_cancelled"})

_SEP = "#"


def custom_id(sample_id: str, repeat: int, attempt: int) -> str:
    """The line's id: names the question, its repeat and the batch attempt, so it is unique in the run."""
    return f"{sample_id}{_SEP}{repeat}{_SEP}{attempt}"


def input_line(cid: str, body: bytes) -> bytes:
    """One input line with `body` spliced in byte for byte (it must be one JSON object, as request_bytes is)."""
    head = json.dumps({"custom_id": cid, "method": "POST", "url": BATCH_URL}, ensure_ascii=False)
    return b"".join((head[:-1].encode("utf-8"), b', "body": ', body, b"}\n"))


@dataclass
class FileBudget:
    """How full the input file being written is; `fits` says whether one more line may go in it."""

    max_bytes: int
    max_lines: int = MAX_LINES
    lines: int = 0
    size: int = 0

    def fits(self, line_len: int) -> bool:
        return self.lines + 1 <= self.max_lines and self.size + line_len <= self.max_bytes

    def add(self, line_len: int) -> None:
        self.lines += 1
        self.size += line_len


def too_large_message(line_len: int, max_bytes: int) -> str:
    return (
        f"the request is {line_len / MB:.1f} MB as a batch line, above --batch-max-mb {max_bytes / MB:g}; "
        "raise --batch-max-mb (the provider's limit allowing) or send it online (without --batch)"
    )


@dataclass
class LineResult:
    """What one output or error line says about its request."""

    custom_id: str
    completion: Completion | None = None  # a 200 with a chat.completion body (content may be empty)
    failure: RetryError | None = None  # why the request did not give an answer
    # sent again in a later batch within --max-retries: every failed line, a non-200 of any status too
    # (issue 26: a line's 4xx may be the provider's passing trouble, and the bound keeps the cost small)
    retryable: bool = False
    unfinished: bool = False  # never ran (batch expired or cancelled): sent again without spending a retry


def read_output_line(obj: Any, at: str, keys: KeyFilter | None = None) -> LineResult | None:
    """The result an output/error line reports (None when it names no custom_id); `at` stamps a failure.
    A 200's body passes the trust boundary (core.boundary: the key removed, the fields typed)."""
    keys = keys if keys is not None else KeyFilter(None)
    if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
        return None
    cid = obj["custom_id"]
    response = obj.get("response") if isinstance(obj.get("response"), dict) else None
    error = obj.get("error")
    status = response.get("status_code") if response else None
    body = response.get("body") if response else None
    if error is None and status == 200:
        return _answered(cid, body, at, keys)
    if isinstance(error, dict) and isinstance(error.get("code"), str) and error["code"] in UNFINISHED_CODES:
        failure = RetryError(attempt=0, kind="batch_unfinished", message=_error_text(error), at=at)
        return LineResult(cid, failure=failure, retryable=True, unfinished=True)
    if isinstance(status, int) and status != 200:
        message = f"HTTP {status}: {_error_text(body) or _error_text(error) or 'no error message'}"
        failure = RetryError(attempt=0, kind="http_status", message=message, status_code=status, at=at)
        return LineResult(cid, failure=failure, retryable=True)
    text = _error_text(error) or "the line has neither a response nor an error"
    return LineResult(
        cid, failure=RetryError(attempt=0, kind="batch_error", message=text, at=at), retryable=True
    )


def _answered(cid: str, body: Any, at: str, keys: KeyFilter) -> LineResult:
    try:
        completion = completion_from_json(body, 0.0, keys)
    except ResponseShapeError as exc:
        failure = RetryError(attempt=0, kind="malformed_response", message=str(exc), at=at)
        return LineResult(cid, failure=failure, retryable=True)
    completion.latency_s = None  # type: ignore[assignment]  # one request's time is not known in a batch
    if completion.response_text is not None and completion.response_text.strip():
        return LineResult(cid, completion=completion)
    message = f"empty content (finish_reason={completion.finish_reason})"
    spent = completion.usage if completion.usage != Usage() else None
    failure = RetryError(attempt=0, kind="empty_content", message=message, at=at, usage=spent)
    return LineResult(cid, completion=completion, failure=failure, retryable=True)


def _error_text(error: Any) -> str:
    """The message of an error in any of the shapes seen: OpenAI's {"error": {"message"}} body, an
    {"code", "message"} object, vLLM's ErrorResponse or plain string."""
    if isinstance(error, str):
        return error
    if not isinstance(error, dict):
        return ""
    inner = error.get("error")
    if isinstance(inner, (dict, str)):
        return _error_text(inner)
    message = error.get("message")
    code = error.get("code")
    if isinstance(message, str):
        return f"{code}: {message}" if isinstance(code, str) and code else message
    return clip(json.dumps(error, ensure_ascii=False), 500)  # the line was redacted before it was read
