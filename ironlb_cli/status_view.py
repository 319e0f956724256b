"""`ironlb status`, the pure part: API objects and speaker metrics -> a view (`render` prints it).

Everything the command shows is derived here from what it was given, so the whole screen can be
tested from tables of objects without a cluster. The shell (`ironlb_cli.__main__`) only fetches.

Sources, and what each one can tell:
* the API: pools with the controller's counters (`status.assigned*`/`available*`), Services with
  their ingress and the `metallb.io/ip-allocated-from-pool` annotation, the speakers'
  ServiceL2Status / ServiceBGPStatus objects (who announces what, to which BGPPeers), Nodes
  (Ready), and Warning Events about Services (why one is pending);
* the speakers' Prometheus endpoints, only when given: BGP and BFD session state per peer, the
  membership view (how many members each speaker sees alive, suspect, dead) and whether a speaker
  runs on a stale configuration. Nothing in the API carries those, so without a scrape they are
  "unknown", never guessed.

Objects of any shape are read as data: a malformed object shows up as a configuration problem or
as blanks, it never stops the command.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import parser as prom_parser

from ironlb import addresses, honouring, model, parsing, selectors, services, validation
from ironlb import annotations as keys
from ironlb.problems import Problem
from ironlb_cli import readers

SCHEMA_VERSION = 1
UNKNOWN = "unknown"
MEMBER_STATES = ("alive", "suspect", "dead", "left")
READY_VALUES = ("True", "False", "Unknown")

_Answer = TypeVar("_Answer")


# --- inputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scrape:
    """One speaker's /metrics: its text, or why it could not be read."""

    url: str
    node: str | None = None  # from `NAME=URL`; else found from the URL's host
    text: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Inputs:
    # metallb.io configuration kinds (`IPAddressPool`, ...) -> raw objects of the namespace
    config: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    services: Sequence[Any] = ()
    nodes: Sequence[Any] = ()
    l2_statuses: Sequence[Any] = ()
    bgp_statuses: Sequence[Any] = ()
    events: Sequence[Any] = ()  # Warning Events whose involvedObject is a Service
    scrapes: Sequence[Scrape] = ()
    # Why speakers could not be found through the API (none running, no right to list Pods).
    speaker_notes: Sequence[str] = ()
    lb_class: str = ""
    # Names of the Secrets in the MetalLB namespace; None = not read (no RBAC for Secrets), and
    # then a `passwordSecret` cannot be judged dangling.
    secret_names: frozenset[str] | None = None


# --- the view -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FamilyUsage:
    family: str  # "IPv4" | "IPv6"
    assigned: int | None  # None until the controller wrote the pool's status
    available: int | None

    @property
    def total(self) -> int | None:
        if self.assigned is None or self.available is None:
            return None
        return self.assigned + self.available

    @property
    def fraction(self) -> float | None:
        total = self.total
        if total is None or self.assigned is None:
            return None
        return 0.0 if total == 0 else self.assigned / total


@dataclass(frozen=True, slots=True)
class PoolView:
    name: str
    addresses: tuple[str, ...]
    auto_assign: bool
    families: tuple[FamilyUsage, ...]
    l2_advertisements: tuple[str, ...]
    bgp_advertisements: tuple[str, ...]
    services: int  # Services whose addresses came from this pool


@dataclass(frozen=True, slots=True)
class Announcement:
    protocol: str  # "layer2" | "bgp"
    node: str
    peers: tuple[str, ...] = ()  # BGP: the BGPPeers its prefixes are configured to reach
    interfaces: tuple[str, ...] = ()  # layer 2: empty = every interface


@dataclass(frozen=True, slots=True)
class ServiceView:
    namespace: str
    name: str
    addresses: tuple[str, ...]
    pool: str | None
    traffic_policy: str  # externalTrafficPolicy: "Cluster" | "Local"
    state: str  # "pending" | "not-announced" | "announced"
    announcements: tuple[Announcement, ...]
    reason: str | None  # why pending / not announced, when something tells

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(sorted({a.protocol for a in self.announcements}))


