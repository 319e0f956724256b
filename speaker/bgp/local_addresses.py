"""This node's own addresses, read from the kernel: the facts `next_hops.choose` decides on.

All of it follows the network namespace of the process (a speaker runs in its node's):
IPv6 addresses come from /proc/net/if_inet6 (`speaker.if_inet6`), IPv4 ones from the SIOCGIFCONF
ioctl, and the address the kernel would connect to a peer from is what a UDP socket `connect`
(which sends nothing) reports as its own name. A few system calls, cheap enough for every pass;
a failure leaves the fact out, and `next_hops` falls back as its description says.
"""

from __future__ import annotations

import array
import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable
from typing import Final

from speaker import if_inet6
from speaker.bgp import next_hops

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SIOCGIFCONF: Final = 0x8912
IFNAMSIZ: Final = 16
# struct ifreq: the name, then a union whose largest member (struct ifmap) is 24 bytes with
# 64-bit pointers, 16 with 32-bit ones.
IFREQ_SIZE: Final = IFNAMSIZ + (24 if struct.calcsize("P") == 8 else 16)
BGP_PORT: Final = 179


def ipv6_addresses(
    addresses: Iterable[if_inet6.InterfaceAddress],
) -> list[tuple[str, ipaddress.IPv6Address]]:
    """(interface, address) of the kernel's IPv6 addresses, without those still in or failed by
    duplicate address detection."""
    return [(a.interface, a.address) for a in addresses if a.usable]


def ipv4_addresses(data: bytes) -> list[tuple[str, ipaddress.IPv4Address]]:
    """(interface, address) from the ifreq array SIOCGIFCONF fills in. An address with a
    label (`eth0:1`) belongs to the interface before the colon."""
    out: list[tuple[str, ipaddress.IPv4Address]] = []
    for i in range(0, len(data) - IFREQ_SIZE + 1, IFREQ_SIZE):
        name = data[i : i + IFNAMSIZ].split(b"\0", 1)[0].decode(errors="replace")
        (family,) = struct.unpack_from("H", data, i + IFNAMSIZ)
        if family != socket.AF_INET or not name:
            continue
        # struct sockaddr_in: family (2 bytes), port (2), then the address.
        start = i + IFNAMSIZ + 4
        out.append((name.split(":", 1)[0], ipaddress.IPv4Address(data[start : start + 4])))
    return out


def _read_ifconf() -> bytes:
    size = IFREQ_SIZE * 32
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while True:
            buffer = array.array("B", bytes(size))
            # struct ifconf: the buffer's length, then a pointer to it (native alignment).
            request = struct.pack("iP", size, buffer.buffer_info()[0])
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFCONF, request)
            except OSError:
                return b""
            (length,) = struct.unpack_from("i", answer)
            if length < size:  # a full buffer may have been cut short: ask again, bigger
                return buffer.tobytes()[:length]
            size *= 2


def source_toward(peer: IPAddress) -> IPAddress | None:
    """The local address the kernel would connect to `peer` from (None: no route to it)."""
    family = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((str(peer), BGP_PORT))
            name = sock.getsockname()[0]
    except OSError:
        return None
    try:
        return ipaddress.ip_address(str(name).split("%", 1)[0])
    except ValueError:
        return None


def read(peer_addresses: Iterable[IPAddress]) -> next_hops.Facts:
    """Every interface's addresses, and the kernel's local address toward each peer."""
    interfaces: dict[str, list[IPAddress]] = {}
    for name, v4 in ipv4_addresses(_read_ifconf()):
        interfaces.setdefault(name, []).append(v4)
    for name, v6 in ipv6_addresses(if_inet6.read()):
        interfaces.setdefault(name, []).append(v6)
    sources = {p: s for p in set(peer_addresses) if (s := source_toward(p)) is not None}
    return next_hops.Facts({n: tuple(a) for n, a in interfaces.items()}, sources)
