"""What this node must announce, computed from one snapshot of the cluster.

Every speaker runs the same pure functions over the same inputs, so they agree without talking:
for L2, one owner per address; for BGP, every eligible node. The result is desired state; the
layer 2 and BGP appliers diff it against what they have applied. Decisions carry MetalLB's reason
names (`notOwner`, `noMatchingAdvertisement`, ...) so logs and status read the same as MetalLB's.

Both modes decide in one order: first what holds for the Service on every node (an address, a
pool, an endpoint somewhere, advertisements that apply to it), then whether this node may carry
it: `node_verdict`, the one walk of the node-level checks (`Check`), which layer 2 (its candidates
and its reasons), BGP and `ironlb status --explain` share. A node failing several checks is told
the first, the same in both modes.

Where MetalLB elects per Service (hashing its first ingress address), we elect per address over the
union of the candidates of every Service holding it: Services sharing an address then always have
one owner, whatever their advertisements say. A Service's addresses are all elected by hashing
its first one, so a dual-stack Service is answered by one node in both families.

Beyond MetalLB, a node whose data path is not ready (`ironlb.datapath`: kube-proxy unhealthy, or
for a Local Service not yet programmed) or that is draining is no candidate and withdraws its BGP
routes. Every non-announcement carries a reason and a message (who is elected, which check
failed): what `ironlb status --explain` prints for this node.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ironlb import addresses, datapath, model, selectors
from ironlb import annotations as keys
from speaker import election

# Addresses whose elected node is remembered between passes (`_owner`).
OWNER_MEMO = 16384


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
    # Elected, but none of the interfaces the L2Advertisements name answers here: MetalLB's
    # layer2 SetBalancer posts announceFailed and announces nothing (no ServiceL2Status).
    INTERFACE_MISSING = "interfaceMissing"


# A node's verdict on a Service: MetalLB's reasons, or the data path's (ironlb.datapath).
Why = Reason | datapath.Reason


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
    health_check_node_port: int | None = None  # kube-proxy's answer on local endpoints (Local)
    # "namespace/name", made once: a pass reads it several times for every Service.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


def services_by_key(services: tuple[Service, ...]) -> Mapping[str, Service]:
    """The Services by key, made again only for another tuple: the store hands every pass the
    same tuple while no Service changed (`speaker.snapshot.Store.ours`), and a pass's consumers
    (accounting, status, /explain) share this one index. Read it, never change it."""
    cached = _BY_KEY[0]
    if cached is not None and cached[0] is services:
        return cached[1]
    index = {s.key: s for s in services}
    _BY_KEY[0] = (services, index)
    return index


_BY_KEY: list[tuple[tuple[Service, ...], dict[str, Service]] | None] = [None]


Node = election.NodeInfo


@dataclass(frozen=True, slots=True)
class Snapshot:
    config: model.Config
    services: tuple[Service, ...]
    nodes: Mapping[str, Node]
    # Nodes whose speaker is alive (from membership, or Node Ready when membership is off).
    alive: frozenset[str]
    ignore_exclude_lb: bool = False
    # Each node's own verdict on its data path (gossiped; this node's from its probes). A node
    # without one (a speaker that predates the check, or runs without it) counts as ready.
    readiness: Mapping[str, datapath.NodeReadiness] = field(default_factory=dict)

    def not_ready(self) -> _NotReady:
        """Who is not ready for what, gathered once per pass (not once per Service)."""
        down = frozenset(n for n, r in self.readiness.items() if not r.proxy_ready)
        lagging: dict[str, set[str]] = {}
        for name, r in self.readiness.items():
            for key in r.unready_local:
                lagging.setdefault(key, set()).add(name)
        return _NotReady(down, {k: frozenset(v) for k, v in lagging.items()})


@dataclass(frozen=True, slots=True)
class _NotReady:
    proxy_down: frozenset[str]
    lagging: Mapping[str, frozenset[str]]  # Local Service key -> nodes whose kube-proxy lags

    def for_service(self, service: Service) -> frozenset[str]:
        if not service.local:
            return self.proxy_down
        return self.proxy_down | self.lagging.get(service.key, frozenset())


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
    # Why this node does not announce a Service (absent: it announces every address it owns),
    # and in words (who is elected, which check failed).
    reasons: Mapping[str, Why] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)
    # Addresses this node is elected for but cannot announce: none of the interfaces their
    # advertisements name answers here (MetalLB's announceFailed).
    unannounceable: tuple[L2Address, ...] = ()


@dataclass(frozen=True, slots=True)
class BGPService:
    """A Service this node announces over BGP, with the advertisements that apply here."""

    service: str
    ips: tuple[addresses.IPAddress, ...]
    advertisements: tuple[model.BGPAdvertisement, ...]


@dataclass(frozen=True, slots=True)
class BGPPlan:
    mine: tuple[BGPService, ...]
    # Why this node does not announce a Service, and in words (which check failed).
    reasons: Mapping[str, Why] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)


# --- shared rules --------------------------------------------------------------------------------


def pool_of(config: model.Config, ips: Iterable[addresses.IPAddress]) -> model.IPAddressPool | None:
    """The pool holding every one of the addresses (MetalLB's poolFor), honouring avoidBuggyIPs.

    Remembered for the configuration object it was asked of (`_PoolMemo`): every pass asks it
    for every Service twice, and a profile of a speaker at 1,000 Services had a third of its
    pass here, for answers that change only when the configuration does."""
    wanted = tuple(ips)
    memo = _POOL_MEMO.for_config(config)
    if wanted not in memo:
        memo[wanted] = _first_pool_holding(config, wanted)
    return memo[wanted]


def _first_pool_holding(
    config: model.Config, ips: tuple[addresses.IPAddress, ...]
) -> model.IPAddressPool | None:
    for pool in config.pools:
        if all(_pool_contains(pool, ip) for ip in ips):
            return pool
    return None


_Answers = dict[tuple[addresses.IPAddress, ...], model.IPAddressPool | None]


class _PoolMemo:
    """`pool_of`'s answers for one configuration object, by identity: the snapshot keeps the
    same object until some configuration object changes (`snapshot.Store.parsed_config`), and a
    new one starts afresh. Bounded: addresses come and go with Services."""

    MAX_ENTRIES = 100_000

    def __init__(self) -> None:
        # (configuration, its answers) in one attribute: a reader in another thread sees one
        # pair or the other, never a new configuration with the old one's answers.
        self._entry: tuple[model.Config | None, _Answers] = (None, {})

    def for_config(self, config: model.Config) -> _Answers:
        current, answers = self._entry
        if config is not current or len(answers) > self.MAX_ENTRIES:
            answers = {}
            self._entry = (config, answers)
        return answers


_POOL_MEMO = _PoolMemo()


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


def excluded(node: Node, ignore_exclude_label: bool = False) -> bool:
    """Labelled out of load balancing (unless the speaker runs with --ignore-exclude-lb)."""
    labels = model.label_map(node.labels)
    return keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS in labels and not ignore_exclude_label


# --- one node's verdict: the node-level checks, in one order, for both modes ---------------------


class Mode(enum.StrEnum):
    LAYER2 = "layer2"
    BGP = "bgp"


class Check(enum.Enum):
    """The node-level checks, in the one order `node_verdict` walks them: a node failing several
    is told the first, in both modes.

    MetalLB's order where its source says (speaker's shouldAnnounce, for the node deciding about
    itself: layer2_controller.go and bgp_controller.go both ask first whether an advertisement
    of the pool selects the node; layer 2 then keeps the live speakers (speakersForPool), and
    both drop a NetworkUnavailable node, then an excluded one; last the local endpoint of a
    Local Service). Then ironlb's own: draining beside the Node's other conditions, and the data
    path last (it gates what MetalLB would announce).
    """

    NODE_OBJECT = "nodeObject"  # notOwner: no Node object to read
    SELECTED = "selected"  # an advertisement that applies to the Service selects the node
    LIVE = "live"  # notOwner: layer 2 only, the speaker is a live member
    NETWORK_UNAVAILABLE = "networkUnavailable"
    EXCLUDED = "excluded"  # the exclude-from-external-load-balancers label, unless ignored
    DRAINING = "draining"  # being deleted, tainted for deletion, cordoned when configured
    LOCAL_ENDPOINT = "localEndpoint"  # Local Services: a ready endpoint on the node
    KUBE_PROXY = "kubeProxy"  # the node's kube-proxy is healthy
    KUBE_PROXY_LOCAL = "kubeProxyLocal"  # Local Services: kube-proxy serves the local endpoint


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """Why a node may not announce a Service: the check it failed first, in MetalLB's reason
    name and in words (what `ironlb status --explain` prints)."""

    check: Check
    reason: Why
    message: str


class _Selecting(Protocol):
    """An L2Advertisement or a BGPAdvertisement, as far as choosing nodes goes."""

    @property
    def node_selectors(self) -> tuple[selectors.LabelSelector, ...]: ...


_NO_NODE = NodeVerdict(Check.NODE_OBJECT, Reason.NOT_OWNER, "no Node object for this node")
# Not selected: layer 2 says noMatchingAdvertisement (ironlb's name, as for no advertisement at
# all), BGP notOwner (MetalLB's, poolMatchesNodeBGP).
_UNSELECTED: Mapping[Mode, NodeVerdict] = {
    Mode.LAYER2: NodeVerdict(
        Check.SELECTED,
        Reason.NO_MATCHING_ADVERTISEMENT,
        "no L2Advertisement of the pool selects this node",
    ),
    Mode.BGP: NodeVerdict(
        Check.SELECTED, Reason.NOT_OWNER, "no BGPAdvertisement of the pool selects this node"
    ),
}
_NOT_LIVE = NodeVerdict(Check.LIVE, Reason.NOT_OWNER, "this node's speaker is not a live member")
_NETWORK_UNAVAILABLE = NodeVerdict(
    Check.NETWORK_UNAVAILABLE,
    Reason.NODE_NETWORK_UNAVAILABLE,
    "the Node's NetworkUnavailable condition is True",
)
_EXCLUDED = NodeVerdict(
    Check.EXCLUDED,
    Reason.NODE_EXCLUDED,
    "the Node is labelled exclude-from-external-load-balancers",
)
_NO_LOCAL_ENDPOINT = NodeVerdict(
    Check.LOCAL_ENDPOINT, Reason.NO_LOCAL_ENDPOINTS, "no ready endpoint on this node"
)
_KUBE_PROXY_DOWN = NodeVerdict(
    Check.KUBE_PROXY,
    datapath.Reason.KUBE_PROXY_NOT_READY,
    "kube-proxy is not healthy on this node",
)
_KUBE_PROXY_LAGS = NodeVerdict(
    Check.KUBE_PROXY_LOCAL,
    datapath.Reason.KUBE_PROXY_NO_LOCAL_ENDPOINTS,
    "kube-proxy's healthCheckNodePort reports no local endpoint yet",
)


def node_verdict(
    snapshot: Snapshot, service: Service, me: str, ads: Iterable[_Selecting], mode: Mode
) -> NodeVerdict | None:
    """Why node `me` may not announce `service` in this mode (None: it may), in `Check` order.

    `ads` are the advertisements that apply to the Service (its pool, its labels): whether there
    are any is the Service's question, asked before this one, as are its address, its pool and
    its endpoints anywhere. A node without a verdict on its data path counts as ready.
    """
    node = snapshot.nodes.get(me)
    if node is None:
        return _NO_NODE
    labels = model.label_map(node.labels)
    if not any(selectors.any_matches(ad.node_selectors, labels) for ad in ads):
        return _UNSELECTED[mode]
    own = _own_verdict(snapshot, node, mode)
    if own is not None:
        return own
    if service.local and me not in endpoint_nodes(service):
        return _NO_LOCAL_ENDPOINT
    readiness = snapshot.readiness.get(me)
    if readiness is None:
        return None
    if not readiness.proxy_ready:
        return _KUBE_PROXY_DOWN
    if service.local and service.key in readiness.unready_local:
        return _KUBE_PROXY_LAGS
    return None


def _own_verdict(snapshot: Snapshot, node: Node, mode: Mode) -> NodeVerdict | None:
    """`node_verdict`'s checks of the node alone, whatever the Service (Check.LIVE to
    Check.DRAINING, in that order); the layer 2 electorate filters a pass's nodes with them
    once. Liveness counts in layer 2 only: BGP is each node's own decision."""
    if mode is Mode.LAYER2 and node.name not in snapshot.alive:
        return _NOT_LIVE
    if node.network_unavailable:
        return _NETWORK_UNAVAILABLE
    if excluded(node, snapshot.ignore_exclude_lb):
        return _EXCLUDED
    if node.drain is not None:
        return NodeVerdict(Check.DRAINING, node.drain.reason, node.drain.message)
    return None


