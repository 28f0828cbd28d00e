"""Token buckets (GCRA) that pace requests: the endpoint's own and the user's --max-*-per-minute. Pure."""

from __future__ import annotations

from dataclasses import dataclass

ANNOUNCED_SAFETY = 0.99  # pace a little under an announced rate: arrivals jitter, clocks differ


class Bucket:
    """GCRA: `rate` slots per second with bursts of `capacity`; reserve() returns the slot's start time."""

    def __init__(self, rate: float, capacity: float, now: float, available: float | None = None) -> None:
        self.rate = rate
        self.capacity = max(1.0, capacity)
        avail = self.capacity if available is None else max(0.0, min(available, self.capacity))
        self.tat = now + (self.capacity - avail) / rate  # theoretical arrival time of the next slot

    def earliest(self, now: float, cost: float = 1.0) -> float:
        return max(now, self.tat + cost / self.rate - self.capacity / self.rate)

    def reserve(self, now: float, cost: float = 1.0) -> float:
        start = self.earliest(now, cost)
        self.tat = max(self.tat, start) + cost / self.rate
        return start

    def drain(self, now: float) -> None:
        """The server says the bucket is empty now."""
        self.tat = max(self.tat, now + self.capacity / self.rate)


@dataclass
class UserLimits:
    """--max-requests-per-minute / --max-tokens-per-minute: one pair of buckets shared by every endpoint."""

    requests: Bucket | None = None
    tokens: Bucket | None = None

    @classmethod
    def of(cls, max_rpm: float | None, max_tpm: float | None, now: float) -> UserLimits:
        # a little under the tier's figure, as under an announced one: a request that reaches the
        # server a few ms early is refused, and the wait then costs far more than the margin
        return cls(
            Bucket(ANNOUNCED_SAFETY * max_rpm / 60, 1.0, now) if max_rpm else None,
            Bucket(ANNOUNCED_SAFETY * max_tpm / 60, max_tpm, now) if max_tpm else None,
        )


def capacity_of(remaining: float | None, reset_s: float | None, rate: float) -> float | None:
    """The bucket size implied by what is left plus what refills until the reset (the bucket is full then)."""
    if remaining is None or reset_s is None:
        return None
    return max(1.0, remaining + reset_s * rate)
