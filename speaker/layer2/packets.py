"""Ethernet/ARP and IPv6 neighbour-discovery frames, parsed and built with `struct` alone.

Every ARP request and neighbour solicitation for an owned address is answered in user space, so
this is the hot path: plain struct code is about twice as fast as scapy here (lab notes) and
needs no libpcap. `parse` never raises: any bytes give a packet or None.

Choices where MetalLB or the RFCs leave room (each one checked against Linux in the lab):
- Gratuitous ARP is sent in both forms, Ethernet broadcast, sender = target = the address: a
  request with a zero target MAC (RFC 5227 announcement) and a reply whose target MAC is the
  sender's. Linux only lets a reply override a neighbour entry younger than its 1 s locktime when
  `tha == sha` (`arp_is_garp`); MetalLB's reply with `tha = ff:ff:ff:ff:ff:ff` is ignored then.
- Neighbour advertisements, solicited or not, use the advertised address itself as IPv6 source,
  as Linux does for its own addresses: strict receivers (ndisc6) drop NAs whose source differs
  from the target, and the kernel accepts either. Solicited replies carry Override=1 (MetalLB
  sends 0): with 0 a host whose entry still points at the previous owner keeps it (RFC 4861
  7.2.5), which defeats a takeover.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ETH_P_IP: Final = 0x0800
ETH_P_ARP: Final = 0x0806
ETH_P_IPV6: Final = 0x86DD
ARP_REQUEST: Final = 1
ARP_REPLY: Final = 2
ICMPV6: Final = 58
NEIGHBOR_SOLICITATION: Final = 135
NEIGHBOR_ADVERTISEMENT: Final = 136
OPTION_SOURCE_LLADDR: Final = 1
OPTION_TARGET_LLADDR: Final = 2
ND_HOP_LIMIT: Final = 255

BROADCAST: Final = b"\xff" * 6
ZERO_MAC: Final = b"\x00" * 6
ALL_NODES: Final = ipaddress.IPv6Address("ff02::1")
UNSPECIFIED: Final = ipaddress.IPv6Address("::")
ETHERNET_MIN: Final = 60  # without the FCS; shorter frames are padded
_SOLICITED_NODE_BASE: Final = int(ipaddress.IPv6Address("ff02::1:ff00:0"))

_ETHER = struct.Struct("!6s6sH")
_ARP = struct.Struct("!HHBBH6s4s6s4s")
_IPV6 = struct.Struct("!IHBB16s16s")
_NA_FLAGS = struct.Struct("!BBHB3x16s")
_NS_BODY = struct.Struct("!BBH4x16s")
_ROUTER, _SOLICITED, _OVERRIDE = 0x80, 0x40, 0x20


@dataclass(frozen=True, slots=True)
class Arp:
    eth_dst: bytes
    eth_src: bytes
    operation: int
    sender_mac: bytes
    sender_ip: ipaddress.IPv4Address
    target_mac: bytes
    target_ip: ipaddress.IPv4Address


@dataclass(frozen=True, slots=True)
class NeighborSolicitation:
    eth_dst: bytes
    eth_src: bytes
    source: ipaddress.IPv6Address
    destination: ipaddress.IPv6Address
    hop_limit: int
    code: int
    target: ipaddress.IPv6Address
    source_mac: bytes | None  # the Source Link-Layer Address option


@dataclass(frozen=True, slots=True)
class NeighborAdvertisement:
    eth_dst: bytes
    eth_src: bytes
    source: ipaddress.IPv6Address
    destination: ipaddress.IPv6Address
    hop_limit: int
    code: int
    router: bool
    solicited: bool
    override: bool
    target: ipaddress.IPv6Address
    target_mac: bytes | None  # the Target Link-Layer Address option


Packet = Arp | NeighborSolicitation | NeighborAdvertisement


# --- addresses ------------------------------------------------------------------------------------


def mac_bytes(text: str) -> bytes:
    """'02:00:0a:fa:00:0b' -> 6 bytes; raises ValueError on anything else."""
    parts = text.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"not a MAC address: {text!r}")
    return bytes(int(p, 16) for p in parts)


def mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def solicited_node(address: ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    """The solicited-node multicast group a neighbour solicitation for `address` is sent to."""
    return ipaddress.IPv6Address(_SOLICITED_NODE_BASE | (int(address) & 0xFFFFFF))


def multicast_mac(group: ipaddress.IPv6Address) -> bytes:
    """Ethernet address of an IPv6 multicast group (RFC 2464: 33:33 + the low 32 bits)."""
    return b"\x33\x33" + group.packed[12:]


# --- checksum -------------------------------------------------------------------------------------


def _ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    words: tuple[int, ...] = struct.unpack(f"!{len(data) // 2}H", data)
    total = sum(words)
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _pseudo_header(source: bytes, destination: bytes, length: int) -> bytes:
    return source + destination + struct.pack("!I3xB", length, ICMPV6)


def icmpv6_checksum(source: bytes, destination: bytes, message: bytes) -> int:
    """RFC 4443 checksum of `message` (its checksum field zeroed) over the IPv6 pseudo-header."""
    return (
        ~_ones_complement_sum(_pseudo_header(source, destination, len(message)) + message) & 0xFFFF
    )


# --- parsing --------------------------------------------------------------------------------------


def parse(frame: bytes) -> Packet | None:
    """An ARP packet, a neighbour solicitation or advertisement; None for anything else."""
    if len(frame) < _ETHER.size:
        return None
    eth_dst, eth_src, ethertype = _ETHER.unpack_from(frame)
    if ethertype == ETH_P_ARP:
        return _parse_arp(frame, eth_dst, eth_src)
    if ethertype == ETH_P_IPV6:
        return _parse_nd(frame, eth_dst, eth_src)
    return None


def _parse_arp(frame: bytes, eth_dst: bytes, eth_src: bytes) -> Arp | None:
    if len(frame) < _ETHER.size + _ARP.size:
        return None
    htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _ARP.unpack_from(frame, _ETHER.size)
    if (htype, ptype, hlen, plen) != (1, ETH_P_IP, 6, 4):
        return None
    return Arp(
        eth_dst,
        eth_src,
        op,
        sha,
        ipaddress.IPv4Address(spa),
        tha,
        ipaddress.IPv4Address(tpa),
    )


def _parse_nd(
    frame: bytes, eth_dst: bytes, eth_src: bytes
) -> NeighborSolicitation | NeighborAdvertisement | None:
    start = _ETHER.size
    if len(frame) < start + _IPV6.size:
        return None
    first, payload_length, next_header, hop_limit, src, dst = _IPV6.unpack_from(frame, start)
    if first >> 28 != 6 or next_header != ICMPV6:
        return None
    message = frame[start + _IPV6.size : start + _IPV6.size + payload_length]
    # Both messages are 24 bytes before their options: type, code, checksum, 4, target.
    if len(message) != payload_length or payload_length < 24:
        return None
    kind = message[0]
    if kind not in (NEIGHBOR_SOLICITATION, NEIGHBOR_ADVERTISEMENT):
        return None
    if _ones_complement_sum(_pseudo_header(src, dst, payload_length) + message) != 0xFFFF:
        return None
    options = _options(message, 24)
    if options is None:
        return None
    source = ipaddress.IPv6Address(src)
    destination = ipaddress.IPv6Address(dst)
    target = ipaddress.IPv6Address(message[8:24])
    code = message[1]
    if kind == NEIGHBOR_SOLICITATION:
        return NeighborSolicitation(
            eth_dst,
            eth_src,
            source,
            destination,
            hop_limit,
            code,
            target,
            options.get(OPTION_SOURCE_LLADDR),
        )
    flags = message[4]
    return NeighborAdvertisement(
        eth_dst,
        eth_src,
        source,
        destination,
        hop_limit,
        code,
        bool(flags & _ROUTER),
        bool(flags & _SOLICITED),
        bool(flags & _OVERRIDE),
        target,
        options.get(OPTION_TARGET_LLADDR),
    )


def _options(message: bytes, offset: int) -> dict[int, bytes] | None:
    """Link-layer address options by type (the first of each); None if the TLVs are broken."""
    found: dict[int, bytes] = {}
    while offset < len(message):
        if offset + 2 > len(message):
            return None
        kind, units = message[offset], message[offset + 1]
        end = offset + units * 8
        # RFC 4861 4.6: a zero length is invalid and the whole packet must be dropped.
        if units == 0 or end > len(message):
            return None
        if kind in (OPTION_SOURCE_LLADDR, OPTION_TARGET_LLADDR) and units == 1:
            found.setdefault(kind, message[offset + 2 : offset + 8])
        offset = end
    return found


# --- building -------------------------------------------------------------------------------------


def arp(
    *,
    eth_dst: bytes,
    eth_src: bytes,
    operation: int,
    sender_mac: bytes,
    sender_ip: ipaddress.IPv4Address,
    target_mac: bytes,
    target_ip: ipaddress.IPv4Address,
) -> bytes:
    frame = _ETHER.pack(eth_dst, eth_src, ETH_P_ARP) + _ARP.pack(
        1, ETH_P_IP, 6, 4, operation, sender_mac, sender_ip.packed, target_mac, target_ip.packed
    )
    return frame.ljust(ETHERNET_MIN, b"\x00")


def arp_request(
    mac: bytes, sender_ip: ipaddress.IPv4Address, target_ip: ipaddress.IPv4Address
) -> bytes:
    """A broadcast who-has, as a host resolving `target_ip` sends it."""
    return arp(
        eth_dst=BROADCAST,
        eth_src=mac,
        operation=ARP_REQUEST,
        sender_mac=mac,
        sender_ip=sender_ip,
        target_mac=ZERO_MAC,
        target_ip=target_ip,
    )


def arp_reply(request: Arp, mac: bytes) -> bytes:
    """`request.target_ip is-at mac`, unicast to the requester (as mdlayher/arp replies)."""
    return arp(
        eth_dst=request.sender_mac,
        eth_src=mac,
        operation=ARP_REPLY,
        sender_mac=mac,
        sender_ip=request.target_ip,
        target_mac=request.sender_mac,
        target_ip=request.sender_ip,
    )


def gratuitous_arp(mac: bytes, address: ipaddress.IPv4Address) -> tuple[bytes, bytes]:
    """The request form and the reply form (tha = sha) of a gratuitous ARP for `address`."""
    request = arp(
        eth_dst=BROADCAST,
        eth_src=mac,
        operation=ARP_REQUEST,
        sender_mac=mac,
        sender_ip=address,
        target_mac=ZERO_MAC,
        target_ip=address,
    )
    reply = arp(
        eth_dst=BROADCAST,
        eth_src=mac,
        operation=ARP_REPLY,
        sender_mac=mac,
        sender_ip=address,
        target_mac=mac,
        target_ip=address,
    )
    return request, reply


def _icmpv6_frame(
    eth_dst: bytes,
    eth_src: bytes,
    source: ipaddress.IPv6Address,
    destination: ipaddress.IPv6Address,
    hop_limit: int,
    message: bytes,
) -> bytes:
    checksum = icmpv6_checksum(source.packed, destination.packed, message)
    message = message[:2] + struct.pack("!H", checksum) + message[4:]
    header = _IPV6.pack(6 << 28, len(message), ICMPV6, hop_limit, source.packed, destination.packed)
    return _ETHER.pack(eth_dst, eth_src, ETH_P_IPV6) + header + message


def _lladdr_option(kind: int, mac: bytes | None) -> bytes:
    return b"" if mac is None else bytes((kind, 1)) + mac


def neighbor_solicitation(
    *,
    eth_src: bytes,
    source: ipaddress.IPv6Address,
    target: ipaddress.IPv6Address,
    source_mac: bytes | None,
    destination: ipaddress.IPv6Address | None = None,
    eth_dst: bytes | None = None,
    hop_limit: int = ND_HOP_LIMIT,
    code: int = 0,
) -> bytes:
    """A solicitation; by default multicast to the target's solicited-node group."""
    destination = destination or solicited_node(target)
    eth_dst = eth_dst or multicast_mac(destination)
    body = _NS_BODY.pack(NEIGHBOR_SOLICITATION, code, 0, target.packed)
    message = body + _lladdr_option(OPTION_SOURCE_LLADDR, source_mac)
    return _icmpv6_frame(eth_dst, eth_src, source, destination, hop_limit, message)