@dataclass(frozen=True, slots=True)
class SessionView:
    peer: str  # BGPPeer name
    address: str  # as in the metrics' `peer` label: "10.0.0.1:179", "[fd00::1]:179"
    my_asn: int
    peer_asn: int | None  # None for dynamicASN
    node: str
    bgp: str  # "up" | "down" | "absent" (the speaker has no such session) | "unknown"
    bfd: str | None  # same values; None when the peer has no BFD profile
    prefixes: int | None


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    ready: str  # the Node's Ready condition: "True" | "False" | "Unknown"
    speaker: str  # "scraped" | "error" | "not-scraped"
    error: str | None
    members: Mapping[str, int] | None  # what this speaker's membership sees, by state
    announced: int | None  # Services x addresses this speaker announces
    config_stale: bool | None


@dataclass(frozen=True, slots=True)
class ScrapeView:
    url: str
    node: str | None
    error: str | None  # None: read and understood


@dataclass(frozen=True, slots=True)
class View:
    pools: tuple[PoolView, ...]
    services: tuple[ServiceView, ...]
    sessions: tuple[SessionView, ...]
    nodes: tuple[NodeView, ...]
    problems: tuple[str, ...]  # configuration problems, fields not honoured, unmatched scrapes
    scrapes: tuple[ScrapeView, ...]


# --- small readers that never raise ---------------------------------------------------------------


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value)


def _meta(obj: Any) -> Mapping[str, Any]:
    return readers.mapping(readers.mapping(obj).get("metadata"))


def _family(text: str) -> str:
    return "IPv6" if ":" in text else "IPv4"


# --- metrics --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeakerMetrics:
    bgp_up: Mapping[str, bool]  # peer label "addr:port" -> up
    bfd_up: Mapping[str, bool]  # peer address -> up
    prefixes: Mapping[str, int]
    members: Mapping[str, int] | None  # None when membership is off in that speaker
    announced: int
    announcing_nodes: frozenset[str]  # `node` labels of metallb_speaker_announced
    config_stale: bool | None


@dataclass(frozen=True, slots=True)
class Reading:
    """One node's scrape: its figures, or why there are none."""

    metrics: SpeakerMetrics | None
    error: str | None


def read_metrics(text: str) -> SpeakerMetrics:
    """The figures `status` needs from one speaker's exposition text; ValueError if malformed."""
    bgp_up: dict[str, bool] = {}
    bfd_up: dict[str, bool] = {}
    prefixes: dict[str, int] = {}
    members: dict[str, int] | None = None
    announced = 0
    nodes: set[str] = set()
    stale: bool | None = None
    try:
        families = list(prom_parser.text_string_to_metric_families(text))
    except Exception as e:  # the parser raises bare ValueErrors, and worse on odd input
        raise ValueError(f"not Prometheus text: {e}") from e
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if not math.isfinite(value):
                continue
            if name == "metallb_bgp_session_up":
                bgp_up[labels.get("peer", "")] = value >= 1
            elif name == "metallb_bfd_session_up":
                bfd_up[labels.get("peer", "")] = value >= 1
            elif name == "metallb_bgp_announced_prefixes_total":
                prefixes[labels.get("peer", "")] = int(value)
            elif name == "ironlb_memberlist_members":
                members = members if members is not None else {}
                state = labels.get("state", "")
                members[state] = members.get(state, 0) + int(value)
            elif name == "metallb_speaker_announced" and value >= 1:
                announced += 1
                if labels.get("node"):
                    nodes.add(labels["node"])
            elif name == "metallb_k8s_client_config_stale_bool":
                stale = value >= 1
    return SpeakerMetrics(bgp_up, bfd_up, prefixes, members, announced, frozenset(nodes), stale)


