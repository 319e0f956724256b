"""Rules that span objects: MetalLB's `config.For`, minus what parsing already checked.

`validate(config)` reports overlapping address ranges, duplicate names, duplicate BGP peers,
aggregation lengths that a pool's prefixes contradict, local-preference conflicts between
advertisements, duplicate community aliases, and dangling references.

Two choices differ from MetalLB's single `error`:
* A conflict between two objects is reported on *both* of them, so that the answer does not
  depend on which one came first; the webhook then rejects the incoming object whichever side it
  is on, and status/Events can name both ends.
* Dangling references (a pool, peer, alias, BFD profile or Secret that does not exist yet) are
  `transient`: MetalLB ignores unknown pools silently and treats the rest as retryable, and the
  webhook must not reject them (objects are applied in any order), but users deserve to hear.

Node sets are compared by their selectors, not by the Nodes that exist now: two selector lists
conflict unless `ironlb.selectors.lists_disjoint` proves no label set matches both. That is
conservative (a node that might exist tomorrow counts) and independent of cluster state.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from ironlb import addresses, model, selectors
from ironlb.problems import Problem

KIND_ORDER = {kind: i for i, kind in enumerate(model.CONFIG_KINDS)}


def validate(config: model.Config) -> list[Problem]:
    """Every cross-object Problem of `config`, ordered by kind, then object name."""
    problems: list[Problem] = []
    problems += _duplicate_names(config)
    problems += _pool_overlaps(config.pools)
    problems += _duplicate_peers(config.bgp_peers)
    problems += _aggregation_lengths(config)
    problems += _local_pref_conflicts(config)
    problems += _duplicate_aliases(config.communities)
    problems += _dangling_references(config)
    problems += _bfd_echo_on_ipv6(config)
    return order(problems)


def order(problems: Iterable[Problem]) -> list[Problem]:
    """Drop repeats and sort by (kind, name), keeping each object's problems in rule order."""
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (KIND_ORDER.get(p.kind, len(KIND_ORDER)), p.kind, p.name))


def about(problems: Iterable[Problem], kind: str, name: str) -> list[Problem]:
    return [p for p in problems if p.kind == kind and p.name == name]


def invalid_objects(problems: Iterable[Problem]) -> frozenset[tuple[str, str]]:
    """(kind, name) of every object with a non-transient Problem: what a consumer should skip."""
    return frozenset((p.kind, p.name) for p in problems if not p.transient)


# --- Names ------------------------------------------------------------------------------------


def _duplicate_names(config: model.Config) -> list[Problem]:
    problems: list[Problem] = []
    groups: list[tuple[str, Iterable[tuple[str, str]]]] = [
        (model.IP_ADDRESS_POOL, ((p.name, p.namespace) for p in config.pools)),
        (model.L2_ADVERTISEMENT, ((a.name, a.namespace) for a in config.l2_advertisements)),
        (model.BGP_ADVERTISEMENT, ((a.name, a.namespace) for a in config.bgp_advertisements)),
        (model.BGP_PEER, ((p.name, p.namespace) for p in config.bgp_peers)),
        (model.BFD_PROFILE, ((p.name, p.namespace) for p in config.bfd_profiles)),
        (model.COMMUNITY, ((c.name, c.namespace) for c in config.communities)),
    ]
    for kind, names in groups:
        seen: set[str] = set()
        for name, namespace in names:
            if name in seen:
                where = f" (again in namespace {namespace!r})" if namespace else ""
                problems.append(
                    Problem(kind, name, "metadata.name", f"duplicate definition of {kind}{where}")
                )
            seen.add(name)
    return problems


# --- Pools ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    position: int  # of the pool in the config
    pool: model.PoolName
    index: int  # in the pool's spec.addresses
    range: addresses.AddressRange


def _pool_overlaps(pools: tuple[model.IPAddressPool, ...]) -> list[Problem]:
    """Sweep all ranges by start address; only overlapping pairs cost anything."""
    entries = sorted(
        (_Entry(n, p.name, i, r) for n, p in enumerate(pools) for i, r in enumerate(p.addresses)),
        key=lambda e: (e.range.version, e.range.first, e.range.last),
    )
    problems: list[Problem] = []
    active: list[_Entry] = []
    for entry in entries:
        active = [a for a in active if a.range.overlaps(entry.range)]
        for other in active:
            first, second = sorted((other, entry), key=lambda e: (e.position, e.index))
            problems += _overlap_problems(first, second)
        active.append(entry)
    return problems


def _overlap_problems(first: _Entry, second: _Entry) -> list[Problem]:
    def field(e: _Entry) -> str:
        return f"spec.addresses[{e.index}]"

    if first.position == second.position:
        return [
            Problem(
                model.IP_ADDRESS_POOL,
                second.pool,
                field(second),
                f"{second.range} overlaps with {first.range} ({field(first)}) in the same pool",
            )
        ]
    return [
        Problem(
            model.IP_ADDRESS_POOL,
            mine.pool,
            field(mine),
            f"{mine.range} overlaps with {theirs.range} in IPAddressPool {theirs.pool!r} "
            f"({field(theirs)}): address ranges may not overlap, within or across pools",
        )
        for mine, theirs in ((first, second), (second, first))
    ]