# --- layer 2 --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _L2Candidacy:
    candidates: frozenset[str]
    scores: Mapping[str, int]
    ads: tuple[model.L2Advertisement, ...]


class _Electorate:
    """One pass's nodes, read once: who passes its own checks, and for each distinct set of
    advertisements the nodes it selects and their preference scores.

    Services share a few sets of advertisements, so a pass costs (distinct sets x Nodes) +
    (Services x candidates) instead of reading every Node's labels for every Service. The
    candidates are `node_verdict`'s (`candidates` over every Node), its checks applied to sets.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        # The node's own checks, liveness first: at 1,000 Nodes with a handful of live speakers,
        # reading every Node's labels for every Service was most of a pass.
        self._usable = tuple(
            (node, model.label_map(node.labels))
            for node in snapshot.nodes.values()
            if _own_verdict(snapshot, node, Mode.LAYER2) is None
        )
        # Keyed by the advertisements' identities: they live in snapshot.config for the pass.
        self._by_ads: dict[tuple[int, ...], tuple[frozenset[str], Mapping[str, int]]] = {}
        self._without: dict[
            tuple[tuple[int, ...], frozenset[str]], tuple[frozenset[str], Mapping[str, int]]
        ] = {}

    def selection(self, ad: model.L2Advertisement) -> frozenset[tuple[str, int]]:
        """The usable nodes one advertisement selects, each with the preference weight it
        gives the node: what a candidacy under it reads of the nodes (`Memo`)."""
        return frozenset(
            (node.name, election.scores_of(((node, labels),), (ad,)).get(node.name, 0))
            for node, labels in self._usable
            if selectors.any_matches(ad.node_selectors, labels)
        )

    def without(
        self, ads: tuple[model.L2Advertisement, ...], unready: frozenset[str]
    ) -> tuple[frozenset[str], Mapping[str, int]]:
        """The usable nodes these advertisements select, with their scores, less the nodes not
        ready for a Service; one shared set per distinct (advertisements, unready) pair, so
        that the election's memo (`_owner`) holds few."""
        key = tuple(id(ad) for ad in ads)
        selected = self._by_ads.get(key)
        if selected is None:
            chosen = [
                (node, labels)
                for node, labels in self._usable
                if any(selectors.any_matches(ad.node_selectors, labels) for ad in ads)
            ]
            selected = (frozenset(node.name for node, _ in chosen), election.scores_of(chosen, ads))
            self._by_ads[key] = selected
        if unready.isdisjoint(selected[0]):
            return selected
        found = self._without.get((key, unready))
        if found is None:
            left = selected[0] - unready
            found = (left, {n: v for n, v in selected[1].items() if n in left})
            self._without[(key, unready)] = found
        return found


