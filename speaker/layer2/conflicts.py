"""Split brain on the wire: another machine claiming an address this node answers for.

Pure, like `responding`: `detect` says whether one received frame is a claim, and `Tracker`
keeps the conflicts seen lately on an explicit clock, so tests need neither sockets nor time.

A frame received on interface I is a claim on X, while this node owns X on I, when it is
- an ARP reply, or a gratuitous ARP (request or reply whose sender IP equals its target IP),
  with sender IP X and a sender MAC that is none of this node's interfaces'; or
- an IPv6 neighbour advertisement (hop limit 255, code 0: anything else receivers drop) for
  target X whose target link-layer address option, or the Ethernet source when the option is
  absent, is none of this node's MACs.
Requests for X (someone asking who has it, duplicate address detection included) are no claim,
and neither is an all-zero MAC (no address at all).

What a port can see without promiscuous mode (which it does not enable): broadcast frames
(gratuitous ARP in both forms, broadcast replies such as `arping -A`), frames sent to this
node's MAC (replies to requests this node sends), and multicast to groups the interface is in
(all-nodes ff02::1 always, so unsolicited advertisements). A unicast reply another machine sends
to a third host is not seen: a rogue that only answers requests, without ever announcing, goes
unnoticed until it announces. Every Linux host announces an address when it configures it
(gratuitous ARP with `arp_notify`, or an unsolicited advertisement with `ndisc_notify`), and
every MetalLB-compatible speaker announces on takeover, which is enough to catch the split
brains that matter: two speakers, or a speaker and a host, each believing they own the address.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from speaker.layer2 import packets, responding

IPAddress = packets.IPAddress
# A conflict is current while claims keep coming at least this often.
EXPIRY_S: Final = 30.0
# A continuing conflict is reported (callback, warning) again at most this often.
REPORT_INTERVAL_S: Final = 10.0
# A spoofer sending from random MACs must not grow memory nor flood Events: per address, at most
# this many foreign MACs are tracked (the least recently seen goes) and reported per interval;
# in all, at most MAX_CONFLICTS are tracked.
MAX_MACS_PER_ADDRESS: Final = 4
MAX_CONFLICTS: Final = 256


@dataclass(frozen=True, slots=True)
class Claim:
    """One frame in which `mac` says it has `ip`, received on `interface`."""

    ip: IPAddress
    mac: bytes
    interface: str


@dataclass(frozen=True, slots=True)
class Conflict:
    """Another machine (`mac`, as aa:bb:cc:dd:ee:ff) claiming `ip`, last seen on `interface`.

    `first_seen` and `last_seen` are wall-clock seconds (Unix time); `count` is the number of
    claims seen since `first_seen`.
    """

    ip: IPAddress
    mac: str
    interface: str
    first_seen: float
    last_seen: float
    count: int


def detect(
    packet: packets.Packet | None,
    interface: str,
    own_macs: Collection[bytes],
    owned: responding.Owned,
) -> Claim | None:
    """The claim `packet`, received on `interface`, makes on an address owned there, if any."""
    if isinstance(packet, packets.Arp):
        if packet.operation == packets.ARP_REQUEST:
            # The common case on the read path, so checked first: someone asking.
            if packet.sender_ip != packet.target_ip:
                return None
        elif packet.operation != packets.ARP_REPLY:
            return None
        address: IPAddress = packet.sender_ip
        mac = packet.sender_mac
    elif isinstance(packet, packets.NeighborAdvertisement):
        if packet.hop_limit != packets.ND_HOP_LIMIT or packet.code != 0:
            return None
        address = packet.target
        mac = packet.eth_src if packet.target_mac is None else packet.target_mac
    else:
        return None
    allowed = owned.get(address)
    if allowed is None or not responding.allows(allowed, interface):
        return None
    if mac in own_macs or mac == packets.ZERO_MAC:
        return None
    return Claim(address, mac, interface)


class Tracker:
    """The conflicts seen within `expiry` seconds, one per (address, foreign MAC).

    Times: `now` is a monotonic clock (expiry and report pacing), `wall` the wall clock written
    into `Conflict`. Every change publishes new immutable views (`by_address`, `current`), so
    another thread may read them while the owner of the tracker keeps observing.
    """

    def __init__(
        self, expiry: float = EXPIRY_S, report_interval: float = REPORT_INTERVAL_S
    ) -> None:
        self.expiry = expiry
        self.report_interval = report_interval
        self._conflicts: dict[tuple[IPAddress, bytes], Conflict] = {}
        self._seen_at: dict[tuple[IPAddress, bytes], float] = {}
        self._reported_at: dict[tuple[IPAddress, bytes], float] = {}
        self._address_reports: dict[IPAddress, list[float]] = {}  # within report_interval
        self.current: tuple[Conflict, ...] = ()
        self.by_address: Mapping[IPAddress, Conflict] = MappingProxyType({})

    def observe(self, claim: Claim, now: float, wall: float) -> Conflict | None:
        """Record `claim`; returns its conflict when it is due a report (new, or not reported
        for `report_interval`), else None."""
        key = (claim.ip, claim.mac)
        seen_at = self._seen_at.get(key)
        known = self._conflicts.get(key)
        if known is None:
            self._make_room(claim.ip)
        if known is None or seen_at is None or now - seen_at >= self.expiry:
            mac = packets.mac_text(claim.mac)
            conflict = Conflict(claim.ip, mac, claim.interface, wall, wall, 1)
            self._reported_at.pop(key, None)
        else:
            conflict = replace(
                known, interface=claim.interface, last_seen=wall, count=known.count + 1
            )
        self._conflicts[key] = conflict
        self._seen_at[key] = now
        self._publish()
        reported_at = self._reported_at.get(key)
        if reported_at is not None and now - reported_at < self.report_interval:
            return None
        recent = [
            t for t in self._address_reports.get(claim.ip, ()) if now - t < self.report_interval
        ]
        if len(recent) >= MAX_MACS_PER_ADDRESS:
            self._address_reports[claim.ip] = recent
            return None  # this address had its reports for now: tracked, shown, not reported
        self._address_reports[claim.ip] = [*recent, now]
        self._reported_at[key] = now
        return conflict

    def _make_room(self, address: IPAddress) -> None:
        """Before a new (address, MAC) is tracked: drop the least recently seen MAC of that
        address past MAX_MACS_PER_ADDRESS, and the least recently seen of all past MAX_CONFLICTS."""
        of_address = [k for k in self._seen_at if k[0] == address]
        if len(of_address) >= MAX_MACS_PER_ADDRESS:
            self._drop([min(of_address, key=self._seen_at.__getitem__)])
        if len(self._seen_at) >= MAX_CONFLICTS:
            self._drop([min(self._seen_at, key=self._seen_at.__getitem__)])

    def expire(self, now: float) -> list[Conflict]:
        """Forget the conflicts not seen for `expiry` seconds; returns them."""
        return self._drop(
            [key for key, seen_at in self._seen_at.items() if now - seen_at >= self.expiry]
        )

    def retain(self, owned: responding.Owned) -> list[Conflict]:
        """Forget the conflicts on addresses (or interfaces) no longer owned; returns them."""
        return self._drop(
            [
                key
                for key, conflict in self._conflicts.items()
                if conflict.ip not in owned
                or not responding.allows(owned[conflict.ip], conflict.interface)
            ]
        )

    def next_expiry(self) -> float | None:
        """When (on the `now` clock) the oldest conflict expires, if nothing more is seen."""
        return min(self._seen_at.values()) + self.expiry if self._seen_at else None

    def _drop(self, keys: list[tuple[IPAddress, bytes]]) -> list[Conflict]:
        dropped = [self._conflicts.pop(key) for key in keys]
        for key in keys:
            self._seen_at.pop(key, None)
            self._reported_at.pop(key, None)
        live = {ip for ip, _ in self._seen_at}
        for address in [a for a in self._address_reports if a not in live]:
            del self._address_reports[address]
        if dropped:
            self._publish()
        return dropped

    def _publish(self) -> None:
        self.current = tuple(self._conflicts.values())
        latest: dict[IPAddress, Conflict] = {}
        for conflict in self.current:
            # Two foreign MACs on one address: the one seen last stands for it.
            other = latest.get(conflict.ip)
            if other is None or conflict.last_seen >= other.last_seen:
                latest[conflict.ip] = conflict
        self.by_address = MappingProxyType(latest)
