"""What a refusal means: rate limit (wait, then send again), quota or billing (stop), or a request that
can never fit the limit (stop); the limits a response's headers announce; the retry policy and the one
list of retryable HTTP statuses. Pure: headers are any str -> str mapping, bodies the decoded JSON.

Provider facts this module relies on (see also docs/providers.md, docs/ratelimits.md):
- OpenAI sends `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as Go-style durations
  ("6m0s", "0.25s", "12ms"; community.openai.com/t/1268905); its SDK honours `retry-after-ms` and
  `retry-after` (seconds or HTTP date). Messages say "Please try again in 9.816s" (MetaGPT#523, crewAI#494).
- OpenAI's exhausted quota is a 429 with type and code `insufficient_quota`: waiting does not fix it
  (chatanywhere/GPT_API_free#229). Its TPM limiter refuses one request larger than the whole budget ("Request
  too large ... Limit 30000, Requested 30601", code `rate_limit_exceeded`): a hard error (DrShushen/climb#13,
  Aider-AI/aider#1880).
- Anthropic sends `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` (an RFC 3339 time) and
  `retry-after` on a 429 (anthropics/anthropic-sdk-typescript#357).
- Gemini puts its wait in the body (`error.details[]` google.rpc.RetryInfo `retryDelay` "36s") and names
  the quota in a google.rpc.QuotaFailure; a per-day `quotaId` such as
  "GenerateRequestsPerDayPerProjectPerModel-FreeTier" does not clear by waiting (diegosouzapw/OmniRoute#9504,
  gke-labs/gemini-for-kubernetes-development#1215). Its OpenAI-compatible layer may wrap the error in a
  one-element list (google-gemini/gemini-cli#10925).
- OpenRouter's 402 with `Retry-After` is the transient in-flight budget (`metadata.limit_source`
  "openrouter_in_flight_budget"), worth retrying; without it credits are missing (OpenRouter's docs).
- Azure OpenAI asks for "retry after 86400 seconds" when a tier's quota is spent (DrShushen/climb#13).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, TypedDict

from evaluator.core.boundary import clip
from evaluator.core.jsonl import JSONObject
from evaluator.core.usage import retry_errors_of

# A server asking for a longer wait than this is out of quota for the day, not pacing requests.
QUOTA_WAIT_S = 900.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_TRY_AGAIN = re.compile(r"try again in (\d[\dhmsµun.]*)", re.IGNORECASE)
_TOO_LARGE = re.compile(
    r"(?:on|per) (tokens|requests|input tokens|output tokens) per min(?:ute)?\b.*?Limit:? ~?(\d+)"
    r"(?:, Used:? ~?\d+)?, Requested:? ~?(\d+)",
    re.IGNORECASE | re.DOTALL,
)


# The statuses worth retrying besides 5xx (which are always retried): request timeout, conflict,
# too early, rate limited. ratelimit.classify and the breaker read this set; nothing else lists them.
RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
# The 5xx that never heal: 501 Not Implemented is a server that has no such method or route (a static file
# server answering POST), so sending again cannot help.
NEVER_RETRIED_5XX = frozenset({501})


def retryable_status(status: int) -> bool:
    """Whether an HTTP error status is worth another attempt (rate limits aside, see ratelimit.classify)."""
    return status in RETRYABLE_STATUS or (status >= 500 and status not in NEVER_RETRIED_5XX)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 120.0

    def wait_s(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Exponential backoff with full jitter in [50%, 100%]; Retry-After wins when longer (capped)."""
        backoff = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        wait = backoff * (0.5 + 0.5 * rng.random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_max_s))
        return wait


