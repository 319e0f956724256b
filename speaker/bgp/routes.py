"""Which routes each BGP session must carry, and the least work to get there.

`desired` applies MetalLB's rules (metallb-behaviour.md §5.4) to the advertisements that apply on
this node: each address is masked to the advertisement's aggregation length, every session gets
the advertisements whose `peers` list is empty or names it, duplicates of a prefix collapse into
one route carrying the union of their communities, LOCAL_PREF goes to iBGP sessions only, and a
session carries only its own address family unless it is dual-stack.

`diff` compares what ExaBGP was told (applied) with `desired` and returns the announcements (new
or changed attributes: BGP replaces a route by announcing it again) and the withdrawals; an
unchanged route costs nothing. `apply(applied, diff(applied, desired)) == desired` always.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ironlb import problems
from speaker.bgp import peers as peers_module

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network
PeerName = str

# MetalLB refuses an advertisement with more (native, FRR and frr-k8s backends alike, legacy and
# large communities counted together). ironlb.honouring reports one advertisement over it; only
# here are several advertisements' communities merged onto one route.
MAX_COMMUNITIES = 63


class Community(NamedTuple):
    """RFC 1997 community `asn:value` (two 16-bit halves)."""

    asn: int
    value: int

    def __str__(self) -> str:
        return f"{self.asn}:{self.value}"


class LargeCommunity(NamedTuple):
    """RFC 8092 large community `global:local1:local2` (three 32-bit parts)."""

    global_admin: int
    local1: int
    local2: int

    def __str__(self) -> str:
        return f"{self.global_admin}:{self.local1}:{self.local2}"


def _check_communities(communities: Iterable[Community], large: Iterable[LargeCommunity]) -> None:
    for c in communities:
        if not (0 <= c.asn <= 0xFFFF and 0 <= c.value <= 0xFFFF):
            raise ValueError(f"community {c} out of range")
    for lc in large:
        if not all(0 <= part <= 0xFFFFFFFF for part in lc):
            raise ValueError(f"large community {lc} out of range")


@dataclass(frozen=True, slots=True)
class Advertisement:
    """One BGPAdvertisement as it applies to an address on this node, aliases resolved.

    `local_pref` None = not set (MetalLB's 0). `peers` empty = every peer.
    """

    aggregation_length: int = 32
    aggregation_length_v6: int = 128
    local_pref: int | None = None
    communities: frozenset[Community] = frozenset()
    large_communities: frozenset[LargeCommunity] = frozenset()
    peers: frozenset[PeerName] = frozenset()

    def __post_init__(self) -> None:
        if not 0 <= self.aggregation_length <= 32:
            raise ValueError(f"aggregation length {self.aggregation_length} out of range")
        if not 0 <= self.aggregation_length_v6 <= 128:
            raise ValueError(f"aggregation length v6 {self.aggregation_length_v6} out of range")
        if self.local_pref is not None and not 0 <= self.local_pref <= 0xFFFFFFFF:
            raise ValueError(f"local preference {self.local_pref} out of range")
        _check_communities(self.communities, self.large_communities)

    def prefix(self, address: IPAddress) -> Prefix:
        length = self.aggregation_length if address.version == 4 else self.aggregation_length_v6
        return _network(address, length)

    def applies_to(self, peer: PeerName) -> bool:
        return not self.peers or peer in self.peers


@functools.lru_cache(maxsize=1 << 16)
def _network(address: IPAddress, length: int) -> Prefix:
    # Remembered, since every pass asks again for the same 10,000 prefixes; and built from the
    # address's integer, since given the address object the constructors format it as text
    # and parse that again (25 us a prefix, most of a new advertisement's first pass here).
    if isinstance(address, ipaddress.IPv4Address):
        return ipaddress.IPv4Network((int(address), length), strict=False)
    return ipaddress.IPv6Network((int(address), length), strict=False)


@dataclass(frozen=True, slots=True)
class Announcement:
    """An address of an announced Service and the advertisements that apply to it here.

    Several Services sharing an address may each contribute one; order never matters.
    """

    address: IPAddress
    advertisements: tuple[Advertisement, ...]


@dataclass(frozen=True, slots=True)
class RouteAttributes:
    """Path attributes of one route. Origin is always IGP and the next hop always this node."""

    local_pref: int | None = None
    communities: frozenset[Community] = frozenset()
    large_communities: frozenset[LargeCommunity] = frozenset()

    def __post_init__(self) -> None:
        _check_communities(self.communities, self.large_communities)

    @property
    def community_count(self) -> int:
        return len(self.communities) + len(self.large_communities)


PeerRoutes = Mapping[Prefix, RouteAttributes]
Routes = Mapping[PeerName, PeerRoutes]


@dataclass(frozen=True, slots=True)
class Desired:
    routes: dict[PeerName, dict[Prefix, RouteAttributes]]
    problems: tuple[problems.Problem, ...] = ()


@dataclass
class _Merge:
    local_prefs: set[int] = field(default_factory=set)
    communities: set[Community] = field(default_factory=set)
    large: set[LargeCommunity] = field(default_factory=set)


def desired(
    announcements: Iterable[Announcement], sessions: Iterable[peers_module.Peer]
) -> Desired:
    """Routes per peer for the Services this node announces."""
    session_list = list(sessions)
    pairs = [(a.address, ad) for a in announcements for ad in a.advertisements]
    result: dict[PeerName, dict[Prefix, RouteAttributes]] = {}
    found: list[problems.Problem] = []
    for peer in session_list:
        # A prefix with one advertisement (the usual case) keeps it; only a prefix reached
        # twice pays for merging. Attributes are built once per distinct advertisement.
        merged: dict[Prefix, Advertisement | _Merge] = {}
        unreachable: set[int] = set()
        families = peer.families
        for address, ad in pairs:
            if address.version not in families or not ad.applies_to(peer.name):
                continue
            if address.version != peer.family and peer.next_hop(address.version) is None:
                # "next-hop self" names the TCP session's address, of the other family.
                unreachable.add(address.version)
                continue
            prefix = ad.prefix(address)
            before = merged.get(prefix)
            if before is None:
                merged[prefix] = ad
                continue
            merging = before if isinstance(before, _Merge) else _merged(before)
            _add(merging, ad)
            merged[prefix] = merging
        routes: dict[Prefix, RouteAttributes] = {}
        built: dict[int, RouteAttributes] = {}
        crowded: list[tuple[Prefix, int]] = []
        for prefix, how in merged.items():
            if isinstance(how, _Merge):
                attrs = _attributes(how, peer)
            elif (cached := built.get(id(how))) is not None:
                attrs = cached
            else:
                attrs = built[id(how)] = _attributes(_merged(how), peer)
            if attrs.community_count > MAX_COMMUNITIES:
                crowded.append((prefix, attrs.community_count))
                continue
            routes[prefix] = attrs
        result[peer.name] = routes
        if crowded:
            # One Problem per peer, not per route: 10,000 routes of one advertisement would
            # otherwise be 10,000 lines in the log and in the ConfigurationState.
            prefix, count = min(
                crowded, key=lambda c: (c[0].version, int(c[0].network_address), c[0].prefixlen)
            )
            found.append(
                problems.Problem(
                    "BGPPeer",
                    peer.name,
                    "",
                    f"{len(crowded)} route(s) would carry more than {MAX_COMMUNITIES} "
                    f"communities (e.g. {prefix}: {count}, from the spec.communities of its "
                    "BGPAdvertisements); not announced to this peer",
                )
            )
        for version in sorted(unreachable):
            found.append(
                problems.Problem(
                    "BGPPeer",
                    peer.name,
                    "spec.dualStackAddressFamily",
                    f"no IPv{version} next hop for this IPv{peer.family} session (no "
                    f"IPv{version} address on the interface of its local address, nor an "
                    f"IPv{version} InternalIP); IPv{version} routes are not announced to it",
                )
            )
    return Desired(result, tuple(found))


def _merged(ad: Advertisement) -> _Merge:
    m = _Merge()
    _add(m, ad)
    return m


def _add(m: _Merge, ad: Advertisement) -> None:
    if ad.local_pref is not None:
        m.local_prefs.add(ad.local_pref)
    m.communities |= ad.communities
    m.large |= ad.large_communities


def _attributes(m: _Merge, peer: peers_module.Peer) -> RouteAttributes:
    return RouteAttributes(
        # Validation rejects ads that would disagree on one prefix; should two still meet
        # (serviceSelectors are checked per Service), the highest wins, so the result never
        # depends on the order Services were seen in.
        local_pref=max(m.local_prefs) if m.local_prefs and peer.is_ibgp else None,
        communities=frozenset(m.communities),
        large_communities=frozenset(m.large),
    )


@dataclass(frozen=True, slots=True)
class Change:
    """What one session must be told: (re-)announce these, withdraw those."""

    announce: dict[Prefix, RouteAttributes] = field(default_factory=dict)
    withdraw: frozenset[Prefix] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.announce or self.withdraw)


def diff_peer(applied: PeerRoutes, wanted: PeerRoutes) -> Change:
    announce = {p: a for p, a in wanted.items() if applied.get(p) != a}
    withdraw = frozenset(p for p in applied if p not in wanted)
    return Change(announce, withdraw)


def diff(applied: Routes, wanted: Routes) -> dict[PeerName, Change]:
    """Per peer, the minimal change from `applied` to `wanted`; peers with none are left out.

    A peer missing from `wanted` has all its routes withdrawn."""
    changes: dict[PeerName, Change] = {}
    for peer in applied.keys() | wanted.keys():
        change = diff_peer(applied.get(peer, {}), wanted.get(peer, {}))
        if change:
            changes[peer] = change
    return changes


def apply_peer(applied: PeerRoutes, change: Change) -> dict[Prefix, RouteAttributes]:
    result = {p: a for p, a in applied.items() if p not in change.withdraw}
    result.update(change.announce)
    return result


def apply(
    applied: Routes, changes: Mapping[PeerName, Change]
) -> dict[PeerName, dict[Prefix, RouteAttributes]]:
    """`applied` after `changes`; peers left without routes are dropped."""
    result: dict[PeerName, dict[Prefix, RouteAttributes]] = {}
    for peer in applied.keys() | changes.keys():
        routes = apply_peer(applied.get(peer, {}), changes.get(peer, Change()))
        if routes:
            result[peer] = routes
    return result