def _l2_ads(
    snapshot: Snapshot, service: Service, pool: model.IPAddressPool
) -> tuple[model.L2Advertisement, ...]:
    """The L2Advertisements that apply to a Service: they select its pool and its labels."""
    return tuple(
        ad
        for ad in snapshot.config.l2_advertisements
        if ad.selects(pool) and _service_matches(ad.service_selectors, service)
    )


def _l2_candidacy(
    snapshot: Snapshot,
    service: Service,
    pool: model.IPAddressPool,
    not_ready: _NotReady,
    electorate: _Electorate,
) -> _L2Candidacy | Reason:
    """The nodes that may announce this Service's addresses (the same answer as `candidates`,
    and `election.scores` over them), or why nobody may: the Service's own checks."""
    if not can_serve(service):
        return Reason.NO_ENDPOINTS
    ads = _l2_ads(snapshot, service, pool)
    if service.shares and any(ad.service_selectors for ad in ads):
        return Reason.SHARED_IP_WITH_SERVICE_SELECTOR
    if not ads:
        return Reason.NO_MATCHING_ADVERTISEMENT
    # `node_verdict`'s data-path checks over the pass's readiness, gathered once.
    unready = not_ready.for_service(service)
    # Shared between the Services with the same advertisements and unready nodes: no copy per
    # Service, and few distinct sets in the election's memo (`_owner`).
    candidates, scores = electorate.without(ads, unready)
    if service.local:
        candidates = candidates & endpoint_nodes(service)
        scores = {n: v for n, v in scores.items() if n in candidates}
    return _L2Candidacy(candidates, scores, ads)


