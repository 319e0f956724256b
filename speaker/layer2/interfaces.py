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
from typing import Any, Final

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


# MetalLB's speaker reads its interface exclusions from the `metallb-excludel2` ConfigMap,
# mounted here; so does ours (`speaker.layer2.excludes` reads the file).
EXCLUDE_CONFIG_PATH: Final = "/etc/metallb/excludel2.yaml"
EXCLUDE_CONFIG_KEY: Final = "announcedInterfacesToExclude"


def parse_exclude_config(data: Any) -> tuple[str, ...]:
    """The regexes of MetalLB's `excludel2.yaml` (already parsed from YAML): a mapping whose
    `announcedInterfacesToExclude` lists them. An empty or missing list excludes nothing, as in
    MetalLB. ValueError, saying what is wrong, for anything else or a regex that does not
    compile."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise ValueError(
            f"expected a mapping with {EXCLUDE_CONFIG_KEY!r}, not {type(data).__name__}"
        )
    patterns = data.get(EXCLUDE_CONFIG_KEY) or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"{EXCLUDE_CONFIG_KEY} must be a list of strings")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"{EXCLUDE_CONFIG_KEY}: {pattern!r} is not a regex: {e}") from e
    return tuple(patterns)


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
