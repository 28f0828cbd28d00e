"""HTTP to an OpenAI-compatible chat-completions endpoint, with the protocol's own retry policy (the
openai client's are off: every attempt, and why it failed, is in the record). The exact canonical bytes
are sent, so request_sha256 is the hash of what went out."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx2 as httpx  # the HTTP library openai >= 3 is built on
import openai

from evaluator.core.boundary import KeyFilter, clip
from evaluator.core.records import RetryError, Usage
from evaluator.core.text import one_line, utc_now
from evaluator.request.bounds import MAX_RESPONSE_BYTES, ReplyTooLarge, capping_hook, total_timeout
from evaluator.request.endpoint import split_query
from evaluator.request.pacing import Gate, Ticket, admit
from evaluator.request.ratelimit import NEVER_RETRIED_5XX, Limits, RetryPolicy
from evaluator.request.replies import (
    Completion,
    Failure,
    ResponseShapeError,
    completion_from_bytes,
    limits_of,
    status_failure,
)

log = logging.getLogger(__name__)
MESSAGE_LIMIT = 2000  # a retry error's or stop line's text, after redaction


@dataclass
class SendOutcome:
    completion: Completion | None  # None when every attempt failed
    attempts: int
    retry_errors: list[RetryError] = field(default_factory=list)
    error: str | None = None  # the final error when completion is None
    last_empty: Completion | None = None  # an empty answer's metadata (finish_reason, usage)
    endpoint: str | None = None  # the endpoint of the last attempt
    started_at: str = ""
    finished_at: str = ""
    anomalies: list[str] = field(default_factory=list)  # every attempt's protocol anomalies
    last_status: int | None = None  # the HTTP status of the last answer that arrived (for an evaluator error)


def make_client(
    base_url: str,
    api_key: str | None,
    timeout_s: float,
    concurrency: int,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> openai.AsyncOpenAI:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    base, query = split_query(base_url)  # the client would put /chat/completions after the query string
    return openai.AsyncOpenAI(
        base_url=base,
        default_query=query or None,
        api_key=api_key or "EMPTY",
        max_retries=0,
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
        http_client=httpx.AsyncClient(
            limits=limits,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            event_hooks={"response": [capping_hook(max_response_bytes)]},
        ),
    )


@dataclass
class Endpoint:
    """One server. Taken out of rotation after repeated failures, tried again after a cooldown."""

    url: str
    client: openai.AsyncOpenAI
    gate: Gate | None = None  # rate-aware admission (pacing.Gate); EndpointPool gives every endpoint one
    consecutive_failures: int = 0
    ejected_until: float = 0.0
    ejections: int = 0


class EndpointPool:
    """Spreads attempts over endpoints (the earliest slot of any gate); a failing one sits out a cooldown."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        eject_after: int = 3,
        cooldown_s: float = 5.0,
        gate: Callable[[], Gate] | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("at least one endpoint is needed")
        self.endpoints = endpoints
        self.eject_after = eject_after
        self.cooldown_s = cooldown_s
        for e in endpoints:
            if e.gate is None:
                e.gate = gate() if gate is not None else Gate(ceiling=1024)
        self.gates: list[Gate] = [e.gate for e in endpoints if e.gate is not None]
        self.changed = asyncio.Event()

    def _usable(self, i: int) -> bool:
        """An endpoint refused past the patience is set aside while another is not (request.pacing)."""
        now = time.monotonic()
        alive = [e for e in self.endpoints if e.gate is None or e.gate.gave_up is None] or self.endpoints
        endpoint = self.endpoints[i]
        if endpoint not in alive:
            return False
        if any(e.ejected_until <= now for e in alive):
            return endpoint.ejected_until <= now
        # everyone is out: probe the one that comes back first
        return endpoint is min(alive, key=lambda e: e.ejected_until)

    async def acquire(self) -> tuple[Endpoint, Ticket]:
        """Wait at the gates for the next slot; the ticket goes back to release() after the attempt."""
        i, ticket = await admit(self.gates, self._usable, self.changed)
        return self.endpoints[i], ticket

    def release(self, endpoint: Endpoint, ticket: Ticket) -> None:
        assert endpoint.gate is not None
        endpoint.gate.release(ticket)
        self.changed.set()

    def window(self) -> int:
        """The effective concurrency: the sum of the endpoints' current windows."""
        return sum(g.concurrency for g in self.gates)

    def succeeded(self, endpoint: Endpoint) -> None:
        endpoint.consecutive_failures = 0

    def failed(self, endpoint: Endpoint) -> None:
        """A server-side failure (connection, timeout, 5xx, bad body); client errors do not count."""
        endpoint.consecutive_failures += 1
        if len(self.endpoints) > 1 and endpoint.consecutive_failures >= self.eject_after:
            endpoint.ejections += 1
            backoff = min(60.0, self.cooldown_s * 2 ** (endpoint.ejections - 1))
            endpoint.ejected_until = time.monotonic() + backoff
            endpoint.consecutive_failures = 0

    async def close(self) -> None:
        for e in self.endpoints:
            await e.client.close()


