"""OpenAI's Files and Batches APIs on the run's base URL, through the openai client.

Every answer is read as raw JSON through the trust boundary (core.boundary.parse_json), never through the
SDK's models: a field of the wrong type there makes pydantic warn with the field's value, a key included.
Faults that waiting can fix are retried with the run's RetryPolicy; a 404 or 405 on the upload means the
endpoint has no batch API. Every call has a whole-request deadline (request.bounds); a download's grows
with the bytes that came in, so only a drip runs out of it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import openai

from evaluator.core.boundary import KeyFilter, ShapeError, clip, one_line, parse_json
from evaluator.core.errors import EvaluatorError
from evaluator.core.text import usable_batch_id
from evaluator.request.batch_lines import BATCH_URL
from evaluator.request.bounds import (
    LINE_SLACK,
    MAX_RESPONSE_BYTES,
    REPLY_CAP,
    ReplyTooLarge,
    total_timeout,
    transfer_deadline,
)
from evaluator.request.ratelimit import RetryPolicy, retryable_status
from evaluator.request.replies import error_message

T = TypeVar("T")
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


def output_cap(lines: int) -> int:
    """The most bytes an output file of `lines` requests is read to: a capped reply and its wrapper a line."""
    return (lines + 1) * (MAX_RESPONSE_BYTES + LINE_SLACK)


class BatchUnsupported(EvaluatorError):
    """The endpoint has no Files/Batches API."""


class BatchAPIError(EvaluatorError):
    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass
class BatchInfo:
    """The fields of OpenAI's batch object that a run uses, every string cleaned."""

    id: str
    status: str
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)  # request_counts: total, completed, failed
    errors: list[str] = field(default_factory=list)  # a failed validation's messages (errors.data)
    problem: str = ""  # why `id` is empty (an unusable id: its type or length, never its text)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def id_problem(value: Any) -> str:
    """What is wrong with a batch id, naming its type or length, never its text."""
    if not isinstance(value, str):
        return f"the id was {'null' if value is None else type(value).__name__}"
    return (
        "the id was empty"
        if not value
        else f"the id ({len(value)} characters) has characters ids do not have"
    )


def batch_info(obj: Any, clean: Callable[[str], str]) -> BatchInfo:
    """A batch object (parsed JSON) as a BatchInfo: strings redacted, one line; counts ints; a bad id ""."""

    def text(value: Any) -> str | None:
        return clip(one_line(clean(value)), 300) if isinstance(value, str) else None

    obj = obj if isinstance(obj, dict) else {}
    counts = obj.get("request_counts") if isinstance(obj.get("request_counts"), dict) else {}
    errors_obj = obj.get("errors") if isinstance(obj.get("errors"), dict) else {}
    listed = errors_obj.get("data")
    data = listed if isinstance(listed, list) else []
    errors = []
    for e in data:
        if isinstance(e, dict):
            line = e.get("line")
            where = f" (line {line})" if isinstance(line, int) and not isinstance(line, bool) else ""
            code = text(e.get("code")) or "error"
            errors.append(clip(f"{code}{where}: {text(e.get('message')) or ''}", 2000))
    return BatchInfo(
        id=clean(obj["id"]) if usable_batch_id(obj.get("id")) else "",
        status=text(obj.get("status")) or "unknown",
        input_file_id=text(obj.get("input_file_id")),
        output_file_id=text(obj.get("output_file_id")),
        error_file_id=text(obj.get("error_file_id")),
        counts={k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0},
        errors=errors,
    )


