"""Entry point: `python -m speaker` / `ironlb-speaker`.

Flags keep MetalLB's names and environment variables where one exists (`--ml-bind-addr` /
`METALLB_ML_BIND_ADDR`, `--ml-bind-port` / `METALLB_ML_BIND_PORT`, also spelt `--ml-bindaddr` and
`--ml-bindport` as MetalLB's speaker does, `--ml-secret-key-path`, `--lb-class`, `--host` /
`METALLB_HOST`, `--ignore-exclude-lb`, `--gratuitous-arp-interval` /
`METALLB_GRATUITOUS_ARP_INTERVAL`, `--pod-name` / `METALLB_POD_NAME`, `NODE_NAME` or
`METALLB_NODE_NAME`, `METALLB_NAMESPACE`);
ironlb's own: the data-path check
(`--datapath-check`, `--healthz-url`, `--datapath-probe-rate`), `--drain-on-cordon` and
`--take-over-from` / `IRONLB_TAKE_OVER_FROM` (`ironlb.taking_over`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys

from ironlb import datapath, taking_over
from ironlb_io import kube, logs
from speaker import agent, appliers, datapath_probing, joining, metrics, running, seeds
from speaker.layer2 import interfaces
from speaker.membership import config as membership_config

# MetalLB's bound on --gratuitous-arp-interval: seconds that fit an int32.
MAX_GRATUITOUS_ARP_INTERVAL_S = 2**31 - 1


def gratuitous_arp_interval(text: str) -> int:
    """MetalLB's --gratuitous-arp-interval: whole seconds from 0 (off) to 2^31 - 1."""
    # Go's strconv.Atoi, as MetalLB parses it: ASCII digits, an optional sign, nothing else.
    seconds = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else -1
    if not 0 <= seconds <= MAX_GRATUITOUS_ARP_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a whole number of seconds from 0 (off) to {MAX_GRATUITOUS_ARP_INTERVAL_S}"
        )
    return seconds


def _add_node_flags(parser: argparse.ArgumentParser) -> None:
    """Which node this is, which objects it serves, and where it serves its endpoints."""
    env = os.environ.get
    parser.add_argument(
        "--node-name",
        default=env("NODE_NAME") or env("METALLB_NODE_NAME", ""),
        help="this node's name (env NODE_NAME, or MetalLB's METALLB_NODE_NAME)",
    )
    parser.add_argument(
        "--namespace",
        default=env("METALLB_NAMESPACE", "metallb-system"),
        help="namespace of the metallb.io objects (env METALLB_NAMESPACE)",
    )
    parser.add_argument(
        "--pod-name",
        default=env("METALLB_POD_NAME", ""),
        help="this speaker's Pod in --namespace, made owner of its status objects so that they "
        "go with it (env METALLB_POD_NAME); empty: they get no owner",
    )
    parser.add_argument("--kubeconfig", default=None, help="else $KUBECONFIG or in-cluster")
    parser.add_argument("--lb-class", default="", help="handle only this loadBalancerClass")
    parser.add_argument("--metrics-port", type=int, default=7473, help="Prometheus; 0 = off")
    parser.add_argument(
        "--host",
        default=env("METALLB_HOST", ""),
        help="address of /metrics, /healthz, /readyz and /explain (env METALLB_HOST; the chart "
        "gives the node's own, as MetalLB's does); empty: every address of both families",
    )


def _add_membership_flags(parser: argparse.ArgumentParser) -> None:
    """The membership (memberlist) flags, with --excludel2-path among them."""
    env = os.environ.get
    parser.add_argument(
        "--ml-bind-addr",
        "--ml-bindaddr",
        default=env("METALLB_ML_BIND_ADDR", ""),
        help="membership address (empty: membership off, Node Ready decides liveness)",
    )
    parser.add_argument(
        "--ml-bind-port",
        "--ml-bindport",
        type=int,
        default=int(env("METALLB_ML_BIND_PORT") or 7946),
        help="membership UDP port (env METALLB_ML_BIND_PORT)",
    )
    # A layer 2 flag, kept among the membership ones so that --help lists flags as it always has.
    parser.add_argument(
        "--excludel2-path",
        default=interfaces.EXCLUDE_CONFIG_PATH,
        help="MetalLB's excludel2.yaml (the metallb-excludel2 ConfigMap): interfaces never used "
        "for layer 2; without the file, MetalLB's chart default list",
    )
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


def _add_announcing_flags(parser: argparse.ArgumentParser) -> None:
    """Layer 2 and BGP: whether and how this node announces."""
    env = os.environ.get
    parser.add_argument(
        "--gratuitous-arp-interval",
        type=gratuitous_arp_interval,
        # A string default goes through `type` too, so a bad environment value is an error.
        default=env("METALLB_GRATUITOUS_ARP_INTERVAL") or 0,
        help="announce every address this node owns in layer 2 again (gratuitous ARP, "
        "unsolicited NA) every this many seconds; 0 (default): only when it takes one over "
        "(env METALLB_GRATUITOUS_ARP_INTERVAL)",
    )
    parser.add_argument("--no-layer2", action="store_true", help="do not answer ARP/NDP")
    parser.add_argument("--no-bgp", action="store_true", help="do not run BGP")
    parser.add_argument("--ignore-exclude-lb", action="store_true")


