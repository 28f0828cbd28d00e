"""Rate-aware admission: every attempt to an endpoint passes its gate before it is sent.

A gate holds, for one endpoint:
- a wait shared by every worker: a refusal our pace caused (its Retry-After, reset header or body delay)
  holds back all of them, not only the row that got it; the summary counts the union of these holds;
- refusals our pace did not cause (a shared key, an upstream behind a router): after a hold the endpoint
  asked for, the first request goes alone; if even it is refused, the limiter had a token for it, so the
  refusals come whatever our rate: each is then waited out by its own request, the learned pace is
  dropped, and nothing is halved, until their share grows well past what it was;
- an AIMD concurrency window with --concurrency as the ceiling: the first request goes alone (its answer's
  headers tell the limits); the window opens then, halves on a burst of refusals (not below what the pace
  needs in flight) and grows by about one per window of successes. When no pace is known, the opening is
  spread over the first round trip measured in time, at least RAMP_MIN_S and at most RAMP_S, then the
  window doubles per round trip from what is in flight: on a fast endpoint a limiter's first refusal
  stops it after about burst + rate x RAMP_MIN_S requests;
- a pace in requests and tokens per second (request.buckets: burst, then one slot per 1/rate), the smallest
  of --max-requests-per-minute / --max-tokens-per-minute, the announced limits and, when none is announced,
  the rate let through between refusals (never below a floor of what succeeded);
- the patience: no success for --rate-limit-patience seconds while refusals come: `gave_up` says why, and
  the pool sets the endpoint aside (the run stops when all are).

Pure bookkeeping on a caller-supplied clock; request.admission.admit sleeps until the slot it reserved.
tests/pacing_sim.py runs a gate against a simulated token bucket on a virtual clock.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from evaluator.request.buckets import ANNOUNCED_SAFETY, Bucket, UserLimits, capacity_of
from evaluator.request.ratelimit import Limits

SAFETY = 0.98  # ... and a little more under a measured one
PROBING_GROWTH = 1.05  # after the first refusal the pace is a guess: grow it fast until a second refusal
STEADY_GROWTH = 1.002  # once measured: at least this, probing for a higher limit
GROWTH_SHARE = 0.05  # per success, the pace grows by this share of its measure's uncertainty (1 / count)
GROWTH_CAP = 0.005  # ... and at most this: a rough measure of a slow limit must not overshoot it at once
RAMP_S = 1.0  # before a pace is known, the window opens over the probe's round trip, at most this long ...
RAMP_MIN_S = 0.5  # ... and at least this long (a fast endpoint's round trip is a few ms: no spread at all)
PATIENCE_S = 600.0  # --rate-limit-patience: no success for this long while refusals come -> give up
ALONE_SHARE = 0.25  # after a hold, the first request goes alone when a round trip is under this share of it
FOREIGN_ANSWERS = 32  # the refused share is taken over this many answers
FLOOR_SHARE = 0.5  # the learned pace never drops below this share of the best rate that succeeded ...
FLOOR_SPAN_S = 20.0  # ... over this long (long enough that an opening burst does not count as a rate)


@dataclass
class GateStats:
    refusals: int = 0  # rate-limit refusals (429 / transient 402)
    held_s: float = 0.0  # how long every worker was held by refusals (the union of the holds)
    foreign: int = 0  # refusals that came while we sent below what had got through: waited out alone
    lowest_window: int = 0
    sent: int = 0


class Hold(NamedTuple):
    """What a refusal costs: the wait, and whether every worker waits (our rate caused it) or only its request."""

    wait_s: float
    shared: bool


class Burst(NamedTuple):
    """A burst of refusals, one measure of the endpoint's rate that each refusal in it refines."""

    marks: tuple[float, ...]  # the send times of the refusals that began the bursts before it
    hold: float  # the wait its first refusal asked for
    pace_before: float | None  # the pace when it began


