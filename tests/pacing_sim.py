"""A virtual-clock run of evaluator.request.pacing.Gate against a token-bucket endpoint, in milliseconds of CPU.

The endpoint is the same bucket tests/ratelimit_server.py keeps (`rps` per second, bursts of `burst`,
refill continuous). An accepted request answers after `latency_s`; a refusal comes back after
`refusal_s` (limiters answer at once) with the wait the server would ask: the time to its next token,
rounded up to whole seconds as an integer Retry-After is (RFC 9110), or exact when `exact_wait`.
`headers` makes every answer carry the OpenAI-style limits (per minute, remaining, reset). Workers are
the evaluator's: each takes the earliest slot the gate offers, and a refused row is sent again after the
hold without leaving its worker. Nothing here awaits real time; `simulate` returns the figures.

    python tests/pacing_sim.py --rps 4 --burst 4 --rows 80      # prints one line of figures
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
from dataclasses import dataclass, field

from evaluator.request.pacing import Gate
from evaluator.request.ratelimit import Limits


@dataclass
class Endpoint:
    rps: float
    burst: float
    latency_s: float = 0.05
    refusal_s: float = 0.002
    exact_wait: bool = False
    headers: bool = False
    tokens: float = field(init=False)
    t: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rps)
        self.t = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        exact = max(0.0, (1.0 - self.tokens) / self.rps)
        return exact if self.exact_wait else float(max(1, math.ceil(exact)))

    def limits(self) -> Limits:
        if not self.headers:
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

    @property
    def refused_share(self) -> float:
        return self.refused / max(1, self.requests)

    def wall_over_bound(self, ep: Endpoint) -> float:
        return (self.last_s - self.first_s) / ((self.rows - ep.burst) / ep.rps)


def simulate(
    ep: Endpoint, rows: int, ceiling: int = 16, limit_s: float = 3600.0, trace: bool = False
) -> Result:
    """Run `rows` rows with `ceiling` workers; returns what the endpoint saw."""
    now = [0.0]
    gate = Gate(ceiling=ceiling, clock=lambda: now[0])
    seq = itertools.count()
    events: list[tuple[float, int, str, float]] = []  # (time, seq, kind, sent_at)
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
            gate.reserve(now[0])
            waiting -= 1
            todo -= 1
            requests += 1
            first = first or now[0]
            if ep.take(now[0]):
                heapq.heappush(events, (now[0] + ep.latency_s, next(seq), "ok", now[0]))
            else:
                heapq.heappush(events, (now[0] + ep.refusal_s, next(seq), "refused", now[0]))
        return math.inf

    while done < rows and now[0] < limit_s:
        wake = admit_all()
        nxt = events[0][0] if events else math.inf
        if wake < nxt:
            now[0] = wake
            continue
        now[0], _, kind, sent_at = heapq.heappop(events)
        gate.release()
        waiting += 1
        if trace:
            pace = gate.requests.rate if gate.requests else None
            print(f"{now[0]:8.3f} {kind:8s} sent {sent_at:8.3f} window {gate.window:5.1f} pace {pace}")
        if kind == "ok":
            gate.succeeded(sent_at, ep.limits(), None)
            done += 1
            last = now[0]
        else:
            refused += 1
            gate.refused(sent_at, ep.limits(), ep.wait_s(), 1.0)
            todo += 1  # the same row again, after the hold
    return Result(rows=done, requests=requests, refused=refused, first_s=first, last_s=last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=4.0)
    parser.add_argument("--burst", type=float, default=4.0)
    parser.add_argument("--rows", type=int, default=80)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--ceiling", type=int, default=16)
    parser.add_argument("--exact-wait", action="store_true")
    parser.add_argument("--headers", action="store_true")
    parser.add_argument("--trace", action="store_true")
    a = parser.parse_args()
    ep = Endpoint(a.rps, a.burst, a.latency, exact_wait=a.exact_wait, headers=a.headers)
    r = simulate(ep, a.rows, a.ceiling, trace=a.trace)
    print(
        f"rows {r.rows}, requests {r.requests}, refused {r.refused} ({100 * r.refused_share:.1f}%), "
        f"first to last / bound {r.wall_over_bound(ep):.3f}"
    )


if __name__ == "__main__":
    main()
