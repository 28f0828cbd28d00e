"""The pace of one gate (request.pacing.Gate): requests and tokens per second as token buckets.

The smallest of --max-requests-per-minute / --max-tokens-per-minute, the announced limits and, when none
is announced, the rate let through between refusals (never below a floor of what succeeded). The token
buckets (GCRA) themselves are pure: the endpoint's own and the user's --max-*-per-minute.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from evaluator.request.ratelimit import Limits

ANNOUNCED_SAFETY = 0.99  # pace a little under an announced rate: arrivals jitter, clocks differ
SAFETY = 0.98  # ... and a little more under a measured one
PROBING_GROWTH = 1.05  # after the first refusal the pace is a guess: grow it fast until a second refusal
STEADY_GROWTH = 1.002  # once measured: at least this, probing for a higher limit
GROWTH_SHARE = 0.05  # per success, the pace grows by this share of its measure's uncertainty (1 / count)
GROWTH_CAP = 0.005  # ... and at most this: a rough measure of a slow limit must not overshoot it at once
FLOOR_SHARE = 0.5  # the learned pace never drops below this share of the best rate that succeeded ...
FLOOR_SPAN_S = 20.0  # ... over this long (long enough that an opening burst does not count as a rate)


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


class Burst(NamedTuple):
    """A burst of refusals, one measure of the endpoint's rate that each refusal in it refines."""

    marks: tuple[float, ...]  # the send times of the refusals that began the bursts before it
    hold: float  # the wait its first refusal asked for
    pace_before: float | None  # the pace when it began


