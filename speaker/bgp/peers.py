"""The BGP sessions this node keeps, as plain values.

A `Peer` is one BGPPeer selected for this node, already resolved (password read from its Secret,
BFD profile looked up): everything needed to render an ExaBGP neighbor and to decide which
routes the session may carry. The metallb.io model is mapped onto it elsewhere; this module only
knows what ExaBGP can do with it, and says (as Problems) what it cannot.
"""

from __future__ import annotations

import enum
import ipaddress
import zlib
from dataclasses import dataclass, field
from typing import Literal

from ironlb import problems

Family = Literal[4, 6]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_PORT = 179
# MetalLB's native speaker uses 90 s when holdTime is unset; ExaBGP's own default would be 180.
DEFAULT_HOLD_TIME = 90
# FRR's default restart time, which MetalLB relies on when enableGracefulRestart is set.
GRACEFUL_RESTART_TIME = 120
# TCP_MD5SIG_MAXKEYLEN; ExaBGP refuses longer keys and would not start at all (the same limit
# as ironlb.honouring's, which reports it before a session is asked for).
MAX_PASSWORD_BYTES = 80

# RFC 5880 leaves these to the implementation; FRR's bfdd defaults, which MetalLB documents.
DEFAULT_BFD_INTERVAL_MS = 300
DEFAULT_BFD_MULTIPLIER = 3


@dataclass(frozen=True, slots=True)
class BFDSettings:
    """A BFDProfile's timers (echo mode is not implemented: control packets only)."""

    receive_interval_ms: int = DEFAULT_BFD_INTERVAL_MS
    transmit_interval_ms: int = DEFAULT_BFD_INTERVAL_MS
    detect_multiplier: int = DEFAULT_BFD_MULTIPLIER
    passive: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.receive_interval_ms <= 60000:
            raise ValueError(f"receive interval {self.receive_interval_ms} ms out of range")
        if not 1 <= self.transmit_interval_ms <= 60000:
            raise ValueError(f"transmit interval {self.transmit_interval_ms} ms out of range")
        if not 1 <= self.detect_multiplier <= 255:
            raise ValueError(f"detect multiplier {self.detect_multiplier} out of range")


@dataclass(frozen=True, slots=True)
class Peer:
    """One BGP session of this node. `name` is the BGPPeer's name (advertisements refer to it).

    `peer_asn` None means "whatever the peer says in its OPEN" (dynamicASN: external); for
    dynamicASN: internal the caller passes `my_asn` (MetalLB: the peer must be in myASN).
    `local_asn` is BGPPeer.localASN: the session presents it instead of `my_asn`, as FRR's
    `local-as N no-prepend replace-as` (MetalLB's rendering) does, so `my_asn` appears nowhere
    on this session. `hold_time`/`keepalive_time` are seconds.
    `ipv4_next_hop`/`ipv6_next_hop` replace `next-hop self` for that family: needed only on a
    dual-stack session for the family the TCP session is not, where "self" has no meaning.
    """

    name: str
    my_asn: int
    peer_asn: int | None
    peer_address: IPAddress
    peer_port: int = DEFAULT_PORT
    source_address: IPAddress | None = None
    router_id: ipaddress.IPv4Address | None = None
    hold_time: int | None = None
    keepalive_time: int | None = None
    ebgp_multi_hop: bool = False
    password: str = field(default="", repr=False)
    graceful_restart: bool = False
    dual_stack: bool = False
    ipv4_next_hop: ipaddress.IPv4Address | None = None
    ipv6_next_hop: ipaddress.IPv6Address | None = None
    bfd: BFDSettings | None = None
    local_asn: int | None = None

    def __post_init__(self) -> None:
        for asn in (self.my_asn, self.peer_asn, self.local_asn):
            if asn is not None and not 1 <= asn <= 0xFFFFFFFF:
                raise ValueError(f"peer {self.name}: ASN {asn} out of range")
        if not 1 <= self.peer_port <= 65535:
            raise ValueError(f"peer {self.name}: port {self.peer_port} out of range")
        if self.source_address is not None and (
            self.source_address.version != self.peer_address.version
        ):
            raise ValueError(f"peer {self.name}: source and peer address families differ")

    @property
    def family(self) -> Family:
        return 4 if self.peer_address.version == 4 else 6

    @property
    def families(self) -> tuple[Family, ...]:
        """Address families of the routes this session carries."""
        if self.dual_stack:
            return (4, 6)
        return (self.family,)

    @property
    def local_as(self) -> int:
        """The ASN this session presents: in the OPEN and in the AS_PATH it sends."""
        return self.local_asn or self.my_asn

    @property
    def is_ibgp(self) -> bool:
        # FRR sorts a session by the ASN it presents: a local-as equal to the peer's remote-as
        # makes it iBGP (FRR's bgp_local_as topotest); ExaBGP compares its local-as the same way.
        # peer_asn None (dynamicASN: external) is eBGP.
        return self.peer_asn == self.local_as

    @property
    def effective_hold_time(self) -> int:
        if self.hold_time is not None:
            return self.hold_time
        if self.keepalive_time is not None:
            return 3 * self.keepalive_time
        return DEFAULT_HOLD_TIME

    def next_hop(self, family: int) -> IPAddress | None:
        """The next hop for routes of `family`, None meaning the session's own address."""
        return self.ipv4_next_hop if family == 4 else self.ipv6_next_hop