def candidates(
    snapshot: Snapshot, service: Service, ads: Sequence[model.L2Advertisement]
) -> frozenset[str]:
    """The nodes that may announce a Service in layer 2, given the advertisements that apply
    to it: `node_verdict` asked node by node. The definition; a pass computes the same sets
    faster (`_Electorate`)."""
    return frozenset(
        name
        for name in snapshot.nodes
        if node_verdict(snapshot, service, name, ads, Mode.LAYER2) is None
    )


_NO_CANDIDACY_MESSAGES: Mapping[Reason, str] = {
    Reason.NO_ENDPOINTS: "no ready or serving endpoint anywhere",
    Reason.SHARED_IP_WITH_SERVICE_SELECTOR: (
        "a Service sharing its address is selected by an advertisement with serviceSelectors"
    ),
    Reason.NO_MATCHING_ADVERTISEMENT: "no L2Advertisement selects the pool and the Service",
    Reason.NO_IP_ALLOCATED: "the Service has no address",
    Reason.IP_NOT_ALLOWED: "no pool holds the Service's addresses",
}


def _merged(
    candidacies: Iterable[_L2Candidacy],
) -> tuple[frozenset[str], Mapping[str, int]]:
    """The candidates and scores of an address over the Services holding it: the union, and
    each node's highest score (one holder's own, uncopied, in the common case)."""
    found = list(candidacies)
    if len(found) == 1:
        return found[0].candidates, found[0].scores
    candidates: set[str] = set()
    scores: dict[str, int] = {}
    for candidacy in found:
        candidates |= candidacy.candidates
        for name, score in candidacy.scores.items():
            scores[name] = max(scores.get(name, 0), score)
    return frozenset(candidates), scores


