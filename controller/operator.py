"""The controller process: kopf for the watches, our own loop for everything else.

Order of start-up, and why:
1. metrics and (optionally) the admission webhook listen at once, so probes and admission work
   on standby replicas too;
2. the leader Lease is acquired; only then is anything decided;
3. Services, pools and Namespaces are LISTed and the allocator rebuilt from existing status,
   and the first round runs (a settled cluster needs no write); the process is then ready;
4. kopf starts watching. Its `@kopf.on.event` handlers only feed the snapshot; they never
   return anything kopf would write, and kopf is configured so that it cannot write either:
   progress and diff-base storages that store nothing, no finalizers (no handler needs one),
   its own Event posting off (we post MetalLB's Events ourselves), no peering objects.
A lost Lease ends the process at once (exit code 3): the writers already check the Lease before
every request, and a new replica takes over from a clean start. A background loop (resync, the
configuration check) that ends, which only a bug does, ends it too (exit code 1), logged.

Logs are JSON lines (ts, level, msg, logger, plus the record's fields), kopf's included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from controller import certs, config_reporting, leader, metrics, reconciling, webhook
from ironlb import model
from ironlb_io import kube, retrying

log = logging.getLogger(__name__)

EXIT_LEASE_LOST = 3
STARTED = time.monotonic()


@dataclass(frozen=True, slots=True)
class Options:
    namespace: str = "metallb-system"
    lb_class: str = ""
    kubeconfig: str | None = None
    metrics_port: int = 7472
    webhook_port: int = 0
    webhook_cert_dir: str | None = None
    lease_name: str = "ironlb-controller"
    lease_duration: int = 15
    log_level: str = "info"
    resync_s: float = reconciling.RESYNC_S


# --- kopf ----------------------------------------------------------------------------------------


class _NoProgress(kopf.ProgressStorage):
    """Remembers nothing, so kopf has nothing to write onto users' Services.

    Only `@kopf.on.event` handlers are registered, which keep no progress anyway; this makes
    sure a handler added later cannot start annotating objects behind our back."""

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        pass

    def purge(self, **_: Any) -> None:
        pass

    def touch(self, **_: Any) -> None:
        pass

    def clear(self, *, essence: Any) -> Any:
        return essence  # nothing of ours is in it; skip kopf's deep copy of every body


class _NoDiffBase(kopf.DiffBaseStorage):
    """No last-handled-configuration annotation either.

    `build` would deep-copy every object on every event to compute diffs that only
    on.create/on.update handlers use; without such handlers that was most of kopf's cost per
    event, so it returns an empty essence."""

    def build(self, **_: Any) -> Any:
        return {}

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        pass


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.posting.enabled = False
    s.persistence.progress_storage = _NoProgress()
    s.persistence.diffbase_storage = _NoDiffBase()
    s.peering.standalone = True
    s.peering.clusterwide = True
    # The resources are known up front; no CRD/namespace scanning (and no RBAC for it).
    s.scanning.disabled = True
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    s.networking.request_timeout = 60
    return s


def connection_info(credentials: kube.Credentials) -> kopf.ConnectionInfo:
    """Our credentials for kopf's watches, so both talk to one server as one user."""
    return kopf.ConnectionInfo(
        server=credentials.server,
        ca_path=credentials.ca_file,
        insecure=credentials.insecure,
        token=credentials.bearer(),
        scheme="Bearer" if credentials.bearer() else None,
        certificate_path=credentials.cert_file,
        private_key_path=credentials.key_file,
        default_namespace=credentials.namespace,
    )


def registry(reconciler: reconciling.Reconciler, credentials: kube.Credentials) -> Any:
    r = kopf.OperatorRegistry()
    pool_plural, pool_versions = model.RESOURCES[model.IP_ADDRESS_POOL]

    @kopf.on.login(registry=r)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(credentials)

    @kopf.on.event("v1", "services", registry=r)
    async def service_event(event: Mapping[str, Any], **_: Any) -> None:
        reconciler.observe_service(event.get("type"), event["object"])

    @kopf.on.event(model.GROUP, pool_versions[-1], pool_plural, registry=r)
    async def pool_event(event: Mapping[str, Any], **_: Any) -> None:
        reconciler.observe_pool(event.get("type"), event["object"])

    @kopf.on.event("v1", "namespaces", registry=r)
    async def namespace_event(event: Mapping[str, Any], **_: Any) -> None:
        reconciler.observe_namespace(event.get("type"), event["object"])

    return r


# --- the webhook's lister, over our client ------------------------------------------------------


def lister(client: kube.Client, namespace: str) -> webhook.Lister:
    async def list_kind(kind: str) -> list[Mapping[str, Any]]:
        if kind == model.SECRET:
            secrets_, _ = await client.list(
                kube.core_path("secrets", namespace), metadata_only=True
            )
            return [{"metadata": {"name": s["metadata"]["name"]}} for s in secrets_]
        plural, versions = model.RESOURCES[kind]
        items, _ = await client.list(kube.group_path(model.GROUP, versions[-1], plural, namespace))
        return list(items)

    return list_kind