@dataclass
class Pace:
    user: UserLimits = field(default_factory=UserLimits)
    requests: Bucket | None = None  # the endpoint's own pace: announced, or learned from refusals
    tokens: Bucket | None = None
    token_costs: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    header_rpm: float | None = None
    header_tpm: float | None = None
    feedback_rps: float | None = None  # the pace learned from refusals when no header announces one
    feedback_growth: float = 1.0
    burst: Burst | None = None  # the current burst of refusals
    refusal_marks: deque[float] = field(default_factory=lambda: deque(maxlen=8))  # refusals that set the pace
    first_sent: float | None = None
    sends: deque[float] = field(default_factory=lambda: deque(maxlen=4096))  # send times
    refused_sends: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    ok_times: deque[float] = field(default_factory=deque)  # the successes of the last FLOOR_SPAN_S
    best_ok_rps: float = 0.0  # the best rate that got through over FLOOR_SPAN_S

    def token_cost(self) -> float:
        """Tokens one request is expected to use: the mean of the recorded usage so far."""
        return sum(self.token_costs) / len(self.token_costs) if self.token_costs else 1.0

    def buckets(self, ramp: Bucket | None) -> list[tuple[Bucket, float]]:
        cost = self.token_cost()
        pairs = [
            (self.requests, 1.0),
            (self.user.requests, 1.0),
            (self.tokens, cost),
            (self.user.tokens, cost),
            (ramp, 1.0),
        ]
        return [(b, min(c, b.capacity)) for b, c in pairs if b is not None]

    def known(self) -> bool:
        """Is any pace known (then the window opens at once, with no ramp)?"""
        return any(b is not None for b in (self.requests, self.user.requests, self.tokens, self.user.tokens))

    def sent(self, t: float) -> None:
        if self.first_sent is None:
            self.first_sent = t
        self.sends.append(t)

    def count_tokens(self, total_tokens: int | None) -> None:
        if total_tokens:
            self.token_costs.append(float(total_tokens))

    def remember_ok(self, now: float) -> None:
        self.ok_times.append(now)
        while self.ok_times[0] <= now - FLOOR_SPAN_S:
            self.ok_times.popleft()
        self.best_ok_rps = max(self.best_ok_rps, len(self.ok_times) / FLOOR_SPAN_S)

    def grow(self) -> None:
        """A success: a pace learned from refusals grows a little, probing for a higher limit."""
        if self.feedback_rps is not None and self.requests is not None and self.header_rpm is None:
            self.feedback_rps *= self.feedback_growth
            self.requests.rate = self.feedback_rps

    def floor_rps(self) -> float:
        """The lowest pace a refusal may set: a share of the best rate that succeeded."""
        return FLOOR_SHARE * self.best_ok_rps

    def forget(self) -> None:
        """Refusals that come whatever our pace taught no pace (announced limits, --max-requests-per-minute
        and the floor still pace)."""
        if self.header_rpm is None:
            self.requests, self.feedback_rps = None, None
            self.refusal_marks.clear()

    def learn_from_refusal(self, sent_at: float, hold: float, now: float, new_burst: bool) -> None:
        """No announced limit: the pace is what the endpoint let through.

        The limiter had less than one request left at each refusal, so what got through since an earlier
        refusal, over the time since, is its rate to within a request: the pace is the best such measure
        over the last refusals (a span held back by the window or a low pace measures low; the best of
        several is the closest). Before a second refusal there is only a guess: what got through since the
        first request, over that time plus the wait the endpoint asked for. Each refusal of a burst refines
        the burst's measure (one fewer got through). The pace grows per success by a share of the
        measure's uncertainty, one over its count, between 0.2% and 0.5% (5% while it is only a guess),
        probing for more."""
        if self.first_sent is None:
            return
        if new_burst:
            self.burst = Burst(tuple(self.refusal_marks), hold, self.feedback_rps)
            self.refusal_marks.append(sent_at)
        burst = self.burst
        if burst is None:
            return
        spans = [(self.through(t, sent_at), max(1e-3, sent_at - t)) for t in burst.marks]
        # the limiter's leftovers at the two refusals (each under one request) differ by about half of one
        rps, through = max((((n + 0.5) / span, n) for n, span in spans), default=(0.0, 0))
        if through >= 2:
            self.feedback_growth = 1.0 + max(STEADY_GROWTH - 1.0, min(GROWTH_CAP, GROWTH_SHARE / through))
        elif burst.pace_before is not None:  # too little since the last refusal to measure: cut
            rps = 0.5 * burst.pace_before
        else:
            through = self.through(self.first_sent, sent_at, after=False)
            if through < 1:
                return  # a refused first request says nothing of the rate: the hold alone slows the run
            rps = through / max(1e-3, sent_at - self.first_sent + burst.hold)
            self.feedback_growth = PROBING_GROWTH
        rps = max(rps * SAFETY, self.floor_rps())
        if self.requests is None:
            self.requests = Bucket(rps, float(through), now, 0.0)  # bursts as large as the one that passed
        self.feedback_rps = rps
        self.requests.rate = rps

    def through(self, start: float, end: float, *, after: bool = True) -> int:
        """Requests sent after `start` (or from it) up to `end` that were not refused; those still on their
        way count. After a refusal, not from it: what was sent in the same instant before it emptied the
        limiter, and is no measure of its rate."""

        def within(t: float) -> bool:
            return (start < t if after else start <= t) and t <= end

        return sum(map(within, self.sends)) - sum(map(within, self.refused_sends))

    def learn(self, limits: Limits, now: float) -> bool:
        """Take the limits a response announces; True when a new request limit came (it ends the ramp)."""
        new_rpm = bool(limits.requests_per_min and limits.requests_per_min != self.header_rpm)
        if limits.requests_per_min and new_rpm:
            self.header_rpm = limits.requests_per_min
            rate = limits.requests_per_min / 60
            capacity = capacity_of(limits.requests_remaining, limits.requests_reset_s, rate)
            self.requests = Bucket(rate * ANNOUNCED_SAFETY, capacity or 1.0, now, limits.requests_remaining)
        if limits.tokens_per_min and limits.tokens_per_min != self.header_tpm:
            self.header_tpm = limits.tokens_per_min
            rate = limits.tokens_per_min / 60
            capacity = (
                capacity_of(limits.tokens_remaining, limits.tokens_reset_s, rate) or limits.tokens_per_min
            )
            self.tokens = Bucket(rate * ANNOUNCED_SAFETY, capacity, now, limits.tokens_remaining)
        return new_rpm
