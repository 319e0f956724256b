"""The speaker's HTTP port: `/metrics`, `/healthz` and `/readyz`, served from a thread.

From a thread of its own (like prometheus_client's server, which this replaces), so that scrapes
and probes are answered while the main loop is busy with a pass.

`/healthz` answers 200 while the process serves at all: the liveness probe, which must not restart
a speaker for something a restart cannot fix (DNS, the apiserver). `/readyz` answers 200 when
nothing is missing, else 503 with the reasons, one a line (`loading`, `apiserver_unreachable`,
`apiserver_certificate_invalid`, `apiserver_refused`,
`seeds_unresolved`, `memberlist_key_missing`, `memberlist_bind_failed`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import prometheus_client
from prometheus_client import exposition
from prometheus_client import registry as prom_registry

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def app(
    registry: prom_registry.CollectorRegistry, not_ready: Callable[[], Sequence[str]]
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    metrics = prometheus_client.make_wsgi_app(registry)

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            reasons = list(not_ready())
            if reasons:
                body = "".join(f"{r}\n" for r in reasons)
                return _text(start_response, "503 Service Unavailable", body)
            return _text(start_response, "200 OK", "ok\n")
        result: Iterable[bytes] = metrics(environ, start_response)
        return result

    return serve


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


class Server:
    def __init__(
        self,
        port: int,
        registry: prom_registry.CollectorRegistry,
        not_ready: Callable[[], Sequence[str]],
        host: str = "0.0.0.0",
    ) -> None:
        self._server = make_server(
            host,
            port,
            app(registry, not_ready),
            server_class=exposition.ThreadingWSGIServer,
            handler_class=_Quiet,
        )
        self.port: int = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
