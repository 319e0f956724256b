"""The speaker's Events (`nodeAssigned`, `nodeWithdrawn`, `announceFailed`, `DataPath*`, ...),
posted apart from the passes: a pass only queues them.

Every Event waits (bounded) until ExaBGP took the routes and the status writer is done, and a
few go at a time: on a busy node the routes matter more than the API writes that describe them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets as random_names
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from ironlb import events
from ironlb_io import kube
from speaker import snapshot

log = logging.getLogger(__name__)

EVENT_HOLD_S = 30.0  # the longest an Event waits for the status writer to be done
EVENT_CONCURRENCY = 4


class EventsClient(Protocol):
    """What posting needs of `kube.Client`."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


class EventPoster:
    """Posts this node's Events about the objects in `store`. `status_quiet` is set while the
    status writer has nothing left to write; `settled` returns once ExaBGP took the routes (or
    waited long enough)."""

    def __init__(
        self,
        client: EventsClient,
        store: snapshot.Store,
        node_name: str,
        *,
        status_quiet: asyncio.Event,
        settled: Callable[[], Awaitable[None]],
    ) -> None:
        self.client = client
        self.store = store
        self.node_name = node_name
        self.status_quiet = status_quiet
        self.settled = settled
        self.posting: set[asyncio.Future[None]] = set()  # the Events posted one task each
        # `nodeAssigned` Events to post, (service key, protocol): one task posts them all, since a
        # task per Event made 10,000 tasks each waiting for the routes (~0.7 s of the pass's loop).
        self._assigned: collections.deque[tuple[str, str]] = collections.deque()
        self._assigning: asyncio.Future[None] | None = None
        self._gate = asyncio.Semaphore(EVENT_CONCURRENCY)

    def post_service_event(self, key: str, reason: str, message: str, *, warning: bool) -> None:
        """An Event on Service `key` from this node; none when the Service is gone meanwhile."""
        svc = self.store.services.get(key)
        if svc is None:
            return
        self.post_soon(event_body(svc, reason, message, self.node_name, warning=warning))

    def post_node_event(self, reason: str, message: str, *, warning: bool) -> None:
        node = self.store.node(self.node_name)
        if node is None:
            return
        body = event_body(node, reason, message, self.node_name, kind="Node", warning=warning)
        self.post_soon(body)

    def post_soon(self, body: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self._post(body))
        self.posting.add(task)
        task.add_done_callback(self.posting.discard)

    def post_assigned(self, service: str, protocol: str) -> None:
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
                message = f'announcing from node "{self.node_name}" with protocol "{protocol}"'
                await self._create(event_body(svc, "nodeAssigned", message, self.node_name))

        # Returns only with the queue empty: this task is done in the same step as that check,
        # so an Event queued after it finds the task done and starts another.
        while self._assigned:
            await self.settled()
            await asyncio.gather(*(poster() for _ in range(EVENT_CONCURRENCY)))

    async def _post(self, body: dict[str, Any]) -> None:
        await self.settled()
        await self._create(body)

    async def _create(self, body: dict[str, Any]) -> None:
        # A few at a time, and after the status objects: 10,000 Services announced at once
        # must not be 10,000 requests racing the status writer for the API server (status is
        # what readers and alerts rely on; an Event is a note). Bounded, so never lost.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.status_quiet.wait(), EVENT_HOLD_S)
        async with self._gate:
            try:
                await self.client.create(
                    kube.core_path("events", body["metadata"]["namespace"]), body
                )
            except kube.ApiError as e:
                log.warning("could not post event", extra={"error": str(e)})


def event_body(
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
