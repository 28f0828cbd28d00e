"""Admission over several endpoints' gates (request.pacing.Gate), and what the gates did over a run."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evaluator.request.pacing import Gate, Ticket


async def admit(
    gates: Sequence[Gate], usable: Callable[[int], bool], changed: asyncio.Event
) -> tuple[int, Ticket]:
    """Wait for the earliest slot over the usable gates and take it; returns the gate's index and ticket.

    Ties go to the gate with fewer requests in flight, then fewer sent. A slot is taken only when it has
    come: a worker waiting for one gate's next slot looks again whenever any gate changes (`changed` is set
    on every release, refusal or success), so it is never committed to a slow endpoint while a fast one
    opens up.
    """
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
