"""The status writer: converges our ServiceL2Status / ServiceBGPStatus objects on what the latest
pass wanted (`speaker.status` decides the writes), several requests at a time, apart from the
loop: announcing never waits for the API server.

Our status objects are the writer's business, not a pass's: a pass does not read them, so their
watch events come here (`observe`, `relisted`) rather than wake the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ironlb import model, services
from ironlb_io import kube, retrying
from speaker import pacing, snapshot, status

log = logging.getLogger(__name__)

STATUS_CONCURRENCY = 8


class StatusClient(Protocol):
    """What the status writer needs of `kube.Client`."""

    async def get(self, path: str) -> dict[str, Any]: ...

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def delete(self, path: str) -> None: ...


@dataclass(frozen=True)
class _Batch:
    """One kind's writes in one sync: its collection, the owner they set, a few at a time."""

    kind: str
    base: str
    owner: status.Owner | None
    gate: asyncio.Semaphore


class StatusWriter:
    """Writes this node's status objects into `namespace`, keeping `store` on what the server
    holds. `settled` returns once ExaBGP took the routes (or waited long enough)."""

    def __init__(
        self,
        client: StatusClient,
        store: snapshot.Store,
        node_name: str,
        namespace: str,
        settled: Callable[[], Awaitable[None]],
    ) -> None:
        self.client = client
        self.store = store
        self.node_name = node_name
        self.namespace = namespace
        self.settled = settled
        self.wanted: dict[str, list[status.Wanted]] = {}  # kind -> what the latest pass wants
        # Layer 2: (namespace, name) -> the nodes elected for one of the Service's addresses.
        self.l2_announcers: Mapping[tuple[str, str], frozenset[str]] = {}
        self.owner: status.Owner | None = None  # our Pod, once read (`learn_owner`)
        # Standing by for another load balancer's speaker (`ironlb.taking_over`): only our own
        # objects are removed, the other's are left alone.
        self.standing_by = False
        self.dirty = asyncio.Event()
        # Set while the status writer has nothing left to write: Events wait for it (bounded).
        self.quiet = asyncio.Event()
        # (kind, "namespace/name") -> the resourceVersion our create returned, until the watch's
        # event for that object arrives (whichever version it carries): at most one per object.
        self._superseded: dict[tuple[str, str], str] = {}
        # Our status objects being created, (kind, "namespace/name") -> whether the watch
        # reported the object DELETED meanwhile: then the create's answer, arriving later, is
        # not put into the store (it would bring back an object the server no longer holds, and
        # nothing after that would tell the writer: seen after a cut link, whose TCP streams
        # resume out of order).
        self._creating: dict[tuple[str, str], bool] = {}

    def want(
        self,
        wanted: dict[str, list[status.Wanted]],
        l2_announcers: Mapping[tuple[str, str], frozenset[str]],
        *,
        standing_by: bool = False,
    ) -> None:
        """What the latest pass wants (kind -> objects), and who it elected in layer 2;
        `standing_by`: nothing is wanted, and of what exists only our own objects go."""
        self.l2_announcers = l2_announcers
        self.wanted = wanted
        self.standing_by = standing_by
        self.dirty.set()

    # --- inputs -----------------------------------------------------------------------------

    def observe(self, kind: str, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A watch event for one of our status objects.

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
            self.dirty.set()

    def relisted(self, kind: str, items: list[Mapping[str, Any]]) -> None:
        self._superseded.clear()
        if self.store.replace(kind, items):
            self.dirty.set()

    async def learn_owner(self, pod_name: str) -> None:
        """Read our own Pod once, retried until it answers (RBAC not bound yet, apiserver away):
        from then on our status objects are owned by it, those already made included."""
        ns, name = self.namespace, pod_name
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
        self.owner = status.Owner(name, uid)
        self.dirty.set()

    # --- writing ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Converge our status objects on what the latest pass wanted; a failed write is
        retried after a second, a newer wish replaces an older one."""
        while True:
            if not self.dirty.is_set():
                self.quiet.set()
            await self.dirty.wait()
            self.quiet.clear()
            await self.settled()
            self.dirty.clear()
            began = time.monotonic()
            failed = False
            for kind, wanted in list(self.wanted.items()):
                failed |= not await self.sync(kind, wanted)
            if failed:
                await asyncio.sleep(1.0)
                self.dirty.set()
            # Paced like the passes: echoes of our own writes must not keep it diffing.
            await asyncio.sleep(pacing.pause_s(time.monotonic() - began, 0.0))

    async def sync(self, kind: str, wanted: list[status.Wanted]) -> bool:
        """One kind's objects made as `wanted` says; True when every write succeeded."""
        existing = list(self.store.config.get(kind, {}).values())
        owner = self.owner
        changes = status.diff(
            kind,
            self.node_name,
            wanted,
            existing,
            announcers=(
                self.l2_announcers
                if kind == model.SERVICE_L2_STATUS and not self.standing_by
                else None
            ),
            owner=owner,
            only_ours=self.standing_by,
        )
        plural, versions = model.RESOURCES[kind]
        base = kube.group_path(model.GROUP, versions[-1], plural, self.namespace)
        batch = _Batch(kind, base, owner, asyncio.Semaphore(STATUS_CONCURRENCY))
        results = await asyncio.gather(
            *(self._create(batch, w) for w in changes.create),
            *(self._update(batch, w) for w in changes.update),
            *(self._delete(batch, n) for n in changes.delete),
            *(self._adopt(batch, n) for n in changes.adopt),
        )
        return all(results)

    async def _create(self, batch: _Batch, w: status.Wanted) -> bool:
        async with batch.gate:
            key = (batch.kind, f"{self.namespace}/{w.name}")
            self._creating[key] = False
            try:
                return await self._created(batch, w, key)
            finally:
                self._creating.pop(key, None)

    async def _created(self, batch: _Batch, w: status.Wanted, key: tuple[str, str]) -> bool:
        body = status.body(w, self.node_name, self.namespace, batch.owner)
        try:
            made = await self.client.create(batch.base, body)
            version = services.resource_version(made)
            if version:
                self._superseded[key] = version
        except kube.ApiError as e:
            if not e.conflict:
                log.warning("could not create status", extra={"error": str(e)})
                return False
        if not await self._patch_status(f"{batch.base}/{w.name}/status", w.status):
            return False
        if self._creating.get(key):
            # Deleted (another node's eviction) before our answers came back: the store
            # keeps what the watch said, and the writer looks again.
            self.dirty.set()
            return True
        # What the server holds now: its watch events then compare equal.
        self.store.put(batch.kind, None, {**body, "status": dict(w.status)})
        return True

    async def _update(self, batch: _Batch, w: status.Wanted) -> bool:
        async with batch.gate:
            if not await self._patch_status(f"{batch.base}/{w.name}/status", w.status):
                return False
            current = self.store.config.get(batch.kind, {}).get(f"{self.namespace}/{w.name}")
            if current is not None:
                self.store.put(batch.kind, None, {**current, "status": dict(w.status)})
            return True

    async def _delete(self, batch: _Batch, name: str) -> bool:
        async with batch.gate:
            try:
                await self.client.delete(f"{batch.base}/{name}")
            except kube.ApiError as e:
                if not e.not_found:
                    log.warning("could not delete status", extra={"error": str(e)})
                    return False
            self.store.config.get(batch.kind, {}).pop(f"{self.namespace}/{name}", None)
            return True

    async def _adopt(self, batch: _Batch, name: str) -> bool:
        assert batch.owner is not None
        references = [batch.owner.reference()]
        async with batch.gate:
            try:
                # The object itself, not /status: ownerReferences are metadata.
                await self.client.merge_patch(
                    f"{batch.base}/{name}", {"metadata": {"ownerReferences": references}}
                )
            except kube.ApiError as e:
                if e.not_found:
                    return True  # gone meanwhile: its watch event brings a create
                log.warning("could not set the owner of status", extra={"error": str(e)})
                return False
            current = self.store.config.get(batch.kind, {}).get(f"{self.namespace}/{name}")
            if current is not None:
                metadata = {**current["metadata"], "ownerReferences": references}
                self.store.put(batch.kind, None, {**current, "metadata": metadata})
            return True

    async def _patch_status(self, path: str, body: Mapping[str, Any]) -> bool:
        try:
            await self.client.merge_patch(path, {"status": dict(body)})
        except kube.ApiError as e:
            log.warning("could not write status", extra={"error": str(e), "path": path})
            return False
        return True
