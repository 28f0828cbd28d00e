"""Bounds on one exchange, for every request the bundle makes (chat, the batch API, `BoundedGets`): a
reply's size (read as a stream, abandoned past the cap) and the whole attempt's duration (httpx's own
timeouts are per phase and per read)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import httpx2 as httpx

if TYPE_CHECKING:
    import openai

from evaluator.core.errors import EvaluatorError

# A reply's body is read up to this many bytes, then abandoned. A 32,768-token answer with as much
# reasoning, every character JSON-escaped as \uXXXX, stays under 2 MiB: 16 MiB is far above any honest reply.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# A batch output line: one reply and the few fields around it (custom_id, status_code, request_id).
LINE_SLACK = 64 * 1024
# A model list: OpenRouter's, the longest listed, with a description per model, is about 1 MiB.
MAX_MODELS_BYTES = 8 * 1024 * 1024
# /version ({"version": "0.x.y"}) and /health (empty): far below this.
MAX_SMALL_BYTES = 64 * 1024
# A transfer whose size is known (an upload) or grows with what it carries (a batch output file) has a
# deadline that grows with its bytes: --timeout, plus a second per this many bytes.
MIN_BYTES_PER_S = 1024 * 1024
# The cap of the replies read in this context, where it differs from the client's (a batch output file).
REPLY_CAP: ContextVar[int | None] = ContextVar("reply_cap", default=None)


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
    """An httpx response hook, run before any body byte is read: the body capped at `cap` (or REPLY_CAP)."""

    async def hook(response: httpx.Response) -> None:
        response.stream = CappedStream(response.stream, REPLY_CAP.get() or cap)

    return hook


def total_timeout(client: openai.AsyncOpenAI) -> float | None:
    """The client's --timeout: httpx applies it per phase (connect, each read), we also to the whole."""
    t = client.timeout
    if isinstance(t, httpx.Timeout):
        return t.read
    return float(t) if isinstance(t, (int, float)) else None


def transfer_deadline(timeout_s: float | None, size: int) -> float | None:
    """The whole-transfer deadline of `size` bytes: --timeout, plus a second per MIN_BYTES_PER_S."""
    return None if timeout_s is None else timeout_s + size / MIN_BYTES_PER_S


class BoundedGets:
    """GET requests from synchronous code (one after the other, on a private event loop) under the chat
    path's bounds: one deadline from connect to the last byte, the body capped at `cap` bytes."""

    def __init__(self, timeout_s: float, cap: int, headers: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            headers=headers,
            event_hooks={"response": [capping_hook(cap)]},
        )

    def get(self, url: str, params: Any = None) -> httpx.Response:
        """The answer, read whole; TimeoutError past the deadline (ConnectTimeout if never connected)."""
        connected = False  # once a request goes out on a connection, a timeout is no longer the connect's

        async def trace(event: str, info: Any) -> None:
            nonlocal connected
            connected = connected or event.startswith(("http11.", "http2.")) or event.endswith("tcp.complete")

        async def call() -> httpx.Response:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await self.http.get(url, params=params, extensions={"trace": trace})
            except TimeoutError:
                if connected:
                    raise
                # nothing answered the connect (a firewall that drops it): said as httpx says it
                raise httpx.ConnectTimeout(f"no connection within {self.timeout_s:g} s") from None

        return self.loop.run_until_complete(call())

    def __enter__(self) -> BoundedGets:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.loop.run_until_complete(self.http.aclose())
        finally:
            self.loop.close()
