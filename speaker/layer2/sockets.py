"""The only module that touches raw sockets and interface state: AF_PACKET ports and a scan.

One port per announcing interface holds up to two AF_PACKET sockets, bound to ETH_P_ARP and
ETH_P_IPV6 (not ETH_P_ALL, which would make the kernel copy every frame the node sends and
receives to the filter). Each gets its BPF program before it is bound, so nothing unfiltered is
ever queued. Neighbour solicitations go to solicited-node multicast groups a real NIC filters
out, so the port joins the groups of the owned IPv6 addresses (PACKET_ADD_MEMBERSHIP).

Besides the requests it answers, a port reads ARP replies and neighbour advertisements, in which
another machine may claim an owned address (`conflicts`). Promiscuous mode stays off: what the
interface receives anyway is enough (broadcast, frames to this node, all-nodes multicast, which
the port also joins), and costs little, since answers to other hosts are not in it.

Interface facts come from ioctls on a socket (they follow the caller's network namespace),
link-local addresses from /proc/net/if_inet6 (`speaker.if_inet6`) and, for bridge/bond
membership, from /sys/class/net/<if>/master as MetalLB reads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import ipaddress
import logging
import os
import socket
import struct
import time
from collections.abc import Sequence
from typing import Final

from speaker import if_inet6
from speaker.layer2 import filters, interfaces, packets

# How long a read of an interface's carrier stands for (RawPort.send).
CARRIER_READ_S: Final = 0.1

logger = logging.getLogger(__name__)

SOL_PACKET: Final = 263
SO_ATTACH_FILTER: Final = 26
PACKET_ADD_MEMBERSHIP: Final = 1
PACKET_DROP_MEMBERSHIP: Final = 2
PACKET_MR_MULTICAST: Final = 0
PACKET_OUTGOING: Final = 4
SIOCGIFFLAGS: Final = 0x8913
SIOCGIFADDR: Final = 0x8915
SIOCGIFHWADDR: Final = 0x8927
IFF_UP: Final = 0x1
IFF_BROADCAST: Final = 0x2
IFF_NOARP: Final = 0x80
ARPHRD_ETHER: Final = 1
READ_BATCH: Final = 64
_IFREQ_SIZE: Final = 40
# The kernel gives every IPv6 interface a link-local address in fe80::/64; the rest of fe80::/10
# is not looked for.
_LINK_LOCAL: Final = ipaddress.IPv6Network("fe80::/16")


def open_raw(
    interface: str, protocol: int, program: Sequence[filters.Instruction]
) -> socket.socket:
    """A non-blocking AF_PACKET socket on `interface` that sees only frames `program` accepts."""
    # Protocol 0 receives nothing until bind(), so the filter is in place before any frame.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        code = ctypes.create_string_buffer(filters.assemble(program))
        fprog = struct.pack("HP", len(program), ctypes.addressof(code))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        sock.bind((interface, protocol))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def read_frames(sock: socket.socket, limit: int = READ_BATCH) -> list[bytes]:
    """Frames waiting on a non-blocking socket (at most `limit`), without our own outgoing ones."""
    frames = []
    for _ in range(limit):
        try:
            data, address = sock.recvfrom(65535)
        except (BlockingIOError, InterruptedError):
            break
        except OSError as e:
            # ENETDOWN and friends: the next interface scan closes or reopens the port.
            logger.debug("receive on %s failed: %s", address_name(sock), e)
            break
        if address[2] == PACKET_OUTGOING:
            continue
        frames.append(data)
    return frames


def address_name(sock: socket.socket) -> str:
    with contextlib.suppress(OSError):
        return str(sock.getsockname()[0])
    return "?"


# rtnetlink multicast groups: links, IPv4 and IPv6 addresses (what decides eligibility).
RTMGRP_LINK: Final = 0x1
RTMGRP_IPV4_IFADDR: Final = 0x10
RTMGRP_IPV6_IFADDR: Final = 0x100


def link_events() -> socket.socket:
    """A non-blocking rtnetlink socket that becomes readable when a link goes up or down or an
    address changes in this network namespace: rescan then, not only every SCAN_INTERVAL_S. A
    node back from a cut link otherwise answered nothing for up to 10 s after its link was up
    (seen in the layer-2 cut test: 7.7 s with no answer for the returned node's addresses,
    which the stand-in had already let go)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, 0)
    try:
        sock.bind((0, RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR))
    except BaseException:
        sock.close()
        raise
    return sock


def drain(sock: socket.socket) -> int:
    """Read every pending datagram (their content does not matter: a rescan reads the state
    afresh); returns how many."""
    count = 0
    while True:
        try:
            sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return count
        except OSError:  # ENOBUFS: events were lost; a rescan reads the state anyway
            return count + 1
        count += 1


