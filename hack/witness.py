"""Independent witnesses of the data plane, as seen from the lab's ToR.

Tests, benches and the demo believe what the ToR sees, never what ironlb says about itself:
who answers ARP and NDP for an address (`arping`, `ndisc6`, the ToR's neighbour table), and
which nexthops the ToR's kernel routes a prefix through. Two of them run as processes on the
ToR for fine-grained timing:

    python -m hack.witness arp INTERFACE ADDRESS EVERY_S   # one ARP request every EVERY_S;
                                                           # a JSON line per change of who answers
    python -m hack.witness fib NETWORK...                  # a JSON line per route change
                                                           # (rtnetlink, IPv4, main table)

`ArpWatcher` and `FibWatcher` start those in the lab and read their lines.
"""

from __future__ import annotations

import argparse
import collections
import ipaddress
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from hack import lab as network_lab

TOR_LAN = "br0"


# --- one-shot witnesses -------------------------------------------------------------------------


def arp_macs(lab: network_lab.Lab, address: str, count: int = 2, wait_s: int = 3) -> set[str]:
    """MACs that answer a broadcast who-has from the ToR (arping -b keeps broadcasting)."""
    out = lab.exec(
        "tor", "arping", "-b", "-c", str(count), "-w", str(wait_s), "-I", TOR_LAN, address,
        timeout=wait_s + 10,
    )  # fmt: skip
    return {m.lower() for m in re.findall(r"\[([0-9A-Fa-f:]{17})\]", out.stdout)}


def ndp_mac(lab: network_lab.Lab, address: str) -> str | None:
    """The MAC in the first neighbour advertisement the ToR gets for `address`."""
    out = lab.exec("tor", "ndisc6", "-r", "3", "-w", "1000", address, TOR_LAN, timeout=10)
    found = re.search(r"Target link-layer address: ([0-9A-Fa-f:]{17})", out.stdout)
    return found.group(1).lower() if found else None


def neighbour_mac(lab: network_lab.Lab, address: str) -> str | None:
    """The MAC the ToR's neighbour table holds for `address`."""
    out = lab.exec("tor", "ip", "neigh", "show", address, "dev", TOR_LAN)
    found = re.search(r"lladdr ([0-9a-f:]{17})", out.stdout)
    return found.group(1) if found else None


def fib(lab: network_lab.Lab, prefix: str) -> set[str]:
    """Nexthop gateways of `prefix` (or a bare address) in the ToR's kernel FIB."""
    family = "-6" if ":" in prefix else "-4"
    out = lab.exec("tor", "ip", "-j", family, "route", "show", prefix).stdout
    gateways: set[str] = set()
    for route in json.loads(out or "[]"):
        # Only the route for exactly this prefix, not a covering one.
        if route.get("dst") not in (prefix, prefix.split("/")[0]):
            continue
        if "gateway" in route:
            gateways.add(route["gateway"])
        gateways.update(h["gateway"] for h in route.get("nexthops", []) if "gateway" in h)
    return gateways


# --- the ARP watcher ----------------------------------------------------------------------------


def watch_arp(interface: str, address: str, every_s: float, out: IO[str]) -> None:
    """Ask who has `address` every `every_s`; print each change of the set of answering MACs
    as `{"t": monotonic time, "macs": [...]}`."""
    # The speaker's own packet code is the tool here; the witness only sends and listens.
    from speaker.layer2 import filters, packets, probing, sockets

    vip = ipaddress.ip_address(address)
    source = probing.source_of(interface)
    if source.ipv4 is None or not isinstance(vip, ipaddress.IPv4Address):
        raise SystemExit(f"ARP needs an IPv4 address on {interface} and an IPv4 target")
    sock = sockets.open_raw(interface, packets.ETH_P_ARP, filters.ARP_REPLIES)
    last: list[str] | None = None
    next_at = time.monotonic()
    while True:
        sock.send(packets.arp_request(source.mac, source.ipv4, vip))
        next_at += every_s
        macs: set[str] = set()
        while (left := next_at - time.monotonic()) > 0:
            if select.select([sock], [], [], left)[0]:
                for frame in sockets.read_frames(sock):
                    p = packets.parse(frame)
                    if (
                        isinstance(p, packets.Arp)
                        and p.operation == packets.ARP_REPLY
                        and p.sender_ip == vip
                    ):
                        macs.add(packets.mac_text(p.sender_mac))
        state = sorted(macs)
        if state != last:
            last = state
            out.write(json.dumps({"t": time.monotonic(), "macs": state}) + "\n")
            out.flush()


