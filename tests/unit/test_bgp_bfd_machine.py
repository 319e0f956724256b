"""The BFD state machine on a simulated clock: bring-up, detection, poll sequences, AdminDown.

`Wire` joins two machines through a link with a fixed delay that can be cut; time only moves
when the simulation says so. The far end is configured like FRR's bfdd defaults (300 ms x 3).
Scripted tests feed hand-made packets to one machine to pin down single rules of RFC 5880.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.bgp.bfd import machine
from speaker.bgp.bfd import packet as pkt

FAST = machine.Timers(300_000, 300_000, 3)
S = pkt.State


@dataclass
class Wire:
    a_timers: machine.Timers = FAST
    b_timers: machine.Timers = FAST
    delay: float = 0.001
    now: float = 0.0
    cut: bool = False
    sent: dict[str, list[tuple[float, pkt.ControlPacket]]] = field(
        default_factory=lambda: {"a": [], "b": []}
    )
    changes: dict[str, list[tuple[float, machine.StateChange]]] = field(
        default_factory=lambda: {"a": [], "b": []}
    )
    received: dict[str, list[tuple[float, pkt.ControlPacket]]] = field(
        default_factory=lambda: {"a": [], "b": []}
    )

    def __post_init__(self) -> None:
        self.m = {
            "a": machine.Session(0xAAAA, self.a_timers, 0.0, random.Random(1)),
            "b": machine.Session(0xBBBB, self.b_timers, 0.0, random.Random(2)),
        }
        self._inflight: list[tuple[float, int, str, pkt.ControlPacket]] = []
        self._seq = 0

    @property
    def a(self) -> machine.Session:
        return self.m["a"]

    @property
    def b(self) -> machine.Session:
        return self.m["b"]

    def handle(self, who: str, outputs: list[machine.Output]) -> None:
        other = "b" if who == "a" else "a"
        for out in outputs:
            if isinstance(out, machine.Transmit):
                self.sent[who].append((self.now, out.packet))
                if not self.cut:
                    self._seq += 1
                    heapq.heappush(
                        self._inflight, (self.now + self.delay, self._seq, other, out.packet)
                    )
            else:
                self.changes[who].append((self.now, out))

    def run_until(self, t: float) -> None:
        for _ in range(200_000):
            candidates: list[tuple[float, str]] = []
            for who, m in self.m.items():
                d = m.next_deadline()
                if d is not None:
                    candidates.append((d, who))
            if self._inflight:
                candidates.append((self._inflight[0][0], "wire"))
            if not candidates or min(candidates)[0] > t:
                self.now = t
                return
            when, what = min(candidates)
            assert when >= self.now - 1e-9, "time went backwards"
            self.now = max(self.now, when)
            if what == "wire":
                _, _, dest, packet = heapq.heappop(self._inflight)
                self.received[dest].append((self.now, packet))
                self.handle(dest, self.m[dest].receive(packet, self.now))
            else:
                self.handle(what, self.m[what].tick(self.now))
        raise AssertionError("simulation did not make progress")

    def states(self) -> tuple[pkt.State, pkt.State]:
        return self.a.state, self.b.state


def up_wire(**kw: object) -> Wire:
    wire = Wire(**kw)  # type: ignore[arg-type]
    wire.run_until(10.0)
    assert wire.states() == (S.UP, S.UP)
    return wire


def test_comes_up_and_settles_on_the_fast_interval() -> None:
    wire = Wire()
    wire.run_until(10.0)
    assert wire.states() == (S.UP, S.UP)
    # Three-way handshake on both sides: Down -> Init -> Up, or Down -> Up on receiving Init.
    for who in "ab":
        path = [c.new for _, c in wire.changes[who]]
        assert path in ([S.INIT, S.UP], [S.UP])
    # Before Up, packets were at least ~1 s apart (750 ms with jitter): slow start, §6.8.3.
    up_at = max(t for who in "ab" for t, c in wire.changes[who] if c.new == S.UP)
    slow = [t for t, p in wire.sent["a"] if t < up_at and p.state != S.UP]
    assert all(b - a >= 0.75 - 1e-9 for a, b in itertools.pairwise(slow))
    # After the poll sequence, 75-100 % of 300 ms between packets.
    late = [t for t, _ in wire.sent["a"] if t > up_at + 2.0]
    gaps = [b - a for a, b in itertools.pairwise(late)]
    assert gaps and all(0.225 - 1e-9 <= g <= 0.300 + 1e-9 for g in gaps)
    assert not wire.a.polling and not wire.b.polling
    assert wire.a.remote_discriminator == 0xBBBB and wire.b.remote_discriminator == 0xAAAA


def test_going_up_runs_a_poll_sequence() -> None:
    wire = up_wire()
    up_at = next(t for t, c in wire.changes["a"] if c.new == S.UP)
    after = [(t, p) for t, p in wire.sent["a"] if t >= up_at and not p.final]
    assert after[0][1].poll and after[0][1].desired_min_tx_us == 300_000
    finals = [t for t, p in wire.received["a"] if p.final]
    assert finals, "the peer answered the poll"
    assert all(not p.poll for t, p in after if t > finals[0])


def test_silence_brings_it_down_after_detection_time() -> None:
    wire = up_wire()
    wire.cut = True
    cut_at = wire.now
    wire.run_until(cut_at + 5.0)
    assert wire.states() == (S.DOWN, S.DOWN)
    for who in "ab":
        last_rx = max(t for t, _ in wire.received[who] if t <= cut_at + wire.delay)
        down_at, change = wire.changes[who][-1]
        assert change.new == S.DOWN and change.old == S.UP
        assert change.diag == pkt.Diag.CONTROL_DETECTION_TIME_EXPIRED
        assert not change.remote_admin_down
        # Exactly remote detect mult (3) x agreed interval (300 ms) after the last packet.
        assert down_at == pytest.approx(last_rx + 0.9)
    assert wire.a.remote_discriminator == 0
    assert wire.a.local_diag == pkt.Diag.CONTROL_DETECTION_TIME_EXPIRED
    # Back to slow transmission while down.
    assert wire.a.desired_min_tx_us == machine.SLOW_TX_US


def test_recovers_after_the_link_returns() -> None:
    wire = up_wire()
    wire.cut = True
    wire.run_until(wire.now + 3.0)
    wire.cut = False
    wire.run_until(wire.now + 5.0)
    assert wire.states() == (S.UP, S.UP)
    assert wire.a.up_events == 2 and wire.a.down_events == 1


def test_detection_uses_the_slower_of_our_rx_and_their_tx() -> None:
    wire = up_wire(
        a_timers=machine.Timers(300_000, 300_000, 3), b_timers=machine.Timers(500_000, 200_000, 5)
    )
    # a: b's mult 5 x max(a rx 300 ms, b tx 500 ms) = 2.5 s; b: 3 x max(200, 300) = 0.9 s.
    assert wire.a.detection_time_us == 2_500_000
    assert wire.b.detection_time_us == 900_000
    # Each sends at max(own desired tx, remote required rx).
    assert wire.a.transmit_interval_us == 300_000
    assert wire.b.transmit_interval_us == 500_000


def test_slower_transmit_waits_for_final() -> None:
    wire = up_wire()
    start = wire.now
    wire.handle("a", wire.a.set_timers(machine.Timers(800_000, 300_000, 3), start))
    assert wire.a.polling
    assert wire.a.desired_min_tx_us == 800_000
    assert wire.a.transmit_interval_us == 300_000  # not yet: §6.8.3
    wire.run_until(start + 3.0)
    assert not wire.a.polling
    assert wire.a.transmit_interval_us == 800_000
    polls = [t for t, p in wire.sent["a"] if t >= start and p.poll]
    final = next(t for t, p in wire.received["a"] if t >= start and p.final)
    assert polls and max(polls) < final
    # b noticed the slower sender and widened its detection time.
    assert wire.b.detection_time_us == 3 * 800_000
    assert wire.states() == (S.UP, S.UP)


def test_shorter_receive_interval_keeps_old_detection_until_final() -> None:
    wire = up_wire(a_timers=machine.Timers(300_000, 600_000, 3))
    assert wire.b.transmit_interval_us == 600_000
    start = wire.now
    wire.handle("a", wire.a.set_timers(machine.Timers(300_000, 200_000, 3), start))
    # b's tx is 300 ms, so a's detection depends on max(rx in use, 300 ms).
    assert wire.a.detection_time_us == 3 * 600_000
    wire.run_until(start + 3.0)
    assert wire.a.detection_time_us == 3 * 300_000
    assert wire.b.transmit_interval_us == 300_000


def test_poll_is_answered_at_once_with_final() -> None:
    a = machine.Session(7, FAST, 0.0, random.Random(3))
    probe = pkt.ControlPacket(state=S.DOWN, my_discriminator=99, poll=True)
    outputs = a.receive(probe, 0.01)
    transmits = [o.packet for o in outputs if isinstance(o, machine.Transmit)]
    assert len(transmits) == 1
    answer = transmits[0]
    assert answer.final and not answer.poll
    assert answer.your_discriminator == 99 and answer.state == S.INIT


def test_admin_down_is_signalled_not_a_failure() -> None:
    wire = up_wire()
    wire.handle("a", wire.a.set_admin_down(True, wire.now))
    assert wire.a.state == S.ADMIN_DOWN
    assert wire.a.local_diag == pkt.Diag.ADMINISTRATIVELY_DOWN
    wire.run_until(wire.now + 2.0)
    assert wire.b.state == S.DOWN
    _, change = wire.changes["b"][-1]
    assert change.remote_admin_down and change.diag == pkt.Diag.NEIGHBOR_SIGNALED_SESSION_DOWN
    # a ignores everything while AdminDown, and keeps telling b so.
    assert wire.a.state == S.ADMIN_DOWN
    assert all(p.state == S.ADMIN_DOWN for t, p in wire.sent["a"] if t > wire.now - 1.0)
    wire.handle("a", wire.a.set_admin_down(False, wire.now))
    wire.run_until(wire.now + 5.0)
    assert wire.states() == (S.UP, S.UP)


def test_remote_down_while_up() -> None:
    a = machine.Session(7, FAST, 0.0, random.Random(3))
    a.receive(pkt.ControlPacket(state=S.INIT, my_discriminator=9, your_discriminator=7), 0.1)
    assert a.state == S.UP
    outputs = a.receive(
        pkt.ControlPacket(state=S.DOWN, my_discriminator=9, your_discriminator=7), 0.2
    )
    (change,) = [o for o in outputs if isinstance(o, machine.StateChange)]
    assert (change.old, change.new, change.diag) == (
        S.UP,
        S.DOWN,
        pkt.Diag.NEIGHBOR_SIGNALED_SESSION_DOWN,
    )


def test_packets_that_must_be_ignored() -> None:
    a = machine.Session(7, FAST, 0.0, random.Random(3))
    # Your Discriminator zero is only acceptable from a peer that is Down or AdminDown.
    assert a.receive(pkt.ControlPacket(state=S.UP, my_discriminator=9), 0.1) == []
    assert a.receive(pkt.ControlPacket(state=S.INIT, my_discriminator=9), 0.1) == []
    # Someone else's discriminator.
    assert (
        a.receive(pkt.ControlPacket(state=S.DOWN, my_discriminator=9, your_discriminator=8), 0.1)
        == []
    )
    assert a.state == S.DOWN and a.remote_discriminator == 0 and a.packets_in == 0


def test_passive_waits_for_the_remote() -> None:
    passive = machine.Session(7, machine.Timers(300_000, 300_000, 3, passive=True), 0.0)
    assert passive.next_deadline() is None
    assert passive.tick(100.0) == []
    passive.receive(pkt.ControlPacket(state=S.DOWN, my_discriminator=9), 100.0)
    assert passive.next_deadline() is not None


def test_remote_asking_for_no_packets_gets_none() -> None:
    a = machine.Session(7, FAST, 0.0, random.Random(3))
    a.receive(pkt.ControlPacket(state=S.DOWN, my_discriminator=9, required_min_rx_us=0), 0.0)
    # Until the remote is forgotten after a Detection Time (3 x 1 s) of silence.
    outputs = [o for t in range(1, 30) for o in a.tick(t / 10)]
    assert not any(isinstance(o, machine.Transmit) for o in outputs)
    assert any(isinstance(o, machine.Transmit) for t in range(30, 50) for o in a.tick(t / 10))


@settings(max_examples=100, deadline=None)
@given(
    tx=st.integers(10_000, 2_000_000),
    mult=st.integers(1, 10),
    seed=st.integers(0, 2**32),
)
def test_jitter_bounds(tx: int, mult: int, seed: int) -> None:
    timers = machine.Timers(tx, tx, mult)
    s = machine.Session(7, timers, 0.0, random.Random(seed))
    # Make it Up with a fast, permissive peer so the configured interval applies.
    s.receive(
        pkt.ControlPacket(
            state=S.INIT,
            my_discriminator=9,
            your_discriminator=7,
            desired_min_tx_us=1,
            required_min_rx_us=1,
        ),
        0.0,
    )
    s.receive(
        pkt.ControlPacket(
            state=S.UP,
            my_discriminator=9,
            your_discriminator=7,
            desired_min_tx_us=1,
            required_min_rx_us=1,
            final=True,
        ),
        0.0,
    )
    assert s.state == S.UP and not s.polling
    now, sends = 0.0, []
    for _ in range(40):
        deadline = s.next_deadline()
        assert deadline is not None
        now = deadline
        if any(isinstance(o, machine.Transmit) for o in s.tick(now)):
            sends.append(now)
        # Keep the session alive.
        s.receive(
            pkt.ControlPacket(
                state=S.UP,
                my_discriminator=9,
                your_discriminator=7,
                desired_min_tx_us=1,
                required_min_rx_us=1,
            ),
            now,
        )
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    top = 0.9 if mult == 1 else 1.0
    assert gaps and all(0.75 * tx / 1e6 - 1e-9 <= g <= top * tx / 1e6 + 1e-9 for g in gaps)


def test_timers_validation() -> None:
    with pytest.raises(ValueError):
        machine.Timers(0, 300_000, 3)
    with pytest.raises(ValueError):
        machine.Timers(300_000, 300_000, 0)
    with pytest.raises(ValueError):
        machine.Session(0, FAST, 0.0)
