"""The speaker process: an `Agent` with its clients, HTTP server and tasks, from the first LIST
to the last close (the order, and why, is `speaker.agent`'s docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ironlb_io import kube, retrying, watching
from speaker import datapath_probing, health, metrics
from speaker.agent import Agent, Options
from speaker.event_posting import EVENT_CONCURRENCY
from speaker.planes import BGP, Layer2, Membership
from speaker.status_writing import STATUS_CONCURRENCY

log = logging.getLogger(__name__)


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
        health.Server(
            options.metrics_port, metrics.REGISTRY, reasons, options.metrics_host, agent.explain
        )
        if options.metrics_port
        else None
    )
    log.info("ironlb speaker starting", extra={"node": options.node_name})
    tasks: list[asyncio.Future[Any]] = []
    watcher: kube.Client | None = None
    stopping = asyncio.ensure_future(stop.wait())
    # Not one of `tasks`, whose end ends the speaker: this one ends once it knows our Pod.
    # Started now, so that the Pod is read while everything is listed.
    learning_owner = (
        asyncio.ensure_future(agent.status_writer.learn_owner(options.pod_name))
        if options.pod_name
        else None
    )
    try:
        versions = await _load(agent, stopping, listing)
        if versions is None:
            return 0
        # What was just loaded lives as long as the process: keep the cyclic collector from
        # walking 10,000 Services' worth of objects again on every full collection.
        gc.collect()
        gc.freeze()
        tasks.extend(_start(agent))
        # Watches hold their connections for minutes: a client of their own, one connection
        # each, so that they never wait behind writes nor writes behind them.
        watcher = kube.Client(credentials, concurrency=len(versions))
        tasks.extend(_follow(agent, watcher, versions))
        await asyncio.wait([stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
        return _exit_code(tasks)
    finally:
        log.info("speaker stopping")
        await _stop(agent, tasks, learning_owner)
        stopping.cancel()
        await client.close()
        if watcher is not None:
            await watcher.close()
        if server is not None:
            server.close()


def _start(agent: Agent) -> list[asyncio.Future[Any]]:
    """The loop and everything that runs beside it; any of them ending ends the speaker."""
    tasks: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(agent.run()),
        asyncio.ensure_future(agent.status_writer.run()),
        asyncio.ensure_future(agent.state_writer.run()),
    ]
    if agent.membership is not None:
        tasks.append(asyncio.ensure_future(agent.watch_membership()))
    if agent.conflicts is not None:
        tasks.append(asyncio.ensure_future(agent.conflicts.run()))
    if agent.layer2 is not None:
        tasks.append(asyncio.ensure_future(agent.watch_interfaces()))
    if agent.prober is not None:
        tasks.append(asyncio.ensure_future(agent.prober.run()))
        tasks.append(asyncio.ensure_future(agent.watch_datapath()))
    tasks.append(asyncio.ensure_future(agent.tick()))
    return tasks


def _follow(
    agent: Agent, watcher: kube.Client, versions: Mapping[watching.Source, str]
) -> list[asyncio.Future[Any]]:
    return [
        asyncio.ensure_future(
            watching.follow(watcher, source, version, agent.observe, agent.relisted)
        )
        for source, version in versions.items()
    ]


def _exit_code(tasks: list[asyncio.Future[Any]]) -> int:
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("speaker task failed", exc_info=task.exception())
            return 1
    return 0


async def _stop(
    agent: Agent, tasks: list[asyncio.Future[Any]], learning_owner: asyncio.Future[None] | None
) -> None:
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