def parse_duration(value: str | None) -> float | None:
    """Seconds in "6m0s", "0.25s", "12ms", "1h2m3s" or a bare number of seconds; None if unreadable."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and pos > 0 else None


def parse_when(value: str | None, now: datetime) -> float | None:
    """Seconds until a reset given as a duration, an RFC 3339 time or an HTTP date."""
    seconds = parse_duration(value)
    if seconds is not None or not value:
        return seconds
    text = value.strip()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True)
class Limits:
    """One response's view of the endpoint's limits (None where the server said nothing)."""

    requests_per_min: float | None = None
    requests_remaining: float | None = None
    requests_reset_s: float | None = None
    tokens_per_min: float | None = None
    tokens_remaining: float | None = None
    tokens_reset_s: float | None = None

    @property
    def known(self) -> bool:
        return self.requests_per_min is not None or self.tokens_per_min is not None

    def exhausted_wait_s(self) -> float | None:
        """Until the reset of a dimension that has nothing left, if any."""
        waits = [
            reset
            for remaining, reset in (
                (self.requests_remaining, self.requests_reset_s),
                (self.tokens_remaining, self.tokens_reset_s),
            )
            if remaining is not None and remaining <= 0 and reset is not None
        ]
        return max(waits) if waits else None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def limits_from_headers(headers: Mapping[str, str], now: datetime | None = None) -> Limits:
    """OpenAI-style `x-ratelimit-*` or Anthropic `anthropic-ratelimit-*` headers (already lower-cased)."""
    now = now or datetime.now(timezone.utc)
    for prefix, name in (("x-ratelimit-", "{f}-{d}"), ("anthropic-ratelimit-", "{d}-{f}")):
        if not any(k.startswith(prefix) for k in headers):
            continue

        def get(field: str, dim: str, prefix: str = prefix, name: str = name) -> str | None:
            return headers.get(prefix + name.format(f=field, d=dim))

        return Limits(
            requests_per_min=_number(get("limit", "requests")),
            requests_remaining=_number(get("remaining", "requests")),
            requests_reset_s=parse_when(get("reset", "requests"), now),
            tokens_per_min=_number(get("limit", "tokens")),
            tokens_remaining=_number(get("remaining", "tokens")),
            tokens_reset_s=parse_when(get("reset", "tokens"), now),
        )
    return Limits()


@dataclass(frozen=True)
class Verdict:
    """What to do after one failed HTTP exchange."""

    kind: str  # rate_limit, quota, too_large, payment, retryable, client_error
    retryable: bool
    wait_s: float | None = None  # the wait the server asked for (any of its ways of saying it)
    stop: str | None = None  # the run must stop: one line naming the limit and the fix

    @property
    def paced(self) -> bool:
        """A refusal with a wait: sent again after it without using the row's protocol retries."""
        return self.retryable and self.kind in ("rate_limit", "payment") and self.wait_s is not None


def error_object(body: Any) -> JSONObject:
    """The `error` object of an OpenAI-, Gemini- or OpenRouter-style error body ({} if none)."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]  # Gemini's compatibility layer: [{"error": {...}}]
    if not isinstance(body, dict):
        return {}
    err = body.get("error", body)
    return err if isinstance(err, dict) else {}


def _details(err: JSONObject) -> list[JSONObject]:
    details = err.get("details")
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


def body_wait_s(err: JSONObject) -> float | None:
    """Gemini's RetryInfo.retryDelay, or an OpenAI-style "Please try again in 20s" in the message."""
    for d in _details(err):
        if str(d.get("@type", "")).endswith("google.rpc.RetryInfo"):
            wait = parse_duration(str(d.get("retryDelay", "")))
            if wait is not None:
                return wait
    m = _TRY_AGAIN.search(str(err.get("message", "")))
    return parse_duration(m.group(1).rstrip(".")) if m else None


