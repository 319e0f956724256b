"""Standalone BGP speaker driven by JSON lines: `python -m speaker.bgp --node-name n1`.

It runs the real `Speaker` (ExaBGP per peer, BFD) without Kubernetes, for the end-to-end tests
and for trying things by hand inside a network namespace. One JSON object per line on stdin:

  {"peers": [{"name": "tor", "myASN": 64512, "peerASN": 64500, "peerAddress": "10.0.0.1",
              "password": "...", "bfd": {"receiveInterval": 300, ...}, ...}]}
  {"announcements": [{"address": "10.252.0.1", "advertisements": [{"aggregationLength": 32,
              "localPref": 100, "communities": ["1:2", "large:1:2:3"], "peers": ["tor"]}]}]}
  {"status": true} | {"wait_synced": 10} | {"pids": true} | {"metrics": true} | {"close": true}
  | {"close": true, "restarting": true} (as a speaker update: graceful-restart peers keep routes)

Answers and every session change go to stdout as JSON lines stamped with the monotonic clock
(`t`); logs go to stderr. End of input or SIGTERM means a graceful shutdown: close the sessions
(`Speaker.close`: a Cease, or for a graceful-restart peer the withdrawals first), exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ironlb_io import logs, prometheus
from speaker.bgp import exabgp, metrics, peers, routes, speaking


def _ip(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    return ipaddress.ip_address(value) if value else None


def peer_from_json(raw: dict[str, Any]) -> peers.Peer:
    """A BGPPeer-shaped dict (camelCase field names, timers in seconds) to a `Peer`."""
    bfd_raw = raw.get("bfd")
    bfd = None
    if bfd_raw is not None:
        bfd = peers.BFDSettings(
            receive_interval_ms=int(bfd_raw.get("receiveInterval", 300)),
            transmit_interval_ms=int(bfd_raw.get("transmitInterval", 300)),
            detect_multiplier=int(bfd_raw.get("detectMultiplier", 3)),
            passive=bool(bfd_raw.get("passiveMode", False)),
        )
    address = _ip(raw["peerAddress"])
    assert address is not None
    router_id = raw.get("routerID")
    v4 = raw.get("ipv4NextHop")
    v6 = raw.get("ipv6NextHop")
    peer_asn = raw.get("peerASN")
    return peers.Peer(
        name=str(raw["name"]),
        my_asn=int(raw["myASN"]),
        peer_asn=int(peer_asn) if peer_asn is not None else None,
        peer_address=address,
        peer_port=int(raw.get("peerPort", peers.DEFAULT_PORT)),
        source_address=_ip(raw.get("sourceAddress")),
        router_id=ipaddress.IPv4Address(router_id) if router_id else None,
        hold_time=raw.get("holdTime"),
        keepalive_time=raw.get("keepaliveTime"),
        ebgp_multi_hop=bool(raw.get("ebgpMultiHop", False)),
        password=str(raw.get("password", "")),
        graceful_restart=bool(raw.get("enableGracefulRestart", False)),
        dual_stack=bool(raw.get("dualStackAddressFamily", False)),
        ipv4_next_hop=ipaddress.IPv4Address(v4) if v4 else None,
        ipv6_next_hop=ipaddress.IPv6Address(v6) if v6 else None,
        bfd=bfd,
    )


def _communities(
    values: list[str],
) -> tuple[frozenset[routes.Community], frozenset[routes.LargeCommunity]]:
    legacy: set[routes.Community] = set()
    large: set[routes.LargeCommunity] = set()
    for text in values:
        if text.startswith("large:"):
            a, b, c = (int(x) for x in text[len("large:") :].split(":"))
            large.add(routes.LargeCommunity(a, b, c))
        else:
            high, low = (int(x) for x in text.split(":"))
            legacy.add(routes.Community(high, low))
    return frozenset(legacy), frozenset(large)


def announcement_from_json(raw: dict[str, Any]) -> routes.Announcement:
    ads = []
    for ad in raw.get("advertisements") or [{}]:
        legacy, large = _communities(list(ad.get("communities", [])))
        local_pref = int(ad.get("localPref", 0))
        ads.append(
            routes.Advertisement(
                aggregation_length=int(ad.get("aggregationLength", 32)),
                aggregation_length_v6=int(ad.get("aggregationLengthV6", 128)),
                local_pref=local_pref or None,
                communities=legacy,
                large_communities=large,
                peers=frozenset(ad.get("peers", [])),
            )
        )
    address = _ip(raw["address"])
    assert address is not None
    return routes.Announcement(address, tuple(ads))


class Driver:
    def __init__(self, options: exabgp.Options, bfd_port: int) -> None:
        self.speaker = speaking.Speaker(options, on_change=self._changed, bfd_port=bfd_port)
        self.registry = prometheus.Registry()
        self.registry.register(metrics.Collector(self.speaker))
        self.announcements: list[routes.Announcement] = []
        self._last_status: Any = None
        self.done = asyncio.Event()
        self.restarting = False

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "t": asyncio.get_running_loop().time(), **fields}
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        sys.stdout.flush()

    def _status(self) -> dict[str, Any]:
        return {n: dataclasses.asdict(s) for n, s in self.speaker.session_states().items()}

    def _changed(self) -> None:
        status = self._status()
        if status != self._last_status:
            self._last_status = status
            self.emit("status", sessions=status)

    def _apply_routes(self) -> list[str]:
        wanted = routes.desired(self.announcements, self.speaker.peers().values())
        self.speaker.set_routes(wanted.routes)
        return [str(p) for p in wanted.problems]

    async def handle(self, message: dict[str, Any]) -> None:
        if "peers" in message:
            found = await self.speaker.set_peers(peer_from_json(p) for p in message["peers"])
            self.emit("peers", problems=[str(p) for p in found] + self._apply_routes())
        if "announcements" in message:
            self.announcements = [announcement_from_json(a) for a in message["announcements"]]
            self.emit("routes", problems=self._apply_routes())
        if "status" in message:
            self.emit("status", sessions=self._status())
        if "wait_synced" in message:
            ok = await self.speaker.wait_synced(float(message["wait_synced"]))
            self.emit("synced", ok=ok)
        if "pids" in message:
            self.emit("pids", pids=self.speaker.process_ids())
        if "metrics" in message:
            self.emit("metrics", text=self.registry.exposition().decode())
        if message.get("close"):
            self.restarting = bool(message.get("restarting", False))
            self.done.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.done.set)
        reader = asyncio.StreamReader(limit=1 << 24)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        reading = asyncio.create_task(self._read(reader))
        await self.done.wait()
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await self.speaker.close(restarting=self.restarting)
        self.emit("closed")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            if not line:
                self.done.set()
                return
            if not line.strip():
                continue
            try:
                await self.handle(json.loads(line))
            except Exception as e:  # a bad line is reported, never fatal
                logging.getLogger(__name__).exception("bad input")
                self.emit("error", message=str(e))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m speaker.bgp", description=__doc__)
    p.add_argument("--node-name", required=True)
    p.add_argument("--workdir", type=Path, help="directory for ExaBGP files (default: temporary)")
    p.add_argument("--bfd-port", type=int, default=3784)
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logs.configure_logging(args.log_level, sys.stderr)
    options = exabgp.Options(node_name=args.node_name, workdir=None)
    if args.workdir is not None:
        options = dataclasses.replace(options, workdir=args.workdir)
    asyncio.run(Driver(options, args.bfd_port).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