class ChatSender:
    """Sends one body with retries, each attempt to the pool's best endpoint at that moment. Refusals with
    a wait (429, a transient 402) are sent again without using the row's retries; real faults use them. A
    quota, billing or too-large refusal sets `stop_reason`: no attempt is sent after it."""

    def __init__(
        self,
        pool: EndpointPool,
        policy: RetryPolicy,
        redact: KeyFilter,
        rng: random.Random | None = None,
    ) -> None:
        self.pool = pool
        self.policy = policy
        self.redact = redact
        self.rng = rng or random.Random()
        self.stop_reason: str | None = None

    async def _attempt(
        self, endpoint: Endpoint, body: bytes, outcome: SendOutcome
    ) -> tuple[Completion, Limits]:
        t0 = time.perf_counter()
        # one deadline from connect to the last byte: httpx's own timeouts are per read, so a server
        # dripping a byte at a time would hold the attempt for good
        async with asyncio.timeout(total_timeout(endpoint.client)):
            resp = await endpoint.client.post(
                "/chat/completions",
                cast_to=httpx.Response,
                content=body,
                options={"headers": {"Content-Type": "application/json"}},
            )
        outcome.last_status = resp.status_code  # known before anything reads the body
        latency = time.perf_counter() - t0
        return completion_from_bytes(resp.content, latency, self.redact), limits_of(resp.headers, self.redact)

    async def _exchange(
        self, endpoint: Endpoint, ticket: Ticket, body: bytes, outcome: SendOutcome
    ) -> tuple[Completion | None, Failure | None]:
        """One attempt; the gate learns from its outcome."""
        gate = endpoint.gate
        assert gate is not None
        try:
            completion, limits = await self._attempt(endpoint, body, outcome)
        except openai.APIStatusError as exc:
            outcome.last_status = exc.status_code
            failure = status_failure(exc, self.redact)
        except openai.APITimeoutError:
            failure = Failure("timeout", "request timed out", True)
        except TimeoutError:
            limit = total_timeout(endpoint.client)
            within = f"{limit:g} s" if limit is not None else "the time allowed"
            failure = Failure("timeout", f"request timed out (no whole reply in {within})", True)
        except ReplyTooLarge as exc:  # a server that sends that much once would again: not retried
            failure = Failure("response_too_large", str(exc), False)
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause else str(exc)
            failure = Failure("connection", f"connection error ({self.redact(detail)})", True)
        except ResponseShapeError as exc:
            failure = Failure("malformed_response", str(exc), True)
        else:
            gate.succeeded(ticket, limits, completion.usage.total_tokens)
            if completion.response_text is not None and completion.response_text.strip():
                self.pool.succeeded(endpoint)
                return completion, None
            message = f"empty content (finish_reason={completion.finish_reason})"
            spent = completion.usage if completion.usage != Usage() else None
            return completion, Failure("empty_content", message, True, ticket=ticket, usage=spent)
        finally:
            self.pool.release(endpoint, ticket)
        failure.ticket = ticket
        if failure.verdict is not None and failure.verdict.kind in ("rate_limit", "payment"):
            return None, failure  # the gate hears about it in send(), with the wait it settles on
        gate.failed(ticket)
        return None, failure

    async def send(self, body: bytes) -> SendOutcome:
        outcome = SendOutcome(completion=None, attempts=0, started_at=utc_now())
        charged = 0  # attempts that count against the protocol's max_retries
        while self.stop_reason is None:
            endpoint, ticket = await self.pool.acquire()
            if self.stop_reason is not None:  # the run stopped while this worker waited at the gate
                self.pool.release(endpoint, ticket)
                break
            outcome.attempts += 1
            outcome.endpoint = endpoint.url
            outcome.last_status = None
            try:
                completion, failure = await self._exchange(endpoint, ticket, body, outcome)
            except Exception as exc:  # a bug must cost one row, with what the server said, never the run
                self._unexpected(outcome, endpoint, exc)
                break
            if completion is not None:
                outcome.anomalies += [a for a in completion.anomalies if a not in outcome.anomalies]
            if failure is None:
                outcome.completion, outcome.error = completion, None
                break
            if completion is not None:
                outcome.last_empty = completion
            paced = failure.verdict is not None and failure.verdict.paced
            charged += 0 if paced else 1
            wait, alone = self._hold_or_eject_endpoint(endpoint, failure, charged, paced)
            self._note(outcome, endpoint, failure, wait)
            self._check_stop(endpoint, failure)
            if not failure.retryable or charged > self.policy.max_retries:
                break
            if alone:
                await asyncio.sleep(wait)
        if outcome.completion is None:
            outcome.error = (
                f"{outcome.error or 'not sent: ' + str(self.stop_reason)} after {outcome.attempts} attempt(s)"
            )
        outcome.finished_at = utc_now()
        return outcome

    def _check_stop(self, endpoint: Endpoint, failure: Failure) -> None:
        """A refusal no wait fixes stops the run; so does an endpoint refused past the patience, once
        every endpoint is (the others go on without it until then)."""
        if self.stop_reason is not None:
            return
        if failure.verdict is not None and failure.verdict.stop:
            self.stop_reason = clip(self.redact(failure.verdict.stop), MESSAGE_LIMIT)
        elif endpoint.gate is not None and endpoint.gate.gave_up and all(g.gave_up for g in self.pool.gates):
            self.stop_reason = clip(self.redact(endpoint.gate.gave_up), MESSAGE_LIMIT)

    def _unexpected(self, outcome: SendOutcome, endpoint: Endpoint, exc: Exception) -> None:
        """One redacted line on stderr, no traceback; the row keeps its attempts and the status that came back."""
        answered = (
            f"the server answered HTTP {outcome.last_status}; " if outcome.last_status is not None else ""
        )
        message = clip(
            self.redact(f"evaluator error: {answered}{type(exc).__name__}: {one_line(exc)}"), MESSAGE_LIMIT
        )
        log.error("error: %s (attempt %d)", message, outcome.attempts)
        outcome.retry_errors.append(
            RetryError(
                attempt=outcome.attempts,
                kind="evaluator_error",
                message=message,
                status_code=outcome.last_status,
                at=utc_now(),
                endpoint=endpoint.url if len(self.pool.endpoints) > 1 else None,
            )
        )
        outcome.error = message

    def _hold_or_eject_endpoint(
        self, endpoint: Endpoint, failure: Failure, charged: int, paced: bool
    ) -> tuple[float, bool]:
        """The pause before the next attempt, and whether this worker waits it alone. A server error or
        no answer ejects the endpoint for its cooldown; a rate-limit refusal our pace caused holds the
        endpoint's gate (every worker of it); one it did not cause, only its request (pacing.Gate)."""

        verdict = failure.verdict
        asked = verdict.wait_s if verdict is not None else None
        if verdict is None or verdict.kind not in ("rate_limit", "payment"):
            if failure.status is None or (failure.status >= 500 and failure.status not in NEVER_RETRIED_5XX):
                self.pool.failed(endpoint)
            return self.policy.wait_s(max(1, charged), asked, self.rng), True
        assert endpoint.gate is not None and failure.ticket is not None
        fallback = self.policy.wait_s(max(1, charged), None, self.rng)
        capped = min(asked, self.policy.retry_after_max_s) if asked is not None else None
        hold = endpoint.gate.refused(failure.ticket, failure.limits, capped, fallback)
        self.pool.changed.set()
        if not paced:
            return fallback, True
        return hold.wait_s, not hold.shared

    def _note(self, outcome: SendOutcome, endpoint: Endpoint, failure: Failure, wait: float) -> None:
        message = clip(self.redact(failure.message), MESSAGE_LIMIT)
        verdict = failure.verdict
        outcome.retry_errors.append(
            RetryError(
                attempt=outcome.attempts,
                kind=failure.kind,
                message=message,
                status_code=failure.status,
                retry_after_s=verdict.wait_s if verdict is not None else None,
                at=utc_now(),
                endpoint=endpoint.url if len(self.pool.endpoints) > 1 else None,
                usage=failure.usage,
                wait_s=round(wait, 3) if failure.retryable else None,
                paced=bool(verdict is not None and verdict.paced) or None,
            )
        )
        outcome.error = message
