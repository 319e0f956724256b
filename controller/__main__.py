"""Entry point: `python -m controller` / `ironlb-controller`. See `controller.operator`."""

from __future__ import annotations

import argparse
import asyncio
import sys

from controller import operator
from ironlb_io import kube, logs


def parse_args(argv: list[str] | None = None) -> operator.Options:
    parser = argparse.ArgumentParser(
        prog="ironlb-controller",
        description="Allocate addresses from metallb.io IPAddressPools to LoadBalancer Services.",
    )
    parser.add_argument(
        "--namespace", default="metallb-system", help="namespace of the metallb.io objects"
    )
    parser.add_argument(
        "--lb-class", default="", help="handle only Services with this loadBalancerClass"
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, in-cluster)"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=7472, help="Prometheus /metrics port; 0 = off"
    )
    parser.add_argument(
        "--webhook-port", type=int, default=0, help="admission webhook HTTPS port; 0 = off"
    )
    parser.add_argument(
        "--webhook-cert-dir",
        default=None,
        help="directory with tls.crt, tls.key, ca.crt for the webhook (default: self-signed)",
    )
    parser.add_argument(
        "--lease-name", default="ironlb-controller", help="coordination.k8s.io Lease name"
    )
    parser.add_argument(
        "--lease-duration", type=int, default=15, help="Lease duration in seconds (>= 1)"
    )
    parser.add_argument("--log-level", default="info", choices=sorted(logs.LEVELS))
    args = parser.parse_args(argv)
    if args.lease_duration < 1:
        parser.error("--lease-duration must be at least 1")
    return operator.Options(
        namespace=args.namespace,
        lb_class=args.lb_class,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        webhook_port=args.webhook_port,
        webhook_cert_dir=args.webhook_cert_dir,
        lease_name=args.lease_name,
        lease_duration=args.lease_duration,
        log_level=args.log_level,
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    logs.configure_logging(options.log_level)
    try:
        return asyncio.run(operator.run(options))
    except kube.ConfigError as e:
        print(f"ironlb-controller: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
