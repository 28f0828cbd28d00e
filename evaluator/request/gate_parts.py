"""The parts a gate (request.pacing.Gate) is made of, each with its own state: the ticket a reservation
hands out, the concurrency window, the spacing a Retry-After imposes, and the patience.

The pace in requests and tokens per minute is request.pace.Pace. Each part is pure bookkeeping on the
times it is given; the gate holds the clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evaluator.request.pace import Bucket

RAMP_S = 1.0  # before a pace is known, the window opens over the probe's round trip, at most this long ...
RAMP_MIN_S = 0.5  # ... and at least this long (a fast endpoint's round trip is a few ms: no spread at all)
PATIENCE_S = 600.0  # --rate-limit-patience: no success for this long while refusals come -> give up
ALONE_SHARE = 0.25  # after a hold, the first request goes alone when a round trip is under this share of it


@dataclass(frozen=True, slots=True)
class Ticket:
    """One reservation: the caller hands it back with the outcome. Requests are known by `id`, never by
    their send time (two can go at the same instant)."""

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
        """The probe is back: open the window to the ceiling. If no pace is known, spread the opening
        over the probe's round trip, but at least RAMP_MIN_S and at most RAMP_S (time: on a fast endpoint a
        round trip is a few ms): a refusal then stops the ramp after about burst + rate x RAMP_MIN_S
        requests instead of after a whole window, and an endpoint with no limit loses about half of it."""
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
        """An answer that never comes must not stall the gate: the first request after a hold goes alone
        for at most a few round trips."""
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