# --- the process ---------------------------------------------------------------------------------


def identity() -> str:
    """Pod name (the hostname inside a Pod) plus something unique to this process."""
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


def ready(*, leading: bool, rebuilt: bool, reachable: bool) -> bool:
    """`/readyz`: the leader once it rebuilt the cluster state; a standby while the apiserver
    answers it (it serves the webhook and waits for the Lease). Readiness must not wait for
    leadership: the new Pod of a rollout could never be Ready while the old one keeps renewing
    the Lease, so no rollout would finish, and a standby counted unhealthy would block every
    drain under a PDB. A replica the apiserver does not answer (or whose certificate it does
    not trust) is not ready either way."""
    return rebuilt or (not leading and reachable)


async def _first(*tasks: asyncio.Future[Any]) -> None:
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)


def _failures(tasks: Mapping[str, asyncio.Future[Any]]) -> list[tuple[str, BaseException]]:
    """The tasks that ended by raising (a cancellation is no failure), by name."""
    failed = []
    for name, task in tasks.items():
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            failed.append((name, error))
    return failed


def _lease_lost(stats: metrics.Metrics) -> int:
    """The leader Lease is someone else's now: say so; the exit code that says it (and keeps
    `run` from releasing a Lease that is no longer ours)."""
    stats.leader.set(0)
    log.error("leader lease lost: exiting")
    return EXIT_LEASE_LOST


async def _listen(
    options: Options,
    stats: metrics.Metrics,
    elector: leader.Elector,
    reconciler: reconciling.Reconciler,
    webhook_client: kube.Client,
) -> tuple[list[Any], asyncio.Task[None] | None]:
    """Start the metrics server and the webhook (with its certificate follower), if enabled;
    returns the servers to stop and the follower's task."""
    servers: list[Any] = []
    if options.metrics_port:
        server = metrics.Server(
            stats,
            lambda: ready(
                leading=elector.holding(),
                rebuilt=reconciler.ready.is_set(),
                reachable=elector.reachable,
            ),
            port=options.metrics_port,
        )
        await server.start()
        servers.append(server)
        log.info("metrics listening", extra={"port": server.port})
    following: asyncio.Task[None] | None = None
    if options.webhook_port:
        certificate = None
        if options.webhook_cert_dir:
            certificate = certs.load_dir(options.webhook_cert_dir)
        hook = webhook.WebhookServer(
            lister(webhook_client, options.namespace),
            options.namespace,
            port=options.webhook_port,
            certificate=certificate,
            malformed=stats.count_malformed_review,
        )
        await hook.start()
        servers.append(hook)
        log.info("webhook listening", extra={"port": hook.port})
        if options.webhook_cert_dir:
            follower = webhook.CertificateFollower(hook, options.webhook_cert_dir)
            following = asyncio.ensure_future(follower.run())
    return servers, following


async def _acquire_lease(elector: leader.Elector, stopping: asyncio.Future[Any]) -> bool:
    """Wait for the leader Lease; False when asked to stop first."""
    acquiring = asyncio.ensure_future(elector.acquire())
    await _first(acquiring, stopping)
    if not acquiring.done():
        acquiring.cancel()
        return False
    acquiring.result()
    return True


async def _load_cluster_state(
    reconciler: reconciling.Reconciler, stop_at: tuple[asyncio.Future[Any], ...]
) -> None:
    """LIST the cluster state into the reconciler; raises `retrying.Stopped` if one of `stop_at`
    ends first."""
    # e.g. the CRDs are not installed yet: keep trying, never decide blind
    await retrying.retry(
        reconciler.load,
        kube.ApiError,
        message="cannot list the cluster state; retrying",
        logger=log,
        level=logging.ERROR,
        # Once per kind of failure, not per retry.
        failure_text=lambda e: f"{e.status} {e.reason}",
        on_recovery=lambda _: log.info("cluster state listed"),
        stop_at=stop_at,
    )


def _start_watching(
    options: Options,
    me: str,
    credentials: kube.Credentials,
    client: kube.Client,
    elector: leader.Elector,
    reconciler: reconciling.Reconciler,
    kopf_stop: asyncio.Event,
) -> tuple[asyncio.Future[Any], dict[str, asyncio.Future[Any]]]:
    """Once the first round is done: kopf's watches and the background loops; returns kopf's
    task and the loops' tasks by name."""
    log.info(
        "ready",
        extra={
            "seconds_since_start": round(time.monotonic() - STARTED, 3),
            "writes": client.total_writes,
            "services": len(reconciler.services),
        },
    )
    operator = asyncio.ensure_future(
        kopf.operator(
            registry=registry(reconciler, credentials),
            settings=settings(),
            clusterwide=True,
            standalone=True,
            stop_flag=kopf_stop,
        )
    )
    reporter = config_reporting.Reporter(client, options.namespace, me, may_write=elector.holding)
    # Loops that never return and retry API errors themselves: one that ends has hit a
    # bug. Waited on with the others, so it ends the process (and the Deployment starts
    # a fresh one) instead of the controller running on without it, saying nothing.
    background: dict[str, asyncio.Future[Any]] = {
        "resync": asyncio.ensure_future(reconciler.resync_forever(options.resync_s)),
        # Problems that got past admission, as conditions and Events on the objects.
        "configuration check": asyncio.ensure_future(reporter.run_forever()),
    }
    return operator, background


