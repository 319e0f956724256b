"""Run the layer-2 data plane alone, without Kubernetes: `python -m speaker.layer2 serve|probe`.

`serve` answers for the addresses it is told to own on stdin, one JSON object per line:
    {"owned": {"10.250.0.200": [], "fd00:250::200": ["eth0"]}}   ([] = every interface)
    {"announce": ["10.250.0.200"]}   (a gratuitous burst again for owned ones: {"announced": N})
    {"stats": true}
    {"conflicts": true}
and answers each line with one JSON line on stdout ({"applied": N}, {"stats": ...}, or the
current split-brain conflicts with every one reported to `on_conflict` so far:
{"conflicts": {ip: conflict}, "reported": [conflict, ...]}); it prints
{"ready": ...} once its sockets are open and exits when stdin closes or on SIGTERM. The lab's
data-plane tests and benchmarks drive node namespaces this way.

`probe` resolves addresses from an interface and prints who answered and how fast (JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import ipaddress
import json
import signal
import sys
from typing import Any

from ironlb_io import logs
from speaker.layer2 import announcing, conflicts, interfaces, metrics, packets, probing

# The runner keeps this many of the conflicts reported to it (a rogue may go on for hours).
REPORTED_KEPT = 1000


def _parse_owned(raw: Any) -> dict[packets.IPAddress, tuple[str, ...]]:
    if not isinstance(raw, dict):
        raise ValueError("owned must be an object of address -> list of interfaces")
    owned: dict[packets.IPAddress, tuple[str, ...]] = {}
    for key, names in raw.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"interfaces of {key} must be a list of names")
        owned[ipaddress.ip_address(key)] = tuple(names)
    return owned


def _parse_addresses(raw: Any) -> list[packets.IPAddress]:
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise ValueError("announce must be a list of addresses")
    return [ipaddress.ip_address(a) for a in raw]


def _stats(stats: metrics.Stats) -> dict[str, dict[str, int]]:
    return {
        "requests_received": dict(stats.requests_received),
        "responses_sent": dict(stats.responses_sent),
        "gratuitous_sent": dict(stats.gratuitous_sent),
    }


def _conflict(conflict: conflicts.Conflict) -> dict[str, Any]:
    return {**dataclasses.asdict(conflict), "ip": str(conflict.ip)}


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve(exclude: list[str], scan_interval: float) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    reported: collections.deque[conflicts.Conflict] = collections.deque(maxlen=REPORTED_KEPT)
    async with announcing.Layer2Announcer(
        exclude=exclude, scan_interval=scan_interval, on_conflict=reported.append
    ) as l2:
        _say({"ready": {n: {"arp": p.arp, "ndp": p.ndp} for n, p in l2.ports.items()}})
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while True:
                reading = asyncio.ensure_future(reader.readline())
                await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    reading.cancel()
                    break
                line = reading.result()
                if not line:
                    break
                try:
                    request = json.loads(line)
                    if "owned" in request:
                        l2.set_owned(_parse_owned(request["owned"]))
                        _say({"applied": len(l2.core.owned)})
                    elif "announce" in request:
                        l2.announce_again(_parse_addresses(request["announce"]))
                        _say({"announced": len(request["announce"])})
                    elif request.get("stats"):
                        _say({"stats": _stats(l2.stats)})
                    elif request.get("conflicts"):
                        _say(
                            {
                                "conflicts": {
                                    str(ip): _conflict(c) for ip, c in l2.conflicts().items()
                                },
                                "reported": [_conflict(c) for c in reported],
                            }
                        )
                    else:
                        _say({"error": "expected owned, announce, stats or conflicts"})
                except ValueError as e:
                    _say({"error": str(e)})
        finally:
            stopping.cancel()
            l2.set_owned({})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speaker.layer2", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="answer ARP/NDP for addresses given on stdin")
    run.add_argument(
        "--exclude",
        action="append",
        default=None,
        help="interface name regex to skip (repeatable; default: MetalLB's list)",
    )
    run.add_argument("--scan-interval", type=float, default=announcing.SCAN_INTERVAL_S)
    run.add_argument("--log-level", default="warning")
    check = sub.add_parser("probe", help="resolve addresses and report the responders")
    check.add_argument("--interface", "-i", required=True)
    check.add_argument("--count", type=int, default=None, help="probes (default: one each)")
    check.add_argument("--window", type=float, default=0.2, help="seconds to listen per probe")
    check.add_argument("--first", action="store_true", help="stop listening at the first answer")
    check.add_argument("addresses", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "serve":
        logs.configure_logging(args.log_level, sys.stderr)
        exclude = interfaces.DEFAULT_EXCLUDE if args.exclude is None else args.exclude
        return asyncio.run(serve(list(exclude), args.scan_interval))
    addresses = [ipaddress.ip_address(a) for a in args.addresses]
    try:
        results = probing.probe(
            args.interface, addresses, count=args.count, window=args.window, first_only=args.first
        )
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with contextlib.suppress(BrokenPipeError):
        _say(
            {
                "summary": dataclasses.asdict(probing.summarize(results)),
                "probes": [
                    {"address": str(r.address), "rtt_s": r.rtt_s, "macs": list(r.macs)}
                    for r in results
                ],
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
