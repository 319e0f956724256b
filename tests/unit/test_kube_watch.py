"""ironlb_io.kube watches against a local HTTP server that stops talking without closing."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from ironlb_io import kube


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Answers a watch with one event, then says nothing more and keeps the connection open:
    a peer that died without a RST looks like this from our side."""
    release = asyncio.Event()

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        event = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
        await response.write(json.dumps(event).encode() + b"\n")
        await release.wait()
        return response

    app = web.Application()
    app.router.add_get("/api/v1/services", watch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        release.set()
        await runner.cleanup()


async def test_a_watch_that_goes_silent_ends_as_unavailable(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube, "WATCH_READ_SLACK_S", 0.2, raising=False)
    client = kube.Client(kube.Credentials(server=silent_server))
    seen: list[str] = []
    try:
        with pytest.raises(kube.ApiError) as raised:
            async with asyncio.timeout(10):  # a bound for the test, far above the 0.2 s
                async for event in client.watch("/api/v1/services", {"timeoutSeconds": "0"}):
                    seen.append(event["object"]["metadata"]["name"])
    finally:
        await client.close()
    assert seen == ["a"]
    assert raised.value.retryable


async def test_connections_to_the_apiserver_probe_a_silent_peer(silent_server: str) -> None:
    """The kernel's keepalive probes find a peer gone without a RST about a minute after it
    fell silent, long before the watch's read timeout: the options are on the socket the
    watch really uses (read while its first event is being handled)."""
    client = kube.Client(kube.Credentials(server=silent_server))
    options: list[tuple[int, int, int, int]] = []
    try:
        async with asyncio.timeout(10):
            async for _ in client.watch("/api/v1/services", {"timeoutSeconds": "300"}):
                for connection in client._open()._open:
                    sock = connection.writer.get_extra_info("socket")
                    options.append(
                        (
                            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                        )
                    )
                break
    finally:
        await client.close()
    wanted = (1, kube.KEEPALIVE_IDLE_S, kube.KEEPALIVE_INTERVAL_S, kube.KEEPALIVE_PROBES)
    assert options == [wanted]
