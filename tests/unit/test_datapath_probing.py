"""speaker.datapath_probing against a loopback HTTP server that answers as told (kube-proxy's
/healthz and healthCheckNodePort answer with a status code; that is all the prober reads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from ironlb import datapath
from ironlb_io import prometheus
from speaker import datapath_probing


class Server:
    """Answers each GET with `status[path]` (500 if absent) and counts requests per path."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.hits: dict[str, int] = {}
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        path = line.split()[1].decode() if len(line.split()) > 1 else "/"
        self.hits[path] = self.hits.get(path, 0) + 1
        code = self.status.get(path, 500)
        writer.write(f"HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    s = Server()
    await s.start()
    yield s
    await s.close()


def prober(server: Server, **kw: object) -> datapath_probing.Prober:
    return datapath_probing.Prober(
        healthz_url=f"http://{{node_ip}}:{server.port}/healthz",
        interval=0.02,
        timeout=0.5,
        registry=prometheus.Registry(),
        **kw,  # type: ignore[arg-type]
    )


async def until(condition: Callable[[], bool], rounds: int = 200) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")


async def test_not_ready_until_kube_proxy_answers_healthy(server: Server) -> None:
    p = prober(server)
    assert not p.readiness().proxy_ready  # before any probe: nothing may be announced
    server.status["/healthz"] = 503
    task = asyncio.ensure_future(p.run())
    try:
        await until(lambda: server.hits.get("/healthz", 0) >= 3)
        assert not p.readiness().proxy_ready and "HTTP 503" in p.message
        server.status["/healthz"] = 200
        await until(lambda: p.readiness().proxy_ready)
        assert p.changed.is_set()
    finally:
        task.cancel()


async def test_one_failure_is_not_enough_two_are(server: Server) -> None:
    p = prober(server, fail_after=2)
    server.status["/healthz"] = 200
    await p._probe_proxy()
    assert p.proxy_ready
    server.status["/healthz"] = 503
    await p._probe_proxy()
    assert p.proxy_ready  # one slow or failed answer moves nothing
    await p._probe_proxy()
    assert not p.proxy_ready


async def test_refused_connection_is_not_ready(server: Server) -> None:
    p = datapath_probing.Prober(
        healthz_url="http://127.0.0.1:1/healthz",
        fail_after=1,
        registry=prometheus.Registry(),
    )
    await p._probe_proxy()
    assert not p.proxy_ready and "127.0.0.1:1" in p.message


async def test_local_services_are_lagging_until_their_port_says_an_endpoint(server: Server) -> None:
    # Both Services on the same port here; the paths tell kube-proxy's two answers apart.
    p = prober(server)
    p.set_targets("127.0.0.1", {"ns/a": server.port})
    assert p.readiness().unready_local == {"ns/a"}  # not probed yet: not announced
    server.status["/"] = 503
    await p._probe_services(0.0)
    assert p.readiness().unready_local == {"ns/a"}
    server.status["/"] = 200
    await p._probe_services(1.0)
    assert p.readiness().unready_local == frozenset()
    p.set_targets("127.0.0.1", {})
    assert p.readiness().unready_local == frozenset()


async def test_probes_per_round_are_bounded_and_new_ones_go_first(server: Server) -> None:
    p = prober(server, rate=100.0)  # 100/s x 0.02 s = 2 per round
    server.status["/"] = 200
    p.set_targets("127.0.0.1", {f"ns/s{i}": server.port for i in range(10)})
    await p._probe_services(0.0)
    assert server.hits.get("/", 0) == 2
    assert len(p.readiness().unready_local) == 8
    for round_ in range(4):
        await p._probe_services(float(round_ + 1))
    assert server.hits["/"] == 10
    assert p.readiness().unready_local == frozenset()  # every one probed once before any twice


def test_endpoints_mode_is_always_ready() -> None:
    p = datapath_probing.Prober(check=datapath.Check.ENDPOINTS, registry=prometheus.Registry())
    p.set_targets("10.0.0.1", {"ns/a": 31000})
    assert p.readiness() == datapath.NodeReadiness(True)


def test_url_for_brackets_ipv6() -> None:
    t = datapath_probing.DEFAULT_HEALTHZ_URL
    assert datapath_probing.url_for(t, "fd00::1") == "http://[fd00::1]:10256/healthz"
    assert datapath_probing.url_for(t, None) == "http://127.0.0.1:10256/healthz"


async def test_confirmed_services_are_asked_again_only_after_recheck(server: Server) -> None:
    # Budgets of 20 per round and 2 rechecks per round: not the limit here.
    p = prober(server, rate=1000.0, recheck=5.0, recheck_rate=100.0)
    server.status["/"] = 200
    p.set_targets("127.0.0.1", {"ns/a": server.port, "ns/b": server.port})
    await p._probe_services(0.0)
    assert server.hits["/"] == 2
    await p._probe_services(1.0)
    await p._probe_services(4.9)
    assert server.hits["/"] == 2  # confirmed: left alone until recheck
    server.status["/"] = 503
    await p._probe_services(5.0)
    assert server.hits["/"] == 4
    assert p.readiness().unready_local == {"ns/a", "ns/b"}
    await p._probe_services(5.5)  # lagging ones: every round
    assert server.hits["/"] == 6


async def test_rechecks_of_confirmed_services_are_bounded_oldest_first(server: Server) -> None:
    # 1,000/s x 0.02 s = 20 probes a round, but rechecks at 50/s x 0.02 s = 1 a round.
    p = prober(server, rate=1000.0, recheck=5.0, recheck_rate=50.0)
    server.status["/"] = 200
    p.set_targets("127.0.0.1", {f"ns/s{i}": server.port for i in range(6)})
    await p._probe_services(0.0)
    assert server.hits["/"] == 6
    p._targets["ns/s3"].probed_at = -1.0  # asked longest ago
    await p._probe_services(10.0)
    assert server.hits["/"] == 7
    assert p._targets["ns/s3"].probed_at == 10.0  # the oldest went first
    for round_ in range(5):
        await p._probe_services(10.1 + round_ / 10)
    assert server.hits["/"] == 12  # one a round until every stale one was asked again
    await p._probe_services(11.0)
    assert server.hits["/"] == 12  # none is stale any more
    # A lagging one is not held back by the recheck budget.
    server.status["/"] = 503
    p.set_targets(
        "127.0.0.1", {**{f"ns/s{i}": server.port for i in range(6)}, "ns/new": server.port}
    )
    await p._probe_services(11.1)
    assert server.hits["/"] == 13
    assert "ns/new" in p.readiness().unready_local


async def test_verdicts_are_known_once_kube_proxy_and_every_local_service_answered(
    server: Server,
) -> None:
    """Graceful restart's End-of-RIB waits for these first answers, failed ones included: a
    first 'not ready' is an answer too, and wakes the agent although readiness is unchanged."""
    p = prober(server, fail_after=2)
    p.set_targets("127.0.0.1", {"ns/a": server.port})
    assert not p.verdicts_known()
    server.status["/healthz"] = 503
    await p._probe_proxy()
    assert not p.proxy_ready and p.changed.is_set()
    assert not p.verdicts_known()  # ns/a never asked
    p.changed.clear()
    server.status["/"] = 503
    await p._probe_services(0.0)
    assert p.changed.is_set() and p.verdicts_known()
    p.set_targets("127.0.0.1", {"ns/a": server.port, "ns/b": server.port + 1})
    assert not p.verdicts_known()  # a new Local Service: not answered yet


def test_endpoints_mode_knows_its_verdicts_at_once() -> None:
    p = datapath_probing.Prober(check=datapath.Check.ENDPOINTS, registry=prometheus.Registry())
    p.set_targets("127.0.0.1", {"ns/a": 30000})
    assert p.verdicts_known()
