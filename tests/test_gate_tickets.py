"""The gate's tickets and its parts, each on a virtual clock (evaluator/request/pacing.py, pace.py): a
request is known by its ticket, never by its send time, and a ticket is taken back once."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.request.pace import Pace, Patience, Spacing, Ticket, UserLimits, Window
from evaluator.request.pacing import Gate
from evaluator.request.ratelimit import Limits

BURST = Limits(requests_per_min=600, requests_remaining=9, requests_reset_s=0.1)


def opened(ceiling: int = 16) -> Gate:
    """A gate whose probe came back at once with a burst of 9 announced: the next requests go together."""
    gate = Gate(ceiling=ceiling, clock=lambda: 0.0)
    probe = gate.reserve(0.0)
    gate.release(probe)
    gate.succeeded(probe, BURST, None)
    return gate


def test_two_requests_sent_at_the_same_instant_get_two_tickets() -> None:
    gate = opened()
    a, b = gate.reserve(0.0), gate.reserve(0.0)
    assert a.sent_at == b.sent_at == 0.0 and a.id != b.id


def test_an_outcome_counts_for_its_own_ticket_only() -> None:
    """Known by send time, a refusal told twice for one request and one told for its twin were the same."""
    gate = opened()
    a, b = gate.reserve(0.0), gate.reserve(0.0)
    gate.release(a)
    gate.refused(a, Limits(), 1.0, 0.5)
    assert gate.refused(a, Limits(), 1.0, 0.5) == (0.0, False)  # told again: nothing more
    assert gate.stats.refusals == 1
    gate.release(b)
    gate.refused(b, Limits(), 1.0, 0.5)
    assert gate.stats.refusals == 2


def test_a_ticket_released_twice_frees_one_slot() -> None:
    gate = opened(ceiling=4)
    tickets = [gate.reserve(0.0) for _ in range(4)]
    assert gate.open_slots == 0
    assert gate.release(tickets[0]) is True
    assert gate.release(tickets[0]) is False  # refused: the window must not count a slot it never lent
    assert gate.in_flight == 3 and gate.open_slots == 1
    other = opened(ceiling=4)
    assert other.release(other.reserve(0.0)) and not other.release(tickets[1])  # not its ticket
    gate.succeeded(tickets[0], Limits(), None)
    gate.succeeded(tickets[0], Limits(), None)  # told again: ignored
    gate.failed(tickets[0])
    assert gate.in_flight == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=60))
def test_in_flight_is_what_was_reserved_and_not_yet_released(steps: list[tuple[bool, int]]) -> None:
    """Any mix of reservations and releases, twice or not, at one instant: ids never repeat and the window
    counts exactly the tickets still out."""
    gate = opened(ceiling=8)
    out: list[Ticket] = []
    seen: set[int] = set()
    back: list[Ticket] = []
    for take, k in steps:
        if take and gate.open_slots:
            t = gate.reserve(0.0)
            assert t.id not in seen
            seen.add(t.id)
            out.append(t)
        elif out or back:
            pool = out + back
            t = pool[k % len(pool)]
            assert gate.release(t) is (t in out)
            if t in out:
                out.remove(t)
                back.append(t)
        assert gate.in_flight == len(out) and gate.open_slots == max(0, gate.concurrency - len(out))


def test_the_window_alone() -> None:
    w = Window(ceiling=4)
    assert w.open_slots == 1  # the probe goes alone
    w.take()
    assert w.open_slots == 0
    w.give_back()
    w.got_through(0.0, 0.2, paced=False)  # no pace known: the opening is spread
    assert w.size == 4 and w.ramp is not None and w.ramp.rate == pytest.approx(4 / 0.5)
    for _ in range(3):
        w.take()
    assert w.ramp is not None
    w.take()  # the ramp is spent: one slot past what is in flight
    assert w.ramp is None and w.slow_start and w.size == 4 and w.active == 4
    assert w.narrow(1.0, 2.0, floor=1.0) and w.size == 2
    assert not w.narrow(1.5, 2.5, floor=1.0) and w.size == 2  # sent before the burst began: same burst
    assert w.narrow(3.0, 3.5, floor=1.5) and w.size == 1.5  # a new burst, not below the floor
    paced = Window(ceiling=4)
    paced.got_through(0.0, 0.2, paced=True)
    assert paced.size == 4 and paced.ramp is None


def test_the_spacing_alone() -> None:
    s = Spacing()
    assert s.earliest(5.0, None) == 5.0
    assert s.hold_all(10.0, 2.0, asked=True, latency_s=0.1) == 2.0
    assert s.hold_all(11.0, 2.0, asked=True, latency_s=0.1) == 1.0  # the union, not the sum
    assert s.earliest(10.5, 0.1) == 13.0
    first, twin = Ticket(4, 13.0), Ticket(5, 13.0)
    s.sent(first)
    s.sent(twin)
    alone_until = 13.0 + 4 * 0.1 + 1.0
    assert s.earliest(13.1, 0.1) == pytest.approx(alone_until)  # the first after the hold goes alone
    s.answered(twin)  # sent at the same instant, but not the first: the wait goes on
    assert s.earliest(13.1, 0.1) == pytest.approx(alone_until)
    assert s.is_first_after_asked_hold(first) and not s.is_first_after_asked_hold(twin)
    s.answered(first)
    assert s.earliest(13.1, 0.1) == 13.1
    s.lift(12.0)
    assert s.blocked_until == 12.0


def test_the_spacing_does_not_stall_on_an_answer_that_never_comes() -> None:
    s = Spacing()
    s.hold_all(0.0, 10.0, asked=True, latency_s=0.5)
    s.sent(Ticket(0, 10.0))
    assert s.earliest(10.1, 0.5) == pytest.approx(13.0)
    assert s.earliest(13.0, 0.5) == 13.0 and not s.awaiting_first


def test_the_patience_alone() -> None:
    p = Patience(patience_s=10.0)
    p.refused(5.0, 1.0, first_sent=0.0)
    assert p.gave_up is None
    p.succeeded(6.0)
    p.refused(15.0, 2.0, first_sent=0.0)
    assert p.gave_up is None  # 9 s since the last success
    p.refused(16.0, 2.0, first_sent=0.0)
    assert p.gave_up is not None and "2 rate-limit refusal(s)" in p.gave_up
    assert "--rate-limit-patience is 10 s" in p.gave_up
    never = Patience(patience_s=10.0)
    never.refused(10.0, 1.0, first_sent=None)  # nothing sent yet: no start to count from
    assert never.gave_up is None


def test_the_pace_alone() -> None:
    pace = Pace(user=UserLimits.of(60, None, 0.0))
    assert pace.known()
    slots = []
    for _ in range(3):  # --max-requests-per-minute 60: one a second, a little under
        ((bucket, cost),) = pace.buckets(None)
        t = bucket.earliest(0.0, cost)
        bucket.reserve(t, cost)
        slots.append(t)
    assert slots == pytest.approx([0.0, 1 / 0.99, 2 / 0.99])
    free = Pace()
    assert not free.known() and free.buckets(None) == []
    assert free.learn(BURST, 0.0) is True and free.learn(BURST, 1.0) is False  # the same limit again
    assert free.known() and free.header_rpm == 600
    free.forget()  # an announced pace is kept
    assert free.requests is not None
    free.count_tokens(100)
    free.count_tokens(300)
    assert free.token_cost() == 200


def test_a_pace_learned_from_refusals_is_dropped_by_forget() -> None:
    pace = Pace()
    for t in (0.0, 1.0, 2.0, 3.0, 4.0):
        pace.sent(t)
    pace.refused_sends.append(4.0)
    pace.learn_from_refusal(4.0, 1.0, 4.0, new_burst=True)
    assert pace.requests is not None and pace.feedback_rps == pytest.approx(0.98 * 4 / 5.0)
    pace.forget()
    assert pace.requests is None and pace.feedback_rps is None and not pace.refusal_marks
    assert math.isclose(pace.floor_rps(), 0.0)
