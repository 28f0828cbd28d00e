"""A virtual-clock run of evaluator.request.pacing.Gate against a token-bucket endpoint, in milliseconds of CPU.

The endpoint is the same bucket tests/support/ratelimit_server.py keeps (`rps` per second, bursts of `burst`,
refill continuous). An accepted request answers after `latency_s`; a refusal comes back after
`refusal_s` (limiters answer at once) with the wait the server would ask: the time to its next token,
rounded up to whole seconds as an integer Retry-After is (RFC 9110), or exact when `exact_wait`.
`headers` makes every answer carry the OpenAI-style limits (per minute, remaining, reset), and
`headers_on_refusal` only the refusals. `refuse_rate` refuses that share of requests at random whatever
the rate (a shared key, an upstream behind a router), with `Retry-After: random_wait_s`. Workers are
the evaluator's: each takes the earliest slot the gate offers, and a refused row is sent again after the
hold without leaving its worker. Nothing here awaits real time; `simulate` returns the figures.

    python tests/support/pacing_sim.py --rps 4 --burst 4 --rows 80      # prints one line of figures
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
from dataclasses import dataclass, field

from evaluator.request.pacing import Gate, Ticket
from evaluator.request.ratelimit import Limits


@dataclass
class Endpoint:
    rps: float
    burst: float
    latency_s: float = 0.05
    refusal_s: float = 0.002
    exact_wait: bool = False
    headers: bool = False
    headers_on_refusal: bool = False
    refuse_rate: float = 0.0
    random_wait_s: float = 1.0
    seed: int = 0
    tokens: float = field(init=False)
    t: float = 0.0
    randomly_refused: bool = False  # the last refusal was a random one
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.burst
        self.rng = random.Random(self.seed)

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rps)
        self.t = now
        self.randomly_refused = self.refuse_rate > 0 and self.rng.random() < self.refuse_rate
        if self.randomly_refused:
            return False
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        if self.randomly_refused:
            return self.random_wait_s
        exact = max(0.0, (1.0 - self.tokens) / self.rps)
        return exact if self.exact_wait else float(max(1, math.ceil(exact)))

    def limits(self, refusal: bool = False) -> Limits:
        if not (self.headers or (refusal and self.headers_on_refusal)):
            return Limits()
        full = (self.burst - self.tokens) / self.rps
        return Limits(
            requests_per_min=self.rps * 60,
            requests_remaining=math.floor(self.tokens),
            requests_reset_s=full,
        )


@dataclass
class Result:
    rows: int
    requests: int
    refused: int
    first_s: float  # first request sent
    last_s: float  # last answer in
    stopped_s: float | None = None  # when the gate gave up (the patience stop), if it did
    refused_opening: int = 0  # refusals before the first request sent one second after the first

    @property
    def refused_share(self) -> float:
        return self.refused / max(1, self.requests)

    def wall_over_bound(self, ep: Endpoint) -> float:
        return (self.last_s - self.first_s) / ((self.rows - ep.burst) / ep.rps)


def simulate(
    ep: Endpoint,
    rows: int,
    ceiling: int = 16,
    limit_s: float = 3600.0,
    trace: bool = False,
    patience_s: float = 600.0,
) -> Result:
    """Run `rows` rows with `ceiling` workers; returns what the endpoint saw."""
    now = [0.0]
    gate = Gate(ceiling=ceiling, clock=lambda: now[0], patience_s=patience_s)
    opening = 0
    seq = itertools.count()
    events: list[tuple[float, int, str, Ticket, float]] = []  # (time, seq, kind, ticket, wait asked)
    todo, done, requests, refused = rows, 0, 0, 0
    waiting = ceiling  # workers looking for a slot
    first = last = 0.0

    def admit_all() -> float:
        """Give every waiting worker its slot if one has come; return when the next one comes."""
        nonlocal waiting, todo, requests, first
        while waiting and todo > 0:
            t = gate.earliest(now[0])
            if t > now[0]:
                return t
            ticket = gate.reserve(now[0])
            waiting -= 1
            todo -= 1
            requests += 1
            first = now[0] if requests == 1 else first
            if ep.take(now[0]):
                heapq.heappush(events, (now[0] + ep.latency_s, next(seq), "ok", ticket, 0.0))
            else:
                heapq.heappush(events, (now[0] + ep.refusal_s, next(seq), "refused", ticket, ep.wait_s()))
        return math.inf

    while done < rows and now[0] < limit_s and gate.gave_up is None:
        wake = admit_all()
        nxt = events[0][0] if events else math.inf
        if wake < nxt:
            now[0] = wake
            continue
        now[0], _, kind, ticket, wait = heapq.heappop(events)
        if kind == "back":  # a worker that waited out its own refusal
            waiting += 1
            todo += 1
            continue
        gate.release(ticket)
        if trace:
            pace = gate.pace.requests.rate if gate.pace.requests else None
            print(f"{now[0]:8.3f} {kind:8s} sent {ticket.sent_at:8.3f} window {gate.concurrency} pace {pace}")
        if kind == "ok":
            gate.succeeded(ticket, ep.limits(), None)
            waiting += 1
            done += 1
            last = now[0]
            continue
        refused += 1
        opening += ticket.sent_at < first + 1.0
        hold = gate.refused(ticket, ep.limits(refusal=True), wait, 1.0)
        if hold.shared:  # the gate holds every worker: this one looks for a slot at once
            waiting += 1
            todo += 1
        else:  # only this request waits, on its worker
            heapq.heappush(events, (now[0] + hold.wait_s, next(seq), "back", ticket, 0.0))
    stopped = now[0] if gate.gave_up is not None else None
    return Result(done, requests, refused, first, last, stopped, opening)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=4.0)
    parser.add_argument("--burst", type=float, default=4.0)
    parser.add_argument("--rows", type=int, default=80)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--ceiling", type=int, default=16)
    parser.add_argument("--exact-wait", action="store_true")
    parser.add_argument("--headers", action="store_true")
    parser.add_argument("--headers-on-refusal", action="store_true")
    parser.add_argument("--refuse-rate", type=float, default=0.0)
    parser.add_argument("--trace", action="store_true")
    a = parser.parse_args()
    ep = Endpoint(
        a.rps,
        a.burst,
        a.latency,
        exact_wait=a.exact_wait,
        headers=a.headers,
        headers_on_refusal=a.headers_on_refusal,
        refuse_rate=a.refuse_rate,
    )
    r = simulate(ep, a.rows, a.ceiling, trace=a.trace)
    print(
        f"rows {r.rows}, requests {r.requests}, refused {r.refused} ({100 * r.refused_share:.1f}%), "
        f"first to last / bound {r.wall_over_bound(ep):.3f}, last answer {r.last_s:.1f} s, "
        f"refused in the first second {r.refused_opening}"
    )


if __name__ == "__main__":
    main()
