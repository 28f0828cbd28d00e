"""Bounds on one exchange: a reply's size (read as a stream, abandoned past the cap) and the whole
attempt's duration (httpx's own timeouts are per phase and per read)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2 as httpx
import openai

from evaluator.core.errors import EvaluatorError

# A reply's body is read up to this many bytes, then abandoned. A 32,768-token answer with as much
# reasoning, every character JSON-escaped as \uXXXX, stays under 2 MiB: 16 MiB is far above any honest reply.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class ReplyTooLarge(EvaluatorError):
    """A reply body past the cap (raised while it streams in, so it is never held whole)."""

    def __init__(self, seen: int, cap: int) -> None:
        super().__init__(f"reply over {cap // (1024 * 1024)} MiB cap (read {seen} bytes)")
        self.seen = seen


class CappedStream(httpx.AsyncByteStream):
    """A response's byte stream that stops with ReplyTooLarge once more than `cap` bytes came in."""

    def __init__(self, inner: Any, cap: int) -> None:
        self.inner = inner
        self.cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.cap:
                raise ReplyTooLarge(seen, self.cap)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def capping_hook(cap: int) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx response hook (run after the headers, before any body byte is read, for answers and
    errors alike): the body streams through CappedStream."""

    async def hook(response: httpx.Response) -> None:
        response.stream = CappedStream(response.stream, cap)

    return hook


def total_timeout(client: openai.AsyncOpenAI) -> float | None:
    """The client's --timeout: httpx applies it per phase (connect, each read), we also to the whole."""
    t = client.timeout
    if isinstance(t, httpx.Timeout):
        return t.read
    return float(t) if isinstance(t, (int, float)) else None