@functools.lru_cache(maxsize=OWNER_MEMO)
def _owner(
    address: str, candidates: frozenset[str], scores: tuple[tuple[str, int], ...]
) -> str | None:
    """The elected node (`election.owner`), remembered: a pass asks the same question for
    every address as the last pass did unless its candidates changed, and the answer costs a
    SHA-256 per candidate. The candidate sets are the pass's shared objects, so the memo holds
    few distinct ones."""
    return election.owner(address, candidates, dict(scores))


# address -> ([(service, candidacy)], election keys) of the Services holding it.
_Holders = dict[
    addresses.IPAddress, tuple[list[tuple[Service, _L2Candidacy]], set[addresses.IPAddress]]
]


def _l2_holders(
    snapshot: Snapshot, reasons: dict[str, Why], messages: dict[str, str], memo: Memo
) -> _Holders:
    """Each address's Services that some node may announce, with their candidacies; the
    others' reasons (the Service's own checks) go into `reasons` and `messages`. A Service
    whose candidacy the memo still holds is not judged again."""
    not_ready = snapshot.not_ready()
    electorate = _Electorate(snapshot)
    changed = memo.l2_selections(snapshot, electorate)
    kept = memo.candidacies
    fresh: dict[str, _L2Entry] = {}
    per_address: _Holders = {}
    for service in snapshot.services:
        unready = not_ready.for_service(service)
        entry = kept.get(service.key)
        if entry is None or not entry.still(service, unready, changed):
            entry = _L2Entry(
                service, unready, _l2_candidacy_of(snapshot, service, not_ready, electorate)
            )
        fresh[service.key] = entry
        candidacy = entry.candidacy
        if isinstance(candidacy, Reason):
            reasons[service.key] = candidacy
            messages[service.key] = _NO_CANDIDACY_MESSAGES.get(candidacy, "")
            continue
        for ip in service.ips:
            holders, keys = per_address.setdefault(ip, ([], set()))
            holders.append((service, candidacy))
            # MetalLB hashes a Service's first address for all of them: a dual-stack Service
            # is announced by one node in both families.
            keys.add(service.ips[0])
    memo.candidacies = fresh
    return per_address


def _l2_candidacy_of(
    snapshot: Snapshot, service: Service, not_ready: _NotReady, electorate: _Electorate
) -> _L2Candidacy | Reason:
    if not service.ips:
        return Reason.NO_IP_ALLOCATED
    pool = pool_of(snapshot.config, service.ips)
    if pool is None:
        return Reason.IP_NOT_ALLOWED
    return _l2_candidacy(snapshot, service, pool, not_ready, electorate)


def _why_not_mine(
    snapshot: Snapshot,
    me: str,
    owner: str | None,
    holders: Iterable[tuple[Service, _L2Candidacy]],
    reasons: dict[str, Why],
    messages: dict[str, str],
) -> None:
    """Why this node does not announce an address's Services (those without a reason yet):
    the first node-level check it fails (`node_verdict`), else another node is elected."""
    for service, candidacy in holders:
        if service.key in reasons:
            continue
        why = node_verdict(snapshot, service, me, candidacy.ads, Mode.LAYER2)
        if why is not None:
            reasons[service.key], messages[service.key] = why.reason, why.message
        else:
            reasons[service.key] = Reason.NOT_OWNER
            messages[service.key] = f"{owner} is elected" if owner else "no node is eligible"


def l2_plan(
    snapshot: Snapshot,
    me: model.NodeName,
    interfaces: frozenset[str] | None = None,
    memo: Memo | None = None,
) -> L2Plan:
    """Which addresses this node answers for, and why not for the others. `interfaces` are
    this node's interfaces that answer ARP/NDP (None: not known, every advertisement's
    interface list is taken as met). `memo` (one per speaker) carries what the previous pass
    found: an address whose Services, candidacies and this node's view of itself are as they
    were is not decided again; the plan is the same as without it."""
    memo = memo if memo is not None else Memo()
    reasons: dict[str, Why] = {}
    messages: dict[str, str] = {}
    per_address = _l2_holders(snapshot, reasons, messages, memo)
    myself = memo.l2_myself(snapshot, me, interfaces)
    kept = memo.addresses
    fresh: dict[addresses.IPAddress, _AddressVerdict] = {}
    owners: dict[addresses.IPAddress, str | None] = {}
    mine: list[L2Address] = []
    unannounceable: list[L2Address] = []
    for ip in memo.address_order(per_address):
        holders, keys = per_address[ip]
        verdict = kept.get(ip)
        if verdict is None or not verdict.still(holders, myself):
            verdict = _address_verdict(snapshot, me, interfaces, ip, holders, keys, myself)
        fresh[ip] = verdict
        owners[ip] = verdict.owner
        if verdict.mine is not None:
            mine.append(verdict.mine)
        if verdict.unannounceable is not None:
            unannounceable.append(verdict.unannounceable)
        # The first address's reason stands for a Service (addresses in order, as before).
        for key, why, message in verdict.reasons:
            if key not in reasons:
                reasons[key], messages[key] = why, message
    memo.addresses = fresh
    # A Service announced for at least one of its addresses has no reason to report.
    for entry in mine:
        for key in entry.services:
            reasons.pop(key, None)
            messages.pop(key, None)
    return L2Plan(tuple(mine), owners, reasons, messages, tuple(unannounceable))


