"""The gratuitous announcement schedule, on an injected clock."""

from __future__ import annotations

import ipaddress
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.layer2 import gratuitous, packets

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


# --- periodic refresh (MetalLB's --gratuitous-arp-interval) ------------------------------------


def refresh_times(
    refresh: gratuitous.Refresh, until: float, step: float = 0.05, busy_until: float = -1.0
) -> list[float]:
    """Poll every `step` seconds up to `until`; returns when A was announced. A counts as in
    its takeover burst (busy) up to `busy_until`."""
    times, now = [], 0.0
    while now <= until:
        busy = {A} if now <= busy_until else set()
        if A in refresh.due(now, busy=busy):
            times.append(round(now, 2))
        now = round(now + step, 2)
    return times


def test_refresh_is_off_by_default() -> None:
    refresh = gratuitous.Refresh()
    assert not refresh.enabled
    refresh.own(A, 0.0)
    assert refresh.pending() == frozenset()
    assert refresh.next_due() is None
    assert refresh.due(1e9) == []


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="0 \\(off\\) or positive"):
        gratuitous.Refresh(-1.0)


@pytest.mark.parametrize(
    ("interval", "until", "expected"),
    [
        (1.0, 4.0, [1.0, 2.0, 3.0, 4.0]),
        (2.5, 10.0, [2.5, 5.0, 7.5, 10.0]),
        (30.0, 95.0, [30.0, 60.0, 90.0]),
    ],
)
def test_an_owned_address_is_announced_every_interval(
    interval: float, until: float, expected: list[float]
) -> None:
    refresh = gratuitous.Refresh(interval)
    refresh.own(A, 0.0)
    assert refresh.next_due() == interval
    assert refresh_times(refresh, until) == expected


def test_owning_again_does_not_move_the_next_round() -> None:
    refresh = gratuitous.Refresh(10.0)
    refresh.own(A, 0.0)
    refresh.own(A, 7.0)
    assert refresh.next_due() == 10.0


def test_losing_stops_the_refresh_at_once() -> None:
    refresh = gratuitous.Refresh(1.0)
    refresh.own(A, 0.0)
    refresh.own(B, 0.0)
    assert sorted(map(str, refresh.due(1.0))) == [str(A), str(B)]
    refresh.lose(A)  # failover: another node owns A now
    assert refresh.pending() == frozenset({B})
    assert refresh.due(2.0) == [B]
    assert refresh.due(100.0) == [B]  # never A again, however late the tick
    refresh.lose(A)  # losing twice is harmless
    refresh.lose(B)
    assert refresh.next_due() is None


def test_a_burst_round_restarts_the_wait() -> None:
    refresh = gratuitous.Refresh(3.0)
    refresh.own(A, 0.0)
    for burst_round in (0.0, 1.1, 2.2, 3.3, 4.4):
        refresh.sent(A, burst_round)
    assert refresh.next_due() == pytest.approx(7.4)
    refresh.sent(B, 5.0)  # not refreshed: nothing to restart
    assert refresh.pending() == frozenset({A})


def test_no_round_while_the_takeover_burst_runs() -> None:
    """Driven as the announcer drives both: burst rounds first, each restarting the wait, then
    the periodic rounds, with the addresses whose burst still runs busy."""
    # An interval shorter than the burst's spacing: rounds would fall between burst rounds.
    schedule, refresh = gratuitous.Schedule(), gratuitous.Refresh(1.0)
    schedule.gain(A, 0.0)
    refresh.own(A, 0.0)
    bursts, periodic, now = [], [], 0.0
    while now <= 8.0:
        for address in schedule.due(now):
            refresh.sent(address, now)
            bursts.append(round(now, 2))
        if refresh.due(now, busy=schedule.pending()):
            periodic.append(round(now, 2))
        now = round(now + 0.05, 2)
    assert bursts == [0.0, 1.1, 2.2, 3.3, 4.4]
    assert periodic == [5.4, 6.4, 7.4]
    # No frame lands inside Linux's 1 s locktime of the one before it.
    frames = sorted(bursts + periodic)
    assert min(b - a for a, b in itertools.pairwise(frames)) >= 1.0 - gratuitous.SLACK_S


def test_a_busy_address_waits_a_whole_interval_again() -> None:
    refresh = gratuitous.Refresh(1.0)
    refresh.own(A, 0.0)
    assert refresh.due(1.0, busy={A}) == []
    assert refresh.next_due() == 2.0


def test_a_late_tick_keeps_the_interval_from_the_actual_send() -> None:
    refresh = gratuitous.Refresh(2.0)
    refresh.own(A, 0.0)
    assert refresh.due(3.5) == [A]  # woken 1.5 s late
    assert refresh.next_due() == pytest.approx(5.5)


def test_refresh_with_a_limit_leaves_the_rest_due_in_order() -> None:
    refresh = gratuitous.Refresh(10.0)
    addresses = [ipaddress.IPv4Address("10.254.0.0") + i for i in range(5)]
    for address in addresses:
        refresh.own(address, 0.0)
    first = refresh.due(10.0, limit=3)
    assert first == addresses[:3]
    assert refresh.next_due() == 10.0  # the other two are still due
    assert refresh.due(10.0, limit=3) == addresses[3:]
    assert refresh.next_due() == 20.0
    assert refresh.due(20.0) == addresses


@st.composite
def refresh_events(draw: st.DrawFn) -> list[tuple[float, str, int]]:
    """Increasing times, each with an event: own / lose / burst round / poll, for one of two
    addresses."""
    steps = draw(
        st.lists(
            st.tuples(
                st.floats(0.0, 3.0, allow_nan=False),
                st.sampled_from(("own", "lose", "sent", "poll", "poll")),
                st.integers(0, 1),
            ),
            min_size=1,
            max_size=80,
        )
    )
    events, now = [], 0.0
    for gap, kind, which in steps:
        now += gap
        events.append((now, kind, which))
    return events


@given(
    interval=st.sampled_from((0.5, 1.0, 2.0, 7.0)),
    events=refresh_events(),
    limit=st.one_of(st.none(), st.integers(1, 2)),
)
@settings(max_examples=300)
def test_refresh_sends_only_while_owned_never_too_often_and_never_forgets(
    interval: float, events: list[tuple[float, str, int]], limit: int | None
) -> None:
    refresh = gratuitous.Refresh(interval)
    addresses = (A, B)
    owned: set[packets.IPAddress] = set()
    last: dict[packets.IPAddress, float] = {}  # last frame of either kind, while owned
    for now, kind, which in events:
        address = addresses[which]
        if kind == "own":  # gained (or its interfaces changed): a burst round goes out now
            owned.add(address)
            refresh.own(address, now)
            refresh.sent(address, now)
            last[address] = now
        elif kind == "lose":
            owned.discard(address)
            last.pop(address, None)
            refresh.lose(address)
        elif kind == "sent" and address in owned:
            refresh.sent(address, now)
            last[address] = now
        elif kind == "poll":
            for sent in refresh.due(now, limit):
                assert sent in owned  # a stale frame would steal traffic back
                assert now - last[sent] >= interval - gratuitous.SLACK_S
                last[sent] = now
        assert refresh.pending() == frozenset(owned)
        # Never forgotten: each owned address is due at most `interval` after its last frame.
        for address in owned:
            at = refresh._next[address]
            assert at <= last[address] + interval + gratuitous.SLACK_S
    due = refresh.next_due()
    assert due == (min(refresh._next.values()) if owned else None)