# --- Peers ------------------------------------------------------------------------------------


def _peer_target(peer: model.BGPPeer) -> tuple[str, str]:
    if peer.peer_address is not None:
        return "spec.peerAddress", f"address {peer.peer_address}"
    return "spec.interface", f"interface {peer.interface}"


def _duplicate_peers(peers: tuple[model.BGPPeer, ...]) -> list[Problem]:
    """Two sessions to the same address, port and VRF from one node cannot both exist."""
    problems: list[Problem] = []
    for i, a in enumerate(peers):
        for b in peers[i + 1 :]:
            if (_peer_target(a)[1], a.peer_port, a.vrf) != (
                _peer_target(b)[1],
                b.peer_port,
                b.vrf,
            ):
                continue
            if selectors.lists_disjoint(a.node_selectors, b.node_selectors):
                continue
            field, target = _peer_target(a)
            vrf = f" in vrf {a.vrf!r}" if a.vrf else ""
            for mine, theirs in ((a, b), (b, a)):
                problems.append(
                    Problem(
                        model.BGP_PEER,
                        mine.name,
                        field,
                        f"duplicate peer: BGPPeer {theirs.name!r} has the same {target}, port "
                        f"{a.peer_port}{vrf}, and their nodeSelectors can select the same node",
                    )
                )
    return problems


# --- BGP advertisements -------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _widest_prefix(r: addresses.AddressRange) -> int:
    """Prefix length of the widest CIDR in the range's minimal summary (a pure, cached fact)."""
    return min(n.prefixlen for n in r.networks())


def _aggregation_lengths(config: model.Config) -> list[Problem]:
    """A /28 pool cannot be announced as /26: the aggregate would cover foreign addresses."""
    problems: list[Problem] = []
    for ad in config.bgp_advertisements:
        for pool in config.pools_for(ad):
            families: tuple[tuple[addresses.Family, str], ...] = (
                (4, "spec.aggregationLength"),
                (6, "spec.aggregationLengthV6"),
            )
            for family, field in families:
                length = ad.aggregation_for(family)
                for i, r in enumerate(pool.addresses):
                    if r.version != family or length >= _widest_prefix(r):
                        continue
                    problems.append(
                        Problem(
                            model.BGP_ADVERTISEMENT,
                            ad.name,
                            field,
                            f"invalid aggregation length {length}: prefix /{_widest_prefix(r)} "
                            f"of {r} in IPAddressPool {pool.name!r} (spec.addresses[{i}]) is "
                            "more specific than the aggregation length",
                        )
                    )
                    break
    return problems


def _aggregation_differs(
    a: model.BGPAdvertisement, b: model.BGPAdvertisement, pool: model.IPAddressPool
) -> bool:
    families = pool.families
    v4 = a.aggregation_length != b.aggregation_length
    v6 = a.aggregation_length_v6 != b.aggregation_length_v6
    if families == {4}:
        return v4
    if families == {6}:
        return v6
    return v4 and v6


def _compatible_local_pref(
    a: model.BGPAdvertisement, b: model.BGPAdvertisement, pool: model.IPAddressPool
) -> bool:
    """MetalLB's rule: differing localPrefs on one pool need the updates to be distinguishable."""
    if a.local_pref == b.local_pref:
        return True
    if _aggregation_differs(a, b, pool):  # (a) different prefixes are announced
        return True
    if a.peers and b.peers and not set(a.peers) & set(b.peers):  # (b) to different peers
        return True
    return selectors.lists_disjoint(a.node_selectors, b.node_selectors)  # (c) from other nodes


def _local_pref_conflicts(config: model.Config) -> list[Problem]:
    """Ads with serviceSelectors are exempt: the speaker checks those per service at announce."""
    problems: list[Problem] = []
    candidates = [ad for ad in config.bgp_advertisements if not ad.service_selectors]
    # The verdict on a pair depends on the pool only through its address families, so it is
    # computed once per (pair, families), not once per pool: pools are many, ads are few.
    verdicts: dict[tuple[int, int, frozenset[addresses.Family]], bool] = {}
    reported: set[tuple[int, int]] = set()
    for pool in config.pools:
        families = pool.families
        selecting = [(n, ad) for n, ad in enumerate(candidates) if ad.selects(pool)]
        for i, (na, a) in enumerate(selecting):
            for nb, b in selecting[i + 1 :]:
                if (na, nb) in reported or a.local_pref == b.local_pref:
                    continue
                key = (na, nb, families)
                if key not in verdicts:
                    verdicts[key] = _compatible_local_pref(a, b, pool)
                if verdicts[key]:
                    continue
                reported.add((na, nb))
                for mine, theirs in ((a, b), (b, a)):
                    problems.append(
                        Problem(
                            model.BGP_ADVERTISEMENT,
                            mine.name,
                            "spec.localPref",
                            f"local preference {mine.local_pref} conflicts with local "
                            f"preference {theirs.local_pref} of BGPAdvertisement "
                            f"{theirs.name!r} on IPAddressPool {pool.name!r}: give them "
                            "different aggregation lengths, disjoint peers or disjoint "
                            "nodeSelectors",
                        )
                    )
    return problems


