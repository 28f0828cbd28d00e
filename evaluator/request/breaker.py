"""When to stop a run early, fed with every finished record:
- before any request has succeeded, the same non-retryable 4xx (same status and message) coming back:
  the endpoint refuses what every request looks like. From the first such refusal on, no new request is
  sent until the ones in flight are recorded (a success in between lifts the stop);
- `limit` rows in a row that failed after their retries (the endpoint is down or misconfigured);
- the spend guard (--max-total-tokens) and the smoke checks (data.reasoning: the first answers all
  contradict --reasoning, or all fail the strict parser): no new request; the run stops once the ones
  in flight are recorded.
A 4xx on one row after others succeeded (one bad image) stays that row's error.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from evaluator.core.errors import EvaluatorError
from evaluator.core.records import ResponseRecord, Sampling
from evaluator.core.usage import record_tokens
from evaluator.data.reasoning import FormatCheck, SmokeCheck, SmokeStop
from evaluator.request.endpoint import not_found_hint
from evaluator.request.ratelimit import NEVER_RETRIED_5XX, RETRYABLE_STATUS


class EndpointDown(EvaluatorError):
    def __init__(self, count: int, last_error: str) -> None:
        super().__init__(
            f"stopped early: {count} rows in a row failed after their retries (last: {last_error}); check the "
            "endpoint, the model name and --max-tokens, then re-run the same command to resume"
        )


class BudgetReached(EvaluatorError):
    def __init__(self, spent: int, limit: int) -> None:
        super().__init__(
            f"stopped: this invocation's records report {spent} tokens, past --max-total-tokens {limit}; "
            "finished rows are saved, re-run the same command to continue"
        )


class EndpointRefused(EndpointDown):
    """The endpoint refused the request shape before any request succeeded."""

    def __init__(self, status: int, message: str, count: int, hint: str) -> None:
        Exception.__init__(
            self,
            f"stopped before any request succeeded: the endpoint refused {count} request(s) with the same HTTP "
            f"{status} ({message.removeprefix(f'HTTP {status}: ')}); {hint}. Rows not sent were not recorded; a new request shape needs a new "
            "--run-name",
        )
        self.status, self.message, self.hint = status, message, hint


# Statuses about the account or the moment, not the request: rate limits, quota, payment (OpenRouter's
# transient 402 is retried), handled by the retry policy.
NOT_A_REFUSAL = RETRYABLE_STATUS | {402}


def refusal_of(record: ResponseRecord) -> tuple[int, str] | None:
    """(status, message) when the record failed on a non-retryable 4xx (or a 501), else None."""
    if record.status != "request_error" or not record.retry_errors:
        return None
    last = record.retry_errors[-1]
    status = last.status_code
    if last.kind != "http_status" or status is None or status in NOT_A_REFUSAL:
        return None
    if not (400 <= status < 500 or status in NEVER_RETRIED_5XX):
        return None
    return status, last.message


def wrong_path(status: int, message: str) -> bool:
    """A 404 about the URL, not about the model or the fields sent: a configuration error."""
    text = message.lower()
    return status == 404 and "parameters" not in text and "model" not in text


def shape_hint(
    status: int, message: str, sampling: Sampling, base_url: str, answering: list[str] | None = None
) -> str:
    """The flag that likely fixes a refusal, from the server's message (never from the model name).
    `answering`: base URLs checked to answer, for a 404 about the path (see not_found_hint)."""
    text = message.lower()
    field = sampling.max_tokens_field
    if status == 404 and "parameters" in text:
        # OpenRouter with provider.require_parameters: no provider takes every field sent (block/buzz#3018)
        return "no provider behind the endpoint accepts every field sent: leave out the refused ones (--top-p none, --temperature none, --max-tokens-field)"
    if status == 404 and "model" in text:  # vLLM / OpenAI: "The model `x` does not exist"
        return "check --model: the endpoint does not serve that model id (its /models lists the ones it does)"
    if status == 404:
        return not_found_hint(base_url, answering)
    if status in (401, 403):
        return "check MODEL_API_KEY (and that the key may use this --model)"
    if "maximum context length" in text or "context_length" in text:
        return "fix: a smaller --max-tokens (or --max-tokens none)"
    if field == "max_tokens" and "max_tokens" in text:
        return "fix: --max-tokens-field max_completion_tokens"
    if field == "max_completion_tokens" and "max_completion_tokens" in text:
        return "fix: --max-tokens-field max_tokens"
    if "top_p" in text or "top-p" in text:
        return "fix: --top-p none"
    if "temperature" in text:
        return "fix: --temperature none (or a value the model accepts)"
    return (
        "check the request settings (--extra-body-json, sampling flags, --model) against the provider's docs"
    )


class Breaker:
    """Holds the early-stop rules for one run; `admit` before a row is sent, `outcome` once it is recorded."""

    def __init__(
        self,
        concurrency: int,
        hint: Callable[[int, str], str],
        limit: int | None = None,
        rows: int | None = None,
        max_total_tokens: int | None = None,
        smoke: SmokeCheck | None = None,
        format_check: FormatCheck | None = None,
    ) -> None:
        self.concurrency = concurrency
        # how many identical refusals confirm one: two, unless fewer requests can ever be in flight
        self.confirm = min(2, concurrency, rows or 2)
        self.limit = limit or max(20, 2 * concurrency)
        self.hint = hint
        self.failures_in_a_row = 0
        self.any_success = False
        self.in_flight = 0
        self.refusals: Counter[tuple[int, str]] = Counter()
        self.refused: tuple[int, str] | None = None  # a confirmed refusal, waiting for the rows in flight
        self.max_total_tokens = max_total_tokens
        self.spent = 0
        self.stopping = False  # final: no new request; the run stops once nothing is in flight
        self.smokes = [c for c in (smoke, format_check) if c is not None]
        self.mismatch: SmokeStop | None = None
        self._gate = asyncio.Event()
        self._gate.set()

    async def admit(self) -> None:
        """Wait while an unconfirmed refusal holds new requests back; then count this row as in flight."""
        await self._gate.wait()
        self.in_flight += 1

    def release(self) -> None:
        """An admitted row that was never sent (the queue ran dry)."""
        self.in_flight -= 1
        self._stop_if_due()
        self._reopen_if_idle()

    def outcome(self, record: ResponseRecord) -> None:
        """Account for one recorded row; raises EndpointRefused / EndpointDown when the run must stop."""
        self.in_flight -= 1
        self._spend(record)
        self._smoke(record)
        if record.status == "ok":
            self.any_success = True
            self.failures_in_a_row = 0
            self.refusals.clear()
            self.refused = None  # a success: the endpoint does take this request shape
            if not self.stopping:
                self._gate.set()
        elif record.status == "request_error":
            self.failures_in_a_row += 1
            refusal = None if self.any_success else refusal_of(record)
            if refusal is not None:
                self.refusals[refusal] += 1
                if self.refusals[refusal] >= self.confirm:
                    self.refused = refusal  # stop once the requests in flight have answered
                self._gate.clear()
            if self.failures_in_a_row >= self.limit:
                raise EndpointDown(self.limit, record.request_error or "")
        self._stop_if_due()
        self._reopen_if_idle()

    def _stop_if_due(self) -> None:
        # Both stops wait until nothing admitted is left, so every request sent is recorded; rows waiting
        # at the gate are never sent.
        if self.in_flight > 0:
            return
        if self.refused is not None:
            status, message = self.refused
            raise EndpointRefused(status, message, self.refusals[self.refused], self.hint(status, message))
        if self.mismatch is not None:
            raise self.mismatch
        if self.stopping and self.max_total_tokens is not None:
            raise BudgetReached(self.spent, self.max_total_tokens)

    def _smoke(self, record: ResponseRecord) -> None:
        for check in self.smokes:
            mismatch = check.see(record)
            if mismatch is not None and self.mismatch is None:  # the first stop seen is the one said
                self.mismatch, self.stopping = mismatch, True
                self._gate.clear()

    def _spend(self, record: ResponseRecord) -> None:
        self.spent += record_tokens(record)
        if self.max_total_tokens is not None and self.spent > self.max_total_tokens:
            self.stopping = True
            self._gate.clear()

    def _reopen_if_idle(self) -> None:
        # nothing in flight can confirm the refusal any more: carry on (the rows decide one by one)
        if not self._gate.is_set() and self.in_flight <= 0 and not self.stopping and self.refused is None:
            self._gate.set()