def neighbor_advertisement(
    *,
    eth_dst: bytes,
    eth_src: bytes,
    source: ipaddress.IPv6Address,
    destination: ipaddress.IPv6Address,
    target: ipaddress.IPv6Address,
    target_mac: bytes | None,
    router: bool = False,
    solicited: bool = False,
    override: bool = False,
    hop_limit: int = ND_HOP_LIMIT,
    code: int = 0,
) -> bytes:
    flags = (_ROUTER if router else 0) | (_SOLICITED if solicited else 0)
    flags |= _OVERRIDE if override else 0
    body = _NA_FLAGS.pack(NEIGHBOR_ADVERTISEMENT, code, 0, flags, target.packed)
    message = body + _lladdr_option(OPTION_TARGET_LLADDR, target_mac)
    return _icmpv6_frame(eth_dst, eth_src, source, destination, hop_limit, message)


def neighbor_reply(solicitation: NeighborSolicitation, mac: bytes) -> bytes:
    """The solicited advertisement for `solicitation.target` (which needs a source lladdr)."""
    if solicitation.source_mac is None:
        raise ValueError("a solicitation without a source link-layer address gets no reply")
    return neighbor_advertisement(
        eth_dst=solicitation.source_mac,
        eth_src=mac,
        source=solicitation.target,
        destination=solicitation.source,
        target=solicitation.target,
        target_mac=mac,
        solicited=True,
        override=True,
    )


def unsolicited_advertisement(mac: bytes, address: ipaddress.IPv6Address) -> bytes:
    """To all nodes: `address` is now at `mac` (Override=1, so existing entries are replaced)."""
    return neighbor_advertisement(
        eth_dst=multicast_mac(ALL_NODES),
        eth_src=mac,
        source=address,
        destination=ALL_NODES,
        target=address,
        target_mac=mac,
        solicited=False,
        override=True,
    )


def gratuitous(mac: bytes, address: IPAddress) -> tuple[bytes, ...]:
    """Every frame of one gratuitous round for `address` on one interface."""
    if isinstance(address, ipaddress.IPv4Address):
        return gratuitous_arp(mac, address)
    return (unsolicited_advertisement(mac, address),)
