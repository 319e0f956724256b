"""The SWIM protocol's messages, as plain values.

A datagram carries one or more of these: a primary message (ping, ack, ...) and, in the space that
is left, gossiped membership updates (alive / suspect / dead). Names are Kubernetes node names and
addresses are (host, port) pairs with a literal IP host.

`meta` is a member's own small opaque byte string (the speaker puts its data-path readiness
there), published with each of its incarnations like memberlist's node `Meta`: an `Alive` carries
the meta of that incarnation, and a full-state exchange carries every live member's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Address:
    host: str  # a literal IPv4 or IPv6 address
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class State(enum.IntEnum):
    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3  # dead by its own announcement: dropped at once, never suspected


@dataclass(frozen=True, slots=True)
class Ping:
    seq: int
    target: str  # so that a different node now living at the address does not answer


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int


@dataclass(frozen=True, slots=True)
class Nack:
    """A helper could not reach the target: proof that the helper, at least, hears us."""

    seq: int


@dataclass(frozen=True, slots=True)
class IndirectPing:
    seq: int
    target: str
    address: Address


@dataclass(frozen=True, slots=True)
class Alive:
    incarnation: int
    name: str
    address: Address
    meta: bytes = b""


@dataclass(frozen=True, slots=True)
class Suspect:
    incarnation: int
    name: str
    origin: str  # who suspects; "" when relayed from a full-state exchange


@dataclass(frozen=True, slots=True)
class Dead:
    incarnation: int
    name: str
    origin: str  # origin == name: a graceful leave

    @property
    def is_leave(self) -> bool:
        return self.origin == self.name


@dataclass(frozen=True, slots=True)
class MemberState:
    name: str
    address: Address
    incarnation: int
    state: State
    meta: bytes = b""  # sent for ALIVE states only


@dataclass(frozen=True, slots=True)
class PushPull:
    """A (part of a) full-state exchange; the receiver answers with its own when reply is set."""

    reply: bool
    join: bool
    states: tuple[MemberState, ...]


Message = Ping | Ack | Nack | IndirectPing | Alive | Suspect | Dead | PushPull
Gossip = Alive | Suspect | Dead
