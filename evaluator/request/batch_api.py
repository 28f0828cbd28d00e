"""OpenAI's Files and Batches APIs on the run's base URL, through the openai client (`client.files`,
`client.batches`; the client keeps a base URL's query string, see request.client.make_client).

Every string a server sends back (ids, statuses, error texts) passes the run's cleaner (the API key removed)
before anything here returns it. Faults that waiting can fix (connection errors, timeouts, 408/409/425/429,
5xx) are retried with the run's RetryPolicy; a 404 or 405 on the first call means the endpoint has no batch
API, said in one line.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import openai

from evaluator.core.boundary import KeyFilter, clip
from evaluator.request.batch_lines import BATCH_URL
from evaluator.request.replies import error_message
from evaluator.request.retry import RETRYABLE_STATUS, RetryPolicy

T = TypeVar("T")
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# The statuses of OpenAI's batch object, in their usual order (for progress lines)
STATUSES = (
    "validating",
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)


class BatchUnsupported(Exception):
    """The endpoint has no Files/Batches API."""


class BatchAPIError(Exception):
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

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def batch_info(obj: dict[str, Any], clean: Callable[[str], str]) -> BatchInfo:
    """Pure: a batch object (JSON) as a BatchInfo."""

    def text(value: Any) -> str | None:
        return clean(value) if isinstance(value, str) else None

    counts = obj.get("request_counts") if isinstance(obj.get("request_counts"), dict) else {}
    errors_obj = obj.get("errors") if isinstance(obj.get("errors"), dict) else {}
    errors = []
    for e in errors_obj.get("data") or []:
        if isinstance(e, dict):
            where = f" (line {e['line']})" if isinstance(e.get("line"), int) else ""
            errors.append(clean(f"{e.get('code') or 'error'}{where}: {e.get('message') or ''}"))
    return BatchInfo(
        id=text(obj.get("id")) or "",
        status=text(obj.get("status")) or "unknown",
        input_file_id=text(obj.get("input_file_id")),
        output_file_id=text(obj.get("output_file_id")),
        error_file_id=text(obj.get("error_file_id")),
        counts={k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)},
        errors=errors,
    )


def unsupported_message(base_url: str, status: int) -> str:
    return (
        f"{base_url} has no OpenAI batch API (POST {base_url.rstrip('/')}/files answered HTTP {status}); run "
        "without --batch, or write the files with `doccount batch prepare` for `vllm run-batch`"
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
                return await self.client.files.create(
                    file=(path.name, f, "application/jsonl"), purpose="batch"
                )

        try:
            created = await self._retried(f"uploading {path.name}", call)
        except _NotThere as exc:
            raise BatchUnsupported(unsupported_message(self.base_url, exc.status)) from None
        return self.clean(str(created.id))

    async def create(self, file_id: str, metadata: dict[str, str]) -> BatchInfo:
        """POST /batches. A create that failed may still have made the batch: before trying again, the
        batch is looked up by its input file, so a fault never makes two batches of one file."""
        tried = False

        async def call() -> BatchInfo:
            nonlocal tried
            if tried and (found := await self.find(file_id)) is not None:
                return found
            tried = True
            made = await self.client.batches.create(
                input_file_id=file_id, endpoint=BATCH_URL, completion_window="24h", metadata=metadata
            )
            return batch_info(made.model_dump(), self.clean)

        return await self._retried(f"creating the batch of {file_id}", call)

    async def find(self, file_id: str, scan: int = 1000) -> BatchInfo | None:
        """The batch made from this input file, if the provider's batch list (newest first) holds one."""

        async def call() -> BatchInfo | None:
            seen = 0
            async for b in self.client.batches.list(limit=100):
                info = batch_info(b.model_dump(), self.clean)
                if info.input_file_id == file_id:
                    return info
                seen += 1
                if seen >= scan:
                    break
            return None

        return await self._retried(f"listing batches to find the one of {file_id}", call)

    async def retrieve(self, batch_id: str) -> BatchInfo:
        async def call() -> Any:
            return await self.client.batches.retrieve(batch_id)

        return batch_info((await self._retried(f"polling {batch_id}", call)).model_dump(), self.clean)

    async def content(self, file_id: str) -> bytes:
        """GET /files/{id}/content."""

        async def call() -> bytes:
            return (await self.client.files.content(file_id)).content

        return await self._retried(f"downloading {file_id}", call)

    async def cancel(self, batch_id: str) -> BatchInfo:
        async def call() -> Any:
            return await self.client.batches.cancel(batch_id)

        return batch_info((await self._retried(f"cancelling {batch_id}", call)).model_dump(), self.clean)

    async def close(self) -> None:
        await self.client.close()

    def _keys(self) -> KeyFilter:
        return self.clean if isinstance(self.clean, KeyFilter) else KeyFilter(None)

    async def _retried(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """call(), again after faults that waiting can fix, at most policy.max_retries times."""
        for attempt in range(1, self.policy.max_retries + 2):
            try:
                return await call()
            except openai.APIStatusError as exc:
                if exc.status_code in (404, 405) and what.startswith("uploading"):
                    raise _NotThere(exc.status_code) from None
                err = BatchAPIError(
                    clip(
                        self.clean(f"{what}: HTTP {exc.status_code}: {error_message(exc, self._keys())}"),
                        2000,
                    ),
                    exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500,
                )
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                err = BatchAPIError(clip(self.clean(f"{what}: {type(exc).__name__}: {exc}"), 2000), True)
            if not err.retryable or attempt > self.policy.max_retries:
                raise err
            await asyncio.sleep(self.policy.wait_s(attempt, None, self.rng))
        raise AssertionError("unreachable")


class _NotThere(Exception):
    def __init__(self, status: int) -> None:
        self.status = status