class RawPort:
    """ARP and/or NDP sockets on one interface; `arp`/`ndp` say which exist."""

    def __init__(self, facts: interfaces.InterfaceFacts, eligible: interfaces.Eligibility) -> None:
        self.name = facts.name
        self.index = facts.index
        self.mac = facts.mac
        self.arp = eligible.arp
        self.ndp = eligible.ndp
        self._groups: frozenset[bytes] = frozenset()
        self._carrier_up = True
        self._carrier_read_at = -CARRIER_READ_S
        self.arp_socket: socket.socket | None = None
        self.ndp_socket: socket.socket | None = None
        try:
            if self.arp:
                self.arp_socket = open_raw(
                    self.name, packets.ETH_P_ARP, filters.ARP_REQUESTS_AND_REPLIES
                )
            if self.ndp:
                self.ndp_socket = open_raw(
                    self.name, packets.ETH_P_IPV6, filters.NEIGHBOR_SOLICITATIONS_AND_ADVERTISEMENTS
                )
        except BaseException:
            self.close()
            raise

    @property
    def sockets(self) -> list[socket.socket]:
        return [s for s in (self.arp_socket, self.ndp_socket) if s is not None]

    def send(self, frame: bytes) -> None:
        """Send one frame; OSError(ENETDOWN) when the link is down. The kernel says so itself
        only for an interface set down; one that lost its carrier (a pulled cable, a veth whose
        peer is down) takes the frame and drops it, so the carrier is read too."""
        # Any AF_PACKET socket bound to the interface sends any frame; the bound protocol only
        # selects what it receives.
        sock = self.arp_socket or self.ndp_socket
        if sock is None:
            raise OSError(f"no socket open on {self.name}")
        if not self._carrier():
            raise OSError(errno.ENETDOWN, f"{self.name} has no carrier")
        sock.send(frame)

    def _carrier(self) -> bool:
        """The interface's carrier, read at most every CARRIER_READ_S (a burst of 1,000
        addresses sends 2,000 frames a round). Unreadable (no sysfs): assumed up."""
        now = time.monotonic()
        if now - self._carrier_read_at < CARRIER_READ_S:
            return self._carrier_up
        self._carrier_read_at = now
        try:
            with open(f"/sys/class/net/{self.name}/carrier", "rb") as f:
                self._carrier_up = f.read().strip() != b"0"
        except FileNotFoundError:
            self._carrier_up = True
        except OSError:
            # EINVAL: the interface is set down (the kernel reports no carrier state then).
            self._carrier_up = False
        return self._carrier_up

    def set_groups(self, groups: frozenset[bytes]) -> None:
        """Join exactly these Ethernet multicast groups (level-triggered)."""
        if self.ndp_socket is None or groups == self._groups:
            return
        for mac, option in [
            *((m, PACKET_ADD_MEMBERSHIP) for m in groups - self._groups),
            *((m, PACKET_DROP_MEMBERSHIP) for m in self._groups - groups),
        ]:
            request = struct.pack("iHH8s", self.index, PACKET_MR_MULTICAST, len(mac), mac)
            try:
                self.ndp_socket.setsockopt(SOL_PACKET, option, request)
            except OSError as e:
                logger.warning("multicast %s on %s failed: %s", packets.mac_text(mac), self.name, e)
        self._groups = groups

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.arp_socket = self.ndp_socket = None
        self._groups = frozenset()


# --- interface facts ------------------------------------------------------------------------------


def _ifreq(sock: socket.socket, request: int, name: str) -> bytes:
    buffer = struct.pack(f"{_IFREQ_SIZE}s", name.encode()[:15])
    return fcntl.ioctl(sock.fileno(), request, buffer)


def link_local_interfaces() -> frozenset[str]:
    """Interfaces with an IPv6 link-local address."""
    return frozenset(a.interface for a in if_inet6.read() if a.address in _LINK_LOCAL)


def ipv4_address(name: str) -> ipaddress.IPv4Address | None:
    """The interface's primary IPv4 address, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            result = _ifreq(sock, SIOCGIFADDR, name)
        except OSError:
            return None
    return ipaddress.IPv4Address(result[20:24])


def link_local_address(name: str) -> ipaddress.IPv6Address | None:
    """The interface's first IPv6 link-local address, if it has one."""
    for a in if_inet6.read():
        if a.interface == name and a.address in _LINK_LOCAL:
            return a.address
    return None


def scan() -> list[interfaces.InterfaceFacts]:
    """Facts about every interface of this network namespace; vanished ones are left out."""
    link_locals = link_local_interfaces()
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for index, name in socket.if_nameindex():
            try:
                (flags,) = struct.unpack_from("H", _ifreq(sock, SIOCGIFFLAGS, name), 16)
                hw = _ifreq(sock, SIOCGIFHWADDR, name)
            except OSError:
                continue
            (hw_type,) = struct.unpack_from("H", hw, 16)
            try:
                _ifreq(sock, SIOCGIFADDR, name)
                has_ipv4 = True
            except OSError:
                has_ipv4 = False
            found.append(
                interfaces.InterfaceFacts(
                    name=name,
                    index=index,
                    mac=hw[18:24],
                    up=bool(flags & IFF_UP),
                    broadcast=bool(flags & IFF_BROADCAST),
                    noarp=bool(flags & IFF_NOARP),
                    enslaved=os.path.exists(f"/sys/class/net/{name}/master"),
                    ethernet=hw_type == ARPHRD_ETHER,
                    has_ipv4=has_ipv4,
                    has_link_local=name in link_locals,
                )
            )
    return found