class ArpWatcher:
    """The ToR's view of who answers ARP for an address, as (monotonic time, MACs) changes."""

    def __init__(self, lab: network_lab.Lab, address: str, every_s: float = 0.01) -> None:
        self.process = lab.popen(
            network_lab.NS_TOR,
            "env", f"PYTHONPATH={network_lab.ROOT}",
            sys.executable, "-m", "hack.witness", "arp", TOR_LAN, address, str(every_s),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip

    def until(
        self, wanted: Callable[[list[str]], bool], timeout: float
    ) -> tuple[float, list[str]] | None:
        """Time and MACs of the first change that satisfies `wanted`; None on timeout or if the
        watcher stopped."""
        reader = lines_of(self.process)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while reader.queue:  # one at a time: later changes stay for the next call
                event = reader.queue.popleft()
                if wanted(event["macs"]):
                    return float(event["t"]), list(event["macs"])
            if reader.ended:
                return None
            reader.fill(wait_s=0.2)
        return None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        # Killed, it is gone at once, but on two cores under heavy load (a hundred processes of
        # another benchmark) being reaped took over 5 s once: waiting longer is no hang.
        self.process.wait(60)


# --- the FIB watcher ----------------------------------------------------------------------------

RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE, NLMSG_DONE = 24, 25, 26, 3
RTA_DST, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE = 1, 5, 9, 15
RTMGRP_IPV4_ROUTE = 0x40
SO_RCVBUFFORCE = 33
MAIN_TABLE = 254


def _attributes(data: bytes) -> dict[int, list[bytes]]:
    found: dict[int, list[bytes]] = {}
    i = 0
    while i + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, i)
        if length < 4:
            break
        found.setdefault(kind, []).append(data[i + 4 : i + length])
        i += (length + 3) & ~3
    return found


def _gateways(attributes: dict[int, list[bytes]]) -> list[str]:
    via = [socket.inet_ntoa(g) for g in attributes.get(RTA_GATEWAY, [])]
    for multipath in attributes.get(RTA_MULTIPATH, []):
        i = 0
        while i + 8 <= len(multipath):
            length = struct.unpack_from("=H", multipath, i)[0]
            if length < 8:
                break
            hop = _attributes(multipath[i + 8 : i + length])
            via += [socket.inet_ntoa(g) for g in hop.get(RTA_GATEWAY, [])]
            i += (length + 3) & ~3
    return sorted(set(via))


def route_events(
    data: bytes, networks: Sequence[ipaddress.IPv4Network]
) -> Iterator[dict[str, Any]]:
    """The watcher's events in one rtnetlink read: a route of a watched network with its
    gateways (none: it is gone), or `synced` at the end of the initial dump."""
    i = 0
    while i + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, i)
        if length < 16:
            break
        body = data[i + 16 : i + length]
        i += (length + 3) & ~3
        if kind == NLMSG_DONE:
            yield {"synced": True}
            continue
        if kind not in (RTM_NEWROUTE, RTM_DELROUTE) or len(body) < 12:
            continue
        family, dst_len, _, _, table = struct.unpack_from("=BBBBB", body)
        attributes = _attributes(body[12:])
        if RTA_TABLE in attributes:
            table = struct.unpack("=I", attributes[RTA_TABLE][0][:4])[0]
        if family != socket.AF_INET or table != MAIN_TABLE or RTA_DST not in attributes:
            continue
        net = ipaddress.IPv4Network((socket.inet_ntoa(attributes[RTA_DST][0]), dst_len))
        if any(net.subnet_of(n) for n in networks):
            via = _gateways(attributes) if kind == RTM_NEWROUTE else []
            yield {"d": str(net), "v": via}


