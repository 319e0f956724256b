"""Which interfaces get an ARP and/or an NDP responder (MetalLB's announcer.go, §4.3).

Skipped: names matching the exclude list (MetalLB's chart default, so container bridges, veths
of pods and tunnels never announce), interfaces that are down, enslaved to a bridge or bond (the
master answers instead) or NOARP, and anything that is not Ethernet (frames are built for it).
ARP needs the BROADCAST flag and an IPv4 address on the interface (MetalLB's ARP library cannot
open a responder without one, so MetalLB never answers there and neither do we); NDP needs an
IPv6 link-local address. Pure: the facts are read elsewhere (`sockets.scan`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

DEFAULT_EXCLUDE: Final = (
    "^docker.*",
    "^cbr.*",
    "^dummy.*",
    "^virbr.*",
    "^lxcbr.*",
    "^veth.*",
    "^lo$",
    "^cali.*",
    "^tunl.*",
    "^flannel.*",
    "^kube-ipvs.*",
    "^cni.*",
    "^nodelocaldns.*",
    "^lxc.*",
)


@dataclass(frozen=True, slots=True)
class InterfaceFacts:
    name: str
    index: int
    mac: bytes
    up: bool
    broadcast: bool
    noarp: bool
    enslaved: bool
    ethernet: bool
    has_ipv4: bool
    has_link_local: bool


@dataclass(frozen=True, slots=True)
class Eligibility:
    arp: bool
    ndp: bool
    # Why neither responder runs (None when at least one does).
    reason: str | None = None

    @property
    def any(self) -> bool:
        return self.arp or self.ndp


def exclusion(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One regex from the list, joined as MetalLB joins it: (a)|(b)|..."""
    parts = [f"({p})" for p in patterns]
    return re.compile("|".join(parts)) if parts else None


def eligibility(facts: InterfaceFacts, exclude: re.Pattern[str] | None) -> Eligibility:
    if exclude is not None and exclude.search(facts.name):
        return Eligibility(False, False, "excluded")
    if not facts.up:
        return Eligibility(False, False, "down")
    if facts.enslaved:
        return Eligibility(False, False, "enslaved")
    if facts.noarp:
        return Eligibility(False, False, "noarp")
    if not facts.ethernet:
        return Eligibility(False, False, "not ethernet")
    arp = facts.broadcast and facts.has_ipv4
    ndp = facts.has_link_local
    return Eligibility(arp, ndp, None if arp or ndp else "no address")
