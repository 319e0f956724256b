"""The speaker's loop: watches in, announcements out. `speaker.running` starts it as a process.

Start-up order, and why:
1. membership starts (so other speakers see us early) and metrics listen;
2. Services, EndpointSlices, Nodes, the metallb.io kinds, our status objects and the Secret names
   are LISTed: nothing is decided from a partial view; each kind is then watched from its
   list's resourceVersion (`ironlb_io.watching`), feeding the same store;
3. the loop runs: whenever something a pass reads changed (a watch event the Store says
   matters, a membership change, a periodic tick), the whole snapshot is rebuilt, the pure plans
   computed (`speaker.desired`) and handed to the layer 2 and BGP appliers (which diff against
   what they applied). After a pass that took T the next waits at least T (`speaker.pacing`), so
   that however fast events come, at least half of the loop's time is left to ExaBGP's
   acknowledgements, BFD timers and the status writer;
4. the status writer (`speaker.status_writing`) converges our status objects on what the latest
   pass wanted, several requests at a time, apart from the loop: announcing never waits for the
   API server; so does the ConfigurationState writer (`speaker.state_writing`), for our
   `speaker-<node>` object, when the pass's configuration problems change, or what it does not
   honour (`speaker.honoured_reporting`: `ironlb.honouring`'s findings and this node's own, such
   as a password Secret too long for TCP MD5): those are our `Honoured` condition, and each of
   this node's own gets a Warning Event on the object it is about (the controller posts the
   configuration's findings, once for every node).
A pass only queues its Events (`speaker.event_posting`) and counts what it announces
(`speaker.accounting`); split brains are watched apart (`speaker.conflict_watching`).
On SIGTERM: leave membership first (the others take over at once), stop answering, close the BGP
sessions (a Cease: the peer drops our routes at once; a graceful-restart peer keeps them for the
next speaker), then exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ironlb import addresses, model, taking_over
from ironlb.problems import Problem
from ironlb_io import kube, watching
from speaker import (
    datapath_probing,
    desired,
    election,
    explaining,
    inputs,
    metrics,
    snapshot,
    status,
)
from speaker.accounting import Accounting
from speaker.conflict_watching import NO_CONFLICT, ConflictWatcher
from speaker.datapath_reporting import DataPathReporter
from speaker.event_posting import EventPoster
from speaker.honoured_reporting import HonouredReporter
from speaker.pacing import pause_s
from speaker.planes import BGP, Layer2, Membership
from speaker.readiness import ReadinessGossip, local_targets
from speaker.state_writing import ConfigurationStateWriter
from speaker.status_writing import StatusWriter

log = logging.getLogger(__name__)

SLOW_PASS_S = 0.25  # a pass longer than this is logged
# Status objects and Events wait (at most this long) until ExaBGP took the routes: on a busy
# node the routes matter more than the API writes that describe them.
SETTLE_WAIT_S = 10.0
TICK_S = 10.0
# How often the layer 2 plane's interfaces are looked at (it scans them every 10 s itself).
INTERFACES_POLL_S = 1.0
SECRETS_EVERY_S = 30.0
# Every watched input reaches a pass through its watch (or a relist): this pass is only a
# safety net, and at 10,000 Services it costs ~0.4 s, which every minute would be most of an
# idle speaker's CPU (MetalLB's informers resync every 10 hours).
RESYNC_S = 300.0
STATE_REFRESH_S = 60.0  # our ConfigurationState is read back (one GET) this often
# How long a pass lets the BGP sessions take up its routes before its layer 2 work (they write
# their first command within a few ms; a busy one is not waited for beyond this).
EARLY_HANDOVER_S = 0.02


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
    # A label selector of the Pods (in `namespace`) of the load balancer this node takes over
    # from (`ironlb.taking_over`); empty: none.
    take_over_from: str = ""


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
    last_good: model.Config | None = None
    passwords: dict[str, str] = field(default_factory=dict)  # basic-auth Secret -> password
    last_pass_s: float = 0.0
    _problems: list[Problem] = field(default_factory=list)
    # What /explain answers from (read by the HTTP thread: replaced whole after each pass).
    _explained: explaining.Seen | None = None
    # The interfaces answering ARP/NDP as the latest pass saw them.
    _interfaces_seen: frozenset[str] | None = None
    # The live speakers the previous pass saw, and the verdicts of our own death refuted by
    # then: what members coming back (`election.to_announce_again`) is measured against.
    _alive_before: frozenset[str] | None = None
    _seen_alive: frozenset[str] = frozenset()
    _returns_seen: int = 0
    # Stand-in addresses to announce again once the view is quiet (`election.Deferred`).
    _again_later: election.Deferred[addresses.IPAddress] = field(default_factory=election.Deferred)
    _again_timer: asyncio.TimerHandle | None = None
    _standing: taking_over.Standing | None = None  # what the previous pass stood for
    # What the previous pass decided, kept so that a pass costs what changed (`desired.Memo`).
    _plans: desired.Memo = field(default_factory=desired.Memo)

    def __post_init__(self) -> None:
        me, ns = self.options.node_name, self.options.namespace
        self.store.status_node = me
        self.status_writer = StatusWriter(self.client, self.store, me, ns, self._settled)
        self.poster = EventPoster(
            self.client,
            self.store,
            me,
            status_quiet=self.status_writer.quiet,
            settled=self._settled,
        )
        self.state_writer = ConfigurationStateWriter(
            self.client, ns, me, conflict=NO_CONFLICT if self.layer2 is not None else None
        )
        self.accounting = Accounting(me, self.poster)
        self.honoured_reporter = HonouredReporter(me, self.store, self.poster, self.state_writer)
        self.datapath_reporter = DataPathReporter(me, self.prober, self.poster, self.state_writer)
        self.gossip = ReadinessGossip(me, self.membership, self.prober)
        self.conflicts = (
            None
            if self.layer2 is None
            else ConflictWatcher(
                self.layer2, me, self.poster, self.state_writer, lambda: self._explained
            )
        )

    # --- inputs -----------------------------------------------------------------------------

    def observe(self, kind: str, event_type: str | None, obj: Mapping[str, Any]) -> None:
        if kind in snapshot.STATUS_KINDS:
            self.status_writer.observe(kind, event_type, obj)
        elif self.store.put(kind, event_type, obj):
            self.dirty.set()

    def relisted(self, kind: str, items: list[Mapping[str, Any]]) -> None:
        if kind in snapshot.STATUS_KINDS:
            self.status_writer.relisted(kind, items)
        elif self.store.replace(kind, items):
            self.dirty.set()

    async def load(self) -> dict[watching.Source, str]:
        """LIST every kind; returns the resourceVersion each kind's watch starts from."""
        versions = {}
        for source in inputs.sources(
            self.options.namespace, self.options.node_name, self.options.take_over_from
        ):
            items, versions[source] = await watching.list_kind(self.client, source)
            self.store.replace(source.kind, items)
        await self.load_secrets()
        metrics.CONFIG_LOADED.set(1)
        return versions

    async def load_secrets(self) -> None:
        """Secret names in our namespace and BGP passwords (`speaker.inputs`)."""
        items, _ = await self.client.list(kube.core_path("secrets", self.options.namespace))
        passwords = inputs.passwords(items)
        changed = self.store.set_secrets(inputs.secret_names(items))
        if changed or passwords != self.passwords:
            self.passwords = passwords
            self.dirty.set()

    # --- the loop -----------------------------------------------------------------------------

    def alive(self) -> frozenset[str] | None:
        return None if self.membership is None else self.membership.members()

    def _snapshot(self) -> tuple[desired.Snapshot, desired.Snapshot, list[Problem]]:
        """The pass's snapshot (what the election sees), the same with our own verdict as our
        probes have it (what our BGP plan sees), and the configuration's problems."""
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
            readiness=self.gossip.readiness() if alive is not None else {},
        )
        own = snap
        if self.prober is not None:
            # The Local Services this pass would announce from here are probed from now on; one
            # not yet confirmed by kube-proxy is not announced in this very pass either.
            self.prober.set_targets(self._node_ip(), local_targets(snap, me))
            verdict = self.prober.readiness()
            own = dataclasses.replace(snap, readiness={**snap.readiness, me: verdict})
            if alive is not None:
                # The election must see our verdict as the others see it (gossip cuts it).
                snap = dataclasses.replace(
                    snap, readiness={**snap.readiness, me: verdict.as_gossiped()}
                )
        return snap, own, problems

    def standing(self) -> taking_over.Standing:
        """What this node does while another load balancer's speaker may run here (logged and
        counted when it changes)."""
        now = taking_over.standing(
            taking_over.Predecessor.of(p) for p in self.store.predecessors.values()
        )
        if now is not self._standing:
            if self.options.take_over_from:
                log.info(
                    "taking over",
                    extra={
                        "standing": now.value,
                        "detail": _STANDING_WORDS[now],
                        "pods": ", ".join(sorted(self.store.predecessors)),
                    },
                )
                for each in taking_over.Standing:
                    metrics.STANDING.labels(each.value).set(1 if each is now else 0)
            self._standing = now
        return now

    async def reconcile_once(self) -> None:
        me = self.options.node_name
        standing = self.standing()
        snap, own, problems = self._snapshot()
        # Stale: objects conflict, so the pass runs on the last good configuration. (While
        # nothing changes every pass gets the same object: identity alone does not say it.)
        stale = (
            self.store.config_conflicts()
            and self.last_good is not None
            and snap.config is self.last_good
        )
        if not stale:
            self.last_good = snap.config
        metrics.CONFIG_STALE.set(1 if stale else 0)
        if problems != self._problems:
            for p in problems:
                log.warning("configuration problem", extra={"problem": str(p)})
            self._problems = problems
        self.state_writer.set_problems(problems)
        self.state_writer.stand_by(not standing.writes)
        # BGP is this node's decision alone: our own verdict always counts.
        bgp_plan = (
            desired.bgp_plan(own, model.NodeName(me), self._plans) if standing.bgp else _EMPTY_BGP
        )
        # Until our probes answered once, the plan is not yet this node's answer.
        complete = self.prober is None or self.prober.verdicts_known()
        # Standing by for another speaker's sessions: none of ours (no Node, no peer).
        node = snap.nodes.get(me) if standing.bgp else None
        if self.bgp is not None and standing.bgp:
            # The routes go to ExaBGP before the layer 2 work: each one then spends FRR's
            # work-queue hold at the router (~60 ms) while this pass goes on, not after it.
            # Not when our sessions are handed to the other load balancer's speaker: `apply`
            # must end them (graceful restart: the peer keeps our routes) before a runner can
            # take up the empty route set, or the runners withdraw every route first.
            self.bgp.announce(snap.config, node, bgp_plan, self.passwords, complete=complete)
            await self.bgp.handed_over(EARLY_HANDOVER_S)
        answering = self._interfaces_seen = (
            self.layer2.interfaces() if self.layer2 is not None else None
        )
        l2 = (
            desired.l2_plan(snap, model.NodeName(me), answering, self._plans)
            if standing.layer2
            else _EMPTY_L2
        )
        if self.layer2 is not None:
            self.layer2.set_owned({e.address: e.interfaces for e in l2.mine})
            if standing.layer2:
                self._announce_again(snap, l2, answering)
                self.accounting.report_unannounceable(l2)
        reached: Mapping[str, tuple[model.PeerName, ...]] = {}
        if self.bgp is not None:
            reached = await self.bgp.apply(
                snap.config,
                node,
                bgp_plan,
                self.passwords,
                complete=complete,
                # Sessions given up to the other load balancer's speaker end as for a restart
                # (this node stays): a graceful-restart router keeps our routes meanwhile.
                handing_over=not standing.bgp,
            )
        layer2, bgp = self.layer2 is not None, self.bgp is not None
        self.accounting.account(l2, bgp_plan, reached, snap, layer2=layer2, bgp=bgp)
        bgp_problems = self.bgp.problems if self.bgp is not None else ()
        if standing.writes:
            self.honoured_reporter.judge(snap.config, bgp_problems, problems)
        verdict = self.datapath_reporter.judge(snap)
        by_key = desired.services_by_key(snap.services)
        self._explained = explaining.Seen(
            by_key,
            l2 if layer2 else None,
            bgp_plan if bgp else None,
            reached,
            verdict,
        )
        l2_announcers = status.Announcers(by_key, l2.owners)
        wanted = {
            model.SERVICE_L2_STATUS: status.wanted_l2(me, l2 if layer2 else _EMPTY_L2),
            model.SERVICE_BGP_STATUS: status.wanted_bgp(me, reached),
        }
        self.status_writer.want(wanted, l2_announcers, standing_by=not standing.writes)

    def _announce_again(
        self, snap: desired.Snapshot, l2: desired.L2Plan, answering: frozenset[str] | None
    ) -> None:
        """Kept addresses announced again when members are back (`election.to_announce_again`):
        what is ours with every member we have seen alive now, the rest once the view is quiet
        (a pass is asked for then)."""
        assert self.layer2 is not None
        mine = [e.address for e in l2.mine]
        returned, we_returned = self._returns(snap.alive)
        ours_with_all: frozenset[addresses.IPAddress] = frozenset()
        if returned or we_returned:
            everyone = dataclasses.replace(snap, alive=snap.alive | self._seen_alive)
            plan = desired.l2_plan(everyone, model.NodeName(self.options.node_name), answering)
            ours_with_all = frozenset(e.address for e in plan.mine)
        loop = asyncio.get_running_loop()
        again, settled, ask_at = self._again_later.decide(
            mine, ours_with_all, returned, we_returned, snap.alive, loop.time()
        )
        if self._again_timer is not None:
            self._again_timer.cancel()
        # One wake-up for what waits, however many passes run before it is due.
        self._again_timer = None if ask_at is None else loop.call_at(ask_at, self.dirty.set)
        if again:
            log.info(
                "announcing kept addresses again: members are back",
                extra={
                    "addresses": len(again),
                    "after_quiet": len(settled),
                    "returned": ", ".join(sorted(returned)),
                },
            )
            self.layer2.announce_again(again)

    def _returns(self, alive: frozenset[str]) -> tuple[frozenset[str], bool]:
        """(members live now that an earlier pass saw live and the previous one did not,
        whether we refuted a verdict of our own death since then). A member never seen before
        is new, not back: it cannot have stood in for anyone."""
        before, self._alive_before = self._alive_before, alive
        returned = alive - before if before is not None else frozenset()
        returned &= self._seen_alive
        self._seen_alive |= alive
        count = self.membership.returns() if self.membership is not None else 0
        we_returned, self._returns_seen = count > self._returns_seen, count
        return returned, we_returned

    def _node_ip(self) -> str | None:
        found = snapshot.internal_ips(self.store.node(self.options.node_name))
        v4 = [a for a in found if ":" not in a]
        return (v4 or found)[0] if found else None

    async def watch_datapath(self) -> None:
        assert self.prober is not None
        while True:
            await self.prober.changed.wait()
            self.prober.changed.clear()
            self.gossip.publish()
            self.dirty.set()

    def explain(self, key: str) -> dict[str, Any] | None:
        """This node's verdict on one Service, for `/explain` (called from the HTTP thread)."""
        seen = self._explained
        if seen is None or key not in seen.services:
            return None
        conflicts = self.conflicts.described() if self.conflicts is not None else []
        return explaining.explained(self.options.node_name, seen, key, conflicts)

    async def watch_interfaces(self) -> None:
        """A pass when the interfaces answering ARP/NDP change: an address elected here that
        waits for its interface is answered once the interface is up, and the reverse."""
        assert self.layer2 is not None
        while True:
            await asyncio.sleep(INTERFACES_POLL_S)
            if self.layer2.interfaces() != self._interfaces_seen:
                self.dirty.set()

    async def _settled(self) -> None:
        if self.bgp is not None:
            await self.bgp.wait_synced(SETTLE_WAIT_S)

    async def run(self) -> None:
        """Reconcile whenever something changed; the next pass starts no sooner after the end
        of the last one than that pass took (`pause_s`)."""
        self.dirty.set()
        ended = time.monotonic()
        while True:
            await self.dirty.wait()
            await asyncio.sleep(pause_s(self.last_pass_s, time.monotonic() - ended))
            self.dirty.clear()
            began, cpu_began = time.monotonic(), time.thread_time()
            try:
                await self.reconcile_once()
            except kube.ApiError as e:
                log.warning("reconcile failed; will retry", extra={"error": str(e)})
                await asyncio.sleep(1.0)
                self.dirty.set()
            ended = time.monotonic()
            self.last_pass_s = ended - began
            metrics.PASS_SECONDS.observe(self.last_pass_s)
            # On a busy node a pass waits for a core: its wall time then says more about the
            # neighbours than about the pass.
            metrics.PASS_CPU_SECONDS.observe(time.thread_time() - cpu_began)
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
                self.state_writer.refresh_soon()

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
_EMPTY_BGP = desired.BGPPlan(())
_STANDING_WORDS = {
    taking_over.Standing.STANDING_BY: "standing by: the other load balancer's speaker serves "
    "this node (no ARP/NDP answers, no BGP sessions, no status objects)",
    taking_over.Standing.LAYER2_ONLY: "layer 2 only: the other load balancer's speaker is "
    "starting on this node (its BGP sessions must be able to connect)",
    taking_over.Standing.SERVING: "serving: no other load balancer's speaker serves this node",
}