def peer_label(address: str, port: int) -> str:
    """The `peer` label the speaker's BGP metrics use (MetalLB's): host:port, IPv6 bracketed."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def url_host(url: str) -> str | None:
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None
    return host or None


# --- building the view ----------------------------------------------------------------------------


def build(inputs: Inputs) -> View:
    config, problems = _config(inputs)
    nodes_raw = [n for n in inputs.nodes if readers.text(_meta(n).get("name"))]
    scraped, scrape_rows, scrape_problems = _match_scrapes(inputs.scrapes, nodes_raw)
    service_views = _services(inputs, config)
    pools = _pools(inputs.config.get(model.IP_ADDRESS_POOL, ()), config, service_views)
    sessions = _sessions(config, nodes_raw, scraped)
    nodes = _nodes(nodes_raw, scraped)
    return View(
        pools=pools,
        services=service_views,
        sessions=sessions,
        nodes=nodes,
        problems=(*problems, *inputs.speaker_notes, *scrape_problems),
        scrapes=scrape_rows,
    )


def checked(
    stored: Mapping[str, Any], secret_names: Iterable[str] | None
) -> tuple[model.Config, list[Problem]]:
    """The stored metallb.io objects (kind -> list) through ironlb's parsing and cross-object
    validation, as the webhook and the controller judge them (`ironlb preflight` too).
    `secret_names` None: the Secrets could not be read, so password references go unjudged."""
    objects: dict[str, list[Any]] = {
        kind: [o for o in readers.items(stored.get(kind)) if isinstance(o, Mapping)]
        for kind in model.CONFIG_KINDS
    }
    raw: dict[str, Iterable[Any]] = dict(objects)
    if secret_names is not None:
        raw[model.SECRET] = [{"metadata": {"name": n}} for n in sorted(secret_names)]
    config, problems = parsing.parse_config(raw)
    found = validation.order([*problems, *validation.validate(config)])
    if secret_names is None:
        found = [p for p in found if not p.field.startswith("spec.passwordSecret")]
    return config, found


def _config(inputs: Inputs) -> tuple[model.Config, list[str]]:
    config, found = checked(inputs.config, inputs.secret_names)
    # Then what is accepted but not honoured: the same list the webhook warns with.
    found += honouring.not_honoured(config)
    return config, [str(p) for p in found]


def _match_scrapes(
    scrapes: Sequence[Scrape], nodes: Sequence[Any]
) -> tuple[dict[str, Reading], tuple[ScrapeView, ...], list[str]]:
    """Node name -> what its speaker's metrics say; a row per scrape; scrapes that fit no node."""
    by_address = nodes_by_address(nodes)
    matched: dict[str, Reading] = {}
    rows: list[ScrapeView] = []
    problems: list[str] = []
    for scrape in scrapes:
        metrics: SpeakerMetrics | None = None
        error = scrape.error
        if error is None:
            try:
                metrics = read_metrics(scrape.text or "")
            except ValueError as e:
                error = str(e)
        node = scrape.node or node_of_url(scrape.url, by_address)
        if not node and metrics is not None and len(metrics.announcing_nodes) == 1:
            (node,) = metrics.announcing_nodes
        rows.append(ScrapeView(scrape.url, node, error))
        problem = file_under_node(matched, node, scrape.url, Reading(metrics, error), "scraped")
        if problem:
            problems.append(problem)
    return matched, tuple(rows), problems


def nodes_by_address(nodes: Sequence[Any]) -> dict[str, str]:
    """Each address of a Node (`status.addresses`, one spelling per address) -> the Node's name."""
    by_address: dict[str, str] = {}
    for node in nodes:
        name = readers.text(_meta(node).get("name"))
        for entry in readers.items(
            readers.mapping(readers.mapping(node).get("status")).get("addresses")
        ):
            by_address[_canonical(readers.text(readers.mapping(entry).get("address")))] = name
    return by_address


def node_of_url(url: str, by_address: Mapping[str, str]) -> str | None:
    """The Node whose address is the URL's host, if any (`nodes_by_address`)."""
    host = url_host(url)
    return by_address.get(_canonical(host)) if host else None


def file_under_node(
    matched: dict[str, _Answer], node: str | None, url: str, answer: _Answer, asked: str
) -> str | None:
    """Files the answer of the speaker at `url` under its node, the first answer per node
    winning; else the problem to report. `asked` is how the speaker was asked ("scraped")."""
    if not node:
        return f"{url}: cannot tell which node this speaker runs on; give it as NODE=URL"
    if node in matched:
        return f"{url}: node {node} was already {asked}; ignored"
    matched[node] = answer
    return None


def _canonical(address: str) -> str:
    """One spelling per address, so a node's address and a scrape URL's host compare equal."""
    ip = addresses.parse_ip(address)
    return address if ip is None else str(ip)


