"""Whether to answer one ARP request or neighbour solicitation, and with which frame.

Pure, like MetalLB's `internal/layer2` split between socket I/O and the decision: the answer is a
frame to send or a typed reason not to, so tests assert reasons without sockets. Checks run in
MetalLB's order (request? meant for us? owned? on an allowed interface?), with a few extra
refusals MetalLB gets from its libraries or the RFCs (own frames, gratuitous announcements,
malformed neighbour discovery).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from speaker.layer2 import packets

IPAddress = packets.IPAddress
Interfaces = frozenset[str]
# An empty set of interfaces means every interface, as an L2Advertisement without `interfaces`.
ALL: Final[Interfaces] = frozenset()
Owned = Mapping[IPAddress, Interfaces]


class Reason(enum.Enum):
    MALFORMED = "malformed"
    NOT_REQUEST = "not a request"
    OWN_PACKET = "own packet"
    GRATUITOUS = "gratuitous"
    NOT_FOR_US = "not for us"
    INVALID = "invalid"
    NO_SOURCE_LINK_ADDRESS = "no source link-layer address"
    NOT_OWNER = "not owner"
    WRONG_INTERFACE = "wrong interface"


@dataclass(frozen=True, slots=True)
class Answer:
    address: IPAddress
    frame: bytes


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: Reason
    # The address asked about, when the packet names one.
    address: IPAddress | None = None


Decision = Answer | Ignore


def allows(interfaces: Interfaces, name: str) -> bool:
    return not interfaces or name in interfaces


def _ownership(address: IPAddress, interface: str, owned: Owned) -> Ignore | None:
    interfaces = owned.get(address)
    if interfaces is None:
        return Ignore(Reason.NOT_OWNER, address)
    if not allows(interfaces, interface):
        return Ignore(Reason.WRONG_INTERFACE, address)
    return None


def decide(packet: packets.Packet | None, interface: str, mac: bytes, owned: Owned) -> Decision:
    """The reply to `packet` received on `interface` (whose MAC is `mac`), or why there is none."""
    if packet is None:
        return Ignore(Reason.MALFORMED)
    if isinstance(packet, packets.Arp):
        return _arp(packet, interface, mac, owned)
    if isinstance(packet, packets.NeighborSolicitation):
        return _solicitation(packet, interface, mac, owned)
    return Ignore(Reason.NOT_REQUEST, packet.target)


def _arp(packet: packets.Arp, interface: str, mac: bytes, owned: Owned) -> Decision:
    address = packet.target_ip
    if packet.operation != packets.ARP_REQUEST:
        return Ignore(Reason.NOT_REQUEST, address)
    if packet.eth_src == mac or packet.sender_mac == mac:
        return Ignore(Reason.OWN_PACKET, address)
    # Someone announcing the address (maybe a previous owner): answering would start a fight.
    if packet.sender_ip == address:
        return Ignore(Reason.GRATUITOUS, address)
    if packet.eth_dst != packets.BROADCAST and packet.eth_dst != mac:
        return Ignore(Reason.NOT_FOR_US, address)
    refusal = _ownership(address, interface, owned)
    if refusal is not None:
        return refusal
    return Answer(address, packets.arp_reply(packet, mac))


def _solicitation(
    packet: packets.NeighborSolicitation, interface: str, mac: bytes, owned: Owned
) -> Decision:
    address = packet.target
    if packet.eth_src == mac:
        return Ignore(Reason.OWN_PACKET, address)
    # RFC 4861 7.1.1: hop limit 255 proves the sender is on-link; code 0; unicast target.
    if packet.hop_limit != packets.ND_HOP_LIMIT or packet.code != 0 or address.is_multicast:
        return Ignore(Reason.INVALID, address)
    group = packets.solicited_node(address)
    if packet.destination not in (group, address):
        return Ignore(Reason.NOT_FOR_US, address)
    if packet.eth_dst != mac and packet.eth_dst != packets.multicast_mac(group):
        return Ignore(Reason.NOT_FOR_US, address)
    # Duplicate address detection (source ::) carries no link-layer address, and MetalLB answers
    # only solicitations that say where to send the advertisement.
    if packet.source == packets.UNSPECIFIED or packet.source_mac is None:
        return Ignore(Reason.NO_SOURCE_LINK_ADDRESS, address)
    refusal = _ownership(address, interface, owned)
    if refusal is not None:
        return refusal
    return Answer(address, packets.neighbor_reply(packet, mac))
