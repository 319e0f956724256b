"""Entry point: `python -m controller` / `ironlb-controller`."""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse_args(argv)
    print("ironlb-controller: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
