"""A client's own connections: `python -m hack.client [--timeout S] ADDRESS PORT ...`.

Run in the lab's client namespace. For each address it opens a new TCP connection and reads the
one line the echo Pods answer (`<pod> <node> <client address seen>`); prints a JSON list with
the line, or null where the connection failed, was reset or said nothing within the timeout.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys


def ask(address: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    return data.decode(errors="replace").strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.client", description=__doc__)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("targets", nargs="+", help="ADDRESS PORT pairs")
    args = parser.parse_args(argv)
    if len(args.targets) % 2:
        parser.error("targets come in ADDRESS PORT pairs")
    pairs = zip(args.targets[::2], args.targets[1::2], strict=True)
    print(json.dumps([ask(address, int(port), args.timeout) for address, port in pairs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