def _address_verdict(
    snapshot: Snapshot,
    me: model.NodeName,
    interfaces: frozenset[str] | None,
    ip: addresses.IPAddress,
    holders: list[tuple[Service, _L2Candidacy]],
    keys: set[addresses.IPAddress],
    myself: _Myself,
) -> _AddressVerdict:
    """One address's owner and what it means for this node: announced, elected but
    unanswerable here (and why), or why not (`_why_not_mine`)."""
    cands, scores = _merged(candidacy for _, candidacy in holders)
    # Services sharing an address but listing different first addresses (MetalLB would
    # elect each on its own and may get two announcers): the smallest key decides, the
    # same on every node, so an address always has one owner.
    owner = _owner(str(min(keys, key=_address_order)), cands, tuple(sorted(scores.items())))
    node = snapshot.nodes.get(me)
    holding = tuple(holders)
    if owner != me or node is None:
        why: dict[str, Why] = {}
        words: dict[str, str] = {}
        _why_not_mine(snapshot, me, owner, holders, why, words)
        found = tuple((key, reason, words[key]) for key, reason in why.items())
        return _AddressVerdict(holding, myself, owner, None, None, found)
    my_ads = [
        ad
        for _, candidacy in holders
        for ad in candidacy.ads
        if _selects_node(ad.node_selectors, node)
    ]
    entry = L2Address(
        address=ip,
        interfaces=_interfaces(my_ads),
        services=tuple(sorted({service.key for service, _ in holders})),
    )
    if _answers(entry.interfaces, interfaces):
        return _AddressVerdict(holding, myself, owner, entry, None, ())
    # MetalLB elects without looking at interfaces, so the address stays here, unanswered,
    # as it does there; every node computes the same owner from the same inputs.
    message = _missing_message(entry.interfaces, interfaces or frozenset())
    missing = tuple((key, Reason.INTERFACE_MISSING, message) for key in entry.services)
    return _AddressVerdict(holding, myself, owner, None, entry, missing)


def _answers(wanted: tuple[str, ...], present: frozenset[str] | None) -> bool:
    """Whether one of the interfaces an address may be answered on is here (MetalLB's
    IPAdvertisement.MatchInterfaces against the announcer's interfaces)."""
    return wanted == ALL_INTERFACES or present is None or not present.isdisjoint(wanted)


def _missing_message(wanted: tuple[str, ...], present: frozenset[str]) -> str:
    here = ", ".join(sorted(present)) or "none"
    return (
        f"elected, but none of the interfaces the L2Advertisements name ({', '.join(wanted)}) "
        f"answers ARP/NDP on this node (it answers on: {here})"
    )


def _address_order(address: addresses.IPAddress) -> tuple[int, int]:
    return (address.version, int(address))


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


_BGP_MESSAGES: Mapping[Reason, str] = {
    Reason.NO_IP_ALLOCATED: "the Service has no address",
    Reason.IP_NOT_ALLOWED: "no pool holds the Service's addresses",
    Reason.NO_ENDPOINTS: "no ready or serving endpoint anywhere",
    Reason.NO_MATCHING_ADVERTISEMENT: "no BGPAdvertisement selects this Service",
    Reason.CONFLICTING_ADVERTISEMENTS: "advertisements disagree on localPref",
}