def _exit_code(
    stats: metrics.Metrics,
    keeping: asyncio.Future[Any],
    running: asyncio.Future[Any],
    background: Mapping[str, asyncio.Future[Any]],
    reported: set[str],
) -> int:
    """Why the leader stopped leading, logged: the Lease lost, the reconciler failed, or a
    background loop ended (each adds the failed tasks to `reported`); 0 when asked to stop."""
    if keeping.done():
        return _lease_lost(stats)
    if running.done() and running.exception() is not None:
        log.error("reconciler failed", exc_info=running.exception())
        reported.add("reconciler")
        return 1
    if ended := [name for name, task in background.items() if task.done()]:
        for name in ended:
            log.error(
                "background task ended: exiting",
                extra={"task": name},
                exc_info=background[name].exception(),
            )
        reported.update(ended)
        return 1
    return 0


async def _stop_tasks(
    kopf_stop: asyncio.Event,
    operator: asyncio.Future[Any] | None,
    tasks: Mapping[str, asyncio.Future[Any]],
    reported: set[str],
) -> None:
    """Stop kopf, then cancel and await the other tasks, logging failures not logged yet."""
    # kopf first, through its own stop flag, so its watch streams close cleanly.
    kopf_stop.set()
    if operator is not None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(operator), 10)
    for task in tasks.values():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), 10)
    # The gather swallows what the tasks raised (kopf's failure, one raised while stopping):
    # say each once, leaving out those said above.
    for name, error in _failures(tasks):
        if name not in reported:
            log.error("task failed", extra={"task": name}, exc_info=error)


async def run(options: Options) -> int:
    credentials = kube.load(options.kubeconfig)
    stats = metrics.Metrics()
    client = kube.Client(credentials, on_write=stats.count_write)
    # The Lease has its own connection: renewals must never queue behind a burst of writes.
    lease_client = kube.Client(credentials, concurrency=1, on_write=stats.count_write)
    # So has the webhook: its reads answer an apply within the apiserver's timeout and must not
    # queue behind the reconciler's writes (it writes nothing).
    webhook_client = kube.Client(credentials, concurrency=2)
    me = identity()
    elector = leader.Elector(
        lease_client, options.namespace, options.lease_name, me, options.lease_duration
    )
    reconciler = reconciling.Reconciler(
        client,
        namespace=options.namespace,
        lb_class=options.lb_class,
        instance=me,
        stats=stats,
        may_write=elector.holding,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    servers, following = await _listen(options, stats, elector, reconciler, webhook_client)

    log.info(
        "ironlb controller starting",
        extra={"identity": me, "namespace": options.namespace, "lb_class": options.lb_class},
    )
    stopping = asyncio.ensure_future(stop.wait())
    tasks: dict[str, asyncio.Future[Any]] = {}
    reported: set[str] = set()  # tasks whose failure is logged already
    background: dict[str, asyncio.Future[Any]] = {}
    kopf_stop = asyncio.Event()
    operator: asyncio.Future[Any] | None = None
    code = 0
    try:
        if not await _acquire_lease(elector, stopping):
            return 0
        stats.leader.set(1)
        keeping = asyncio.ensure_future(elector.keep())
        tasks["lease"] = keeping
        try:
            await _load_cluster_state(reconciler, stop_at=(stopping, keeping))
        except retrying.Stopped:
            if keeping.done():  # lost while listing: said, counted and kept as below
                code = _lease_lost(stats)
            return code
        running = asyncio.ensure_future(reconciler.run())
        tasks["reconciler"] = running
        readying = asyncio.ensure_future(reconciler.ready.wait())
        await _first(readying, running, keeping, stopping)
        if readying.done():
            operator, background = _start_watching(
                options, me, credentials, client, elector, reconciler, kopf_stop
            )
            tasks |= {"kopf": operator, **background}
            await _first(running, keeping, stopping, operator, *background.values())
        else:
            readying.cancel()
        code = _exit_code(stats, keeping, running, background, reported)
    finally:
        await _stop_tasks(kopf_stop, operator, tasks, reported)
        if code != EXIT_LEASE_LOST:
            await elector.release()
        stopping.cancel()
        if following is not None:
            following.cancel()
        for server in servers:
            await server.stop()
        await client.close()
        await lease_client.close()
        await webhook_client.close()
        writes = client.total_writes + lease_client.total_writes
        log.info("stopped", extra={"writes": writes, "exit_code": code})
    return code
