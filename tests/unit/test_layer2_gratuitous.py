"""The gratuitous announcement schedule, on an injected clock."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.layer2 import gratuitous

A = ipaddress.IPv4Address("10.250.0.200")
B = ipaddress.IPv6Address("fd00:250::200")


def send_times(schedule: gratuitous.Schedule, until: float, step: float = 0.05) -> list[float]:
    """Drive the schedule by polling every `step` seconds; returns when A was due."""
    times, now = [], 0.0
    while now <= until:
        if A in schedule.due(now):
            times.append(round(now, 2))
        now = round(now + step, 2)
    return times


def test_gained_address_is_announced_at_once_then_every_1_1_s_for_5_s() -> None:
    schedule = gratuitous.Schedule()
    schedule.gain(A, 0.0)
    assert schedule.next_due() == 0.0
    assert send_times(schedule, 10.0) == [0.0, 1.1, 2.2, 3.3, 4.4]
    assert schedule.pending() == frozenset()
    assert schedule.next_due() is None


def test_woken_exactly_at_next_due() -> None:
    schedule = gratuitous.Schedule()
    schedule.gain(A, 100.0)
    sent = []
    while (due := schedule.next_due()) is not None:
        assert schedule.due(due) == [A]
        sent.append(due)
    assert sent == pytest.approx([100.0, 101.1, 102.2, 103.3, 104.4])


def test_losing_stops_at_once() -> None:
    schedule = gratuitous.Schedule()
    schedule.gain(A, 0.0)
    schedule.gain(B, 0.0)
    assert sorted(map(str, schedule.due(0.0))) == [str(A), str(B)]
    schedule.lose(A)
    assert schedule.due(1.1) == [B]
    assert schedule.pending() == frozenset({B})


def test_gaining_again_during_a_burst_extends_it_without_an_extra_send() -> None:
    schedule = gratuitous.Schedule()
    schedule.gain(A, 0.0)
    assert schedule.due(0.0) == [A]
    schedule.gain(A, 0.5)  # MetalLB: already in the spam map -> only the deadline moves
    assert schedule.due(0.5) == []
    times = [0.0]
    now = 0.5
    while (due := schedule.next_due()) is not None:
        now = due
        assert schedule.due(now) == [A]
        times.append(round(now, 2))
    assert times == [0.0, 1.1, 2.2, 3.3, 4.4, 5.5]  # the window now ends at 5.5


def test_regaining_after_a_loss_starts_a_new_burst() -> None:
    schedule = gratuitous.Schedule()
    schedule.gain(A, 0.0)
    schedule.due(0.0)
    schedule.lose(A)
    schedule.gain(A, 0.3)
    assert schedule.due(0.3) == [A]


def test_due_with_a_limit_leaves_the_rest_due() -> None:
    schedule = gratuitous.Schedule()
    addresses = [ipaddress.IPv4Address("10.254.0.0") + i for i in range(5)]
    for address in addresses:
        schedule.gain(address, 0.0)
    first = schedule.due(0.0, limit=3)
    assert len(first) == 3
    assert schedule.next_due() == 0.0
    rest = schedule.due(0.0, limit=3)
    assert sorted(first + rest) == addresses
    assert schedule.next_due() == pytest.approx(1.1)


def test_a_late_tick_keeps_the_spacing_from_the_actual_send() -> None:
    schedule = gratuitous.Schedule()
    schedule.gain(A, 0.0)
    schedule.due(0.0)
    assert schedule.due(1.6) == [A]  # woken 0.5 s late
    assert schedule.next_due() == pytest.approx(2.7)


@given(
    gains=st.lists(st.floats(0, 20, allow_nan=False), min_size=1, max_size=5),
    polls=st.lists(st.floats(0, 40, allow_nan=False), min_size=1, max_size=60),
)
@settings(max_examples=200)
def test_sends_keep_their_spacing_and_stay_inside_the_window(
    gains: list[float], polls: list[float]
) -> None:
    schedule = gratuitous.Schedule()
    events = sorted([(t, 0, "gain") for t in gains] + [(t, 1, "poll") for t in polls])
    last_gain: float | None = None
    last_send: float | None = None
    for t, _, kind in events:
        if kind == "gain":
            if A not in schedule.pending():
                last_send = None  # a new burst starts: spacing is per burst
            schedule.gain(A, t)
            last_gain = t
            continue
        if A in schedule.due(t):
            assert last_gain is not None
            assert t <= last_gain + gratuitous.WINDOW_S + gratuitous.SLACK_S
            if last_send is not None:
                assert t - last_send >= gratuitous.INTERVAL_S - gratuitous.SLACK_S
            last_send = t