def _bgp_verdict(
    snapshot: Snapshot,
    service: Service,
    me: model.NodeName,
    per_pool: dict[str, tuple[model.BGPAdvertisement, ...]] | None,
) -> tuple[model.BGPAdvertisement, ...] | Reason | NodeVerdict:
    """`bgp_decision`, with the node-level verdict whole (its message)."""
    if not service.ips:
        return Reason.NO_IP_ALLOCATED
    pool = pool_of(snapshot.config, service.ips)
    if pool is None:
        return Reason.IP_NOT_ALLOWED
    if not can_serve(service):
        return Reason.NO_ENDPOINTS
    of_pool = None if per_pool is None else per_pool.get(pool.name)
    if of_pool is None:
        of_pool = tuple(ad for ad in snapshot.config.bgp_advertisements if ad.selects(pool))
        if per_pool is not None:
            per_pool[pool.name] = of_pool
    labels = model.label_map(service.labels)
    ads = tuple(ad for ad in of_pool if selectors.any_matches(ad.service_selectors, labels))
    if not ads:
        return Reason.NO_MATCHING_ADVERTISEMENT
    node = snapshot.nodes.get(me)
    here: tuple[model.BGPAdvertisement, ...] = ()
    if node is not None:
        mine = model.label_map(node.labels)
        here = tuple(ad for ad in ads if selectors.any_matches(ad.node_selectors, mine))
    if _conflicting(here, service):
        return Reason.CONFLICTING_ADVERTISEMENTS
    # `here` are the ads that apply and select this node: node_verdict's selection check
    # then needs no second match of every ad against the node's labels.
    verdict = node_verdict(snapshot, service, me, here, Mode.BGP)
    return here if verdict is None else verdict


def bgp_decision(
    snapshot: Snapshot,
    service: Service,
    me: model.NodeName,
    per_pool: dict[str, tuple[model.BGPAdvertisement, ...]] | None = None,
) -> tuple[model.BGPAdvertisement, ...] | Why:
    """The advertisements under which this node announces the Service, or why it does not:
    the Service's own checks (an address, a pool, an endpoint anywhere, a BGPAdvertisement
    that applies to it, no two of those here in conflict), then this node's (`node_verdict`).

    `per_pool` remembers, across the calls of one pass, which advertisements select each pool:
    the same for every Service of the pool."""
    found = _bgp_verdict(snapshot, service, me, per_pool)
    return found.reason if isinstance(found, NodeVerdict) else found


def bgp_plan(snapshot: Snapshot, me: model.NodeName, memo: Memo | None = None) -> BGPPlan:
    """What this node announces over BGP, and why not the rest. With `memo` (one per speaker),
    a Service whose object is the one the previous pass judged keeps its verdict while the
    configuration and this node's view of itself are as they were; the plan is the same."""
    memo = memo if memo is not None else Memo()
    mine: list[BGPService] = []
    reasons: dict[str, Why] = {}
    messages: dict[str, str] = {}
    kept = memo.bgp_verdicts if memo.bgp_myself(snapshot, me) else {}
    fresh: dict[str, tuple[Service, _BGPVerdict, BGPService | None]] = {}
    per_pool: dict[str, tuple[model.BGPAdvertisement, ...]] = {}
    for service in snapshot.services:
        before = kept.get(service.key)
        if before is not None and before[0] is service:
            fresh[service.key] = before
            found, announced = before[1], before[2]
        else:
            found = _bgp_verdict(snapshot, service, me, per_pool)
            announced = (
                None
                if isinstance(found, NodeVerdict | Reason)
                else BGPService(service.key, service.ips, found)
            )
            fresh[service.key] = (service, found, announced)
        if announced is not None:
            mine.append(announced)
        elif isinstance(found, NodeVerdict):
            reasons[service.key], messages[service.key] = found.reason, found.message
        elif isinstance(found, Reason):
            reasons[service.key], messages[service.key] = found, _BGP_MESSAGES[found]
    memo.bgp_verdicts = fresh
    return BGPPlan(tuple(mine), reasons, messages)


_BGPVerdict = tuple[model.BGPAdvertisement, ...] | Reason | NodeVerdict


# --- what passes remember -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _L2Entry:
    """A Service's layer 2 candidacy (or the reason it has none), with what it was read from
    beyond the configuration and the nodes' selection."""

    service: Service
    unready: frozenset[str]
    candidacy: _L2Candidacy | Reason

    def still(self, service: Service, unready: frozenset[str], changed: frozenset[int]) -> bool:
        """Whether it holds for this pass: the same Service object (the store keeps one until
        the Service or its EndpointSlices change), the same nodes not ready for it, and none of
        its advertisements selecting other nodes (`changed`: their identities)."""
        if service is not self.service or unready != self.unready:
            return False
        candidacy = self.candidacy
        return isinstance(candidacy, Reason) or all(id(ad) not in changed for ad in candidacy.ads)


@dataclass(frozen=True, slots=True)
class _Myself:
    """What this node's kept verdicts (on addresses in layer 2, on Services in BGP) read of the
    node itself: which advertisements of the mode select it, its own checks, its data path,
    the interfaces answering here (layer 2; None in BGP)."""

    present: bool
    selected_by: tuple[bool, ...]
    own: NodeVerdict | None
    readiness: datapath.NodeReadiness | None
    interfaces: frozenset[str] | None


