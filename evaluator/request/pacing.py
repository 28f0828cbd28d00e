"""Rate-aware admission: every attempt to an endpoint passes its gate before it is sent.

A gate holds, for one endpoint, the parts of request.pace: the spacing (a refusal our pace caused holds
every worker), the AIMD window under --concurrency, the pace (requests and tokens per second) and the
patience; docs/ratelimits.md describes how they play together. reserve() hands out a Ticket; the caller
hands it back to release() once the attempt is over and to one of succeeded() / failed() / refused() with
its outcome (once: again, it is ignored). Pure bookkeeping on a caller-supplied clock; `admit` sleeps until
the slot it reserved. tests/support/pacing_sim.py runs a gate against a simulated limiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from evaluator.request.pace import (
    PATIENCE_S,
    RAMP_MIN_S,
    RAMP_S,
    Bucket,
    Pace,
    Patience,
    Spacing,
    Ticket,
    UserLimits,
    Window,
)
from evaluator.request.ratelimit import Limits

__all__ = ["RAMP_MIN_S", "RAMP_S", "Bucket", "Gate", "GateStats", "Hold", "Ticket", "UserLimits"]

FOREIGN_ANSWERS = 32  # the refused share is taken over this many answers


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


class Gate:
    def __init__(
        self,
        ceiling: int,
        user: UserLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        patience_s: float = PATIENCE_S,
    ) -> None:
        self.window = Window(ceiling)
        self.pace = Pace(user=user or UserLimits())
        self.spacing = Spacing()
        self.patience = Patience(patience_s)
        self.clock = clock
        self.stats = GateStats(lowest_window=ceiling)
        self.latency_s: float | None = None  # a moving mean of the answers' round trips
        self.answers: deque[bool] = deque(maxlen=256)  # whether each of the last answers was a refusal
        self.foreign_share: float | None = None  # the share of refusals that come whatever our pace
        self.ids = itertools.count()
        self.in_flight_ids: set[int] = set()  # tickets not yet released
        self.unanswered: set[int] = set()  # tickets whose outcome has not come yet

    # ------------------------------------------------------------------ what the pool reads

    @property
    def open_slots(self) -> int:
        return self.window.open_slots

    @property
    def in_flight(self) -> int:
        return self.window.active

    @property
    def concurrency(self) -> int:
        """The window's current width."""
        return int(self.window.size)

    @property
    def gave_up(self) -> str | None:
        """Why the endpoint is set aside (refused for longer than the patience), or None."""
        return self.patience.gave_up

    # ------------------------------------------------------------------ admission

    def earliest(self, now: float) -> float:
        """When this gate could admit one more request (inf while the window is full)."""
        if self.window.open_slots <= 0:
            return math.inf
        t = self.spacing.earliest(now, self.latency_s)
        for bucket, cost in self.pace.buckets(self.window.ramp):
            t = max(t, bucket.earliest(now, cost))
        return t

    def reserve(self, now: float) -> Ticket:
        """Take a window slot and the next pace slot; the ticket says when to send."""
        t = self.earliest(now)
        assert t < math.inf, "reserve() needs an open slot"
        for bucket, cost in self.pace.buckets(self.window.ramp):
            bucket.reserve(t, cost)
        self.window.take()
        ticket = Ticket(next(self.ids), t)
        self.pace.sent(t)
        self.spacing.sent(ticket)
        self.in_flight_ids.add(ticket.id)
        self.unanswered.add(ticket.id)
        self.stats.sent += 1
        return ticket

    def release(self, ticket: Ticket) -> bool:
        """The attempt is over: its window slot is free (False for a ticket released already or not ours)."""
        if ticket.id not in self.in_flight_ids:
            return False
        self.in_flight_ids.remove(ticket.id)
        self.window.give_back()
        return True

    def _answer(self, ticket: Ticket) -> bool:
        """Each ticket's outcome counts once."""
        if ticket.id not in self.unanswered:
            return False
        self.unanswered.remove(ticket.id)
        self.spacing.answered(ticket)
        return True

    # ------------------------------------------------------------------ feedback

    def succeeded(self, ticket: Ticket, limits: Limits, total_tokens: int | None) -> None:
        if not self._answer(ticket):
            return
        now = self.clock()
        self.pace.count_tokens(total_tokens)
        self._learn(limits, now)
        self.window.got_through(ticket.sent_at, now, self.pace.known())
        self.patience.succeeded(now)
        self.answers.append(False)
        self.pace.remember_ok(now)
        trip = now - ticket.sent_at
        self.latency_s = trip if self.latency_s is None else 0.9 * self.latency_s + 0.1 * trip
        self.pace.grow()

    def failed(self, ticket: Ticket) -> None:
        """Any other failure got through the limiter, and still ends the probe: the window opens."""
        if self._answer(ticket):
            self.window.got_through(ticket.sent_at, self.clock(), self.pace.known())

    def refused(self, ticket: Ticket, limits: Limits, wait_s: float | None, fallback_s: float) -> Hold:
        """A rate-limit refusal. One our pace caused holds every worker back, narrows the window and slows
        the pace; one that came while we sent below what had got through is waited out by its request.
        A ticket already answered costs nothing more: Hold(0, False)."""
        if not self._answer(ticket):
            return Hold(0.0, False)
        now, sent_at = self.clock(), ticket.sent_at
        self._learn(limits, now)
        hold = wait_s if wait_s is not None else fallback_s
        self.stats.refusals += 1
        self.answers.append(True)
        self.patience.refused(now, hold, self.pace.first_sent)
        self.window.stop_opening()
        if not self._ours(ticket, now):
            self.stats.foreign += 1
            return Hold(hold, False)
        self.stats.held_s += self.spacing.hold_all(now, hold, wait_s is not None, self.latency_s)
        self.pace.refused_sends.append(sent_at)
        new_burst = self.window.narrow(sent_at, now, self._window_for_pace())
        if new_burst:
            self.stats.lowest_window = min(self.stats.lowest_window, int(self.window.size))
        if self.pace.header_rpm is None:
            self.pace.learn_from_refusal(sent_at, hold, now, new_burst)
        if self.pace.requests is not None:
            self.pace.requests.drain(now)
        return Hold(hold, True)

    def _share(self) -> float:
        """The refused share of the last answers."""
        picked = list(self.answers)[-FOREIGN_ANSWERS:]
        return sum(picked) / len(picked) if picked else 0.0

    def _ours(self, ticket: Ticket, now: float) -> bool:
        """Did our own rate cause this refusal? Not when it refused the first request sent after the wait
        the endpoint asked for (a limiter has a token then); from then on, not while the refused share
        stays about what it was."""
        if self.foreign_share is not None:
            if self._share() <= 1.5 * self.foreign_share + 0.1:
                return False
            self.foreign_share = None
            return True
        if not self.spacing.is_first_after_asked_hold(ticket):
            return True
        if sum(1 for t in reversed(self.pace.sends) if t == ticket.sent_at) > 1:
            return True  # several went at that instant: this one may not have been the first
        self.foreign_share = self._share()
        self._forget_pace(now)
        return False

    def _forget_pace(self, now: float) -> None:
        """Refusals that come whatever our pace taught no pace: the window opens again."""
        self.pace.forget()
        self.window.size = float(self.window.ceiling)
        self.spacing.lift(now)

    def _window_for_pace(self) -> float:
        """A refusal narrows the window, but not below what the pace needs in flight (Little's law): with
        a pace the limit is on the rate, and the pace alone keeps the requests in flight under it."""
        if self.pace.requests is None or self.latency_s is None:
            return 1.0
        return min(float(self.window.ceiling), 1.25 * self.pace.requests.rate * self.latency_s + 1.0)

    def _learn(self, limits: Limits, now: float) -> None:
        if self.pace.learn(limits, now):
            self.window.ramp = None


