"""What this node must announce, computed from one snapshot of the cluster.

Every speaker runs the same pure functions over the same inputs, so they agree without talking:
for L2, one owner per address; for BGP, every eligible node. The result is desired state; the
layer 2 and BGP appliers diff it against what they have applied. Decisions carry MetalLB's reason
names (`notOwner`, `noMatchingAdvertisement`, ...) so logs and status read the same as MetalLB's.

Where MetalLB elects per Service (hashing its first ingress address), we elect per address over the
union of the candidates of every Service holding it: Services sharing an address then always have
one owner, whatever their advertisements say. A dual-stack Service's two addresses are elected
separately, so its IPv4 and IPv6 addresses may be answered by different nodes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ironlb import addresses, model, selectors
from speaker import election


class Reason(enum.StrEnum):
    """Why this node does not announce a Service, in MetalLB's words (its metrics and logs)."""

    NOT_OWNER = "notOwner"
    NO_MATCHING_ADVERTISEMENT = "noMatchingAdvertisement"
    SHARED_IP_WITH_SERVICE_SELECTOR = "sharedIPWithServiceSelector"
    IP_NOT_ALLOWED = "ipNotAllowed"
    NO_IP_ALLOCATED = "noIPAllocated"
    CONFLICTING_ADVERTISEMENTS = "conflictingAdvertisements"
    NODE_NETWORK_UNAVAILABLE = "nodeNetworkUnavailable"
    NODE_EXCLUDED = "nodeLabeledExcludeBalancers"
    NO_LOCAL_ENDPOINTS = "noLocalEndpoints"
    NO_ENDPOINTS = "noEndpoints"


@dataclass(frozen=True, slots=True)
class Endpoint:
    node: model.NodeName | None
    ready: bool
    serving: bool


