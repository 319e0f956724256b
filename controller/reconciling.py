"""The level-triggered loop: snapshot in, smallest writes out.

Watch handlers (kopf, in `controller.operator`) only call `observe_*`: the object replaces its
older self in an in-memory snapshot and, if anything the controller reads changed, its key is
marked dirty. Nothing here depends on seeing every event: one task (`_loop`) takes every dirty
key, decides it from the whole snapshot with the pure allocator, and compares the wanted status
with the status the snapshot shows; only a difference becomes a write. A periodic re-LIST
(`resync`) repairs whatever a watch might have missed.

MetalLB's reprocess-all semantics are kept: when pools or namespace labels change every Service
is decided again, those holding addresses first (`converging.reprocess_order`), and when a
decision frees room (a Service deleted, shrunk, or its sharing key changed) every pending
Service is looked at again.

Writes go through a few worker tasks (as many as the client's connection limit) fed by one
priority queue: Service status first, then pool status, then Events, so Services get their
addresses before the bookkeeping. A queued key is written from the state at the moment it is
sent, so ten decisions about one Service while it waits in the queue make one write. One status
write per Service is in flight at a time; when it ends, the Service is written again if it was
asked for meanwhile or if its newest view does not show the decision. While a write is queued or
in flight, the Service's next decision uses the addresses being written, not the stale status,
so the allocator never takes back what it is about to publish.

Start-up (`load`): LIST pools, Namespaces, Services and our own Warning Events, rebuild the
allocator from the Services' existing status (held addresses first) and only then allocate
anything new. On a settled cluster every wanted state already matches, so the first round
writes nothing; `ready` is set once that round's writes (if any) are done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller import allocator, converging, metrics, snapshot
from ironlb import model, services
from ironlb_io import kube

log = logging.getLogger(__name__)

POOL_GROUP, POOL_VERSION = model.GROUP, model.RESOURCES[model.IP_ADDRESS_POOL][1][-1]
POOL_PLURAL = model.RESOURCES[model.IP_ADDRESS_POOL][0]
RESYNC_S = 300.0
BATCH = 500  # decisions between two yields to the event loop
RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
LEASE_WAIT_S = 0.05  # a writer's pause while the Lease's renewal is late
# Pool status is bookkeeping: during a burst of allocations write it at most this often.
POOL_STATUS_INTERVAL_S = 1.0


class Write(enum.IntEnum):
    """What a queued write is; the value is its priority (lower first)."""

    STATUS = 0
    POOL_STATUS = 1
    EVENT = 2


EventKey = tuple[str, str, str]  # (type, reason, message)


class Reconciler:
    def __init__(
        self,
        client: kube.Client,
        *,
        namespace: str,
        lb_class: str = "",
        instance: str = "ironlb-controller",
        stats: metrics.Metrics | None = None,
        may_write: Callable[[], bool] = lambda: True,
        workers: int = kube.CONCURRENCY,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.lb_class = lb_class
        self.instance = instance
        self.metrics = stats or metrics.Metrics()
        self.may_write = may_write
        self.clock, self.wall = clock, wall
        self.allocator = allocator.Allocator()
        self.ready = asyncio.Event()

        # The snapshot: the newest object seen of each kind.
        self.services: dict[str, snapshot.ServiceView] = {}
        self.pools: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}

        # Decisions and what is being written.
        self.desired: dict[str, snapshot.Desired] = {}
        self.unconfirmed: dict[str, snapshot.Desired] = {}  # queued or in flight
        self.pending: set[str] = set()  # LoadBalancers that did not converge
        self._told: dict[str, set[EventKey]] = {}  # Events already posted since the last change
        self._waiting_since: dict[str, float] = {}  # for the allocation latency
        self._loaded = False  # a valid pool configuration has been applied
        self._problems: tuple[str, ...] = ()
        self._uses_namespace_labels = False

        self._dirty: set[str] = set()
        self._pools_dirty = False
        self._pool_status_dirty = False
        self._wake = asyncio.Event()

        self._queue: list[tuple[int, int, Write, str, Any]] = []
        self._queued: set[tuple[Write, str]] = set()
        self._seq = itertools.count()
        self._has_work = asyncio.Event()
        self._in_flight = 0
        # One status write per Service at a time: two in flight for one key can land in either
        # order, each diffed against a view that the other is changing (a Service went
        # LoadBalancer -> ClusterIP -> LoadBalancer and kept its address without its pool
        # annotation). A key asked for while its write is in flight is only marked in `_again`
        # and queued when that write ends (`_status_write_ended`).
        self._writing: set[str] = set()
        self._again: set[str] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._attempts: dict[tuple[Write, str], int] = {}
        self._pool_written_at: dict[str, float] = {}
        self._pool_timer: asyncio.TimerHandle | None = None
        self._workers = workers
        self._event_seq = itertools.count()

    # --- snapshot input (from the watches; cheap and synchronous) ------------------------------

    def _mark(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    def observe_service(self, type_: str | None, obj: Mapping[str, Any]) -> None:
        self.metrics.updates.inc()
        key = services.key(obj)
        if type_ == "DELETED" or not services.class_matches(obj, self.lb_class):
            # Gone, or another implementation's: not kept at all (cheap for clusters full of
            # them); if we held it, forgetting it frees its addresses on the next round.
            if self.services.pop(key, None) is not None:
                self._mark(key)
            return
        self._store(snapshot.service_view(obj))

    def _store(self, view: snapshot.ServiceView) -> None:
        old = self.services.get(view.key)
        if old is not None and not snapshot.newer(view.resource_version, old.resource_version):
            return  # older than what we hold (e.g. our own PATCH response got here first)
        if old is None or old.uid != view.uid:
            # Another object of this name (its deletion and creation may land in one round,
            # and never reach `_forget`): the Events said about the last one are news to it.
            self._told.pop(view.key, None)
        self.services[view.key] = view
        if old == view:
            return
        if view.key not in self._waiting_since and view.load_balancer and not view.ingress:
            self._waiting_since[view.key] = self.clock()
        self._mark(view.key)

    def observe_pool(self, type_: str | None, obj: Mapping[str, Any]) -> None:
        self.metrics.updates.inc()
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != self.namespace:
            return  # MetalLB reads configuration from its own namespace only
        name = str(meta.get("name", ""))
        old = self.pools.get(name)
        if type_ == "DELETED":
            if self.pools.pop(name, None) is not None:
                self._pools_dirty = True
                self._wake.set()
            return
        if old is not None and not snapshot.newer(
            services.resource_version(obj), services.resource_version(old)
        ):
            return
        self.pools[name] = dict(obj)
        if old is None or _pool_inputs(old) != _pool_inputs(obj):
            self._pools_dirty = True
        else:
            self._pool_status_dirty = True  # a status edit: put ours back if it differs
        self._wake.set()

    def observe_namespace(self, type_: str | None, obj: Mapping[str, Any]) -> None:
        self.metrics.updates.inc()
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        if type_ == "DELETED":
            changed = self.namespaces.pop(name, None) is not None
        else:
            changed = self.namespaces.get(name) != labels
            self.namespaces[name] = labels
        if changed and self._uses_namespace_labels:
            self._pools_dirty = True
            self._wake.set()

    # --- start-up ----------------------------------------------------------------------------

    async def load(self) -> None:
        """LIST everything the decisions need; the allocator is rebuilt on the first round."""
        pools, _ = await self.client.list(
            kube.group_path(POOL_GROUP, POOL_VERSION, POOL_PLURAL, self.namespace)
        )
        namespaces, _ = await self.client.list(kube.core_path("namespaces"))
        services, _ = await self.client.list(kube.core_path("services"))
        warnings, _ = await self.client.list(
            kube.core_path("events"),
            {"fieldSelector": f"type=Warning,source={snapshot.COMPONENT}"},
        )
        for ns in namespaces:
            self.observe_namespace(None, ns)
        for pool in pools:
            self.observe_pool(None, pool)
        for svc in services:
            self.observe_service(None, svc)
        self._remember_warnings(warnings)
        self._pools_dirty = True
        self._wake.set()
        log.info(
            "state loaded",
            extra={"services": len(services), "pools": len(pools), "namespaces": len(namespaces)},
        )

    def _remember_warnings(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Warnings a previous run posted, so a restart does not post them again."""
        for ev in events:
            involved = ev.get("involvedObject") or {}
            key = f"{involved.get('namespace', '')}/{involved.get('name', '')}"
            view = self.services.get(key)
            if view is None or view.uid != involved.get("uid"):
                continue
            told = self._told.setdefault(key, set())
            told.add((str(ev.get("type")), str(ev.get("reason")), str(ev.get("message"))))

    async def resync(self) -> None:
        """Re-LIST Services and pools and fold them in: drop objects the watch never said were
        deleted, take newer versions. Level-triggered: a missed event costs one period."""
        listed, version = await self.client.list(kube.core_path("services"))
        seen = set()
        for svc in listed:
            seen.add(services.key(svc))
            self.observe_service(None, svc)
        for key in [k for k in self.services if k not in seen]:
            if not snapshot.newer(self.services[key].resource_version, version):
                del self.services[key]
                self._mark(key)
        pools, version = await self.client.list(
            kube.group_path(POOL_GROUP, POOL_VERSION, POOL_PLURAL, self.namespace)
        )
        names = set()
        for pool in pools:
            names.add(str((pool.get("metadata") or {}).get("name", "")))
            self.observe_pool(None, pool)
        for name in [n for n in self.pools if n not in names]:
            if not snapshot.newer(services.resource_version(self.pools[name]), version):
                self.observe_pool("DELETED", self.pools[name])

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Decide and write until cancelled. Call `load` first."""
        workers = [
            asyncio.create_task(self._writer(), name=f"writer-{i}") for i in range(self._workers)
        ]
        try:
            first = True
            while True:
                await self._wake.wait()
                self._wake.clear()
                await self._round()
                if first:
                    first = False
                    await self._drained()
                    self.ready.set()
                    self.metrics.ready.set(1)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def resync_forever(self, period_s: float = RESYNC_S) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                await self.resync()
            except kube.ApiError as e:
                log.warning("resync failed", extra={"error": str(e)})

    async def _drained(self) -> None:
        """Wait until nothing is queued or in flight."""
        while self._queue or self._in_flight or self._dirty:
            self._idle.clear()
            if self._dirty:
                self._wake.clear()
                await self._round()
                continue
            await self._idle.wait()

    async def _round(self) -> None:
        started = self.clock()
        if self._pools_dirty:
            self._pools_dirty = False
            self._apply_pools()
        if not self._loaded:
            return
        keys, self._dirty = self._dirty, set()
        views: dict[str, snapshot.ServiceView] = {}
        requests: list[allocator.ServiceRequest] = []
        for key in keys:
            view = self.services.get(key)
            if view is None or not snapshot.handled(view, self.lb_class):
                self._forget(key)
                continue
            if not snapshot.relevant(view, self.lb_class) and not self.allocator.allocation(key):
                continue  # e.g. a ClusterIP Service we never touched: nothing to decide
            views[key] = view
            requests.append(self._request(view))
        for i, request in enumerate(converging.reprocess_order(requests)):
            if i and i % BATCH == 0:
                await asyncio.sleep(0)
            view = views[request.key]
            if self.services.get(request.key) is not view:
                self._mark(request.key)  # changed while we yielded: decide it next round
                continue
            self._decide(view, request)
        self._update_pools_status()
        self.metrics.pending.set(len(self.pending))
        self.metrics.reconcile_seconds.observe(self.clock() - started)

    def _request(self, view: snapshot.ServiceView) -> allocator.ServiceRequest:
        writing = self.unconfirmed.get(view.key)
        if writing is None:
            return view.request
        return dataclasses.replace(view.request, current_ips=writing.ips)

    def _apply_pools(self) -> None:
        result = snapshot.pools(self.pools.values(), self.namespaces)
        self._uses_namespace_labels = result.uses_namespace_labels
        problems = tuple(str(p) for p in result.problems)
        if problems != self._problems:
            self._problems = problems
            for p in problems:
                log.warning("pool configuration problem", extra={"problem": p})
        if result.pools is None:
            self.metrics.config_stale.set(1)
            return
        self.metrics.config_stale.set(0)
        self.metrics.config_loaded.set(1)
        first = not self._loaded
        self._loaded = True
        self._pool_status_dirty = True
        if not first and result.pools == self.allocator.pools:
            return
        change = self.allocator.set_pools(result.pools)
        for service, old, new in change.moved:
            log.info("re-homed", extra={"service": service, "from_pool": old, "pool": new})
        for service, _old in change.evicted:
            log.info("evicted: pool no longer holds its addresses", extra={"service": service})
        # Reprocess all: every Service we handle is decided again, holders first.
        for key, view in self.services.items():
            if snapshot.relevant(view, self.lb_class) or self.allocator.allocation(key):
                self._dirty.add(key)

    def _forget(self, key: str) -> None:
        """A Service that is gone or no longer ours: free its addresses, touch nothing."""
        before = self.allocator.allocation(key)
        self.allocator.unassign(key)
        self.desired.pop(key, None)
        self.unconfirmed.pop(key, None)
        self.pending.discard(key)
        self._told.pop(key, None)
        self._waiting_since.pop(key, None)
        if before is not None and self.allocator.pool_for(before.ips) is not None:
            self._reprocess_pending()

    def _reprocess_pending(self) -> None:
        if self.pending:
            self._dirty |= self.pending
            self._wake.set()

    def _decide(self, view: snapshot.ServiceView, request: allocator.ServiceRequest) -> None:
        key = view.key
        decision = converging.converge(self.allocator, request)
        if decision.ok or not view.load_balancer:
            self.pending.discard(key)
        else:
            self.pending.add(key)
            log.info(
                "not allocated",
                extra={
                    "service": key,
                    "reason": decision.error.reason.value if decision.error else "",
                    "error": str(decision.error),
                },
            )
        if not view.load_balancer:
            self._waiting_since.pop(key, None)
        want = snapshot.desired_of(decision)
        events = list(decision.events)
        if want is None:
            self.desired.pop(key, None)
        else:
            self.desired[key] = want
            if snapshot.applied(view, want):
                self.unconfirmed.pop(key, None)
            elif self.unconfirmed.get(key) != want:
                self.unconfirmed[key] = want
                self._told.pop(key, None)  # a new state: its Events are news again
                events = [*snapshot.deprecation_events(view), *events]
                self._enqueue(Write.STATUS, key)
        for event in events:
            self._tell(view, event)
        if decision.reprocess_all:
            self._reprocess_pending()

    def _tell(self, view: snapshot.ServiceView, event: converging.Event) -> None:
        told = self._told.setdefault(view.key, set())
        ident = (event.type, event.reason, event.message)
        if ident in told:
            return
        told.add(ident)
        now = self.wall()
        body = snapshot.event_body(
            view,
            event,
            now=kube.timestamp(now),
            name_suffix=f"{int(now.timestamp() * 1e9):x}{next(self._event_seq) % 4096:03x}",
            instance=self.instance,
        )
        self._enqueue(Write.EVENT, f"{view.key}#{body['metadata']['name']}", body)

    def _update_pools_status(self) -> None:
        counters = {
            p.name: c for p in self.allocator.pools if (c := self.allocator.counters(p.name))
        }
        self.metrics.set_pools(counters)
        now, later = self.clock(), None
        for name, c in counters.items():
            raw = self.pools.get(name)
            if raw is None or snapshot.pool_status_patch(raw, c) is None:
                continue
            due = self._pool_written_at.get(name, -POOL_STATUS_INTERVAL_S) + POOL_STATUS_INTERVAL_S
            if due <= now:
                self._pool_written_at[name] = now
                self._enqueue(Write.POOL_STATUS, name)
            else:
                later = min(later or due, due)
        if later is not None and self._pool_timer is None:
            self._pool_timer = asyncio.get_running_loop().call_later(
                later - now, self._pool_timer_fired
            )
        self._pool_status_dirty = False

    def _pool_timer_fired(self) -> None:
        self._pool_timer = None
        self._pool_status_dirty = True
        self._wake.set()

    # --- writes ------------------------------------------------------------------------------

    def _enqueue(self, kind: Write, key: str, payload: Any = None) -> None:
        if kind is Write.STATUS and key in self._writing:
            self._again.add(key)
            return
        if (kind, key) in self._queued:
            return
        self._queued.add((kind, key))
        heapq.heappush(self._queue, (kind.value, next(self._seq), kind, key, payload))
        self._has_work.set()

    def _retry_later(self, kind: Write, key: str, payload: Any) -> None:
        attempt = self._attempts.get((kind, key), 0)
        self._attempts[(kind, key)] = attempt + 1
        delay = RETRY_S[min(attempt, len(RETRY_S) - 1)]
        asyncio.get_running_loop().call_later(delay, self._enqueue, kind, key, payload)

    async def _writer(self) -> None:
        while True:
            while not self._queue:
                self._has_work.clear()
                if not self._in_flight:
                    self._idle.set()
                await self._has_work.wait()
            if not self.may_write():
                # Not sure we still hold the Lease (a renewal is late, or it is being released
                # on shutdown): never write without it, but keep the queue. A lost Lease ends
                # the process; a late renewal that then succeeds must find every decision still
                # queued, since nothing decides a Service again until its inputs change (a
                # dropped queue once left 9,700 Services without the address already decided).
                await asyncio.sleep(LEASE_WAIT_S)
                continue
            _, _, kind, key, payload = heapq.heappop(self._queue)
            self._queued.discard((kind, key))
            if kind is Write.STATUS:
                self._writing.add(key)
            self._in_flight += 1
            failure: kube.ApiError | None = None
            try:
                if kind is Write.STATUS:
                    await self._write_status(key)
                elif kind is Write.POOL_STATUS:
                    await self._write_pool_status(key)
                else:
                    await self._post_event(payload)
                self._attempts.pop((kind, key), None)
            except kube.ApiError as e:
                failure = e
                self.metrics.update_errors.inc()
                if e.retryable:
                    log.warning("write failed; will retry", extra={"key": key, "error": str(e)})
                    self._retry_later(kind, key, payload)
                else:
                    # No retry follows, so its count would stay for good: one entry per Event
                    # name (each is new) or Service that failed retryably first, a slow leak.
                    self._attempts.pop((kind, key), None)
                    if not e.not_found:
                        log.error("write refused", extra={"key": key, "error": str(e)})
                if kind is Write.STATUS and not e.retryable:
                    self.unconfirmed.pop(key, None)
            finally:
                self._in_flight -= 1
                if kind is Write.STATUS:
                    self._status_write_ended(key, failure)

    def _status_write_ended(self, key: str, failure: kube.ApiError | None) -> None:
        """Queue the key again if it was asked for meanwhile, or if the write went through and
        the newest view still does not show the decision.

        The newest view, not the PATCH response: the watch may already hold a later version
        (another writer replaced our status after our write landed, or the apiserver cleared it
        on a type change), and a decision that did not change is not queued again by deciding.
        """
        self._writing.discard(key)
        asked = key in self._again
        self._again.discard(key)
        if failure is not None and failure.retryable:
            return  # `_retry_later` writes the newest decision after its pause
        view, want = self.services.get(key), self.desired.get(key)
        if view is None or want is None:
            return
        # After a refusal only a new request writes again: the same body would be refused again.
        if asked or (failure is None and not snapshot.applied(view, want)):
            self.unconfirmed[key] = want
            self._enqueue(Write.STATUS, key)

    async def _write_status(self, key: str) -> None:
        view, want = self.services.get(key), self.desired.get(key)
        if view is None or want is None:
            self.unconfirmed.pop(key, None)
            return
        body = snapshot.status_patch(view, want)
        if body is None:
            self.unconfirmed.pop(key, None)
            return
        obj = await self.client.merge_patch(
            kube.core_path("services", view.namespace, view.name) + "/status", body
        )
        written = snapshot.service_view(obj)
        if self.unconfirmed.get(key) == want:
            self.unconfirmed.pop(key, None)
        current = self.services.get(key)
        if current is None:
            return  # deleted meanwhile; the watch's DELETED already freed it
        if snapshot.newer(written.resource_version, current.resource_version):
            self.services[key] = written
            if dataclasses.replace(
                written.request, current_ips=current.request.current_ips
            ) != current.request or (written.uid != current.uid):
                self._mark(key)
        if want.ips and key in self._waiting_since:
            self.metrics.allocation_latency.observe(self.clock() - self._waiting_since.pop(key))

    async def _write_pool_status(self, name: str) -> None:
        raw = self.pools.get(name)
        counters = self.allocator.counters(name)
        if raw is None or counters is None:
            return
        body = snapshot.pool_status_patch(raw, counters)
        if body is None:
            return
        obj = await self.client.merge_patch(
            kube.group_path(POOL_GROUP, POOL_VERSION, POOL_PLURAL, self.namespace, name)
            + "/status",
            body,
        )
        current = self.pools.get(name)
        if current is not None and snapshot.newer(
            services.resource_version(obj), services.resource_version(current)
        ):
            self.pools[name] = obj

    async def _post_event(self, body: dict[str, Any]) -> None:
        try:
            await self.client.create(kube.core_path("events", body["metadata"]["namespace"]), body)
        except kube.ApiError as e:
            if e.conflict:
                return  # the same name twice: one of them is enough
            raise


def _pool_inputs(obj: Mapping[str, Any]) -> tuple[Any, Any]:
    """What a pool decision reads: its spec and labels (not its status, which we write)."""
    meta = obj.get("metadata") or {}
    return (obj.get("spec"), meta.get("labels"))