def _services(inputs: Inputs, config: model.Config) -> tuple[ServiceView, ...]:
    l2: dict[str, list[Announcement]] = {}
    bgp: dict[str, list[Announcement]] = {}
    for raw in inputs.l2_statuses:
        parsed, _ = parsing.parse_servicel2status(readers.mapping(raw))
        if parsed is not None and parsed.node:
            key = f"{parsed.service_namespace}/{parsed.service_name}"
            announcement = Announcement("layer2", parsed.node, interfaces=parsed.interfaces)
            l2.setdefault(key, []).append(announcement)
    for raw in inputs.bgp_statuses:
        parsed_bgp, _ = parsing.parse_servicebgpstatus(readers.mapping(raw))
        if parsed_bgp is not None and parsed_bgp.node:
            key = f"{parsed_bgp.service_namespace}/{parsed_bgp.service_name}"
            peers = tuple(sorted(parsed_bgp.peers))
            bgp.setdefault(key, []).append(Announcement("bgp", parsed_bgp.node, peers=peers))
    warnings = _latest_warnings(inputs.events)
    out = []
    for raw in map(readers.mapping, inputs.services):
        if not services.ours(raw, inputs.lb_class):
            continue
        spec, meta = readers.mapping(raw.get("spec")), _meta(raw)
        namespace, name = readers.text(meta.get("namespace")), readers.text(meta.get("name"))
        key = services.key(raw)
        ips = services.ingress(raw).texts  # as written: an address that does not parse shows
        notes = readers.mapping(meta.get("annotations"))
        pool = readers.text(notes.get(keys.IP_ALLOCATED_FROM_POOL)) or None
        policy = readers.text(spec.get("externalTrafficPolicy")) or "Cluster"
        announced = sorted(
            (*l2.get(key, ()), *bgp.get(key, ())), key=lambda a: (a.protocol, a.node)
        )
        if not ips:
            state = "pending"
            reason = warnings.get(key) or (
                "no Warning event yet: is the controller running?"
                if config.pools
                else "no valid IPAddressPool in the MetalLB namespace"
            )
        elif not announced:
            state = "not-announced"
            reason = _not_announced_reason(config, pool, policy, warnings.get(key))
        else:
            state, reason = "announced", None
        out.append(ServiceView(namespace, name, ips, pool, policy, state, tuple(announced), reason))
    return tuple(sorted(out, key=lambda s: (s.namespace, s.name)))


def _latest_warnings(events: Sequence[Any]) -> dict[str, str]:
    """Service key -> "reason: message" of its most recent Warning Event."""
    latest: dict[str, tuple[str, str]] = {}
    for event in events:
        e = readers.mapping(event)
        involved = readers.mapping(e.get("involvedObject"))
        if e.get("type") != "Warning" or involved.get("kind") != "Service":
            continue
        key = f"{readers.text(involved.get('namespace'))}/{readers.text(involved.get('name'))}"
        # RFC 3339 timestamps of one format compare as strings.
        when = (
            readers.text(e.get("lastTimestamp"))
            or readers.text(e.get("eventTime"))
            or readers.text(_meta(e).get("creationTimestamp"))
        )
        text = f"{readers.text(e.get('reason'))}: {readers.text(e.get('message'))}".strip(": ")
        if key not in latest or when >= latest[key][0]:
            latest[key] = (when, text)
    return {k: v[1] for k, v in latest.items()}


def _not_announced_reason(
    config: model.Config, pool_name: str | None, policy: str, warning: str | None
) -> str:
    if warning:
        return warning
    pool = config.pool(pool_name) if pool_name else None
    advertised = pool is not None and (
        any(ad.selects(pool) for ad in config.l2_advertisements)
        or any(ad.selects(pool) for ad in config.bgp_advertisements)
    )
    if pool is not None and not advertised:
        return f"pool {pool.name} has no L2Advertisement or BGPAdvertisement: nobody announces it"
    if policy == "Local":
        return "externalTrafficPolicy: Local and no eligible node has a ready endpoint"
    return "no speaker announces it: no ready endpoint, or no eligible node"