@dataclass
class Gate:
    ceiling: int
    user: UserLimits = field(default_factory=UserLimits)
    clock: Callable[[], float] = time.monotonic
    window: float = 1.0  # AIMD concurrency window; the first request goes alone
    active: int = 0
    blocked_until: float = 0.0
    learned: bool = False  # an answer other than a refusal has come back (the probe is over)
    requests: Bucket | None = None  # the endpoint's own pace: announced, or learned from refusals
    tokens: Bucket | None = None
    ramp: Bucket | None = None  # spreads the window's opening when no pace is known yet
    ramp_left: int = 0
    slow_start: bool = False  # after the ramp: +1 per answer up to the ceiling (no burst of free slots)
    first_sent: float | None = None
    sends: deque[float] = field(default_factory=lambda: deque(maxlen=4096))  # send times
    refused_sends: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    feedback_rps: float | None = None  # the pace learned from refusals when no header announces one
    feedback_growth: float = 1.0
    latency_s: float | None = None  # a moving mean of the answers' round trips
    burst: Burst | None = None  # the current burst of refusals
    refusal_marks: deque[float] = field(default_factory=lambda: deque(maxlen=8))  # refusals that set the pace
    last_decrease: float = -math.inf
    token_costs: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    stats: GateStats = field(default_factory=GateStats)
    header_rpm: float | None = None
    header_tpm: float | None = None
    patience_s: float = PATIENCE_S
    gave_up: str | None = None  # why the endpoint is set aside: refused for longer than the patience
    last_ok: float | None = None
    refused_since_ok: int = 0
    answers: deque[tuple[float, bool]] = field(default_factory=lambda: deque(maxlen=256))  # (sent, refused)
    ok_times: deque[float] = field(default_factory=deque)  # the successes of the last FLOOR_SPAN_S
    best_ok_rps: float = 0.0  # the best rate that got through over FLOOR_SPAN_S
    foreign_share: float | None = None  # the share of refusals that come whatever our pace
    held_to: float = -math.inf  # the end of the last hold every worker waited out
    server_hold: bool = False  # ... and whether it was the wait the endpoint asked for
    first_after_hold: float | None = None  # when the first request after that hold was sent ...
    awaiting_first: bool = False  # ... which goes alone: its answer says whether the refusals are ours
    last_reserved: float | None = None

    def __post_init__(self) -> None:
        self.stats.lowest_window = self.ceiling

    # ------------------------------------------------------------------ admission

    @property
    def open_slots(self) -> int:
        return max(0, int(self.window) - self.active)

    def token_cost(self) -> float:
        """Tokens one request is expected to use: the mean of the recorded usage so far."""
        return sum(self.token_costs) / len(self.token_costs) if self.token_costs else 1.0

    def _buckets(self) -> list[tuple[Bucket, float]]:
        cost = self.token_cost()
        pairs = [
            (self.requests, 1.0),
            (self.user.requests, 1.0),
            (self.tokens, cost),
            (self.user.tokens, cost),
            (self.ramp, 1.0),
        ]
        return [(b, min(c, b.capacity)) for b, c in pairs if b is not None]

    def earliest(self, now: float) -> float:
        """When this gate could admit one more request (inf while the window is full)."""
        if self.open_slots <= 0:
            return math.inf
        t = max(now, self.blocked_until)
        if self._awaiting(now):
            t = max(t, self._alone_until())
        for bucket, cost in self._buckets():
            t = max(t, bucket.earliest(now, cost))
        return t

    def reserve(self, now: float) -> float:
        """Take a window slot and the next pace slot; returns when to send."""
        t = self.earliest(now)
        assert t < math.inf, "reserve() needs an open slot"
        self.active += 1
        for bucket, cost in self._buckets():
            bucket.reserve(t, cost)
        if self.ramp is not None:
            self.ramp_left -= 1
            if self.ramp_left <= 0:  # spent: from what is in flight, the window doubles per round trip
                self.ramp, self.slow_start = None, True
                # one slot past what is in flight: answers that never come (a stuck request) must not
                # hold the window shut, since it only grows when an answer arrives
                self.window = float(min(self.ceiling, self.active + 1))
        if self.first_sent is None:
            self.first_sent = t
        if self.first_after_hold is None and t >= self.held_to:
            self.first_after_hold = t
        self.last_reserved = t  # the send time the caller reports back (succeeded / failed / refused)
        self.sends.append(t)
        self.stats.sent += 1
        return t

    def release(self) -> None:
        self.active -= 1

    def _alone_until(self) -> float:
        """An answer that never comes must not stall the gate: the first request after a hold goes alone
        for at most a few round trips."""
        assert self.first_after_hold is not None
        return self.first_after_hold + 4 * (self.latency_s or 1.0) + 1.0

    def _awaiting(self, now: float) -> bool:
        """After a hold the endpoint asked for, the first request goes alone until it is answered."""
        if not self.awaiting_first or self.first_after_hold is None:
            return False
        if now >= self._alone_until():
            self.awaiting_first = False
        return self.awaiting_first

    def _answered(self, sent_at: float) -> None:
        if sent_at == self.first_after_hold:
            self.awaiting_first = False

    # ------------------------------------------------------------------ feedback

    def succeeded(self, sent_at: float, limits: Limits, total_tokens: int | None) -> None:
        now = self.clock()
        if total_tokens:
            self.token_costs.append(float(total_tokens))
        self._learn(limits, now)
        self._got_through(now, sent_at)
        self._remember_success(now, sent_at)
        self._answered(sent_at)
        trip = now - sent_at
        self.latency_s = trip if self.latency_s is None else 0.9 * self.latency_s + 0.1 * trip
        if self.feedback_rps is not None and self.requests is not None and self.header_rpm is None:
            self.feedback_rps *= self.feedback_growth
            self.requests.rate = self.feedback_rps

    def _remember_success(self, now: float, sent_at: float) -> None:
        self.last_ok, self.refused_since_ok = now, 0
        self.answers.append((sent_at, False))
        self.ok_times.append(now)
        while self.ok_times[0] <= now - FLOOR_SPAN_S:
            self.ok_times.popleft()
        self.best_ok_rps = max(self.best_ok_rps, len(self.ok_times) / FLOOR_SPAN_S)

    def floor_rps(self) -> float:
        """The lowest pace a refusal may set: a share of the best rate that succeeded."""
        return FLOOR_SHARE * self.best_ok_rps

    def failed(self, sent_at: float) -> None:
        """Any other failure got through the limiter, and still ends the probe: the window opens."""
        self._answered(sent_at)
        self._got_through(self.clock(), sent_at)

    def _got_through(self, now: float, sent_at: float) -> None:
        if not self.learned:
            self.learned = True
            self._open(sent_at, now)
        elif self.slow_start:
            self.window = min(float(self.ceiling), self.window + 1.0)
            self.slow_start = self.window < self.ceiling
        elif self.window < self.ceiling:
            self.window = min(float(self.ceiling), self.window + 1.0 / self.window)

    def _open(self, sent_at: float, now: float) -> None:
        """The probe is back: open the window to the ceiling. If no pace is known, spread the opening
        over the probe's round trip, but at least RAMP_MIN_S and at most RAMP_S (time: on a fast endpoint a
        round trip is a few ms): a refusal then stops the ramp after about burst + rate x RAMP_MIN_S
        requests instead of after a whole window, and an endpoint with no limit loses about half of it."""
        self.window = float(self.ceiling)
        known = (self.requests, self.user.requests, self.tokens, self.user.tokens)
        if any(b is not None for b in known) or self.ceiling <= 2:
            return
        span = min(RAMP_S, max(RAMP_MIN_S, now - sent_at))
        self.ramp = Bucket(self.ceiling / span, 1.0, now)
        self.ramp_left = self.ceiling

    def refused(self, sent_at: float, limits: Limits, wait_s: float | None, fallback_s: float) -> Hold:
        """A rate-limit refusal. One our pace caused holds every worker back, narrows the window and slows
        the pace; one that came while we sent below what had got through is waited out by its request."""
        now = self.clock()
        self._learn(limits, now)
        hold = wait_s if wait_s is not None else fallback_s
        self.stats.refusals += 1
        self.refused_since_ok += 1
        self.answers.append((sent_at, True))
        self._answered(sent_at)
        self._check_patience(now, hold)
        self.ramp, self.slow_start = None, False
        if not self._ours(sent_at, now):
            self.stats.foreign += 1
            return Hold(hold, False)
        self._hold_all(now, hold, wait_s is not None)
        self.refused_sends.append(sent_at)
        new_burst = sent_at > self.last_decrease  # one decrease per burst of refusals, not one per request
        if new_burst:
            self.last_decrease = now
            self.window = max(1.0, self.window / 2, self._window_for_pace())
            self.stats.lowest_window = min(self.stats.lowest_window, int(self.window))
        if self.header_rpm is None:
            self._learn_from_refusal(sent_at, hold, now, new_burst)
        if self.requests is not None:
            self.requests.drain(now)
        return Hold(hold, True)

    def _hold_all(self, now: float, hold: float, asked: bool) -> None:
        """Every worker waits `hold`; the summary counts the union of the holds, not their sum."""
        self.blocked_until = max(self.blocked_until, now + hold)
        self.stats.held_s += max(0.0, now + hold - max(now, self.held_to))
        if now + hold > self.held_to:
            self.held_to, self.server_hold, self.first_after_hold = now + hold, asked, None
            # going alone costs a round trip of the whole window: only where a hold dwarfs it
            self.awaiting_first = asked and (self.latency_s or 0.0) < ALONE_SHARE * hold

    def _check_patience(self, now: float, hold: float) -> None:
        since = self.last_ok if self.last_ok is not None else self.first_sent
        if self.gave_up is None and since is not None and now - since >= self.patience_s:
            self.gave_up = (
                f"no request succeeded for {now - since:.0f} s while the endpoint kept refusing "
                f"({self.refused_since_ok} rate-limit refusal(s), the last asking to wait {hold:g} s); "
                f"--rate-limit-patience is {self.patience_s:g} s"
            )

    def _share(self) -> float:
        """The refused share of the last answers."""
        picked = [r for _, r in self.answers][-FOREIGN_ANSWERS:]
        return sum(picked) / len(picked) if picked else 0.0

    def _ours(self, sent_at: float, now: float) -> bool:
        """Did our own rate cause this refusal? Not when it refused the first request sent after every
        worker waited out the wait the endpoint asked for: a limiter has a token then, unless someone else
        took it (a shared key) or the refusals have nothing to do with the rate (an upstream behind a
        router). From then on refusals are waited out by their request alone while their share stays
        about what it was; a clearly larger share means our rate is too high on top of them."""
        if self.foreign_share is not None:
            if self._share() <= 1.5 * self.foreign_share + 0.1:
                return False
            self.foreign_share = None
            return True
        if not (self.server_hold and sent_at == self.first_after_hold):
            return True
        if sum(1 for t in reversed(self.sends) if t == sent_at) > 1:
            return True  # several went at that instant: this one may not have been the first
        self.foreign_share = self._share()
        self._forget_pace(now)
        return False

    def _forget_pace(self, now: float) -> None:
        """Refusals that come whatever our pace taught no pace: the window opens again (announced limits,
        --max-requests-per-minute and the floor still pace)."""
        if self.header_rpm is None:
            self.requests, self.feedback_rps = None, None
            self.refusal_marks.clear()
        self.window = float(self.ceiling)
        self.blocked_until = min(self.blocked_until, now)

    def _window_for_pace(self) -> float:
        """A refusal narrows the window, but not below what the pace needs in flight (Little's law): with
        a pace the limit is on the rate, and the pace alone keeps the requests in flight under it."""
        if self.requests is None or self.latency_s is None:
            return 1.0
        return min(float(self.ceiling), 1.25 * self.requests.rate * self.latency_s + 1.0)

    def _learn_from_refusal(self, sent_at: float, hold: float, now: float, new_burst: bool) -> None:
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
        spans = [(self._through(t, sent_at), max(1e-3, sent_at - t)) for t in burst.marks]
        # the limiter's leftovers at the two refusals (each under one request) differ by about half of one
        rps, through = max((((n + 0.5) / span, n) for n, span in spans), default=(0.0, 0))
        if through >= 2:
            self.feedback_growth = 1.0 + max(STEADY_GROWTH - 1.0, min(GROWTH_CAP, GROWTH_SHARE / through))
        elif burst.pace_before is not None:  # too little since the last refusal to measure: cut
            rps = 0.5 * burst.pace_before
        else:
            through = self._through(self.first_sent, sent_at, after=False)
            if through < 1:
                return  # a refused first request says nothing of the rate: the hold alone slows the run
            rps = through / max(1e-3, sent_at - self.first_sent + burst.hold)
            self.feedback_growth = PROBING_GROWTH
        rps = max(rps * SAFETY, self.floor_rps())
        if self.requests is None:
            self.requests = Bucket(rps, float(through), now, 0.0)  # bursts as large as the one that passed
        self.feedback_rps = rps
        self.requests.rate = rps

    def _through(self, start: float, end: float, *, after: bool = True) -> int:
        """Requests sent after `start` (or from it) up to `end` that were not refused; those still on their
        way count. After a refusal, not from it: what was sent in the same instant before it emptied the
        limiter, and is no measure of its rate."""

        def within(t: float) -> bool:
            return (start < t if after else start <= t) and t <= end

        return sum(map(within, self.sends)) - sum(map(within, self.refused_sends))

    def _learn(self, limits: Limits, now: float) -> None:
        if limits.requests_per_min and limits.requests_per_min != self.header_rpm:
            self.header_rpm = limits.requests_per_min
            rate = limits.requests_per_min / 60
            capacity = capacity_of(limits.requests_remaining, limits.requests_reset_s, rate)
            self.requests = Bucket(rate * ANNOUNCED_SAFETY, capacity or 1.0, now, limits.requests_remaining)
            self.ramp = None
        if limits.tokens_per_min and limits.tokens_per_min != self.header_tpm:
            self.header_tpm = limits.tokens_per_min
            rate = limits.tokens_per_min / 60
            capacity = (
                capacity_of(limits.tokens_remaining, limits.tokens_reset_s, rate) or limits.tokens_per_min
            )
            self.tokens = Bucket(rate * ANNOUNCED_SAFETY, capacity, now, limits.tokens_remaining)
