"""Resolve addresses the way a neighbour does and record who answers and how fast.

`arping` and `ndisc6` stop at the first answer and add about half a millisecond of their own;
this prober sends one ARP request or neighbour solicitation at a time from a raw socket, listens
for a window, and reports every responder's MAC and the time to the first answer. It is the
witness for "exactly one node answers" and for reply latency, in the lab and on real networks.
"""

from __future__ import annotations

import ipaddress
import math
import select
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from speaker.layer2 import filters, packets, sockets


@dataclass(frozen=True, slots=True)
class Result:
    address: packets.IPAddress
    # Time from send to the first answer, None if nobody answered within the window.
    rtt_s: float | None
    # Every distinct responder, in order of arrival.
    macs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Source:
    mac: bytes
    ipv4: ipaddress.IPv4Address | None
    ipv6: ipaddress.IPv6Address | None


def source_of(interface: str) -> Source:
    """The interface's MAC, primary IPv4 and link-local IPv6 (the probe's sender addresses)."""
    for facts in sockets.scan():
        if facts.name == interface:
            return Source(
                facts.mac, sockets.ipv4_address(interface), sockets.link_local_address(interface)
            )
    raise OSError(f"no interface {interface}")


def _request(source: Source, address: packets.IPAddress) -> bytes:
    if isinstance(address, ipaddress.IPv4Address):
        if source.ipv4 is None:
            raise OSError("the probing interface has no IPv4 address")
        return packets.arp_request(source.mac, source.ipv4, address)
    if source.ipv6 is None:
        raise OSError("the probing interface has no IPv6 link-local address")
    return packets.neighbor_solicitation(
        eth_src=source.mac, source=source.ipv6, target=address, source_mac=source.mac
    )


def _responder(packet: packets.Packet | None, address: packets.IPAddress) -> bytes | None:
    if isinstance(packet, packets.Arp):
        if packet.operation == packets.ARP_REPLY and packet.sender_ip == address:
            return packet.sender_mac
    elif isinstance(packet, packets.NeighborAdvertisement) and packet.target == address:
        return packet.target_mac or packet.eth_src
    return None


def probe(
    interface: str,
    addresses: Sequence[packets.IPAddress],
    *,
    count: int | None = None,
    window: float = 0.2,
    first_only: bool = False,
    source: Source | None = None,
) -> list[Result]:
    """Probe `count` times (default: each address once), round robin, one probe at a time.

    Each probe listens for `window` seconds, or until the first answer with `first_only`.
    """
    source = source or source_of(interface)
    arp = sockets.open_raw(interface, packets.ETH_P_ARP, filters.ARP_REPLIES)
    ndp = sockets.open_raw(interface, packets.ETH_P_IPV6, filters.NEIGHBOR_ADVERTISEMENTS)
    results = []
    try:
        for i in range(len(addresses) if count is None else count):
            address = addresses[i % len(addresses)]
            listen = arp if isinstance(address, ipaddress.IPv4Address) else ndp
            # Drop answers that arrived late for the previous probe.
            sockets.read_frames(listen, limit=1000)
            frame = _request(source, address)
            sent = time.perf_counter()
            listen.send(frame)
            first: float | None = None
            macs: list[str] = []
            deadline = sent + window
            while True:
                remaining = deadline - time.perf_counter()
                if remaining <= 0 or (first_only and first is not None):
                    break
                readable, _, _ = select.select([listen], [], [], remaining)
                if not readable:
                    break
                arrived = time.perf_counter()
                for data in sockets.read_frames(listen):
                    mac = _responder(packets.parse(data), address)
                    if mac is None:
                        continue
                    if first is None:
                        first = arrived - sent
                    if packets.mac_text(mac) not in macs:
                        macs.append(packets.mac_text(mac))
            results.append(Result(address, first, tuple(macs)))
    finally:
        arp.close()
        ndp.close()
    return results


@dataclass(frozen=True, slots=True)
class Summary:
    probes: int
    answered: int
    median_ms: float | None
    p99_ms: float | None
    max_ms: float | None


def summarize(results: Sequence[Result]) -> Summary:
    rtts = sorted(r.rtt_s * 1000 for r in results if r.rtt_s is not None)
    if not rtts:
        return Summary(len(results), 0, None, None, None)
    p99 = rtts[math.ceil(0.99 * len(rtts)) - 1]  # nearest rank
    return Summary(len(results), len(rtts), statistics.median(rtts), p99, rtts[-1])
