"""One BFD session in asynchronous mode (RFC 5880 §6.8), as a pure state machine.

The machine never reads a clock and never touches a socket: every input carries `now` (seconds,
from the caller's monotonic clock) and every call returns the outputs to act on (packets to send,
state changes to report). `next_deadline()` says when `tick` must be called next, so the shell
keeps a single timer per session, and tests drive the machine on a simulated clock.

Timers follow §6.8.2-§6.8.4 and §6.8.7:
- transmit interval = max(bfd.DesiredMinTxInterval, bfd.RemoteMinRxInterval), each packet sent
  after 75-100 % of it (75-90 % when bfd.DetectMult is 1); nothing periodic when the remote asks
  for a RequiredMinRxInterval of 0, and nothing at all in the passive role until the remote has
  spoken;
- bfd.DesiredMinTxInterval is at least 1 s while the session is not Up (§6.8.3);
- detection time = remote Detect Mult x max(bfd.RequiredMinRxInterval, remote DesiredMinTx);
- a change of our intervals while Up starts a Poll Sequence: packets carry P until one with F
  comes back. Until then an increased transmit interval is not used yet, and a reduced receive
  interval does not yet shorten the detection time (§6.8.3). A packet with P is answered at
  once with F, regardless of the transmit timer.
Demand mode and the Echo function are not implemented (we never set D, never ask for echo).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from speaker.bgp.bfd import packet as pkt

SLOW_TX_US = 1_000_000  # §6.8.3: the floor for DesiredMinTx while not Up
_INITIAL_REMOTE_MIN_RX_US = 1  # §6.8.1


@dataclass(frozen=True, slots=True)
class Timers:
    """Local configuration: a BFDProfile's transmitInterval / receiveInterval / multiplier."""

    desired_min_tx_us: int = 300_000
    required_min_rx_us: int = 300_000
    detect_mult: int = 3
    passive: bool = False

    def __post_init__(self) -> None:
        if self.desired_min_tx_us < 1 or self.required_min_rx_us < 0:
            raise ValueError("intervals must be positive")
        if not 1 <= self.detect_mult <= 255:
            raise ValueError("detect multiplier must be 1..255")


@dataclass(frozen=True, slots=True)
class Transmit:
    packet: pkt.ControlPacket


@dataclass(frozen=True, slots=True)
class StateChange:
    old: pkt.State
    new: pkt.State
    diag: pkt.Diag
    # The remote said AdminDown: per RFC 5882 §3.2 not a path failure, clients keep sessions.
    remote_admin_down: bool = False


Output = Transmit | StateChange


