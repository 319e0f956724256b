"""Entry point: `python -m speaker` / `ironlb-speaker`.

Flags keep MetalLB's names and environment variables where one exists (`--ml-bind-addr` /
`METALLB_ML_BIND_ADDR`, `--ml-bind-port`, `--ml-secret-key-path`, `--lb-class`,
`--ignore-exclude-lb`, `NODE_NAME`, `METALLB_NAMESPACE`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from pathlib import Path

from ironlb_io import logs
from speaker import agent, appliers
from speaker.membership import config as membership_config
from speaker.membership import messages as membership_messages
from speaker.membership import metrics as membership_metrics
from speaker.membership import node as membership
from speaker.membership import threaded as membership_threaded


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="ironlb-speaker",
        description="Announce allocated LoadBalancer addresses from this node (ARP/NDP or BGP).",
    )
    parser.add_argument(
        "--node-name", default=env("NODE_NAME", ""), help="this node's name (env NODE_NAME)"
    )
    parser.add_argument(
        "--namespace",
        default=env("METALLB_NAMESPACE", "metallb-system"),
        help="namespace of the metallb.io objects (env METALLB_NAMESPACE)",
    )
    parser.add_argument("--kubeconfig", default=None, help="else $KUBECONFIG or in-cluster")
    parser.add_argument("--lb-class", default="", help="handle only this loadBalancerClass")
    parser.add_argument("--metrics-port", type=int, default=7473, help="Prometheus; 0 = off")
    parser.add_argument(
        "--ml-bind-addr",
        default=env("METALLB_ML_BIND_ADDR", ""),
        help="membership address (empty: membership off, Node Ready decides liveness)",
    )
    parser.add_argument("--ml-bind-port", type=int, default=7946, help="membership UDP port")
    parser.add_argument(
        "--ml-seeds", default=env("IRONLB_ML_SEEDS", ""), help="comma-separated host[:port] seeds"
    )
    parser.add_argument(
        "--ml-secret-key-path",
        default=env("METALLB_ML_SECRET_KEY_PATH", ""),
        help="directory with the membership key file(s) (a mounted Secret)",
    )
    parser.add_argument(
        "--ml-profile",
        default="default",
        choices=sorted(membership_config.PROFILES),
        help="membership timings: ironlb's tuned LAN defaults, or memberlist's (MetalLB's)",
    )
    parser.add_argument("--no-layer2", action="store_true", help="do not answer ARP/NDP")
    parser.add_argument("--no-bgp", action="store_true", help="do not run BGP")
    parser.add_argument("--ignore-exclude-lb", action="store_true")
    parser.add_argument("--log-level", default="info", choices=sorted(logs.LEVELS))
    return parser.parse_args(argv)


REJOIN_EVERY_S = 60.0


def resolve_seeds(text: str, port: int) -> list[membership_messages.Address]:
    """Every address behind every seed: a headless Service name resolves to all speakers."""
    seeds: dict[membership_messages.Address, None] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        first = membership.parse_address(entry, port)
        host = entry.rsplit(":", 1)[0].strip("[]") if entry.count(":") == 1 else entry
        try:
            infos = socket.getaddrinfo(host, first.port, type=socket.SOCK_DGRAM)
        except OSError:
            infos = []
        for info in infos:
            seeds[membership_messages.Address(str(info[4][0]), first.port)] = None
        seeds.setdefault(first, None)
    return list(seeds)


async def _rejoin_forever(member: membership_threaded.ThreadedNode, text: str, port: int) -> None:
    """Seeds change as speakers come and go; look them up again now and then."""
    while True:
        await asyncio.sleep(REJOIN_EVERY_S)
        try:
            member.join(await asyncio.to_thread(resolve_seeds, text, port))
        except (OSError, ValueError) as e:
            logging.getLogger(__name__).warning(
                "could not resolve membership seeds", extra={"error": str(e)}
            )


def _keyring_files(directory: str) -> list[str]:
    if not directory:
        return []
    return sorted(str(p) for p in Path(directory).iterdir() if p.is_file())


async def _run(args: argparse.Namespace) -> int:
    options = agent.Options(
        node_name=args.node_name,
        namespace=args.namespace,
        lb_class=args.lb_class,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        ignore_exclude_lb=args.ignore_exclude_lb,
        log_level=args.log_level,
    )
    member: membership_threaded.ThreadedNode | None = None
    if args.ml_bind_addr:
        config = membership_config.PROFILES[args.ml_profile]
        seeds = resolve_seeds(args.ml_seeds, args.ml_bind_port)
        files = _keyring_files(args.ml_secret_key_path)
        node = membership.Node(
            args.node_name,
            membership.parse_address(args.ml_bind_addr, args.ml_bind_port),
            seeds=seeds,
            keyring=membership.load_keyring(files) if files else None,
            config=config,
        )
        membership_metrics.register(node, agent.REGISTRY)
        member = membership_threaded.ThreadedNode(node)
        await member.start()
    layer2 = None if args.no_layer2 else await appliers.layer2(agent.REGISTRY)
    bgp = None if args.no_bgp else appliers.bgp(args.node_name, agent.REGISTRY)
    rejoining = None
    if member is not None and args.ml_seeds:
        rejoining = asyncio.ensure_future(_rejoin_forever(member, args.ml_seeds, args.ml_bind_port))
    try:
        return await agent.run(options, layer2=layer2, bgp=bgp, membership=member)
    finally:
        if rejoining is not None:
            rejoining.cancel()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.node_name:
        print("error: --node-name (or NODE_NAME) is required", file=sys.stderr)
        return 2
    logs.configure_logging(args.log_level)
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