def watch_fib(networks: Sequence[ipaddress.IPv4Network], out: IO[str]) -> None:
    """Print every change of a route in `networks` as `{"t", "d": prefix, "v": gateways}`,
    after a dump of the current table (`synced`); `overflow` when the kernel dropped events,
    followed by a fresh dump."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)  # a 10,000-route burst fits
    s.bind((0, RTMGRP_IPV4_ROUTE))
    sequence = 0

    def dump() -> None:
        nonlocal sequence
        sequence += 1
        header = struct.pack("=IHHII", 28, RTM_GETROUTE, 0x301, sequence, 0)
        s.send(header + struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0))

    dump()
    while True:
        try:
            data = s.recv(1 << 20)
        except OSError:  # ENOBUFS: events were lost; say so and read the whole table again
            out.write(json.dumps({"t": time.monotonic(), "overflow": True}) + "\n")
            out.flush()
            dump()
            continue
        t = round(time.monotonic(), 6)
        lines = [json.dumps({"t": t, **event}) for event in route_events(data, networks)]
        if lines:
            out.write("\n".join(lines) + "\n")
            out.flush()


class Lines:
    """The JSON lines a watcher prints, read without blocking. Bytes come with os.read, so that
    select sees all that is unread: a buffered readline would pull several lines into Python's
    buffer, where select cannot see them, and they would wait for the next line to arrive."""

    def __init__(self, stream: IO[str]) -> None:
        self.fd = stream.fileno()
        self.rest = b""
        self.ended = False
        self.queue: collections.deque[dict[str, Any]] = collections.deque()

    def fill(self, wait_s: float = 0.0) -> None:
        """Queue every complete line there is; waits up to `wait_s` for the first bytes."""
        timeout = wait_s
        while not self.ended and select.select([self.fd], [], [], timeout)[0]:
            data = os.read(self.fd, 1 << 16)
            if not data:
                self.ended = True
                break
            self.rest += data
            timeout = 0.0
        *lines, self.rest = self.rest.split(b"\n")
        self.queue.extend(json.loads(line) for line in lines if line.strip())

    def read(self) -> list[dict[str, Any]]:
        """Every line not yet taken."""
        self.fill()
        out = list(self.queue)
        self.queue.clear()
        return out


_readers: weakref.WeakKeyDictionary[subprocess.Popen[str], Lines] = weakref.WeakKeyDictionary()


def lines_of(process: subprocess.Popen[str]) -> Lines:
    """The one reader of a watcher's output."""
    assert process.stdout is not None
    if process not in _readers:
        _readers[process] = Lines(process.stdout)
    return _readers[process]


def printed(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Whatever a watcher has printed since the last call (JSON lines), without blocking."""
    return lines_of(process).read()


def start_fib_watcher(lab: network_lab.Lab, networks: Sequence[str]) -> subprocess.Popen[str]:
    """`watch_fib` on the ToR; its lines on the process's stdout."""
    return lab.popen(
        network_lab.NS_TOR,
        "env", f"PYTHONPATH={network_lab.ROOT}",
        sys.executable, "-m", "hack.witness", "fib", *networks,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.witness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    arp = sub.add_parser("arp", help="who answers ARP for an address, as it changes")
    arp.add_argument("interface")
    arp.add_argument("address")
    arp.add_argument("every", type=float)
    routes = sub.add_parser("fib", help="route changes in IPv4 networks")
    routes.add_argument("networks", nargs="+", type=ipaddress.IPv4Network)
    args = parser.parse_args(argv)
    try:
        if args.command == "arp":
            watch_arp(args.interface, args.address, args.every, sys.stdout)
        else:
            watch_fib(args.networks, sys.stdout)
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