class Session:
    def __init__(
        self,
        local_discriminator: int,
        timers: Timers,
        now: float,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= local_discriminator <= 0xFFFFFFFF:
            raise ValueError("the local discriminator must be a nonzero 32-bit value")
        self.local_discriminator = local_discriminator
        self.timers = timers
        self._rng = rng or random.Random()
        self.state = pkt.State.DOWN
        self.local_diag = pkt.Diag.NONE
        self.remote_discriminator = 0
        self.remote_state = pkt.State.DOWN
        self.remote_min_rx_us = _INITIAL_REMOTE_MIN_RX_US
        self.remote_desired_min_tx_us = 0
        self.remote_detect_mult = 0
        # What our packets say (bfd.DesiredMinTxInterval / bfd.RequiredMinRxInterval) ...
        self.desired_min_tx_us = max(timers.desired_min_tx_us, SLOW_TX_US)
        self.required_min_rx_us = timers.required_min_rx_us
        # ... and what the timers use, which lags behind during a Poll Sequence (§6.8.3).
        self._tx_in_use_us = self.desired_min_tx_us
        self._rx_in_use_us = self.required_min_rx_us
        self.polling = False
        self._next_tx: float | None = None if timers.passive else now
        self._detect_at: float | None = None
        self.packets_in = 0
        self.packets_out = 0
        self.up_events = 0
        self.down_events = 0

    # --- derived values ----------------------------------------------------------------------

    @property
    def transmit_interval_us(self) -> int:
        return max(self._tx_in_use_us, self.remote_min_rx_us)

    @property
    def detection_time_us(self) -> int:
        return self.remote_detect_mult * max(self._rx_in_use_us, self.remote_desired_min_tx_us)

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (self._next_tx, self._detect_at) if d is not None]
        return min(deadlines) if deadlines else None

    def _jittered(self, interval_us: int) -> float:
        top = 0.9 if self.timers.detect_mult == 1 else 1.0
        return interval_us * self._rng.uniform(0.75, top) / 1e6

    def _may_transmit(self) -> bool:
        if self.timers.passive and self.remote_discriminator == 0:
            return False
        return self.remote_min_rx_us != 0

    def _packet(self, final: bool = False) -> pkt.ControlPacket:
        return pkt.ControlPacket(
            state=self.state,
            my_discriminator=self.local_discriminator,
            your_discriminator=self.remote_discriminator,
            detect_mult=self.timers.detect_mult,
            desired_min_tx_us=self.desired_min_tx_us,
            required_min_rx_us=self.required_min_rx_us,
            required_min_echo_rx_us=0,
            diag=self.local_diag,
            poll=self.polling and not final,
            final=final,
        )

    def _send(self, out: list[Output], final: bool = False) -> None:
        self.packets_out += 1
        out.append(Transmit(self._packet(final)))

    def _schedule_tx(self, now: float, sooner_only: bool = False) -> None:
        if not self._may_transmit():
            self._next_tx = None
            return
        at = now + self._jittered(self.transmit_interval_us)
        if sooner_only and self._next_tx is not None and self._next_tx <= at:
            return
        self._next_tx = at

    # --- state and interval changes ---------------------------------------------------------

    def _set_state(
        self, new: pkt.State, diag: pkt.Diag, out: list[Output], remote_admin_down: bool = False
    ) -> None:
        old = self.state
        if new == old:
            return
        self.state = new
        self.local_diag = diag
        if new == pkt.State.UP:
            self.up_events += 1
        elif old == pkt.State.UP:
            self.down_events += 1
        out.append(StateChange(old, new, diag, remote_admin_down))

    def _advertise(self, now: float) -> None:
        """Recompute what our packets say after a state or configuration change (§6.8.3)."""
        up = self.state == pkt.State.UP
        tx = self.timers.desired_min_tx_us if up else max(self.timers.desired_min_tx_us, SLOW_TX_US)
        rx = self.timers.required_min_rx_us
        if tx == self.desired_min_tx_us and rx == self.required_min_rx_us:
            return
        if up:
            self.polling = True
            # Faster sending and slower receiving are safe at once; the opposite waits for F.
            if tx < self._tx_in_use_us:
                self._tx_in_use_us = tx
            if rx > self._rx_in_use_us:
                self._rx_in_use_us = rx
        else:
            self.polling = False
            self._tx_in_use_us, self._rx_in_use_us = tx, rx
        self.desired_min_tx_us, self.required_min_rx_us = tx, rx
        self._schedule_tx(now, sooner_only=True)

    def _poll_done(self) -> None:
        self.polling = False
        self._tx_in_use_us = self.desired_min_tx_us
        self._rx_in_use_us = self.required_min_rx_us

    # --- inputs --------------------------------------------------------------------------------

    def receive(self, packet: pkt.ControlPacket, now: float) -> list[Output]:
        """A decoded packet demultiplexed to this session (§6.8.6, after the codec's checks)."""
        out: list[Output] = []
        if packet.your_discriminator == 0 and packet.state not in (
            pkt.State.DOWN,
            pkt.State.ADMIN_DOWN,
        ):
            return out
        if packet.your_discriminator not in (0, self.local_discriminator):
            return out
        self.packets_in += 1
        self.remote_discriminator = packet.my_discriminator
        self.remote_state = packet.state
        self.remote_desired_min_tx_us = packet.desired_min_tx_us
        self.remote_detect_mult = packet.detect_mult
        previous_min_rx = self.remote_min_rx_us
        self.remote_min_rx_us = packet.required_min_rx_us
        if packet.final and self.polling:
            self._poll_done()
        if self.state == pkt.State.ADMIN_DOWN:
            return out
        self._detect_at = now + self.detection_time_us / 1e6
        if packet.state == pkt.State.ADMIN_DOWN:
            if self.state != pkt.State.DOWN:
                self._set_state(
                    pkt.State.DOWN,
                    pkt.Diag.NEIGHBOR_SIGNALED_SESSION_DOWN,
                    out,
                    remote_admin_down=True,
                )
        elif self.state == pkt.State.DOWN:
            if packet.state == pkt.State.DOWN:
                self._set_state(pkt.State.INIT, pkt.Diag.NONE, out)
            elif packet.state == pkt.State.INIT:
                self._set_state(pkt.State.UP, pkt.Diag.NONE, out)
        elif self.state == pkt.State.INIT:
            if packet.state in (pkt.State.INIT, pkt.State.UP):
                self._set_state(pkt.State.UP, pkt.Diag.NONE, out)
        elif packet.state == pkt.State.DOWN:  # we are Up
            self._set_state(pkt.State.DOWN, pkt.Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, out)
        self._advertise(now)
        if packet.poll:
            self._send(out, final=True)
        if self._next_tx is None or self.remote_min_rx_us < previous_min_rx:
            self._schedule_tx(now, sooner_only=self._next_tx is not None)
        elif not self._may_transmit():
            self._next_tx = None
        return out

    def tick(self, now: float) -> list[Output]:
        """Fire whatever is due at `now`: the detection timer, then the transmit timer."""
        out: list[Output] = []
        if self._detect_at is not None and now >= self._detect_at:
            self._detect_at = None
            if self.state in (pkt.State.INIT, pkt.State.UP):
                self._set_state(pkt.State.DOWN, pkt.Diag.CONTROL_DETECTION_TIME_EXPIRED, out)
            # §6.8.1: forget the remote once it has gone silent for a Detection Time.
            self.remote_discriminator = 0
            self.remote_state = pkt.State.DOWN
            self.remote_min_rx_us = _INITIAL_REMOTE_MIN_RX_US
            self.remote_desired_min_tx_us = 0
            self._advertise(now)
            if self._next_tx is None:
                self._schedule_tx(now)
        if self._next_tx is not None and now >= self._next_tx:
            if self._may_transmit():
                self._send(out)
                self._schedule_tx(now)
            else:
                self._next_tx = None
        return out

    def set_admin_down(self, down: bool, now: float) -> list[Output]:
        """Take the session administratively down (we keep telling the peer, §6.8.16) or up."""
        out: list[Output] = []
        if down and self.state != pkt.State.ADMIN_DOWN:
            self._set_state(pkt.State.ADMIN_DOWN, pkt.Diag.ADMINISTRATIVELY_DOWN, out)
            self._detect_at = None
            self._advertise(now)
            self._send(out)
            self._schedule_tx(now)
        elif not down and self.state == pkt.State.ADMIN_DOWN:
            self._set_state(pkt.State.DOWN, pkt.Diag.NONE, out)
            self._advertise(now)
            self._schedule_tx(now, sooner_only=True)
        return out

    def set_timers(self, timers: Timers, now: float) -> list[Output]:
        """New profile values; while Up this runs a Poll Sequence (§6.8.3)."""
        self.timers = timers
        self._advertise(now)
        if self._next_tx is None:
            self._schedule_tx(now)
        return []
