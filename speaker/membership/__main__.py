"""Standalone member: `python -m speaker.membership --name n1 --bind 127.0.0.1:7946 --seed ...`.

Used by the process tests and the benchmark, and handy for trying timings on a real network.
Membership changes are printed on stdout as JSON lines stamped with the host's monotonic clock
(`member`; `returned` when this member refuted a verdict of its own death);
logs go to stderr as JSON lines. SIGTERM or SIGINT makes a graceful leave.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import sys
from typing import Any

from ironlb_io import logs, prometheus
from speaker import health
from speaker.membership import config as cfg
from speaker.membership import events, machine, metrics, node

log = logging.getLogger(__name__)


def _setting(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(cfg.Config)}
    if not sep or key not in fields:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE with FIELD one of {sorted(fields)}")
    kind = type(getattr(cfg.DEFAULT, key))
    if kind is bool:  # bool("false") is True
        if raw.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{key}: expected true or false, not {raw!r}")
        return key, raw.lower() == "true"
    try:
        return key, kind(raw)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{key}: {e}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m speaker.membership", description=__doc__)
    p.add_argument("--name", required=True, help="member name (the node name)")
    p.add_argument("--bind", default="0.0.0.0:7946", help="UDP address to listen on")
    p.add_argument("--advertise", help="address other members should use (default: --bind)")
    p.add_argument("--seed", action="append", default=[], help="a member to join through")
    p.add_argument(
        "--key-file", action="append", default=[], help="file of secrets, one a line (first seals)"
    )
    p.add_argument("--profile", choices=sorted(cfg.PROFILES), default="default")
    p.add_argument(
        "--set",
        type=_setting,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one timing, e.g. probe_interval=0.5",
    )
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1")
    p.add_argument(
        "--drop-rate",
        type=float,
        default=0.0,
        help="TEST HOOK: drop this fraction of incoming datagrams (loss injection without netem)",
    )
    p.add_argument("--key-reload-interval", type=float, default=5.0)
    p.add_argument("--log-level", default="warning")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    settings = dict(args.set)
    config = cfg.PROFILES[args.profile].replace(**settings)
    problems = cfg.validate(config)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return 2
    bind = node.parse_address(args.bind)
    keyring = node.load_keyring(args.key_file)
    out = sys.stdout

    def changed(change: machine.Change) -> None:
        if change.kind == machine.ChangeKind.RETURNED:
            events.event(out, event="returned", node=args.name, incarnation=change.incarnation)
            return
        events.event(
            out,
            event="member",
            node=args.name,
            member=change.name,
            state=change.state.name.lower(),
            incarnation=change.incarnation,
        )

    member = node.Node(
        args.name,
        bind,
        advertise=node.parse_address(args.advertise) if args.advertise else None,
        seeds=[node.parse_address(s) for s in args.seed],
        keyring=keyring,
        config=config,
        on_change=changed,
        drop_rate=args.drop_rate,
    )
    if args.metrics_port is not None:
        registry = prometheus.Registry()
        metrics.register(member, registry)
        health.Server(args.metrics_port, registry, lambda: (), host=args.metrics_host)
    await member.start()
    events.event(out, event="started", node=args.name, address=str(member.advertise))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def reload_keys() -> None:
        current = keyring
        while args.key_file:
            await asyncio.sleep(args.key_reload_interval)
            try:
                fresh = node.load_keyring(args.key_file)
            except (OSError, ValueError) as e:
                # Keep the old keys on a transient read error (a Secret being rewritten).
                log.warning("key reload failed", extra={"error": str(e)})
                continue
            if fresh != current:
                current = fresh
                member.set_keyring(fresh)

    async def report_health() -> None:
        # Lifeguard's local-health score, so that observers (the benchmark) can tell when a
        # member has recovered from an episode; printed only when it changes.
        reported = 0
        while True:
            await asyncio.sleep(0.25)
            if member.machine.awareness != reported:
                reported = member.machine.awareness
                events.event(out, event="health", node=args.name, score=reported)

    tasks = [asyncio.create_task(reload_keys()), asyncio.create_task(report_health())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await member.leave()
    events.event(out, event="stopped", node=args.name)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure_logging(args.log_level, sys.stderr)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
