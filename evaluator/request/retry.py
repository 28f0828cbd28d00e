"""Retry policy and the one list of retryable HTTP statuses. Pure; no HTTP library imported here."""

from __future__ import annotations

import random
from dataclasses import dataclass

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