def _add_datapath_flags(parser: argparse.ArgumentParser) -> None:
    """ironlb's data-path check, judged before announcing from this node."""
    env = os.environ.get
    parser.add_argument(
        "--datapath-check",
        default=env("IRONLB_DATAPATH_CHECK", datapath.Check.KUBE_PROXY.value),
        choices=[c.value for c in datapath.Check],
        help="how this node's data path is judged before announcing from it: kube-proxy's "
        "/healthz and healthCheckNodePorts (default), another health URL (--healthz-url), or "
        "EndpointSlices only (clusters without kube-proxy)",
    )
    parser.add_argument(
        "--healthz-url",
        default=env("IRONLB_HEALTHZ_URL", datapath_probing.DEFAULT_HEALTHZ_URL),
        help="kube-proxy's (or a replacement's) health URL; {node_ip} is the Node's InternalIP",
    )
    parser.add_argument(
        "--datapath-probe-rate",
        type=float,
        default=datapath_probing.RATE_PER_S,
        help="healthCheckNodePort probes per second at most, whatever the Service count",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ironlb-speaker",
        description="Announce allocated LoadBalancer addresses from this node (ARP/NDP or BGP).",
    )
    _add_node_flags(parser)
    _add_membership_flags(parser)
    _add_announcing_flags(parser)
    _add_datapath_flags(parser)
    parser.add_argument(
        "--take-over-from",
        default=os.environ.get("IRONLB_TAKE_OVER_FROM", ""),
        help="a label selector of the Pods in --namespace of the load balancer this one "
        "replaces (MetalLB's speaker: "
        f"{taking_over.METALLB_SPEAKER_SELECTOR!r}): while one runs on this node, this "
        "speaker stands by (no ARP/NDP, no BGP, no status), and it takes the node over as "
        "that Pod goes (env IRONLB_TAKE_OVER_FROM); empty: off",
    )
    parser.add_argument(
        "--drain-on-cordon",
        action="store_true",
        help="a cordoned (unschedulable) node hands its addresses over, as when it is deleted",
    )
    parser.add_argument("--log-level", default="info", choices=sorted(logs.LEVELS))
    return parser.parse_args(argv)


def _report_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger(__name__).error(
            "membership failed; liveness from Node Ready", exc_info=task.exception()
        )


def membership_settings(args: argparse.Namespace) -> joining.Settings:
    """What membership needs, checked for what no retry can fix (ValueError)."""
    seeds.split(args.ml_bind_addr, args.ml_bind_port)
    return joining.Settings(
        name=args.node_name,
        bind=args.ml_bind_addr,
        port=args.ml_bind_port,
        seeds=tuple(seeds.parse(args.ml_seeds, args.ml_bind_port)),
        key_dir=args.ml_secret_key_path,
        config=membership_config.PROFILES[args.ml_profile],
    )


def agent_options(args: argparse.Namespace) -> agent.Options:
    return agent.Options(
        node_name=args.node_name,
        namespace=args.namespace,
        lb_class=args.lb_class,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        metrics_host=args.host or None,
        ignore_exclude_lb=args.ignore_exclude_lb,
        log_level=args.log_level,
        drain_on_cordon=args.drain_on_cordon,
        pod_name=args.pod_name,
        take_over_from=args.take_over_from,
    )


async def _run(args: argparse.Namespace, settings: joining.Settings | None) -> int:
    options = agent_options(args)
    prober = datapath_probing.Prober(
        check=datapath.Check(args.datapath_check),
        healthz_url=args.healthz_url,
        rate=args.datapath_probe_rate,
        registry=metrics.REGISTRY,
    )
    member = None if settings is None else joining.Membership(settings, metrics.REGISTRY)
    if member is not None:
        # Not ready until kube-proxy says so: the others must not elect us before that.
        member.set_metadata(prober.readiness().encode())
    joined = None if member is None else asyncio.ensure_future(member.run())
    if joined is not None:
        joined.add_done_callback(_report_failure)
    layer2 = (
        None
        if args.no_layer2
        else await appliers.layer2(
            metrics.REGISTRY,
            appliers.layer2_excludes(args.excludel2_path),
            gratuitous_interval=args.gratuitous_arp_interval,
        )
    )
    bgp = None if args.no_bgp else appliers.bgp(args.node_name, metrics.REGISTRY)
    try:
        return await running.run(
            options,
            layer2=layer2,
            bgp=bgp,
            membership=member,
            prober=prober,
            not_ready=member.reasons if member is not None else tuple,
        )
    finally:
        if joined is not None:
            joined.cancel()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.node_name:
        print("error: --node-name (or NODE_NAME) is required", file=sys.stderr)
        return 2
    try:
        args.take_over_from = taking_over.selector(args.take_over_from)
        settings = membership_settings(args) if args.ml_bind_addr else None
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logs.configure_logging(args.log_level)
    try:
        return asyncio.run(_run(args, settings))
    except kube.ConfigError as e:
        print(f"ironlb-speaker: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