def fallback_router_id(node_name: str) -> ipaddress.IPv4Address:
    """MetalLB's last resort router ID: CRC32 (IEEE) of the node name, little-endian."""
    checksum = zlib.crc32(node_name.encode())
    return ipaddress.IPv4Address(checksum.to_bytes(4, "little"))


def router_id(peer: Peer, node_name: str) -> ipaddress.IPv4Address:
    """The router ID: configured, else the IPv4 source address, else MetalLB's fallback.

    (MetalLB's native speaker would first try the connection's own IPv4 address; ExaBGP wants
    the ID in its configuration, before any connection exists, so that step is skipped.)"""
    if peer.router_id is not None:
        return peer.router_id
    if isinstance(peer.source_address, ipaddress.IPv4Address):
        return peer.source_address
    return fallback_router_id(node_name)


def check(peer: Peer) -> list[problems.Problem]:
    """What would stop ExaBGP from starting for this peer: no session is made while any.

    (What a session is made without, a keepaliveTime apart from hold / 3 for one, is
    `ironlb.honouring`'s business: it reads the metallb.io model, which this module does not.)"""
    found: list[problems.Problem] = []

    def note(field_name: str, message: str) -> None:
        found.append(problems.Problem("BGPPeer", peer.name, field_name, message))

    hold = peer.effective_hold_time
    if hold != 0 and hold < 3:
        note("spec.holdTime", f"hold time {hold}s must be 0 or at least 3s")
    if len(peer.password.encode()) > MAX_PASSWORD_BYTES:
        note("spec.password", f"TCP MD5 keys are at most {MAX_PASSWORD_BYTES} bytes")
    return found


class Farewell(enum.Enum):
    """How a session ends when its runner is closed."""

    # Close without a NOTIFICATION: a graceful-restart peer keeps our routes as stale and keeps
    # forwarding to this node until the next speaker's End-of-RIB (or its restart time).
    KEEP = "keep"
    # Withdraw every route, wait until ExaBGP reports the withdrawals on the wire, then close.
    WITHDRAW = "withdraw"
    # A Cease NOTIFICATION at once: the peer drops every route of the session in one go.
    CEASE = "cease"


def farewell(peer: Peer, restarting: bool) -> Farewell:
    """How to end `peer`'s session; `restarting`: this process stops but the node stays.

    A Cease needs no withdrawal: without graceful restart the peer drops all our routes when the
    session ends, as it does when MetalLB's speaker exits, and one NOTIFICATION is far quicker
    than thousands of withdrawals each waiting for ExaBGP. But ExaBGP closes a session that
    negotiated graceful restart silently even when told to tear it down with a code, and the
    peer would then keep our routes as stale for its restart time; so a graceful-restart peer
    that must forget them gets the withdrawals first."""
    if not peer.graceful_restart:
        return Farewell.CEASE
    return Farewell.KEEP if restarting else Farewell.WITHDRAW
