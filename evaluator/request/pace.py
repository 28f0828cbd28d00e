"""The parts a gate (request.pacing.Gate) is made of, each pure bookkeeping on the times it is given: the
pace (token buckets), the ticket a reservation hands out, the concurrency window, the spacing a
Retry-After imposes, and the patience (docs/ratelimits.md)."""

from __future__ import annotations

import math
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
        """Refusals that come whatever our pace taught no pace (announced limits and the floor still pace)."""
        if self.header_rpm is None:
            self.requests, self.feedback_rps = None, None
            self.refusal_marks.clear()

    def learn_from_refusal(self, sent_at: float, hold: float, now: float, new_burst: bool) -> None:
        """No announced limit: the pace is what the endpoint let through. A limiter has less than one
        request left at each refusal, so what got through since an earlier refusal, over the time since,
        is its rate; the best such measure over the last refusals is the pace. Before a second refusal it
        is a guess: what got through since the first request, over that time plus the asked wait."""
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
        """Requests sent after `start` (or from it) up to `end` that were not refused. After a refusal,
        not from it: what went in the same instant emptied the limiter, and is no measure of its rate."""

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


# ----------------------------------------------------------------------------- the gate's other parts

RAMP_S = 1.0  # before a pace is known, the window opens over the probe's round trip, at most this long ...
RAMP_MIN_S = 0.5  # ... and at least this long (a fast endpoint's round trip is a few ms: no spread at all)
PATIENCE_S = 600.0  # --rate-limit-patience: no success for this long while refusals come -> give up
ALONE_SHARE = 0.25  # after a hold, the first request goes alone when a round trip is under this share of it


@dataclass(frozen=True, slots=True)
class Ticket:
    """One reservation, known by `id`, never by its send time (two can go at the same instant)."""

    id: int
    sent_at: float  # on the gate's clock


@dataclass
class Window:
    """The AIMD concurrency window under --concurrency: the first request goes alone, the window opens
    when it is answered (spread over a ramp when no pace is known), halves once per burst of refusals and
    grows by about one per window of answers."""

    ceiling: int
    size: float = 1.0
    active: int = 0  # requests in flight
    learned: bool = False  # an answer other than a refusal has come back (the probe is over)
    ramp: Bucket | None = None  # spreads the window's opening when no pace is known yet
    ramp_left: int = 0
    slow_start: bool = False  # after the ramp: +1 per answer up to the ceiling (no burst of free slots)
    last_decrease: float = -math.inf

    @property
    def open_slots(self) -> int:
        return max(0, int(self.size) - self.active)

    def take(self) -> None:
        self.active += 1
        if self.ramp is not None:
            self.ramp_left -= 1
            if self.ramp_left <= 0:  # spent: from what is in flight, the window doubles per round trip
                self.ramp, self.slow_start = None, True
                # one slot past what is in flight: answers that never come (a stuck request) must not
                # hold the window shut, since it only grows when an answer arrives
                self.size = float(min(self.ceiling, self.active + 1))

    def give_back(self) -> None:
        self.active -= 1

    def got_through(self, sent_at: float, now: float, paced: bool) -> None:
        """An answer other than a refusal: the first opens the window, later ones grow it."""
        if not self.learned:
            self.learned = True
            self._open(sent_at, now, paced)
        elif self.slow_start:
            self.size = min(float(self.ceiling), self.size + 1.0)
            self.slow_start = self.size < self.ceiling
        elif self.size < self.ceiling:
            self.size = min(float(self.ceiling), self.size + 1.0 / self.size)

    def _open(self, sent_at: float, now: float, paced: bool) -> None:
        """The probe is back: open the window to the ceiling, spread over the probe's round trip (between
        RAMP_MIN_S and RAMP_S) when no pace is known, so a limiter's first refusal stops it early."""
        self.size = float(self.ceiling)
        if paced or self.ceiling <= 2:
            return
        span = min(RAMP_S, max(RAMP_MIN_S, now - sent_at))
        self.ramp = Bucket(self.ceiling / span, 1.0, now)
        self.ramp_left = self.ceiling

    def stop_opening(self) -> None:
        """A refusal ends the ramp and the slow start."""
        self.ramp, self.slow_start = None, False

    def narrow(self, sent_at: float, now: float, floor: float) -> bool:
        """Halve the window once per burst of refusals (not below `floor`); True when this began one."""
        if sent_at <= self.last_decrease:
            return False
        self.last_decrease = now
        self.size = max(1.0, self.size / 2, floor)
        return True


@dataclass
class Spacing:
    """The wait a refusal our pace caused puts on every worker (its Retry-After, reset or body delay), and
    the first request after it, which goes alone while its answer says whether the refusals are ours."""

    blocked_until: float = 0.0
    held_to: float = -math.inf  # the end of the last hold every worker waited out
    server_hold: bool = False  # ... and whether it was the wait the endpoint asked for
    first_after_hold: Ticket | None = None  # the first request sent after that hold ...
    awaiting_first: bool = False  # ... which goes alone until it is answered

    def hold_all(self, now: float, hold: float, asked: bool, latency_s: float | None) -> float:
        """Every worker waits `hold`; returns what this adds to the union of the holds (not their sum)."""
        self.blocked_until = max(self.blocked_until, now + hold)
        added = max(0.0, now + hold - max(now, self.held_to))
        if now + hold > self.held_to:
            self.held_to, self.server_hold, self.first_after_hold = now + hold, asked, None
            # going alone costs a round trip of the whole window: only where a hold dwarfs it
            self.awaiting_first = asked and (latency_s or 0.0) < ALONE_SHARE * hold
        return added

    def sent(self, ticket: Ticket) -> None:
        if self.first_after_hold is None and ticket.sent_at >= self.held_to:
            self.first_after_hold = ticket

    def alone_until(self, latency_s: float | None) -> float:
        """The first request after a hold goes alone for a few round trips at most."""
        assert self.first_after_hold is not None
        return self.first_after_hold.sent_at + 4 * (latency_s or 1.0) + 1.0

    def earliest(self, now: float, latency_s: float | None) -> float:
        t = max(now, self.blocked_until)
        if self.awaiting_first and self.first_after_hold is not None:
            if now >= self.alone_until(latency_s):
                self.awaiting_first = False
            else:
                t = max(t, self.alone_until(latency_s))
        return t

    def is_first_after_asked_hold(self, ticket: Ticket) -> bool:
        first = self.first_after_hold
        return self.server_hold and first is not None and first.id == ticket.id

    def answered(self, ticket: Ticket) -> None:
        if self.first_after_hold is not None and ticket.id == self.first_after_hold.id:
            self.awaiting_first = False

    def lift(self, now: float) -> None:
        self.blocked_until = min(self.blocked_until, now)


@dataclass
class Patience:
    """No success for `patience_s` while refusals come: `gave_up` says why, and the endpoint is set aside."""

    patience_s: float = PATIENCE_S
    gave_up: str | None = None
    last_ok: float | None = None
    refused_since_ok: int = 0

    def succeeded(self, now: float) -> None:
        self.last_ok, self.refused_since_ok = now, 0

    def refused(self, now: float, hold: float, first_sent: float | None) -> None:
        self.refused_since_ok += 1
        since = self.last_ok if self.last_ok is not None else first_sent
        if self.gave_up is None and since is not None and now - since >= self.patience_s:
            self.gave_up = (
                f"no request succeeded for {now - since:.0f} s while the endpoint kept refusing "
                f"({self.refused_since_ok} rate-limit refusal(s), the last asking to wait {hold:g} s); "
                f"--rate-limit-patience is {self.patience_s:g} s"
            )
