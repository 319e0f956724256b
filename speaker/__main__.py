"""Entry point: `python -m speaker` / `ironlb-speaker`."""

from __future__ import annotations

import argparse
import os
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ironlb-speaker",
        description="Announce allocated LoadBalancer addresses from this node (ARP/NDP or BGP).",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (env NODE_NAME)",
    )
    parser.add_argument(
        "--namespace", default="metallb-system", help="namespace of the metallb.io objects"
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse_args(argv)
    print("ironlb-speaker: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
