"""Membership seeds: parsed once, resolved again and again.

A seed is `host`, `host:port`, `[v6]` or `[v6]:port`; a host name (usually the chart's headless
Service, which lists every speaker) resolves to all its addresses. Cluster DNS may not answer yet
when a speaker starts (or at all, in a lab): a name that does not resolve is a failure to retry,
never a reason to exit. What changes between two resolutions decides what is logged, so that a
speaker retrying every 30 s for an hour writes one line, not 120.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from speaker.membership import messages

Lookup = Callable[[str, int], list[str]]  # host, port -> addresses


@dataclass(frozen=True, slots=True)
class Seed:
    text: str
    host: str
    port: int


def split(text: str, default_port: int) -> Seed:
    """One seed, without resolving it; ValueError for what no retry can fix."""
    entry = text.strip()
    port = default_port
    if entry.startswith("["):
        host, closed, rest = entry[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"bad membership seed {text!r}")
        raw_port = rest[1:] if rest else None
    elif entry.count(":") == 1:
        host, _, raw_port = entry.partition(":")
    else:
        host, raw_port = entry, None
    if raw_port is not None:
        if not raw_port.isdigit():
            raise ValueError(f"bad port in membership seed {text!r}")
        port = int(raw_port)
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad membership seed {text!r}")
    return Seed(entry, host, port)


def parse(text: str, default_port: int) -> list[Seed]:
    """Comma-separated seeds; empty entries are ignored."""
    return [split(e, default_port) for e in text.split(",") if e.strip()]


def system_lookup(host: str, port: int) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)]


@dataclass(frozen=True, slots=True)
class Resolution:
    addresses: tuple[messages.Address, ...]
    failures: tuple[tuple[str, str], ...] = ()  # (seed, why), in seed order

    @property
    def failed(self) -> frozenset[str]:
        return frozenset(seed for seed, _ in self.failures)


def resolve(seeds: Iterable[Seed], lookup: Lookup = system_lookup) -> Resolution:
    """Every address behind every seed; a seed that does not resolve is a failure, not an error."""
    found: dict[messages.Address, None] = {}
    failures: list[tuple[str, str]] = []
    for seed in seeds:
        try:
            hosts = [str(ipaddress.ip_address(seed.host))]
        except ValueError:
            try:
                hosts = lookup(seed.host, seed.port)
            except (OSError, UnicodeError) as e:  # socket.gaierror is an OSError
                failures.append((seed.text, str(e) or type(e).__name__))
                continue
            if not hosts:
                failures.append((seed.text, "no address"))
                continue
        for host in hosts:
            found[messages.Address(host, seed.port)] = None
    return Resolution(tuple(found), tuple(failures))


@dataclass(frozen=True, slots=True)
class Note:
    """A log line worth writing: what changed since the last resolution."""

    level: str  # "warning" or "info"
    message: str
    fields: Mapping[str, object]


def note(before: Resolution | None, now: Resolution, retry_s: float | None) -> Note | None:
    """The line to log after `now`, or None when nothing a person needs to know changed.

    Failures are logged when the set of failing seeds changes (not on every retry); recovery is
    logged once; a successful resolution is logged when its addresses changed."""
    if now.failures and (before is None or before.failed != now.failed):
        return Note(
            "warning",
            "membership seeds do not resolve; retrying",
            {
                "seeds": ", ".join(seed for seed, _ in now.failures),
                "error": "; ".join(why for _, why in now.failures),
                "resolved": len(now.addresses),
                "retry_s": round(retry_s, 1) if retry_s is not None else None,
            },
        )
    if not now.failures and (before is None or before.failures):
        return Note("info", "membership seeds resolved", {"addresses": _text(now)})
    if not now.failures and before is not None and set(before.addresses) != set(now.addresses):
        return Note("info", "membership seeds changed", {"addresses": _text(now)})
    return None


def _text(resolution: Resolution) -> str:
    return ", ".join(str(a) for a in resolution.addresses)