def _pools(
    raw_pools: Sequence[Any], config: model.Config, services: Sequence[ServiceView]
) -> tuple[PoolView, ...]:
    users: dict[str, int] = {}
    for service in services:
        if service.pool:
            users[service.pool] = users.get(service.pool, 0) + 1
    out = []
    for raw in raw_pools:
        name = readers.text(_meta(raw).get("name"))
        if not name:
            continue
        spec = readers.mapping(readers.mapping(raw).get("spec"))
        status = readers.mapping(readers.mapping(raw).get("status"))
        written = tuple(
            a for a in (readers.text(x).strip() for x in readers.items(spec.get("addresses"))) if a
        )
        present = {_family(a) for a in written}
        families = []
        for family, suffix in (("IPv4", "IPv4"), ("IPv6", "IPv6")):
            assigned = _int(status.get(f"assigned{suffix}"))
            available = _int(status.get(f"available{suffix}"))
            if family in present or assigned or available:
                families.append(FamilyUsage(family, assigned, available))
        parsed = config.pool(name)
        l2 = tuple(a.name for a in config.l2_advertisements if parsed and a.selects(parsed))
        bgp = tuple(a.name for a in config.bgp_advertisements if parsed and a.selects(parsed))
        auto = spec.get("autoAssign")
        out.append(
            PoolView(
                name=name,
                addresses=written,
                auto_assign=auto if isinstance(auto, bool) else True,
                families=tuple(families),
                l2_advertisements=l2,
                bgp_advertisements=bgp,
                services=users.get(name, 0),
            )
        )
    return tuple(sorted(out, key=lambda p: p.name))


def _labels(node: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in readers.mapping(_meta(node).get("labels")).items()}


def _sessions(
    config: model.Config,
    nodes: Sequence[Any],
    scraped: Mapping[str, Reading],
) -> tuple[SessionView, ...]:
    """One row per (BGPPeer, Node it selects): the sessions that should exist."""
    out = []
    for peer in config.bgp_peers:
        if peer.peer_address is None:
            address = peer.interface
        else:
            address = peer_label(str(peer.peer_address), peer.peer_port)
        for node in nodes:
            name = readers.text(_meta(node).get("name"))
            if not selectors.any_matches(peer.node_selectors, _labels(node)):
                continue
            bgp: str = UNKNOWN
            bfd: str | None = UNKNOWN if peer.bfd_profile else None
            prefixes: int | None = None
            reading = scraped.get(name)
            metrics = reading.metrics if reading is not None else None
            if metrics is not None:
                up = metrics.bgp_up.get(address)
                bgp = "absent" if up is None else ("up" if up else "down")
                prefixes = metrics.prefixes.get(address)
                if peer.bfd_profile:
                    bfd_state = metrics.bfd_up.get(str(peer.peer_address))
                    bfd = "absent" if bfd_state is None else ("up" if bfd_state else "down")
            out.append(
                SessionView(
                    peer=peer.name,
                    address=address,
                    my_asn=peer.my_asn,
                    peer_asn=peer.peer_asn if not peer.dynamic_asn else None,
                    node=name,
                    bgp=bgp,
                    bfd=bfd,
                    prefixes=prefixes,
                )
            )
    return tuple(sorted(out, key=lambda s: (s.peer, s.node)))


def _ready(node: Any) -> str:
    for condition in readers.items(
        readers.mapping(readers.mapping(node).get("status")).get("conditions")
    ):
        c = readers.mapping(condition)
        if c.get("type") == "Ready":
            value = readers.text(c.get("status"))
            return value if value in READY_VALUES else "Unknown"
    return "Unknown"


def _nodes(nodes: Sequence[Any], scraped: Mapping[str, Reading]) -> tuple[NodeView, ...]:
    names = {readers.text(_meta(n).get("name")) for n in nodes}
    rows: list[tuple[str, Any]] = [(readers.text(_meta(n).get("name")), n) for n in nodes]
    # A scrape named after a node the API does not list still shows (a typo shows as such).
    rows += [(name, None) for name in scraped if name not in names]
    out = []
    for name, node in rows:
        reading = scraped.get(name)
        metrics = reading.metrics if reading is not None else None
        if reading is None:
            speaker, error = "not-scraped", None
        elif metrics is None:
            speaker, error = "error", reading.error
        else:
            speaker, error = "scraped", None
        out.append(
            NodeView(
                name=name,
                ready=_ready(node) if node is not None else "Unknown",
                speaker=speaker,
                error=error,
                members=None if metrics is None or metrics.members is None else metrics.members,
                announced=None if metrics is None else metrics.announced,
                config_stale=None if metrics is None else metrics.config_stale,
            )
        )
    return tuple(sorted(out, key=lambda n: n.name))