@dataclass(frozen=True, slots=True)
class Service:
    namespace: str
    name: str
    ips: tuple[addresses.IPAddress, ...]
    labels: model.Labels = ()
    local: bool = False  # externalTrafficPolicy: Local
    shares: bool = False  # carries an allow-shared-ip annotation
    endpoints: tuple[Endpoint, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Node = election.NodeInfo


@dataclass(frozen=True, slots=True)
class Snapshot:
    config: model.Config
    services: tuple[Service, ...]
    nodes: Mapping[str, Node]
    # Nodes whose speaker is alive (from membership, or Node Ready when membership is off).
    alive: frozenset[str]
    ignore_exclude_lb: bool = False


ALL_INTERFACES: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class L2Address:
    """An address this node answers ARP/NDP for; `interfaces` empty means every interface."""

    address: addresses.IPAddress
    interfaces: tuple[str, ...]
    services: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class L2Plan:
    mine: tuple[L2Address, ...]
    # Every address's elected owner (None: nobody may announce it), for status and logs.
    owners: Mapping[addresses.IPAddress, str | None]
    # Why this node does not announce a Service (absent: it announces every address it owns).
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    # Service key -> the nodes elected for its addresses: more than one when a Service's
    # addresses (dual-stack, say) hash to different nodes. Each has its ServiceL2Status.
    announcers: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BGPService:
    """A Service this node announces over BGP, with the advertisements that apply here."""

    service: str
    ips: tuple[addresses.IPAddress, ...]
    advertisements: tuple[model.BGPAdvertisement, ...]


@dataclass(frozen=True, slots=True)
class BGPPlan:
    mine: tuple[BGPService, ...]
    reasons: Mapping[str, Reason] = field(default_factory=dict)


# --- shared rules --------------------------------------------------------------------------------


def pool_of(config: model.Config, ips: Iterable[addresses.IPAddress]) -> model.IPAddressPool | None:
    """The pool holding every one of the addresses (MetalLB's poolFor), honouring avoidBuggyIPs."""
    wanted = tuple(ips)
    for pool in config.pools:
        if all(_pool_contains(pool, ip) for ip in wanted):
            return pool
    return None


def _pool_contains(pool: model.IPAddressPool, ip: addresses.IPAddress) -> bool:
    if pool.avoid_buggy_ips and ip.version == 4 and int(ip) & 0xFF in (0, 0xFF):
        return False
    return any(ip in r for r in pool.addresses)


def endpoint_nodes(service: Service) -> frozenset[model.NodeName]:
    """Nodes that may receive traffic: those with a ready endpoint, or, when no endpoint is ready
    anywhere, those with a serving (terminating) one, as kube-proxy falls back to them."""
    ready = frozenset(e.node for e in service.endpoints if e.ready and e.node)
    if ready:
        return ready
    return frozenset(e.node for e in service.endpoints if e.serving and e.node)


def can_serve(service: Service) -> bool:
    return any(e.ready or e.serving for e in service.endpoints)


def _selects_node(node_selectors: tuple[selectors.LabelSelector, ...], node: Node) -> bool:
    return selectors.any_matches(node_selectors, model.label_map(node.labels))


def _service_matches(
    service_selectors: tuple[selectors.LabelSelector, ...], service: Service
) -> bool:
    return selectors.any_matches(service_selectors, model.label_map(service.labels))


def election_order(
    candidates: Iterable[str],
    address: addresses.IPAddress,
    scores: Mapping[str, int] | None = None,
) -> list[str]:
    """MetalLB's order: higher preference score first, then the smallest sha256(node#address)."""
    return election.order(str(address), candidates, scores)


# --- layer 2 --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _L2Candidacy:
    candidates: frozenset[str]
    scores: Mapping[str, int]
    ads: tuple[model.L2Advertisement, ...]


def _l2_candidacy(
    snapshot: Snapshot, service: Service, pool: model.IPAddressPool
) -> _L2Candidacy | Reason:
    """The nodes that may announce this Service's addresses, or why nobody may."""
    if not can_serve(service):
        return Reason.NOT_OWNER
    ads = tuple(
        ad
        for ad in snapshot.config.l2_advertisements
        if ad.selects(pool) and _service_matches(ad.service_selectors, service)
    )
    if service.shares and any(ad.service_selectors for ad in ads):
        return Reason.SHARED_IP_WITH_SERVICE_SELECTOR
    if not ads:
        return Reason.NO_MATCHING_ADVERTISEMENT
    candidates = election.eligible(
        snapshot.nodes.values(),
        frozenset(snapshot.alive),
        ads,
        endpoint_nodes=endpoint_nodes(service) if service.local else None,
        ignore_exclude_label=snapshot.ignore_exclude_lb,
    )
    scores = election.scores((snapshot.nodes[n] for n in candidates), ads)
    return _L2Candidacy(candidates, scores, ads)


def l2_plan(snapshot: Snapshot, me: model.NodeName) -> L2Plan:
    reasons: dict[str, Reason] = {}
    # address -> (candidates, scores, [(service key, ads)]) merged over the Services holding it.
    per_address: dict[
        addresses.IPAddress,
        tuple[set[str], dict[str, int], list[tuple[str, tuple[model.L2Advertisement, ...]]]],
    ] = {}
    for service in snapshot.services:
        if not service.ips:
            reasons[service.key] = Reason.NO_IP_ALLOCATED
            continue
        pool = pool_of(snapshot.config, service.ips)
        if pool is None:
            reasons[service.key] = Reason.IP_NOT_ALLOWED
            continue
        candidacy = _l2_candidacy(snapshot, service, pool)
        if isinstance(candidacy, Reason):
            reasons[service.key] = candidacy
            continue
        for ip in service.ips:
            cands, scores, holders = per_address.setdefault(ip, (set(), {}, []))
            cands |= candidacy.candidates
            for name, score in candidacy.scores.items():
                scores[name] = max(scores.get(name, 0), score)
            holders.append((service.key, candidacy.ads))
    owners: dict[addresses.IPAddress, str | None] = {}
    announcers: dict[str, set[str]] = {}
    mine: list[L2Address] = []
    for ip in sorted(per_address, key=lambda a: (a.version, int(a))):
        cands, scores, holders = per_address[ip]
        order = election_order(cands, ip, scores)
        owner = order[0] if order else None
        owners[ip] = owner
        if owner is not None:
            for key, _ in holders:
                announcers.setdefault(key, set()).add(owner)
        node = snapshot.nodes.get(me)
        if owner != me or node is None:
            for key, ads in holders:
                selected = node is not None and any(
                    _selects_node(ad.node_selectors, node) for ad in ads
                )
                reasons.setdefault(
                    key, Reason.NOT_OWNER if selected else Reason.NO_MATCHING_ADVERTISEMENT
                )
            continue
        my_ads = [ad for _, ads in holders for ad in ads if _selects_node(ad.node_selectors, node)]
        mine.append(
            L2Address(
                address=ip,
                interfaces=_interfaces(my_ads),
                services=tuple(sorted({key for key, _ in holders})),
            )
        )
    # A Service announced for at least one of its addresses has no reason to report.
    for entry in mine:
        for key in entry.services:
            reasons.pop(key, None)
    return L2Plan(
        tuple(mine), owners, reasons, {key: frozenset(n) for key, n in announcers.items()}
    )


def _interfaces(ads: Iterable[model.L2Advertisement]) -> tuple[str, ...]:
    """Every interface if any ad says so, else the union of the ads' interface lists."""
    union: set[str] = set()
    for ad in ads:
        if ad.all_interfaces:
            return ALL_INTERFACES
        union.update(ad.interfaces)
    return tuple(sorted(union))


# --- BGP ------------------------------------------------------------------------------------------


def _conflicting(ads: tuple[model.BGPAdvertisement, ...], service: Service) -> bool:
    """Two ads that would send one prefix to one peer with different local preferences."""
    for family in {ip.version for ip in service.ips}:
        for i, a in enumerate(ads):
            for b in ads[i + 1 :]:
                if a.local_pref == b.local_pref:
                    continue
                fam: addresses.Family = 4 if family == 4 else 6
                if a.aggregation_for(fam) != b.aggregation_for(fam):
                    continue
                if a.peers and b.peers and not set(a.peers) & set(b.peers):
                    continue
                return True
    return False


def bgp_decision(
    snapshot: Snapshot,
    service: Service,
    me: model.NodeName,
    per_pool: dict[str, tuple[model.BGPAdvertisement, ...]] | None = None,
) -> tuple[model.BGPAdvertisement, ...] | Reason:
    """The advertisements under which this node announces the Service, or why it does not.

    `per_pool` remembers, across the calls of one pass, which advertisements select each pool
    and this node: the same for every Service of the pool."""
    if not service.ips:
        return Reason.NO_IP_ALLOCATED
    pool = pool_of(snapshot.config, service.ips)
    if pool is None:
        return Reason.IP_NOT_ALLOWED
    node = snapshot.nodes.get(me)
    if node is None:
        return Reason.NOT_OWNER
    on_me = None if per_pool is None else per_pool.get(pool.name)
    if on_me is None:
        on_me = tuple(
            ad
            for ad in snapshot.config.bgp_advertisements
            if ad.selects(pool) and _selects_node(ad.node_selectors, node)
        )
        if per_pool is not None:
            per_pool[pool.name] = on_me
    if not on_me:
        return Reason.NOT_OWNER
    ads = tuple(ad for ad in on_me if _service_matches(ad.service_selectors, service))
    if not ads:
        return Reason.NO_MATCHING_ADVERTISEMENT
    if _conflicting(ads, service):
        return Reason.CONFLICTING_ADVERTISEMENTS
    if node.network_unavailable:
        return Reason.NODE_NETWORK_UNAVAILABLE
    if election.excluded(node, snapshot.ignore_exclude_lb):
        return Reason.NODE_EXCLUDED
    if service.local and me not in endpoint_nodes(service):
        return Reason.NO_LOCAL_ENDPOINTS
    if not can_serve(service):
        return Reason.NO_ENDPOINTS
    return ads


def bgp_plan(snapshot: Snapshot, me: model.NodeName) -> BGPPlan:
    mine: list[BGPService] = []
    reasons: dict[str, Reason] = {}
    per_pool: dict[str, tuple[model.BGPAdvertisement, ...]] = {}
    for service in snapshot.services:
        decision = bgp_decision(snapshot, service, me, per_pool)
        if isinstance(decision, Reason):
            reasons[service.key] = decision
        else:
            mine.append(BGPService(service.key, service.ips, decision))
    return BGPPlan(tuple(mine), reasons)