def header_wait_s(headers: Mapping[str, str], now: datetime) -> float | None:
    """retry-after-ms, then retry-after (seconds or HTTP date), as the openai SDK reads them."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return max(0.0, ms / 1000)
    return parse_when(headers.get("retry-after"), now)


def _daily_quota(err: JSONObject) -> str | None:
    for d in _details(err):
        for v in d.get("violations") or []:
            if isinstance(v, dict) and "perday" in str(v.get("quotaId", "")).lower():
                return str(v.get("quotaId"))
    return None


def _quota_stop(err: JSONObject, wait_s: float | None) -> str | None:
    """The reason a 429 is a spent quota (waiting will not help), or None."""
    code, etype = str(err.get("code", "")), str(err.get("type", ""))
    message = clip(str(err.get("message", "")), 300)
    if "insufficient_quota" in (code, etype):
        return f"the account's quota is used up (insufficient_quota: {message})"
    daily = _daily_quota(err)
    if daily:
        return f"a per-day quota is used up ({daily}: {message})"
    if wait_s is not None and wait_s > QUOTA_WAIT_S:
        return f"the endpoint asks to wait {wait_s:.0f} s, a spent quota rather than a rate limit ({message})"
    return None


def too_large_stop(message: str) -> str | None:
    """One request above a whole per-minute budget: it can never be sent successfully."""
    m = _TOO_LARGE.search(message)
    if not m or int(m.group(3)) <= int(m.group(2)):
        return None
    return (
        f"one request needs {m.group(3)} {m.group(1).lower()} but the endpoint's {m.group(1).lower()}-per-minute "
        f"limit is {m.group(2)} (the output limit counts toward it): lower --max-tokens or use a higher rate tier"
    )


def classify(status: int, headers: Mapping[str, str], body: Any, now: datetime | None = None) -> Verdict:
    """The verdict for one HTTP error response; `headers` lower-cased, `body` the decoded JSON or None."""
    now = now or datetime.now(timezone.utc)
    err = error_object(body)
    wait = header_wait_s(headers, now)
    if wait is None:
        wait = body_wait_s(err)
    if wait is None and status == 429:
        wait = limits_from_headers(headers, now).exhausted_wait_s()
    message = str(err.get("message", ""))
    if status == 429:
        stop = too_large_stop(message)
        if stop:
            return Verdict("too_large", False, wait, stop)
        stop = _quota_stop(err, wait)
        if stop:
            return Verdict("quota", False, wait, stop)
        return Verdict("rate_limit", True, wait)
    if status == 402:
        if wait is not None:  # OpenRouter's transient in-flight budget comes with Retry-After
            return Verdict("payment", True, wait)
        return Verdict(
            "payment", False, None, f"the endpoint refuses for billing (402: {clip(message, 300)})"
        )
    if retryable_status(status):  # 429 is handled above
        return Verdict("retryable", True, wait)
    return Verdict("client_error", False, wait)


class RateLimitStats(TypedDict, total=False):
    """summary.json `rate_limits` (empty when there were no refusals)."""

    refusals: int
    rows: int
    waited_s: float


def rate_limit_stats(rows: list[JSONObject]) -> RateLimitStats:
    """The run's rate-limit refusals as its records hold them (retry_errors marked `paced`, earlier attempts' too): how many, on
    how many rows, and the waits. Empty when there were none, so that such a summary keeps its bytes."""
    waits = [[e.get("wait_s") for e in retry_errors_of(row) if e.get("paced")] for row in rows]
    refusals = sum(len(w) for w in waits)
    if not refusals:
        return {}
    waited = sum(x for w in waits for x in w if isinstance(x, (int, float)))
    return {"refusals": refusals, "rows": sum(1 for w in waits if w), "waited_s": round(waited, 3)}


def rate_limit_markdown(stats: RateLimitStats) -> list[str]:
    """The summary.md line for rate_limit_stats (none when there were no refusals)."""
    if not stats:
        return []
    return [
        f"Rate-limit refusals (429/402 with a wait): {stats['refusals']} on {stats['rows']} row(s), waited out "
        f"without using the rows' retries ({stats['waited_s']} s of waits in all; each is in retry_errors).",
        "",
    ]