async def admit(
    gates: Sequence[Gate], usable: Callable[[int], bool], changed: asyncio.Event
) -> tuple[int, Ticket]:
    """Wait for the earliest slot over the usable gates and take it; the gate's index and ticket. Ties go
    to fewer in flight, then fewer sent. A waiting worker looks again whenever any gate changes, so it is
    never committed to a slow endpoint while a fast one opens up."""

    while True:
        now = gates[0].clock()
        best, key = -1, (math.inf, 0, 0)
        for i, g in enumerate(gates):
            if usable(i):
                k = (g.earliest(now), g.in_flight, g.stats.sent)
                if k < key:
                    best, key = i, k
        when = key[0]
        if when <= now:
            return best, gates[best].reserve(now)
        changed.clear()
        if when == math.inf:
            await changed.wait()
        else:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), when - now)


@dataclass(frozen=True)
class PacingSummary:
    """What the gates did over a run (the final summary line and run_config)."""

    concurrency: int  # the effective concurrency at the end
    lowest: int  # the lowest it went
    ceiling: int
    refusals: int  # rate-limit refusals over all endpoints
    held_s: float  # the union of the holds on every worker (per endpoint, summed over endpoints)
    sent: dict[str, int]  # attempts per endpoint
    alone: int = 0  # refusals our pace did not cause, each waited out by its own request

    def line(self) -> str:
        # "requests at once", not "concurrency 12/16 (lowest 16)": the window at the end can be below its
        # lowest, which only rate-limit refusals lower (the opening ramp does not)
        narrowed = (
            f"rate limits narrowed it to {self.lowest} at the lowest"
            if self.lowest < self.ceiling
            else "never narrowed by rate limits"
        )
        text = (
            f"up to {self.concurrency} requests at once at the end (--concurrency {self.ceiling}; {narrowed})"
        )
        if self.refusals:
            text += f", {self.refusals} rate-limit refusal(s), every worker held {self.held_s:.1f} s in all"
        if self.alone:
            text += f" ({self.alone} not caused by our pace, waited out alone)"
        return text


def pacing_summary(gates: Sequence[Gate], urls: Sequence[str], ceiling: int) -> PacingSummary:
    return PacingSummary(
        concurrency=min(ceiling, sum(g.concurrency for g in gates)),
        lowest=min(ceiling, sum(g.stats.lowest_window for g in gates)),
        ceiling=ceiling,
        refusals=sum(g.stats.refusals for g in gates),
        held_s=round(sum(g.stats.held_s for g in gates), 3),
        sent={u: g.stats.sent for u, g in zip(urls, gates, strict=True)},
        alone=sum(g.stats.foreign for g in gates),
    )
