"""HTTP status codes of GETs, as one JSON list: `python -m hack.httpcheck [--timeout S] URL...`.

Run inside a lab namespace (the ToR probing kube-proxy's /healthz or a Service's
healthCheckNodePort, as a cloud load balancer does), so one process does all the probes of a round.
A URL that does not answer within the timeout gets `null`. With `--body`, the list holds each
answer's body as text instead (`null` unless the status was 2xx): a scraper reading /metrics.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import urllib.error
import urllib.request


def status(url: str, timeout: float) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, http.client.HTTPException):
        return None


def body(url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read()).decode(errors="replace")
    except (OSError, http.client.HTTPException):  # HTTPError (not 2xx) is an OSError
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.httpcheck", description=__doc__)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--body", action="store_true", help="print bodies, not status codes")
    parser.add_argument("urls", nargs="+")
    args = parser.parse_args(argv)
    answers: list[str | int | None] = [
        body(url, args.timeout) if args.body else status(url, args.timeout) for url in args.urls
    ]
    print(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
