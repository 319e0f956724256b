"""Prometheus metrics of the controller, and the small HTTP server that exposes them.

Names under `metallb_` are MetalLB's (same meaning, so its dashboards and alerts work); the rest
are ours under `ironlb_controller_`. Everything lives in one `CollectorRegistry` per `Metrics`,
so tests can build as many as they like without global state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import prometheus_client
from aiohttp import web

from controller import allocator, webhook
from ironlb_io import listening

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        r = self.registry

        def gauge(name: str, text: str, labels: Iterable[str] = ()) -> prometheus_client.Gauge:
            return prometheus_client.Gauge(name, text, list(labels), registry=r)

        pool = ("pool",)
        self.addresses_total = gauge(
            "metallb_allocator_addresses_total", "Usable addresses of the pool", pool
        )
        self.ipv4_total = gauge(
            "metallb_allocator_ipv4_addresses_total", "Usable IPv4 addresses", pool
        )
        self.ipv6_total = gauge(
            "metallb_allocator_ipv6_addresses_total", "Usable IPv6 addresses", pool
        )
        self.in_use = gauge(
            "metallb_allocator_addresses_in_use_total", "Addresses of the pool in use", pool
        )
        self.ipv4_in_use = gauge(
            "metallb_allocator_ipv4_addresses_in_use_total", "IPv4 addresses in use", pool
        )
        self.ipv6_in_use = gauge(
            "metallb_allocator_ipv6_addresses_in_use_total", "IPv6 addresses in use", pool
        )
        self.updates = prometheus_client.Counter(
            "metallb_k8s_client_updates",
            "Object changes received from the watches",
            registry=r,
        )
        self.update_errors = prometheus_client.Counter(
            "metallb_k8s_client_update_errors",
            "Writes that failed",
            registry=r,
        )
        self.config_loaded = gauge(
            "metallb_k8s_client_config_loaded_bool", "1 once a pool configuration was loaded"
        )
        self.config_stale = gauge(
            "metallb_k8s_client_config_stale_bool",
            "1 while running on an older configuration because the latest is invalid",
        )
        self.api_writes = prometheus_client.Counter(
            "ironlb_controller_api_writes",
            "Write requests sent to the apiserver",
            ["verb", "resource"],
            registry=r,
        )
        self.allocation_latency = prometheus_client.Histogram(
            "ironlb_controller_allocation_latency_seconds",
            "From noticing a Service that needs an address to its status carrying it",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.reconcile_seconds = prometheus_client.Histogram(
            "ironlb_controller_reconcile_seconds",
            "Duration of one reconcile round",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.malformed_reviews = prometheus_client.Counter(
            "ironlb_controller_malformed_admission_reviews",
            "Webhook request bodies refused with 400: not JSON, not an AdmissionReview, too large",
            ["reason"],
            registry=r,
        )
        for reason in webhook.MALFORMED_REASONS:  # exported at 0, so rate() sees the first one
            self.malformed_reviews.labels(reason)
        self.pending = gauge(
            "ironlb_controller_pending_services", "LoadBalancer Services without an address"
        )
        self.leader = gauge("ironlb_controller_leader", "1 while this replica holds the lease")
        self.ready = gauge("ironlb_controller_ready", "1 once state was rebuilt after start")
        self._pools: set[str] = set()

    def count_write(self, verb: str, resource: str) -> None:
        self.api_writes.labels(verb, resource).inc()

    def count_malformed_review(self, reason: str) -> None:
        self.malformed_reviews.labels(reason).inc()

    def set_pools(self, counters: dict[str, allocator.PoolCounters]) -> None:
        """Per-pool gauges from the allocator's counters; deleted pools disappear."""
        for name in self._pools - set(counters):
            for g in (
                self.addresses_total,
                self.ipv4_total,
                self.ipv6_total,
                self.in_use,
                self.ipv4_in_use,
                self.ipv6_in_use,
            ):
                g.remove(name)
        for name, c in counters.items():
            self.addresses_total.labels(name).set(c.capacity)
            self.ipv4_total.labels(name).set(c.capacity_ipv4)
            self.ipv6_total.labels(name).set(c.capacity_ipv6)
            self.in_use.labels(name).set(c.assigned)
            self.ipv4_in_use.labels(name).set(c.assigned_ipv4)
            self.ipv6_in_use.labels(name).set(c.assigned_ipv6)
        self._pools = set(counters)

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)


class Server:
    """`/metrics`, `/healthz` and `/readyz` over plain HTTP (port 0 picks a free one)."""

    def __init__(
        self, metrics: Metrics, ready: Callable[[], bool], *, host: str | None = None, port: int
    ) -> None:
        self.metrics, self._ready = metrics, ready
        self.host, self.requested_port, self.port = host, port, 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def scrape(_: web.Request) -> web.Response:
            return web.Response(
                body=self.metrics.render(),
                headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
            )

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            if self._ready():
                return web.Response(text="ok")
            return web.Response(status=503, text="not ready")

        app = web.Application()
        app.router.add_get("/metrics", scrape)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        sock = listening.listen(self.requested_port, self.host)
        site = web.SockSite(runner, sock)
        await site.start()
        self._runner = runner
        self.port = listening.port_of(sock)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
