"""BFD Control packets (RFC 5880 §4.1): the 24-byte mandatory section, encoded and decoded.

`decode` applies the reception checks of §6.8.6 that need no session (version, length, detect
multiplier, multipoint, My Discriminator) and returns None for anything else, so that arbitrary
bytes from the network can never raise. Authentication is not implemented: a packet with the A
bit set is dropped, as §6.8.6 requires of a session without authentication.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

VERSION = 1
LENGTH = 24
_FORMAT = struct.Struct("!BBBBIIIII")
_MAX_U32 = 0xFFFFFFFF


class State(enum.IntEnum):
    ADMIN_DOWN = 0
    DOWN = 1
    INIT = 2
    UP = 3


class Diag(enum.IntEnum):
    NONE = 0
    CONTROL_DETECTION_TIME_EXPIRED = 1
    ECHO_FUNCTION_FAILED = 2
    NEIGHBOR_SIGNALED_SESSION_DOWN = 3
    FORWARDING_PLANE_RESET = 4
    PATH_DOWN = 5
    CONCATENATED_PATH_DOWN = 6
    ADMINISTRATIVELY_DOWN = 7
    REVERSE_CONCATENATED_PATH_DOWN = 8


_POLL, _FINAL, _CPI, _AUTH, _DEMAND, _MULTIPOINT = 0x20, 0x10, 0x08, 0x04, 0x02, 0x01


@dataclass(frozen=True, slots=True)
class ControlPacket:
    """Field names follow RFC 5880; intervals are microseconds, as on the wire."""

    state: State
    my_discriminator: int
    your_discriminator: int = 0
    detect_mult: int = 3
    desired_min_tx_us: int = 1_000_000
    required_min_rx_us: int = 1_000_000
    required_min_echo_rx_us: int = 0
    diag: int = Diag.NONE  # an int: unknown codes from a peer are kept, not rejected
    poll: bool = False
    final: bool = False
    control_plane_independent: bool = False
    demand: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.diag <= 31:
            raise ValueError(f"diag {self.diag} out of range")
        if not 1 <= self.detect_mult <= 255:
            raise ValueError(f"detect multiplier {self.detect_mult} out of range")
        if not 1 <= self.my_discriminator <= _MAX_U32:
            raise ValueError("My Discriminator must be nonzero")
        for value in (
            self.your_discriminator,
            self.desired_min_tx_us,
            self.required_min_rx_us,
            self.required_min_echo_rx_us,
        ):
            if not 0 <= value <= _MAX_U32:
                raise ValueError(f"{value} does not fit 32 bits")
        if self.poll and self.final:
            raise ValueError("Poll and Final must not both be set")


def encode(packet: ControlPacket) -> bytes:
    flags = (
        (packet.state << 6)
        | (_POLL if packet.poll else 0)
        | (_FINAL if packet.final else 0)
        | (_CPI if packet.control_plane_independent else 0)
        | (_DEMAND if packet.demand else 0)
    )
    return _FORMAT.pack(
        (VERSION << 5) | packet.diag,
        flags,
        packet.detect_mult,
        LENGTH,
        packet.my_discriminator,
        packet.your_discriminator,
        packet.desired_min_tx_us,
        packet.required_min_rx_us,
        packet.required_min_echo_rx_us,
    )


def decode(data: bytes) -> ControlPacket | None:
    """A valid packet, or None when §6.8.6 says to discard it (or it is not BFD at all)."""
    if len(data) < LENGTH:
        return None
    vers_diag, flags, mult, length, mine, yours, tx, rx, echo = _FORMAT.unpack_from(data)
    if vers_diag >> 5 != VERSION:
        return None
    if length < LENGTH or length > len(data):
        return None
    if flags & _AUTH:  # authentication not in use on any of our sessions
        return None
    if mult == 0 or flags & _MULTIPOINT or mine == 0:
        return None
    if flags & _POLL and flags & _FINAL:
        # No system may send both (§6.5/§6.8.7); such a packet cannot be answered sensibly.
        return None
    return ControlPacket(
        state=State(flags >> 6),
        my_discriminator=mine,
        your_discriminator=yours,
        detect_mult=mult,
        desired_min_tx_us=tx,
        required_min_rx_us=rx,
        required_min_echo_rx_us=echo,
        diag=vers_diag & 0x1F,
        poll=bool(flags & _POLL),
        final=bool(flags & _FINAL),
        control_plane_independent=bool(flags & _CPI),
        demand=bool(flags & _DEMAND),
    )