# --- Communities --------------------------------------------------------------------------------


def _duplicate_aliases(communities: tuple[model.Community, ...]) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, list[tuple[str, int]]] = {}
    for community in communities:
        for i, defined in enumerate(community.communities):
            seen.setdefault(defined.name, []).append((community.name, i))
    for alias, places in seen.items():
        if len(places) < 2:
            continue
        for n, (name, i) in enumerate(places):
            others = ", ".join(
                f"Community {o!r} spec.communities[{j}]"
                for m, (o, j) in enumerate(places)
                if m != n
            )
            problems.append(
                Problem(
                    model.COMMUNITY,
                    name,
                    f"spec.communities[{i}].name",
                    f"duplicate definition of community alias {alias!r} (also in {others})",
                )
            )
    return problems


# --- References ---------------------------------------------------------------------------------


def _dangling(kind: str, name: str, field: str, message: str) -> Problem:
    return Problem(kind, name, field, message, transient=True)


def _dangling_references(config: model.Config) -> list[Problem]:
    problems: list[Problem] = []
    pools = {p.name for p in config.pools}
    peers = {p.name for p in config.bgp_peers}
    aliases = config.community_aliases()
    bfd_profiles = {p.name for p in config.bfd_profiles}

    ads: list[tuple[str, model.L2Advertisement | model.BGPAdvertisement]] = [
        (model.L2_ADVERTISEMENT, ad) for ad in config.l2_advertisements
    ]
    ads += [(model.BGP_ADVERTISEMENT, ad) for ad in config.bgp_advertisements]
    for kind, ad in ads:
        for i, pool in enumerate(ad.ip_address_pools):
            if pool not in pools:
                problems.append(
                    _dangling(
                        kind,
                        ad.name,
                        f"spec.ipAddressPools[{i}]",
                        f"IPAddressPool {pool!r} does not exist (or is invalid); this entry "
                        "is ignored until it does",
                    )
                )
        if isinstance(ad, model.BGPAdvertisement):
            for i, peer_name in enumerate(ad.peers):
                if peer_name not in peers:
                    problems.append(
                        _dangling(
                            kind,
                            ad.name,
                            f"spec.peers[{i}]",
                            f"BGPPeer {peer_name!r} does not exist (or is invalid)",
                        )
                    )
            for i, entry in enumerate(ad.communities):
                if isinstance(entry, model.CommunityRef) and entry.name not in aliases:
                    problems.append(
                        _dangling(
                            kind,
                            ad.name,
                            f"spec.communities[{i}]",
                            f"{entry.name!r} is neither a community value (a:b, large:a:b:c) "
                            "nor an alias defined by a Community",
                        )
                    )
    for peer in config.bgp_peers:
        if peer.bfd_profile is not None and peer.bfd_profile not in bfd_profiles:
            problems.append(
                _dangling(
                    model.BGP_PEER,
                    peer.name,
                    "spec.bfdProfile",
                    f"BFDProfile {peer.bfd_profile!r} does not exist (or is invalid)",
                )
            )
        if peer.password_secret is not None and peer.password_secret not in config.secret_names:
            problems.append(
                _dangling(
                    model.BGP_PEER,
                    peer.name,
                    "spec.passwordSecret.name",
                    f"Secret {peer.password_secret!r} does not exist in the MetalLB namespace",
                )
            )
    return problems


def _bfd_echo_on_ipv6(config: model.Config) -> list[Problem]:
    """MetalLB's validateConfig: BFD echo mode cannot run on sessions carrying IPv6 prefixes.

    Transient like the other reference checks: it depends on a BFDProfile's content, and the
    BFDProfile webhook cannot re-check the peers that use it.
    """
    echo = {p.name for p in config.bfd_profiles if p.echo_mode}
    problems: list[Problem] = []
    for peer in config.bgp_peers:
        if peer.bfd_profile not in echo:
            continue
        for ad in config.bgp_advertisements:
            if ad.peers and peer.name not in ad.peers:
                continue
            pool = next((p for p in config.pools_for(ad) if 6 in p.families), None)
            if pool is None:
                continue
            problems.append(
                _dangling(
                    model.BGP_PEER,
                    peer.name,
                    "spec.bfdProfile",
                    f"BFDProfile {peer.bfd_profile!r} has echo mode enabled, but "
                    f"BGPAdvertisement {ad.name!r} announces IPv6 IPAddressPool {pool.name!r} "
                    "to this peer, which is not possible",
                )
            )
            break
    return problems
