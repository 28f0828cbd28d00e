"""The gate's pacing logic on a virtual clock (evaluator/request/pacing.py): the opening ramp, what a refusal
teaches, and whole runs against a simulated token bucket (tests/support/pacing_sim.py). The same logic against a
real loopback bucket over HTTP is in tests/test_ratelimit.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.pacing_sim import Endpoint, simulate  # noqa: E402

from evaluator.request.pacing import RAMP_MIN_S, RAMP_S, Gate, UserLimits  # noqa: E402
from evaluator.request.ratelimit import Limits  # noqa: E402


def probe(gate: Gate, trip_s: float, limits: Limits | None = None) -> float:
    """Send the first request at 0 and answer it after trip_s; returns the clock."""
    ticket = gate.reserve(0.0)
    assert ticket.sent_at == 0.0
    gate.release(ticket)
    gate.clock = lambda: trip_s
    gate.succeeded(ticket, limits or Limits(), None)
    return trip_s


@pytest.mark.parametrize("trip", [0.005, 0.3, 30.0])
def test_without_announced_limits_the_window_opens_over_the_round_trip_in_time(trip: float) -> None:
    """Over the first round trip, but never faster than RAMP_MIN_S: on a 5 ms endpoint a round-trip ramp
    sent the whole window at once (and never slower than RAMP_S)."""
    span = min(RAMP_S, max(RAMP_MIN_S, trip))
    gate = Gate(ceiling=16, clock=lambda: 0.0)
    now = probe(gate, trip)
    starts = [gate.reserve(now).sent_at for _ in range(16)]  # the probe's worker takes a slot again too
    assert gate.open_slots == 0
    assert starts[0] == pytest.approx(now) and starts[-1] == pytest.approx(now + span * 15 / 16)
    gaps = {round(b - a, 9) for a, b in zip(starts, starts[1:], strict=False)}
    assert gaps == {round(span / 16, 9)}
    assert gate.window.ramp is None  # spent: from here the window grows from what is in flight


@pytest.mark.parametrize(
    "limits, user, gap",
    [
        (Limits(requests_per_min=600, requests_remaining=9, requests_reset_s=0.1), UserLimits(), 0.0),
        (Limits(), UserLimits.of(6000, None, 0.0), 1 / (0.99 * 100)),
    ],
)
def test_a_known_pace_needs_no_ramp(limits: Limits, user: UserLimits, gap: float) -> None:
    gate = Gate(ceiling=16, user=user, clock=lambda: 0.0)
    now = probe(gate, 0.3, limits)
    assert gate.window.ramp is None
    assert [gate.reserve(now).sent_at for _ in range(2)] == pytest.approx([now, now + gap])  # the limits' own


def test_a_refused_first_request_keeps_the_window_at_one() -> None:
    clock = [0.0]
    gate = Gate(ceiling=16, clock=lambda: clock[0])
    first = gate.reserve(0.0)
    gate.release(first)
    clock[0] = 0.01
    assert gate.refused(first, Limits(), 1.0, 0.5) == (1.0, True)
    assert gate.window.size == 1 and gate.pace.requests is None  # nothing got through: no rate to learn
    assert gate.earliest(0.5) == pytest.approx(1.01)  # the hold
    clock[0] = 1.5
    again = gate.reserve(1.01)
    assert again.sent_at == pytest.approx(1.01)
    gate.release(again)
    gate.succeeded(again, Limits(), None)
    assert gate.window.size == 16  # the first answer opens it


def test_what_was_sent_in_the_refused_instant_before_the_refusal_does_not_count() -> None:
    gate = Gate(ceiling=16, clock=lambda: 0.0)
    for t in (1.0, 1.0, 1.0, 2.0, 3.0):
        gate.pace.sends.append(t)
    gate.pace.refused_sends.extend([1.0, 3.0])
    assert gate.pace.through(1.0, 3.0) == 1  # after the refusal at 1.0: the one at 2.0
    assert gate.pace.through(1.0, 3.0, after=False) == 3  # from it: the two let through at 1.0 as well


def test_the_pace_learned_from_two_refusals_is_the_rate_between_them() -> None:
    clock = [0.0]
    gate = Gate(ceiling=16, clock=lambda: clock[0])
    now = probe(gate, 0.05)
    refused = gate.reserve(now)
    assert refused.sent_at == 0.05
    gate.release(refused)
    clock[0] = 0.06
    gate.refused(refused, Limits(), 1.0, 0.5)  # one through (the probe) before it: a guess
    guess = gate.pace.feedback_rps
    assert guess == pytest.approx(0.98 * 1 / (0.05 + 1.0))
    for i in range(20):  # 20 let through over the next 10 s, then a refusal
        gate.pace.sends.append(1.06 + 0.5 * i)
    last = gate.reserve(11.06)
    assert last.sent_at == 11.06
    gate.spacing.server_hold = False  # the 20 above went after the hold: this is not its first request
    clock[0] = 11.07
    gate.refused(last, Limits(), 1.0, 0.5)
    assert gate.pace.feedback_rps == pytest.approx(0.98 * 20.5 / (11.06 - 0.05))
    assert gate.pace.requests is not None and gate.pace.requests.rate == gate.pace.feedback_rps


CASES = [
    # the issue's case, with Retry-After in whole seconds (RFC 9110) and with the exact wait
    dict(rps=4, burst=4),
    dict(rps=4, burst=4, exact_wait=True),
    dict(rps=10, burst=10),
    dict(rps=2, burst=10),
    dict(rps=4, burst=40),
    dict(rps=4, burst=4, latency_s=0.4),
    dict(rps=1, burst=1),
    dict(rps=0.05, burst=1),  # Moonshot's lowest tier: 3 requests per minute
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_an_endpoint_that_announces_nothing_is_paced_with_few_refusals(case: dict) -> None:
    ep = Endpoint(**case)
    rows = 80 if case["rps"] >= 4 else 100 if case["rps"] > 1 else 40 if case["rps"] == 1 else 30
    r = simulate(ep, rows)
    assert r.rows == rows
    assert r.refused_share <= 0.10, r
    assert r.wall_over_bound(ep) <= (1.10 if case["rps"] > 1 else 1.30), r


def test_announced_limits_leave_nothing_to_refuse() -> None:
    ep = Endpoint(rps=4, burst=4, headers=True)
    r = simulate(ep, 80)
    assert r.rows == 80 and r.refused == 0
    assert r.wall_over_bound(ep) <= 1.03


def test_an_unlimited_endpoint_pays_only_the_probe_and_half_a_ramp() -> None:
    ep = Endpoint(rps=1e6, burst=1e6, latency_s=0.4)
    r = simulate(ep, 800, ceiling=32)
    ideal = 800 / 32 * 0.4
    assert r.refused == 0
    # the probe's round trip, half the ramp (over that round trip), a round trip of the window's doubling
    assert r.last_s - r.first_s <= ideal + 0.4 + 0.2 + 0.4 + 1e-6


def ideal_with_random_refusals(
    rows: int, ceiling: int, latency_s: float, share: float, wait_s: float
) -> float:
    """Each worker's rows one after another; a row is refused share/(1 - share) times on average and
    each refusal costs its own wait (the others' work goes on meanwhile)."""
    per_row = latency_s + share / (1 - share) * (wait_s + 0.002)
    return rows / ceiling * per_row


RANDOM_BOUND = 1.5  # wall time over the ideal, for refusals our pace did not cause


@pytest.mark.parametrize("share", [0.1, 0.3, 0.5])
def test_random_refusals_cost_their_waits_and_never_collapse_the_pace(share: float) -> None:
    """Ample capacity, but a share of requests refused at random (Retry-After: 1): the pace must not
    halve again and again (before: 30% gave 155 of 400 rows in 19,524 s)."""
    ep = Endpoint(rps=1e6, burst=1e6, latency_s=0.2, refuse_rate=share, seed=3)
    r = simulate(ep, 400)
    ideal = ideal_with_random_refusals(400, 16, 0.2, share, 1.0)
    assert r.rows == 400, r
    assert r.last_s - r.first_s <= RANDOM_BOUND * ideal, (r, ideal)


def test_the_issues_example_finishes_in_seconds() -> None:
    ep = Endpoint(rps=1e6, burst=1e6, latency_s=0.2, refuse_rate=0.3, seed=5)
    r = simulate(ep, 120)
    assert r.rows == 120 and r.last_s - r.first_s < 15.0, r  # seconds, not minutes


@pytest.mark.parametrize("case", [dict(rps=4, burst=4), dict(rps=2, burst=10)], ids=["4-4", "2-10"])
def test_a_real_limit_is_still_learned_under_random_refusals(case: dict) -> None:
    """10% random refusals on top of a real limit: the pace still settles near the limit."""
    ep = Endpoint(**case, refuse_rate=0.1, seed=2)
    r = simulate(ep, 100)
    assert r.rows == 100
    assert r.wall_over_bound(ep) <= 1.7, r


@pytest.mark.parametrize("patience", [60.0, 600.0])
def test_an_endpoint_that_refuses_everything_is_given_up_after_the_patience(patience: float) -> None:
    ep = Endpoint(rps=1e6, burst=1e6, refuse_rate=1.0)
    r = simulate(ep, 20, patience_s=patience)
    assert r.rows == 0 and r.stopped_s is not None, r
    # the refusal that ends it comes at most one capped wait (120 s) after the patience is spent
    assert patience <= r.stopped_s <= patience + 121.0, r


def test_a_slow_limit_that_lets_some_through_is_not_given_up() -> None:
    """One success every 50 s, refusals between them: no success-free span reaches 60 s of patience."""
    ep = Endpoint(rps=0.02, burst=1)
    r = simulate(ep, 8, patience_s=60.0)
    assert r.stopped_s is None and r.rows == 8, r


@pytest.mark.parametrize("announced", [False, True], ids=["silent", "on-429s"])
@pytest.mark.parametrize("case", [dict(rps=4, burst=4), dict(rps=10, burst=5), dict(rps=2, burst=2)])
def test_the_opening_on_a_fast_endpoint_meets_few_refusals(case: dict, announced: bool) -> None:
    """50 ms answers, refusals back in 20 ms, the limit told only by the 429s (their Retry-After, or their
    headers too): the window opens over about a second, not over one round trip, so at most about
    burst + rate x 1 s requests are refused (before: 7 to 9 here, 16 to 18 with 50 ms refusals)."""
    ep = Endpoint(**case, latency_s=0.05, refusal_s=0.02, headers_on_refusal=announced)
    r = simulate(ep, 80)
    assert r.rows == 80
    assert r.refused <= case["burst"] + case["rps"] * 1.0, r


def test_answers_that_never_come_do_not_hold_the_window_shut_after_the_ramp() -> None:
    """Two fast answers, then two requests that hang (a stuck reply) as the ramp's last two: the window
    grows only on answers, so it must leave a slot past what is in flight (it stalled here at 2 of 4)."""
    clock = [0.0]
    gate = Gate(ceiling=4, clock=lambda: clock[0])
    now = probe(gate, 0.005)
    for _ in range(2):  # fast rows: answered within a few ms
        ticket = gate.reserve(max(now, clock[0]))
        clock[0] = ticket.sent_at
        gate.release(ticket)
        clock[0] += 0.005
        gate.succeeded(ticket, Limits(), None)
    for _ in range(2):  # stuck rows: never answered
        clock[0] = gate.reserve(clock[0]).sent_at
    assert gate.window.ramp is None and gate.in_flight == 2
    assert gate.open_slots >= 1 and gate.earliest(clock[0]) < float("inf")