class BatchAPI:
    """The Files/Batches calls a batch run makes, with retries and cleaned answers."""

    def __init__(
        self, client: openai.AsyncOpenAI, base_url: str, clean: Callable[[str], str], policy: RetryPolicy
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.clean = clean
        self.policy = policy
        self.rng = random.Random()

    async def upload(self, path: Path) -> str:
        """POST /files (purpose=batch, multipart): the provider's file id."""

        async def call() -> Any:
            with open(path, "rb") as f:
                raw = await self.client.files.with_raw_response.create(
                    file=(path.name, f, "application/jsonl"), purpose="batch"
                )
                return self._json(raw.content, f"uploading {path.name}")

        deadline = transfer_deadline(total_timeout(self.client), path.stat().st_size)
        try:
            created = await self._retried(f"uploading {path.name}", call, deadline)
        except _NotThere as exc:
            raise BatchUnsupported(
                f"{self.base_url} has no OpenAI batch API (POST {self.base_url.rstrip('/')}/files answered "
                f"HTTP {exc.status}); run without --batch, or write the files with `doccount batch prepare` "
                "for `vllm run-batch`"
            ) from None
        file_id = created.get("id") if isinstance(created, dict) else None
        if not usable_batch_id(file_id):
            raise BatchAPIError(
                f"uploading {path.name}: the provider answered without a usable file id ({id_problem(file_id)})"
            )
        return self.clean(file_id)

    async def create(self, file_id: str, metadata: dict[str, str]) -> BatchInfo:
        """POST /batches. A create that failed may still have made the batch: before trying again, the
        batch is looked up by its input file, so a fault never makes two batches of one file."""
        tried = False

        async def call() -> BatchInfo:
            nonlocal tried
            if tried and (found := await self.find(file_id)) is not None:
                return found
            tried = True
            made = await self.client.batches.with_raw_response.create(
                input_file_id=file_id, endpoint=BATCH_URL, completion_window="24h", metadata=metadata
            )
            return self._info(made.content, f"creating the batch of {file_id}")

        info = await self._retried(f"creating the batch of {file_id}", call, total_timeout(self.client))
        if not info.id:
            raise BatchAPIError(
                f"creating the batch of {file_id}: the provider answered without a usable batch id "
                f"({info.problem}), so the batch could not be polled or collected; nothing was saved for it. "
                "Re-run the same command to try again, or run without --batch"
            )
        return info

    async def find(self, file_id: str, scan: int = 1000) -> BatchInfo | None:
        """The batch made from this input file, if the provider's batch list (newest first) holds one."""

        async def call() -> BatchInfo | None:
            seen, after = 0, None
            while seen < scan:
                page = await self.client.batches.with_raw_response.list(
                    limit=100, **({"after": after} if after else {})
                )
                body = self._json(page.content, "listing batches")
                data = body.get("data") if isinstance(body, dict) else None
                if not isinstance(data, list) or not data:
                    return None
                for obj in data:
                    info = batch_info(obj, self.clean)
                    # a batch without a usable id cannot be adopted
                    if info.id and info.input_file_id == file_id:
                        return info
                seen += len(data)
                after = data[-1].get("id") if isinstance(data[-1], dict) else None
                if not (isinstance(body, dict) and body.get("has_more") is True and usable_batch_id(after)):
                    return None
            return None

        return await self._retried(
            f"listing batches to find the one of {file_id}", call, total_timeout(self.client)
        )

    async def retrieve(self, batch_id: str) -> BatchInfo:
        async def call() -> BatchInfo:
            raw = await self.client.batches.with_raw_response.retrieve(batch_id)
            return self._info(raw.content, f"polling {batch_id}")

        return await self._retried(f"polling {batch_id}", call, total_timeout(self.client))

    async def download(self, file_id: str, into: BinaryIO, cap: int) -> int:
        """GET /files/{id}/content into `into` (from its start again on a retry), at most `cap` bytes."""

        async def call() -> int:
            into.seek(0)
            into.truncate()
            return await self._stream(file_id, into, cap)

        return await self._retried(f"downloading {file_id}", call, None)

    async def _stream(self, file_id: str, into: BinaryIO, cap: int) -> int:
        timeout_s = total_timeout(self.client)
        started, written = asyncio.get_running_loop().time(), 0
        token = REPLY_CAP.set(cap)  # the client's hook caps this answer at `cap`, not at a reply's cap
        try:
            async with asyncio.timeout(timeout_s) as deadline:
                async with self.client.files.with_streaming_response.content(file_id) as resp:
                    async for chunk in resp.iter_bytes():
                        into.write(chunk)
                        written += len(chunk)
                        if timeout_s is not None:  # more time for each byte that came: a drip runs out
                            deadline.reschedule(started + (transfer_deadline(timeout_s, written) or 0.0))
        finally:
            REPLY_CAP.reset(token)
        into.flush()
        return written

    async def cancel(self, batch_id: str) -> BatchInfo:
        async def call() -> BatchInfo:
            raw = await self.client.batches.with_raw_response.cancel(batch_id)
            return self._info(raw.content, f"cancelling {batch_id}")

        return await self._retried(f"cancelling {batch_id}", call, total_timeout(self.client))

    async def close(self) -> None:
        await self.client.close()

    def _json(self, raw: bytes, what: str) -> Any:
        """An answer's JSON through the boundary (every string redacted); not JSON is a retryable fault."""
        try:
            return parse_json(raw, self._keys())
        except ShapeError as exc:
            raise BatchAPIError(f"{what}: {exc}", True) from None

    def _info(self, raw: bytes, what: str) -> BatchInfo:
        body = self._json(raw, what)
        info = batch_info(body, self.clean)
        if not info.id:
            info.problem = id_problem(body.get("id") if isinstance(body, dict) else None)
        return info

    def _keys(self) -> KeyFilter:
        return self.clean if isinstance(self.clean, KeyFilter) else KeyFilter(None)

    async def _retried(self, what: str, call: Callable[[], Awaitable[T]], deadline: float | None) -> T:
        """call(), again after faults that waiting can fix (policy.max_retries), each within `deadline` s."""
        for attempt in range(1, self.policy.max_retries + 2):
            try:
                async with asyncio.timeout(deadline):
                    return await call()
            except TimeoutError:
                err = BatchAPIError(f"{what}: no whole answer within the deadline (--timeout)", True)
            except ReplyTooLarge as exc:  # a server that sends that much once would again: not retried
                err = BatchAPIError(f"{what}: the answer is {exc}", False)
            except openai.APIStatusError as exc:
                if exc.status_code in (404, 405) and what.startswith("uploading"):
                    raise _NotThere(exc.status_code) from None
                err = BatchAPIError(
                    clip(
                        self.clean(f"{what}: HTTP {exc.status_code}: {error_message(exc, self._keys())}"),
                        2000,
                    ),
                    retryable_status(exc.status_code),
                )
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                err = BatchAPIError(clip(self.clean(f"{what}: {type(exc).__name__}: {exc}"), 2000), True)
            if not err.retryable or attempt > self.policy.max_retries:
                raise err
            await asyncio.sleep(self.policy.wait_s(attempt, None, self.rng))
        raise AssertionError("unreachable")


class _NotThere(EvaluatorError):
    def __init__(self, status: int) -> None:
        self.status = status
