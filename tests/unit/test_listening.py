"""Every HTTP server listens on both families by default (IPv6-only clusters probe the Pod's
IPv6 address), on one port; an explicit host is honoured."""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.request

import pytest

from controller import metrics, webhook
from ironlb_io import listening, prometheus
from speaker import health

LOOPBACKS = ("127.0.0.1", "::1")


def _url(host: str, port: int, path: str, scheme: str = "http") -> str:
    return f"{scheme}://[{host}]:{port}{path}" if ":" in host else f"{scheme}://{host}:{port}{path}"


def test_the_default_socket_takes_both_families_on_one_port() -> None:
    sock = listening.listen(0)
    try:
        port = listening.port_of(sock)
        for host in LOOPBACKS:
            with socket.create_connection((host, port), timeout=5):
                conn, _ = sock.accept()
                conn.close()
    finally:
        sock.close()


def test_an_explicit_host_is_the_only_one() -> None:
    sock = listening.listen(0, "127.0.0.1")
    try:
        assert sock.family == socket.AF_INET
        with pytest.raises(OSError):
            socket.create_connection(("::1", listening.port_of(sock)), timeout=5).close()
    finally:
        sock.close()


def test_the_speaker_health_port_answers_on_both_families() -> None:
    server = health.Server(0, prometheus.Registry(), lambda: [])
    try:
        for host in LOOPBACKS:
            with urllib.request.urlopen(_url(host, server.port, "/healthz"), timeout=5) as r:
                assert r.status == 200
    finally:
        server.close()


async def test_the_controller_metrics_and_webhook_answer_on_both_families() -> None:
    server = metrics.Server(metrics.Metrics(), lambda: True, port=0)

    async def no_objects(_kind: str) -> list[dict[str, object]]:
        return []

    hook = webhook.WebhookServer(
        no_objects, "metallb-system", port=0, hosts=("localhost", "::1", "127.0.0.1")
    )
    await server.start()
    await hook.start()
    try:
        context = ssl.create_default_context(cadata=hook.ca_pem.decode())
        context.check_hostname = False
        for host in LOOPBACKS:

            def get(url: str, ctx: ssl.SSLContext | None = None) -> int:
                with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
                    return int(r.status)

            assert await asyncio.to_thread(get, _url(host, server.port, "/healthz")) == 200
            # Any answer over TLS shows it listens (an empty GET is not an AdmissionReview).
            with pytest.raises(urllib.error.HTTPError):
                await asyncio.to_thread(get, _url(host, hook.port, "/validate", "https"), context)
    finally:
        await hook.stop()
        await server.stop()