def _myself(
    snapshot: Snapshot,
    me: str,
    ads: Sequence[_Selecting],
    mode: Mode,
    interfaces: frozenset[str] | None,
) -> _Myself:
    """This node as the kept verdicts of one mode read it (`_Myself`)."""
    node = snapshot.nodes.get(me)
    if node is None:
        return _Myself(False, (), None, snapshot.readiness.get(me), interfaces)
    labels = model.label_map(node.labels)
    return _Myself(
        True,
        tuple(selectors.any_matches(ad.node_selectors, labels) for ad in ads),
        _own_verdict(snapshot, node, mode),
        snapshot.readiness.get(me),
        interfaces,
    )


@dataclass(frozen=True, slots=True)
class _AddressVerdict:
    holders: tuple[tuple[Service, _L2Candidacy], ...]
    myself: _Myself
    owner: str | None
    mine: L2Address | None
    unannounceable: L2Address | None
    reasons: tuple[tuple[str, Why, str], ...]

    def still(self, holders: list[tuple[Service, _L2Candidacy]], myself: _Myself) -> bool:
        """The same Services holding the address with the same candidacy objects, and this
        node as it was."""
        return (
            len(holders) == len(self.holders)
            and all(s is t and c is d for (s, c), (t, d) in zip(holders, self.holders, strict=True))
            and (myself is self.myself or myself == self.myself)
        )


class Memo:
    """What one speaker's passes remember of the previous one, so that a pass costs what
    changed, not what the cluster holds: each answer is kept with what it was computed from
    (Service objects by identity, the configuration by identity, which nodes each advertisement
    selects and this node's view of itself by equality) and used again only while those are
    the same. A plan with a memo equals the plan without one (a property test pins it).

    One per speaker, used by one pass at a time: the memo for a hypothetical snapshot (such as
    `Agent._announce_again`'s, with every member alive) is a fresh one."""

    def __init__(self) -> None:
        self._config: model.Config | None = None
        self._l2_selections: tuple[frozenset[tuple[str, int]], ...] = ()
        self.candidacies: dict[str, _L2Entry] = {}
        self.addresses: dict[addresses.IPAddress, _AddressVerdict] = {}
        self._order: tuple[addresses.IPAddress, ...] = ()
        self._bgp_myself: _Myself | None = None
        self._l2_myself: _Myself | None = None
        # Service key -> (the Service judged, its verdict, and what it announces if mine).
        self.bgp_verdicts: dict[str, tuple[Service, _BGPVerdict, BGPService | None]] = {}

    def _same_config(self, config: model.Config) -> bool:
        if config is self._config:
            return True
        self._config = config
        self.candidacies, self.addresses, self.bgp_verdicts = {}, {}, {}
        self._l2_selections, self._bgp_myself = (), None
        return False

    def l2_selections(self, snapshot: Snapshot, electorate: _Electorate) -> frozenset[int]:
        """The L2Advertisements (identities) that select other usable nodes, or give them
        other preference weights, than in the previous pass: the candidacies they gave are
        judged again. Every one, with another configuration."""
        same = self._same_config(snapshot.config)
        now = tuple(electorate.selection(ad) for ad in snapshot.config.l2_advertisements)
        before, self._l2_selections = self._l2_selections, now
        ads = snapshot.config.l2_advertisements
        if not same or len(before) != len(now):
            return frozenset(id(ad) for ad in ads)
        return frozenset(id(ad) for ad, b, n in zip(ads, before, now, strict=True) if b != n)

    def l2_myself(self, snapshot: Snapshot, me: str, interfaces: frozenset[str] | None) -> _Myself:
        """This node's view of itself in layer 2: the previous pass's object while equal, so
        that each kept address verdict compares it by identity, not field by field."""
        now = _myself(snapshot, me, snapshot.config.l2_advertisements, Mode.LAYER2, interfaces)
        if now == self._l2_myself:
            return self._l2_myself
        self._l2_myself = now
        return now

    def address_order(
        self, per_address: Mapping[addresses.IPAddress, object]
    ) -> tuple[addresses.IPAddress, ...]:
        """The addresses in `_address_order`, sorted again only when they changed."""
        if len(per_address) != len(self._order) or any(ip not in per_address for ip in self._order):
            self._order = tuple(sorted(per_address, key=_address_order))
        return self._order

    def bgp_myself(self, snapshot: Snapshot, me: str) -> bool:
        """Whether the BGP verdicts kept still hold as far as this node goes: the same
        configuration, the same BGPAdvertisements selecting it, its own checks and data path
        as they were."""
        same = self._same_config(snapshot.config)
        now = _myself(snapshot, me, snapshot.config.bgp_advertisements, Mode.BGP, None)
        before, self._bgp_myself = self._bgp_myself, now
        return same and before == now
