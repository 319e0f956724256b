"""The speaker process: watches in, announcements and status out.

Start-up order, and why:
1. membership starts (so other speakers see us early) and metrics listen;
2. Services, EndpointSlices, Nodes, the metallb.io kinds, our status objects and the Secret names
   are LISTed: nothing is decided from a partial view; each kind is then watched from its
   list's resourceVersion (`ironlb_io.watching`), feeding the same store;
3. the loop runs: whenever something a pass reads changed (a watch event the Store says
   matters, a membership change, a periodic tick), the whole snapshot is rebuilt, the pure plans
   computed (`speaker.desired`) and handed to the layer 2 and BGP appliers (which diff against
   what they applied). After a pass that took T the next waits at least T, so that however fast
   events come, at least half of the loop's time is left to ExaBGP's acknowledgements, BFD
   timers and the status writer;
4. the status writer converges our status objects on what the latest pass wanted, several
   requests at a time, apart from the loop: announcing never waits for the API server; so does
   the ConfigurationState writer, for our `speaker-<node>` object, when the pass's
   configuration problems change, or what it does not honour (`ironlb.honouring`'s findings and
   this node's own, such as a password Secret too long for TCP MD5): those are our `Honoured`
   condition, and each of this node's own gets a Warning Event on the object it is about (the
   controller posts the configuration's findings, once for every node).
On SIGTERM: leave membership first (the others take over at once), stop answering, close the BGP
sessions (a Cease: the peer drops our routes at once; a graceful-restart peer keeps them for the
next speaker), then exit.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import functools
import gc
import logging
import secrets as random_names
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import prometheus_client
from prometheus_client import registry as prom_registry
from prometheus_client.core import GaugeMetricFamily, Metric

from ironlb import (
    addresses,
    backoff,
    configuration_state,
    datapath,
    events,
    honouring,
    model,
    services,
)
from ironlb import annotations as keys
from ironlb.problems import Problem
from ironlb_io import configuration_states, kube, retrying, watching
from speaker import datapath_probing, desired, explaining, health, snapshot, status

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.005
MAX_PAUSE_S = 2.0  # the pause after a pass never grows beyond this, however long it took
SLOW_PASS_S = 0.25  # a pass longer than this is logged
STATUS_CONCURRENCY = 8
# Status objects and Events wait (at most this long) until ExaBGP took the routes: on a busy
# node the routes matter more than the API writes that describe them.
SETTLE_WAIT_S = 10.0
EVENT_HOLD_S = 30.0  # the longest an Event waits for the status writer to be done
EVENT_CONCURRENCY = 4
TICK_S = 10.0
CONFLICT_POLL_S = 0.2  # a rogue answer for an owned address is reported within a second
# How often the layer 2 plane's interfaces are looked at (it scans them every 10 s itself).
INTERFACES_POLL_S = 1.0
SECRETS_EVERY_S = 30.0
# Every watched input reaches a pass through its watch (or a relist): this pass is only a
# safety net, and at 10,000 Services it costs ~0.4 s, which every minute would be most of an
# idle speaker's CPU (MetalLB's informers resync every 10 hours).
RESYNC_S = 300.0
STATE_REFRESH_S = 60.0  # our ConfigurationState is read back (one GET) this often

REGISTRY = prometheus_client.CollectorRegistry()


class _Announced(prom_registry.Collector):
    """`metallb_speaker_announced`, one series per (service, protocol, node, ip) of the latest
    pass, built at scrape time. A labelled Gauge costs a lookup under a lock per series and
    pass: ~0.2 s for a pass that announces 10,000 Services, spent before the next command
    could go to ExaBGP."""

    def __init__(self) -> None:
        self.series: frozenset[tuple[str, str, str, str]] = frozenset()  # replaced whole

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "metallb_speaker_announced",
            "Services announced from this node",
            labels=["service", "protocol", "node", "ip"],
        )

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for labels in self.series:
            family.add_metric(labels, 1.0)
        yield family


ANNOUNCED = _Announced()
REGISTRY.register(ANNOUNCED)
CONFIG_STALE = prometheus_client.Gauge(
    "metallb_k8s_client_config_stale_bool",
    "1 while some metallb.io object is left out because it is invalid",
    registry=REGISTRY,
)
PASS_SECONDS = prometheus_client.Histogram(
    "ironlb_speaker_pass_seconds",
    "Time of one pass: snapshot, plans, and handing them to the data planes",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
CONFIG_LOADED = prometheus_client.Gauge(
    "metallb_k8s_client_config_loaded_bool",
    "1 once the configuration was loaded",
    registry=REGISTRY,
)
NOT_ANNOUNCED = prometheus_client.Gauge(
    "ironlb_speaker_services_not_announced",
    "Services this node does not announce, by protocol and reason",
    ["protocol", "reason"],
    registry=REGISTRY,
)
# Withdrawals in one pass beyond this are one Event on the Node, not one per Service; and
# announcements or withdrawals beyond this are one log line at info level (each Service's own
# line is then at debug level): 10,000 lines cost a pass ~0.6 s.
SERVICE_EVENTS_PER_PASS = 50


class Layer2(Protocol):
    """What the agent needs from the ARP/NDP data plane."""

    def set_owned(self, owned: Mapping[addresses.IPAddress, tuple[str, ...]]) -> None: ...

    def interfaces(self) -> frozenset[str] | None:
        """The interfaces answering ARP/NDP now (None before the first scan)."""
        ...

    async def close(self) -> None: ...


class BGP(Protocol):
    """What the agent needs from the BGP data plane: `apply` returns Service key -> peers
    reached; `problems` are what the latest `apply` could not honour on this node."""

    @property
    def problems(self) -> Sequence[Problem]: ...

    async def apply(
        self,
        config: model.Config,
        node: desired.Node | None,
        plan: desired.BGPPlan,
        passwords: Mapping[str, str],
        complete: bool = True,
    ) -> Mapping[str, tuple[model.PeerName, ...]]: ...

    async def wait_synced(self, timeout: float) -> bool: ...

    async def close(self, restarting: bool = False) -> None: ...


class Membership(Protocol):
    changed: asyncio.Event

    def members(self) -> frozenset[str] | None: ...  # None: Node Ready decides

    def metadata(self) -> Mapping[str, bytes]: ...  # what each alive member gossips

    def set_metadata(self, data: bytes) -> None: ...

    async def leave(self) -> None: ...


@dataclass
class Options:
    node_name: str
    namespace: str = "metallb-system"
    lb_class: str = ""
    kubeconfig: str | None = None
    metrics_port: int = 7473
    metrics_host: str | None = None  # None: every address of both families
    ignore_exclude_lb: bool = False
    log_level: str = "info"
    drain_on_cordon: bool = False  # a cordoned node hands its addresses over
    # Our own Pod (in `namespace`), owner of our status objects; empty: they get no owner.
    pod_name: str = ""


@dataclass
class Agent:
    options: Options
    client: kube.Client
    layer2: Layer2 | None = None
    bgp: BGP | None = None
    membership: Membership | None = None
    prober: datapath_probing.Prober | None = None
    store: snapshot.Store = field(default_factory=snapshot.Store)
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    announced: dict[str, frozenset[str]] = field(default_factory=dict)  # service -> protocols
    last_good: model.Config | None = None
    passwords: dict[str, str] = field(default_factory=dict)  # basic-auth Secret -> password
    _problems: list[Problem] = field(default_factory=list)
    _metric_labels: set[tuple[str, str, str, str]] = field(default_factory=set)
    _posting: set[asyncio.Future[None]] = field(default_factory=set)
    # `nodeAssigned` Events to post, (service key, protocol): one task posts them all, since a
    # task per Event made 10,000 tasks each waiting for the routes (~0.7 s of the pass's loop).
    _assigned: collections.deque[tuple[str, str]] = field(default_factory=collections.deque)
    _assigning: asyncio.Future[None] | None = None
    _wanted_status: dict[str, list[status.Wanted]] = field(default_factory=dict)
    _owner: status.Owner | None = None  # our Pod, once read (`learn_owner`)
    # Layer 2: (namespace, name) -> the nodes elected for one of the Service's addresses.
    _l2_announcers: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    _status_dirty: asyncio.Event = field(default_factory=asyncio.Event)
    # Set while the status writer has nothing left to write: Events wait for it (bounded).
    _status_quiet: asyncio.Event = field(default_factory=asyncio.Event)
    _event_gate: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(EVENT_CONCURRENCY)
    )
    last_pass_s: float = 0.0
    # (kind, "namespace/name") -> the resourceVersion our create returned, until the watch's
    # event for that object arrives (whichever version it carries): at most one per object.
    _superseded: dict[tuple[str, str], str] = field(default_factory=dict)
    # Our status objects being created, (kind, "namespace/name") -> whether the watch reported
    # the object DELETED meanwhile: then the create's answer, arriving later, is not put into
    # the store (it would bring back an object the server no longer holds, and nothing after
    # that would tell the writer: seen after a cut link, whose TCP streams resume out of order).
    _creating: dict[tuple[str, str], bool] = field(default_factory=dict)
    # The ConfigurationState `speaker-<node>`: the latest pass's problems (None before the
    # first pass), whether they changed since written, and whether to read the object again.
    _state_problems: list[Problem] | None = None
    _state_dirty: asyncio.Event = field(default_factory=asyncio.Event)
    _state_refresh: bool = False
    # This node's data-path verdict (our DataPathReady condition), as the latest pass saw it.
    _datapath: configuration_state.Verdict | None = None
    _published: bytes | None = None  # the readiness last handed to membership
    # What /explain answers from (read by the HTTP thread: replaced whole after each pass).
    _explained: explaining.Seen | None = None
    _not_announced_labels: set[tuple[str, str]] = field(default_factory=set)
    # (Service, address) elected here but with none of its advertisements' interfaces, as
    # reported so far (an announceFailed Event when a pair appears), and the interfaces then.
    _unannounceable: frozenset[tuple[str, str]] = frozenset()
    _interfaces_seen: frozenset[str] | None = None
    # Split brain: (address, foreign MAC) pairs reported, and our condition about them.
    _conflicts_seen: frozenset[tuple[str, str]] = frozenset()
    _conflict_condition: configuration_state.Verdict = field(
        default_factory=lambda: configuration_state.Verdict("False", "NoConflict", "")
    )
    # What is not honoured: the configuration's findings (worked out again only when the
    # configuration is a new one), this node's own reported so far, and our condition.
    _findings_of: model.Config | None = None
    _findings: list[Problem] = field(default_factory=list)
    _own_findings: frozenset[Problem] = frozenset()
    _honoured: configuration_state.Verdict | None = None

    def __post_init__(self) -> None:
        self.store.status_node = self.options.node_name
        self.state = configuration_states.Writer(
            self.client,
            self.options.namespace,
            configuration_state.speaker(self.options.node_name),
        )

    # --- inputs -----------------------------------------------------------------------------

    def observe(self, kind: str, event_type: str | None, obj: Mapping[str, Any]) -> None:
        if kind in snapshot.STATUS_KINDS:
            self._observe_status(kind, event_type, obj)
        elif self.store.put(kind, event_type, obj):
            self.dirty.set()

    def _observe_status(self, kind: str, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """Our status objects are the writer's business, not a pass's: a pass does not read them.

        The writer creates an object and then sets its status; the watch event for the create
        (status still empty) arrives after the store already holds the status we set, and is
        dropped rather than taken for somebody else's change."""
        version = services.resource_version(obj)
        meta = obj.get("metadata") or {}
        key = (kind, f"{meta.get('namespace')}/{meta.get('name')}")
        if event_type == "DELETED" and key in self._creating:
            self._creating[key] = True
        # Any event for the object ends the wait for its create's echo (an ADDED handled before
        # the create's answer came back would otherwise keep the version for ever).
        if self._superseded.pop(key, None) == version and event_type != "DELETED":
            return
        if self.store.put(kind, event_type, obj):
            self._status_dirty.set()

    def relisted(self, kind: str, items: list[Mapping[str, Any]]) -> None:
        if kind in snapshot.STATUS_KINDS:
            self._superseded.clear()
            if self.store.replace(kind, items):
                self._status_dirty.set()
        elif self.store.replace(kind, items):
            self.dirty.set()

    def sources(self) -> list[watching.Source]:
        ns = self.options.namespace

        def source(
            kind: str, path: str, params: tuple[tuple[str, str], ...] = ()
        ) -> watching.Source:
            return watching.Source(kind, path, params, keep=functools.partial(snapshot.slim, kind))

        found = [
            source("Service", kube.core_path("services")),
            source("Node", kube.core_path("nodes")),
            source("EndpointSlice", "/apis/discovery.k8s.io/v1/endpointslices"),
        ]
        for kind in (*model.CONFIG_KINDS, model.SERVICE_L2_STATUS, model.SERVICE_BGP_STATUS):
            plural, versions = model.RESOURCES[kind]
            # Every node's ServiceL2Status matters (a new owner deletes the old one's); of the
            # ServiceBGPStatuses, one per announcing node and Service, only our own do.
            mine = (
                (("labelSelector", f"{keys.STATUS_NODE}={self.options.node_name}"),)
                if kind == model.SERVICE_BGP_STATUS
                else ()
            )
            found.append(source(kind, kube.group_path(model.GROUP, versions[-1], plural, ns), mine))
        return found

    async def load(self) -> dict[watching.Source, str]:
        """LIST every kind; returns the resourceVersion each kind's watch starts from."""
        versions = {}
        for source in self.sources():
            items, versions[source] = await watching.list_kind(self.client, source)
            self.store.replace(source.kind, items)
        await self.load_secrets()
        CONFIG_LOADED.set(1)
        return versions

    async def load_secrets(self) -> None:
        """Secret names in our namespace (dangling-reference checks) and BGP passwords, which
        MetalLB reads from `kubernetes.io/basic-auth` Secrets' `password` key."""
        items, _ = await self.client.list(kube.core_path("secrets", self.options.namespace))
        names = {services.key(s): {"metadata": {"name": s["metadata"]["name"]}} for s in items}
        passwords = {
            s["metadata"]["name"]: password
            for s in items
            if s.get("type") == "kubernetes.io/basic-auth"
            and (password := _decoded(s.get("data"), "password")) is not None
        }
        changed = self.store.set_secrets(names)
        if changed or passwords != self.passwords:
            self.passwords = passwords
            self.dirty.set()

    # --- the loop -----------------------------------------------------------------------------

    def alive(self) -> frozenset[str] | None:
        return None if self.membership is None else self.membership.members()

    def readiness(self) -> dict[str, datapath.NodeReadiness]:
        """Every node's data-path verdict: the others' as they gossip it, ours from our probes
        (a node that gossips none, an older speaker, counts as ready)."""
        out: dict[str, datapath.NodeReadiness] = {}
        if self.membership is not None:
            for name, data in self.membership.metadata().items():
                found = datapath.decode(data)
                if found is not None:
                    out[name] = found
        if self.prober is not None:
            out[self.options.node_name] = self.prober.readiness().as_gossiped()
        return out

    async def reconcile_once(self) -> None:
        me = self.options.node_name
        alive = self.alive()
        snap, problems = snapshot.build(
            self.store,
            namespace=self.options.namespace,
            alive=alive,
            lb_class=self.options.lb_class,
            ignore_exclude_lb=self.options.ignore_exclude_lb,
            last_good=self.last_good,
            drain_on_cordon=self.options.drain_on_cordon,
            # Without membership the others cannot know our verdict: the L2 election then
            # ignores readiness (as MetalLB), or we would stand down and nobody take over.
            readiness=self.readiness() if alive is not None else {},
        )
        own = snap
        if self.prober is not None:
            # The Local Services this pass would announce from here are probed from now on; one
            # not yet confirmed by kube-proxy is not announced in this very pass either.
            self.prober.set_targets(self._node_ip(), _local_targets(snap, me))
            verdict = self.prober.readiness()
            own = dataclasses.replace(snap, readiness={**snap.readiness, me: verdict})
            if alive is not None:
                # The election must see our verdict as the others see it (gossip cuts it).
                snap = dataclasses.replace(
                    snap, readiness={**snap.readiness, me: verdict.as_gossiped()}
                )
        stale = self.last_good is not None and snap.config is self.last_good
        if not stale:
            self.last_good = snap.config
        CONFIG_STALE.set(1 if stale else 0)
        if problems != self._problems:
            for p in problems:
                log.warning("configuration problem", extra={"problem": str(p)})
            self._problems = problems
        if problems != self._state_problems:
            self._state_problems = problems
            self._state_dirty.set()
        answering = self._interfaces_seen = (
            self.layer2.interfaces() if self.layer2 is not None else None
        )
        l2 = desired.l2_plan(snap, model.NodeName(me), answering)
        if self.layer2 is not None:
            self.layer2.set_owned({e.address: e.interfaces for e in l2.mine})
            self._report_unannounceable(l2)
        reached: Mapping[str, tuple[model.PeerName, ...]] = {}
        # BGP is this node's decision alone: our own verdict always counts.
        bgp_plan = desired.bgp_plan(own, model.NodeName(me))
        if self.bgp is not None:
            reached = await self.bgp.apply(
                snap.config,
                snap.nodes.get(me),
                bgp_plan,
                self.passwords,
                # Until our probes answered once, the plan is not yet this node's answer.
                complete=self.prober is None or self.prober.verdicts_known(),
            )
        self._account(l2, bgp_plan, reached, snap)
        self._judge_honoured(snap.config)
        self._judge_datapath(snap)
        self._explained = explaining.Seen(
            {s.key: s for s in snap.services},
            l2 if self.layer2 is not None else None,
            bgp_plan if self.bgp is not None else None,
            reached,
            self._datapath,
        )
        self._l2_announcers = {
            (service.namespace, service.name): frozenset(
                owner for ip in service.ips if (owner := l2.owners.get(ip)) is not None
            )
            for service in snap.services
        }
        self._wanted_status = {
            model.SERVICE_L2_STATUS: status.wanted_l2(
                me, l2 if self.layer2 is not None else _EMPTY_L2
            ),
            model.SERVICE_BGP_STATUS: status.wanted_bgp(me, reached),
        }
        self._status_dirty.set()

    def _judge_honoured(self, config: model.Config) -> None:
        """Our `Honoured` condition, from the configuration's findings and this node's own;
        each of this node's own gets one Warning Event when it appears (not on every pass)."""
        if config is not self._findings_of:
            self._findings_of = config
            found = honouring.not_honoured(config)
            if found != self._findings:
                for p in found:
                    log.warning("configuration not honoured", extra={"problem": str(p)})
            self._findings = found
        own = self.bgp.problems if self.bgp is not None else ()
        findings = honouring.on_node(self._findings, own, self._state_problems or ())
        configured = set(self._findings)
        mine = frozenset(p for p in findings if p not in configured)
        for p in sorted(mine - self._own_findings, key=str):
            self._post_not_honoured(p)
        self._own_findings = mine
        verdict = configuration_state.honoured(findings)
        if verdict != self._honoured:
            self._honoured = verdict
            self._state_dirty.set()

    def _post_not_honoured(self, finding: Problem) -> None:
        if finding.kind not in model.CONFIG_KINDS:
            return
        about = next(
            (
                o
                for o in self.store.config.get(finding.kind, {}).values()
                if (o.get("metadata") or {}).get("name") == finding.name
            ),
            None,
        )
        if about is None:
            return
        where = f"{finding.field}: " if finding.field else ""
        self._post_soon(
            _event_body(
                about,
                configuration_state.REASON_NOT_HONOURED,
                f'on node "{self.options.node_name}": {where}{finding.message}',
                self.options.node_name,
                kind=finding.kind,
                api_version=f"{model.GROUP}/{model.RESOURCES[finding.kind][1][-1]}",
                warning=True,
            )
        )

    def _node_ip(self) -> str | None:
        found = snapshot.internal_ips(self.store.node(self.options.node_name))
        v4 = [a for a in found if ":" not in a]
        return (v4 or found)[0] if found else None

    def _judge_datapath(self, snap: desired.Snapshot) -> None:
        """This node's verdict for the DataPathReady condition (and an Event when it flips)."""
        node = snap.nodes.get(self.options.node_name)
        verdict: configuration_state.Verdict
        if node is not None and node.drain is not None:
            verdict = configuration_state.Verdict("False", node.drain.reason, node.drain.message)
        elif self.prober is None or self.prober.check == datapath.Check.ENDPOINTS:
            verdict = configuration_state.Verdict(
                "True", "EndpointsOnly", "kube-proxy is not checked: EndpointSlices decide"
            )
        elif not self.prober.proxy_ready:
            verdict = configuration_state.Verdict(
                "False", datapath.Reason.KUBE_PROXY_NOT_READY, self.prober.message
            )
        else:
            verdict = configuration_state.Verdict("True", "Ready", self.prober.message)
        before = self._datapath
        self._datapath = verdict
        if before is None or before.status != verdict.status or before.reason != verdict.reason:
            self._state_dirty.set()
            if before is not None:
                self._post_node_event(
                    "DataPathReady" if verdict.status == "True" else "DataPathNotReady",
                    f"{verdict.reason}: {verdict.message}",
                    warning=verdict.status != "True",
                )

    def publish_readiness(self) -> None:
        """Hand our probes' verdict to membership, which gossips it when it changed."""
        if self.prober is None or self.membership is None:
            return
        data = self.prober.readiness().encode()
        if data != self._published:
            self._published = data
            self.membership.set_metadata(data)

    async def watch_datapath(self) -> None:
        assert self.prober is not None
        while True:
            await self.prober.changed.wait()
            self.prober.changed.clear()
            self.publish_readiness()
            self.dirty.set()

    def explain(self, key: str) -> dict[str, Any] | None:
        """This node's verdict on one Service, for `/explain` (called from the HTTP thread)."""
        seen = self._explained
        if seen is None or key not in seen.services:
            return None
        return explaining.explained(self.options.node_name, seen, key, self._conflicts())

    def _conflicts(self) -> list[dict[str, Any]]:
        now = time.time()
        return [
            {
                "ip": str(c.ip),
                "mac": c.mac,
                "interface": c.interface,
                "last_seen_s_ago": round(max(0.0, now - c.last_seen), 3),
            }
            for c in self._current_conflicts().values()
        ]

    def _report_unannounceable(self, l2: desired.L2Plan) -> None:
        """MetalLB's announceFailed Warning on a Service when this node is elected for one of
        its addresses but none of the interfaces its L2Advertisements name is here: once when
        that starts (MetalLB posts one on every reconcile of the Service)."""
        now = frozenset(
            (key, str(entry.address)) for entry in l2.unannounceable for key in entry.services
        )
        for key, address in sorted(now - self._unannounceable):
            log.warning(
                "the interfaces to announce an address on are not on this node",
                extra={"event": "announceFailed", "service": key, "ip": address},
            )
            message = (
                f'the interfaces specified by LB IP "{address}" doesn\'t exist in assigned node '
                f'"{self.options.node_name}" with protocol "layer2"'
            )
            self._post_service_event(key, "announceFailed", message, warning=True)
        self._unannounceable = now

    async def watch_interfaces(self) -> None:
        """A pass when the interfaces answering ARP/NDP change: an address elected here that
        waits for its interface is answered once the interface is up, and the reverse."""
        assert self.layer2 is not None
        while True:
            await asyncio.sleep(INTERFACES_POLL_S)
            if self.layer2.interfaces() != self._interfaces_seen:
                self.dirty.set()

    def _current_conflicts(self) -> Mapping[addresses.IPAddress, Any]:
        read = getattr(self.layer2, "conflicts", None)
        return read() if read is not None else {}

    async def watch_conflicts(self) -> None:
        """Another machine answering for an address we announce: an Event on each Service
        holding it and our condition on `speaker-<node>`, as soon as the layer 2 plane saw it
        (it counts the metric itself)."""
        while True:
            await asyncio.sleep(CONFLICT_POLL_S)
            found = self._current_conflicts()
            now = frozenset((str(c.ip), c.mac) for c in found.values())
            if now == self._conflicts_seen:
                continue
            for conflict in found.values():
                if (str(conflict.ip), conflict.mac) not in self._conflicts_seen:
                    self._report_conflict(conflict)
            self._conflicts_seen = now
            if now:
                text = "; ".join(
                    f"{c.ip} claimed by {c.mac} on {c.interface}" for c in found.values()
                )
                self._conflict_condition = configuration_state.Verdict("True", "ForeignClaim", text)
            else:
                self._conflict_condition = configuration_state.Verdict("False", "NoConflict", "")
            self._state_dirty.set()

    def _report_conflict(self, conflict: Any) -> None:
        log.warning(
            "another machine claims an announced address",
            extra={"event": "addressConflict", "ip": str(conflict.ip), "mac": conflict.mac},
        )
        seen = self._explained
        holders = (
            [] if seen is None else [s for s in seen.services.values() if conflict.ip in s.ips]
        )
        message = (
            f"{conflict.ip} is also claimed by {conflict.mac} (seen on {conflict.interface} of "
            f'node "{self.options.node_name}", which announces it): two machines answer for it'
        )
        for service in holders[:SERVICE_EVENTS_PER_PASS]:
            self._post_service_event(service.key, "addressConflict", message, warning=True)

    def _account(
        self,
        l2: desired.L2Plan,
        bgp_plan: desired.BGPPlan,
        reached: Mapping[str, tuple[model.PeerName, ...]],
        snap: desired.Snapshot,
    ) -> None:
        me = self.options.node_name
        now: dict[str, set[str]] = {}
        labels: set[tuple[str, str, str, str]] = set()
        if self.layer2 is not None:
            for entry in l2.mine:
                for service in entry.services:
                    now.setdefault(service, set()).add("layer2")
                    labels.add((service, "layer2", me, str(entry.address)))
        ips = {s.key: s.ips for s in snap.services}
        for service in reached:
            now.setdefault(service, set()).add("bgp")
            for ip in ips.get(service, ()):
                labels.add((service, "bgp", me, str(ip)))
        if labels != self._metric_labels:
            ANNOUNCED.series = frozenset(labels)
        self._metric_labels = labels
        announced = [
            (service, protocol)
            for service, protocols in sorted(now.items())
            for protocol in sorted(protocols - self.announced.get(service, frozenset()))
        ]
        each = logging.INFO if len(announced) <= SERVICE_EVENTS_PER_PASS else logging.DEBUG
        for service, protocol in announced:
            log.log(
                each,
                "service announced",
                extra={"event": "serviceAnnounced", "service": service, "protocol": protocol},
            )
            self._post_later(service, protocol)
        if each != logging.INFO:
            log.info(
                "services announced",
                extra={"event": "servicesAnnounced", "count": len(announced)},
            )
        withdrawn = [
            (service, protocol)
            for service, before in sorted(self.announced.items())
            for protocol in sorted(before - now.get(service, set()))
        ]
        each = logging.INFO if len(withdrawn) <= SERVICE_EVENTS_PER_PASS else logging.DEBUG
        for service, protocol in withdrawn:
            plan_reasons = l2.reasons if protocol == "layer2" else bgp_plan.reasons
            why = str(plan_reasons.get(service, "notAnnounced"))
            log.log(
                each,
                "service withdrawn",
                extra={
                    "event": "serviceWithdrawn",
                    "service": service,
                    "protocol": protocol,
                    "reason": why,
                },
            )
            if len(withdrawn) <= SERVICE_EVENTS_PER_PASS:
                detail = l2.messages.get(service, "") if protocol == "layer2" else ""
                self._post_withdrawn(service, protocol, why, detail)
        if len(withdrawn) > SERVICE_EVENTS_PER_PASS:
            log.info(
                "services withdrawn",
                extra={"event": "servicesWithdrawn", "count": len(withdrawn)},
            )
            self._post_node_event(
                "ServicesWithdrawn",
                f"{len(withdrawn)} announcements withdrawn from this node in one pass",
                warning=False,
            )
        self.announced = {k: frozenset(v) for k, v in now.items()}
        self._count_not_announced(l2, bgp_plan)

    def _count_not_announced(self, l2: desired.L2Plan, bgp_plan: desired.BGPPlan) -> None:
        counts: dict[tuple[str, str], int] = {}
        plans = (("layer2", l2, self.layer2), ("bgp", bgp_plan, self.bgp))
        for protocol, plan, applier in plans:
            if applier is None:
                continue
            for why in plan.reasons.values():
                label = (protocol, str(why))
                counts[label] = counts.get(label, 0) + 1
        for gone in self._not_announced_labels - set(counts):
            NOT_ANNOUNCED.remove(*gone)
        for label, count in counts.items():
            NOT_ANNOUNCED.labels(*label).set(count)
        self._not_announced_labels = set(counts)

    def _post_withdrawn(self, service: str, protocol: str, why: str, detail: str) -> None:
        message = (
            f'not announcing from node "{self.options.node_name}" with protocol "{protocol}": '
            f"{why}{': ' + detail if detail else ''}"
        )
        self._post_service_event(service, "nodeWithdrawn", message, warning=False)

    def _post_service_event(self, key: str, reason: str, message: str, *, warning: bool) -> None:
        """An Event on Service `key` from this node; none when the Service is gone meanwhile."""
        svc = self.store.services.get(key)
        if svc is None:
            return
        self._post_soon(_event_body(svc, reason, message, self.options.node_name, warning=warning))

    def _post_node_event(self, reason: str, message: str, *, warning: bool) -> None:
        node = self.store.node(self.options.node_name)
        if node is None:
            return
        body = _event_body(
            node, reason, message, self.options.node_name, kind="Node", warning=warning
        )
        self._post_soon(body)

    def _post_soon(self, body: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self._post(body))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    def _post_later(self, service: str, protocol: str) -> None:
        """A `nodeAssigned` Event, built and posted once ExaBGP took the routes."""
        self._assigned.append((service, protocol))
        if self._assigning is None or self._assigning.done():
            self._assigning = asyncio.ensure_future(self._post_assigned())

    async def _post_assigned(self) -> None:
        async def poster() -> None:
            while self._assigned:
                service, protocol = self._assigned.popleft()
                svc = self.store.services.get(service)
                if svc is None:
                    continue  # gone meanwhile
                message = (
                    f'announcing from node "{self.options.node_name}" with protocol "{protocol}"'
                )
                await self._create_event(
                    _event_body(svc, "nodeAssigned", message, self.options.node_name)
                )

        # Returns only with the queue empty: this task is done in the same step as that check,
        # so an Event queued after it finds the task done and starts another.
        while self._assigned:
            await self._settled()
            await asyncio.gather(*(poster() for _ in range(EVENT_CONCURRENCY)))

    async def _post(self, body: dict[str, Any]) -> None:
        await self._settled()
        await self._create_event(body)

    async def _create_event(self, body: dict[str, Any]) -> None:
        # A few at a time, and after the status objects: 10,000 Services announced at once
        # must not be 10,000 requests racing the status writer for the API server (status is
        # what readers and alerts rely on; an Event is a note). Bounded, so never lost.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._status_quiet.wait(), EVENT_HOLD_S)
        async with self._event_gate:
            try:
                await self.client.create(
                    kube.core_path("events", body["metadata"]["namespace"]), body
                )
            except kube.ApiError as e:
                log.warning("could not post event", extra={"error": str(e)})

    async def _settled(self) -> None:
        if self.bgp is not None:
            await self.bgp.wait_synced(SETTLE_WAIT_S)

    async def learn_owner(self) -> None:
        """Read our own Pod once, retried until it answers (RBAC not bound yet, apiserver away):
        from then on our status objects are owned by it, those already made included."""
        ns, name = self.options.namespace, self.options.pod_name
        pod = await retrying.retry(
            lambda: self.client.get(kube.core_path("pods", ns, name)),
            kube.ApiError,
            message="cannot read our own Pod; status objects get no owner until then",
            fields={"pod": f"{ns}/{name}"},
            logger=log,
            failure_text=lambda e: f"{e.status} {e.reason}",
        )
        uid = (pod.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            log.warning("our own Pod has no uid; status objects get no owner", extra={"pod": name})
            return
        self._owner = status.Owner(name, uid)
        self._status_dirty.set()

    async def write_status(self) -> None:
        """Converge our status objects on what the latest pass wanted; a failed write is
        retried after a second, a newer wish replaces an older one."""
        while True:
            if not self._status_dirty.is_set():
                self._status_quiet.set()
            await self._status_dirty.wait()
            self._status_quiet.clear()
            await self._settled()
            self._status_dirty.clear()
            began = time.monotonic()
            failed = False
            for kind, wanted in list(self._wanted_status.items()):
                failed |= not await self._sync_status(kind, wanted)
            if failed:
                await asyncio.sleep(1.0)
                self._status_dirty.set()
            # Paced like the passes: echoes of our own writes must not keep it diffing.
            await _pause_after(time.monotonic() - began)

    async def _sync_status(self, kind: str, wanted: list[status.Wanted]) -> bool:
        me, ns = self.options.node_name, self.options.namespace
        existing = list(self.store.config.get(kind, {}).values())
        owner = self._owner
        changes = status.diff(
            kind,
            me,
            wanted,
            existing,
            announcers=self._l2_announcers if kind == model.SERVICE_L2_STATUS else None,
            owner=owner,
        )
        plural, versions = model.RESOURCES[kind]
        base = kube.group_path(model.GROUP, versions[-1], plural, ns)
        gate = asyncio.Semaphore(STATUS_CONCURRENCY)

        async def create(w: status.Wanted) -> bool:
            async with gate:
                key = (kind, f"{ns}/{w.name}")
                self._creating[key] = False
                try:
                    return await created(w, key)
                finally:
                    self._creating.pop(key, None)

        async def created(w: status.Wanted, key: tuple[str, str]) -> bool:
            body = status.body(w, me, ns, owner)
            try:
                made = await self.client.create(base, body)
                version = services.resource_version(made)
                if version:
                    self._superseded[key] = version
            except kube.ApiError as e:
                if not e.conflict:
                    log.warning("could not create status", extra={"error": str(e)})
                    return False
            if not await self._patch_status(f"{base}/{w.name}/status", w.status):
                return False
            if self._creating.get(key):
                # Deleted (another node's eviction) before our answers came back: the store
                # keeps what the watch said, and the writer looks again.
                self._status_dirty.set()
                return True
            # What the server holds now: its watch events then compare equal.
            self.store.put(kind, None, {**body, "status": dict(w.status)})
            return True

        async def update(w: status.Wanted) -> bool:
            async with gate:
                if not await self._patch_status(f"{base}/{w.name}/status", w.status):
                    return False
                current = self.store.config.get(kind, {}).get(f"{ns}/{w.name}")
                if current is not None:
                    self.store.put(kind, None, {**current, "status": dict(w.status)})
                return True

        async def delete(name: str) -> bool:
            async with gate:
                try:
                    await self.client.delete(f"{base}/{name}")
                except kube.ApiError as e:
                    if not e.not_found:
                        log.warning("could not delete status", extra={"error": str(e)})
                        return False
                self.store.config.get(kind, {}).pop(f"{ns}/{name}", None)
                return True

        async def adopt(name: str) -> bool:
            assert owner is not None
            references = [owner.reference()]
            async with gate:
                try:
                    # The object itself, not /status: ownerReferences are metadata.
                    await self.client.merge_patch(
                        f"{base}/{name}", {"metadata": {"ownerReferences": references}}
                    )
                except kube.ApiError as e:
                    if e.not_found:
                        return True  # gone meanwhile: its watch event brings a create
                    log.warning("could not set the owner of status", extra={"error": str(e)})
                    return False
                current = self.store.config.get(kind, {}).get(f"{ns}/{name}")
                if current is not None:
                    metadata = {**current["metadata"], "ownerReferences": references}
                    self.store.put(kind, None, {**current, "metadata": metadata})
                return True

        results = await asyncio.gather(
            *(create(w) for w in changes.create),
            *(update(w) for w in changes.update),
            *(delete(n) for n in changes.delete),
            *(adopt(n) for n in changes.adopt),
        )
        return all(results)

    async def write_configuration_state(self) -> None:
        """Keep `speaker-<node>` saying what the latest pass's problems mean; a write happens
        only when that changes (or the object was found deleted or edited), and a failed one
        is retried with a backoff, apart from the passes."""
        wait = backoff.Backoff()
        while True:
            await self._state_dirty.wait()
            self._state_dirty.clear()
            if self._state_problems is None:
                continue
            refresh, self._state_refresh = self._state_refresh, False
            extra = {}
            if self.layer2 is not None:
                extra[datapath.CONFLICT_CONDITION_TYPE] = self._conflict_condition
            if self._datapath is not None:
                extra[datapath.CONDITION_TYPE] = self._datapath
            if self._honoured is not None:
                extra[configuration_state.HONOURED_CONDITION] = self._honoured
            if await self.state.sync(self._state_problems, refresh=refresh, extra=extra):
                wait.reset()
            else:
                await asyncio.sleep(wait.next())
                self._state_dirty.set()

    async def _patch_status(self, path: str, body: Mapping[str, Any]) -> bool:
        try:
            await self.client.merge_patch(path, {"status": dict(body)})
        except kube.ApiError as e:
            log.warning("could not write status", extra={"error": str(e), "path": path})
            return False
        return True

    async def run(self) -> None:
        """Reconcile whenever something changed; the next pass starts no sooner after the end
        of the last one than that pass took (`pause_s`)."""
        self.dirty.set()
        ended = time.monotonic()
        while True:
            await self.dirty.wait()
            await asyncio.sleep(pause_s(self.last_pass_s, time.monotonic() - ended))
            self.dirty.clear()
            began = time.monotonic()
            try:
                await self.reconcile_once()
            except kube.ApiError as e:
                log.warning("reconcile failed; will retry", extra={"error": str(e)})
                await asyncio.sleep(1.0)
                self.dirty.set()
            ended = time.monotonic()
            self.last_pass_s = ended - began
            PASS_SECONDS.observe(self.last_pass_s)
            if self.last_pass_s > SLOW_PASS_S:
                log.info(
                    "slow pass",
                    extra={
                        "seconds": round(self.last_pass_s, 3),
                        "services": len(self.store.services),
                    },
                )
            self.ready.set()

    async def watch_membership(self) -> None:
        assert self.membership is not None
        while True:
            await self.membership.changed.wait()
            self.membership.changed.clear()
            self.dirty.set()

    async def tick(self) -> None:
        """Secrets are polled (they are not watched: only names and BGP passwords matter), and
        a full pass runs now and then although no input changed, as an informer's resync does:
        the plans are pure, so it can only repair, never disturb."""
        since_secrets = since_pass = since_state = 0.0
        while True:
            await asyncio.sleep(TICK_S)
            since_secrets += TICK_S
            since_pass += TICK_S
            since_state += TICK_S
            if since_secrets >= SECRETS_EVERY_S:
                since_secrets = 0.0
                with contextlib.suppress(kube.ApiError):
                    await self.load_secrets()
            if since_pass >= RESYNC_S:
                since_pass = 0.0
                self.dirty.set()
            if since_state >= STATE_REFRESH_S:
                since_state = 0.0
                # One GET of our ConfigurationState: a deleted or edited one is put back.
                self._state_refresh = True
                self._state_dirty.set()

    async def shutdown(self) -> None:
        if self.membership is not None:
            with contextlib.suppress(Exception):
                await self.membership.leave()
        if self.layer2 is not None:
            self.layer2.set_owned({})
            await self.layer2.close()
        if self.bgp is not None:
            # A stopping speaker is a restarting one (its node stays): peers with graceful
            # restart keep forwarding to this node meanwhile; the others get a Cease.
            await self.bgp.close(restarting=True)


_EMPTY_L2 = desired.L2Plan((), {}, {})


def _local_targets(snap: desired.Snapshot, me: str) -> dict[str, int]:
    """Local Services with a ready endpoint on this node: kube-proxy's healthCheckNodePort
    must agree before they are announced from here. Not those served here only by terminating
    (serving) endpoints: kube-proxy answers 503 for them by design (so that cloud load
    balancers drain the node) while it still forwards to them when nothing is ready anywhere;
    MetalLB keeps announcing then, and so do we, on the EndpointSlices alone."""
    return {
        s.key: s.health_check_node_port
        for s in snap.services
        if s.local
        and s.ips
        and s.health_check_node_port is not None
        and any(e.ready and e.node == me for e in s.endpoints)
    }


def pause_s(busy_s: float, idle_s: float) -> float:
    """How long to wait before the next pass: the last pass's duration (within bounds), so
    that passes never take more than about half of the loop, counted from the end of that
    pass. Time spent idle since then already counts: an event after a quiet minute waits
    only the debounce, not the last pass's length again."""
    return max(DEBOUNCE_S, min(busy_s, MAX_PAUSE_S) - idle_s)


async def _pause_after(busy_s: float) -> None:
    """`pause_s` right after the work: as long as it took (within bounds)."""
    await asyncio.sleep(pause_s(busy_s, 0.0))


def _decoded(data: Any, key: str) -> str | None:
    if not isinstance(data, Mapping) or not isinstance(data.get(key), str):
        return None
    try:
        return base64.b64decode(data[key], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def _event_body(
    about: Mapping[str, Any],
    reason: str,
    message: str,
    node: str,
    *,
    kind: str = "Service",
    api_version: str = "v1",
    warning: bool = False,
) -> dict[str, Any]:
    body = events.body(
        events.involved(about, api_version, kind),
        type="Warning" if warning else "Normal",
        reason=reason,
        message=message,
        component="metallb-speaker",
        instance=node,
        now=kube.timestamp(),
        name_suffix=random_names.token_hex(8),
    )
    if kind == "Node":
        # A Node has no namespace: its Events live in `default`, as the kubelet's do.
        body["metadata"]["namespace"] = "default"
    return body


async def run(
    options: Options,
    *,
    layer2: Layer2 | None = None,
    bgp: BGP | None = None,
    membership: Membership | None = None,
    prober: datapath_probing.Prober | None = None,
    not_ready: Callable[[], Sequence[str]] = tuple,
) -> int:
    credentials = kube.load(options.kubeconfig)
    client = kube.Client(
        credentials,
        concurrency=STATUS_CONCURRENCY + EVENT_CONCURRENCY + 2,
        field_manager="ironlb-speaker",
    )
    agent = Agent(options, client, layer2=layer2, bgp=bgp, membership=membership, prober=prober)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    listing = ["loading"]  # what the first LIST is waiting for; read by the HTTP thread

    def reasons() -> list[str]:
        return [*([] if agent.ready.is_set() else listing), *not_ready()]

    server = (
        health.Server(options.metrics_port, REGISTRY, reasons, options.metrics_host, agent.explain)
        if options.metrics_port
        else None
    )
    log.info("ironlb speaker starting", extra={"node": options.node_name})
    tasks: list[asyncio.Future[Any]] = []
    watcher: kube.Client | None = None
    stopping = asyncio.ensure_future(stop.wait())
    # Not one of `tasks`, whose end ends the speaker: this one ends once it knows our Pod.
    # Started now, so that the Pod is read while everything is listed.
    learning_owner = asyncio.ensure_future(agent.learn_owner()) if options.pod_name else None
    try:
        versions = await _load(agent, stopping, listing)
        if versions is None:
            return 0
        # What was just loaded lives as long as the process: keep the cyclic collector from
        # walking 10,000 Services' worth of objects again on every full collection.
        gc.collect()
        gc.freeze()
        tasks.append(asyncio.ensure_future(agent.run()))
        tasks.append(asyncio.ensure_future(agent.write_status()))
        tasks.append(asyncio.ensure_future(agent.write_configuration_state()))
        if membership is not None:
            tasks.append(asyncio.ensure_future(agent.watch_membership()))
        if layer2 is not None:
            tasks.append(asyncio.ensure_future(agent.watch_conflicts()))
            tasks.append(asyncio.ensure_future(agent.watch_interfaces()))
        if prober is not None:
            tasks.append(asyncio.ensure_future(prober.run()))
            tasks.append(asyncio.ensure_future(agent.watch_datapath()))
        tasks.append(asyncio.ensure_future(agent.tick()))
        # Watches hold their connections for minutes: a client of their own, one connection
        # each, so that they never wait behind writes nor writes behind them.
        watcher = kube.Client(credentials, concurrency=len(versions))
        for source, version in versions.items():
            tasks.append(
                asyncio.ensure_future(
                    watching.follow(watcher, source, version, agent.observe, agent.relisted)
                )
            )
        await asyncio.wait([stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.error("speaker task failed", exc_info=task.exception())
                return 1
        return 0
    finally:
        log.info("speaker stopping")
        # Passes and the status writer end first: a pass running on while membership leaves
        # and BGP closes would start sessions after the close, and the status writer could
        # still write "announcing" for a node that is going away.
        for task in tasks:
            task.cancel()
        if learning_owner is not None:
            learning_owner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        await agent.shutdown()
        stopping.cancel()
        await client.close()
        if watcher is not None:
            await watcher.close()
        if server is not None:
            server.close()


def _listing_failure(e: kube.ApiError) -> str:
    """The /readyz reason for a failed first LIST."""
    if e.reason == kube.CERTIFICATE_INVALID:
        return "apiserver_certificate_invalid"
    return "apiserver_unreachable" if e.status == 0 else "apiserver_refused"


async def _load(
    agent: Agent, stopping: asyncio.Future[Any], listing: list[str]
) -> dict[watching.Source, str] | None:
    """The first LIST of everything, retried with backoff while the apiserver cannot answer
    (not there yet, or our RBAC not yet bound); None when told to stop meanwhile."""

    def name_in_readiness(e: kube.ApiError) -> None:
        listing[:] = [_listing_failure(e)]

    try:
        versions = await retrying.retry(
            agent.load,
            kube.ApiError,
            message="cannot list the cluster state; retrying",
            logger=log,
            failure_text=lambda e: f"{e.status} {e.reason}",
            on_failure=name_in_readiness,
            on_recovery=lambda _: log.info("cluster state listed"),
            stop_at=(stopping,),
        )
    except retrying.Stopped:
        return None
    listing[:] = ["loading"]
    return versions
