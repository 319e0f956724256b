"""The speaker's HTTP port: `/metrics`, `/healthz` and `/readyz`, served from a thread.

From a thread of its own (like prometheus_client's server, which this replaces), so that scrapes
and probes are answered while the main loop is busy with a pass.

`/healthz` answers 200 while the process serves at all: the liveness probe, which must not restart
a speaker for something a restart cannot fix (DNS, the apiserver). `/readyz` answers 200 when
nothing is missing, else 503 with the reasons, one a line (`loading`, `apiserver_unreachable`,
`apiserver_certificate_invalid`, `apiserver_refused`,
`seeds_unresolved`, `memberlist_no_member_answered`, `memberlist_key_missing`,
`memberlist_bind_failed`).

`/explain?service=NAMESPACE/NAME` answers what this speaker last decided about one Service on its
node (`ironlb status --explain` reads it): 200 with the JSON document the `explain` callable
returns, 404 `{"error": ...}` for a Service the speaker does not know (or when it serves no
verdicts), 400 for a missing or malformed `service`, 500 when the callable fails. The callable
runs in this thread: it must only read what the main loop published.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler

import prometheus_client
from prometheus_client import exposition
from prometheus_client import registry as prom_registry

from ironlb_io import listening

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
# Service key "namespace/name" -> this node's verdict document, or None for an unknown Service.
Explain = Callable[[str], Mapping[str, Any] | None]
# A namespace is a DNS label (63), a Service name too; anything longer is no Service key.
MAX_SERVICE_KEY = 63 + 1 + 63


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def app(
    registry: prom_registry.CollectorRegistry,
    not_ready: Callable[[], Sequence[str]],
    explain: Explain | None = None,
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
        if path == "/explain":
            return _explain(environ, start_response, explain)
        result: Iterable[bytes] = metrics(environ, start_response)
        return result

    return serve


def service_key(query: str) -> str | None:
    """The `service` parameter of a query string when it is one `namespace/name`, else None."""
    values = urllib.parse.parse_qs(query, keep_blank_values=True).get("service", [])
    if len(values) != 1 or len(values[0]) > MAX_SERVICE_KEY:
        return None
    namespace, slash, name = values[0].partition("/")
    if not slash or not namespace or not name or "/" in name or not values[0].isprintable():
        return None
    return values[0]


def _explain(
    environ: dict[str, Any], start_response: StartResponse, explain: Explain | None
) -> list[bytes]:
    if environ.get("REQUEST_METHOD", "GET") != "GET":
        return _json(start_response, "405 Method Not Allowed", {"error": "only GET"})
    key = service_key(str(environ.get("QUERY_STRING", "")))
    if key is None:
        return _json(
            start_response,
            "400 Bad Request",
            {"error": "give one Service as ?service=NAMESPACE/NAME"},
        )
    if explain is None:
        return _json(start_response, "404 Not Found", {"error": "this speaker has no verdicts"})
    try:
        found = explain(key)
        body = None if found is None else json.dumps(dict(found), allow_nan=False)
    except Exception as e:  # whatever the callable does, the HTTP thread answers
        return _json(
            start_response,
            "500 Internal Server Error",
            {"error": f"cannot explain {key}: {_describe(e)}"},
        )
    if body is None:
        return _json(start_response, "404 Not Found", {"error": f"unknown Service {key}"})
    return _send(start_response, "200 OK", "application/json", body)


def _describe(error: Exception) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # an exception whose message itself fails
        return type(error).__name__


def _json(start_response: StartResponse, status: str, document: Mapping[str, Any]) -> list[bytes]:
    return _send(start_response, status, "application/json", json.dumps(document))


def _send(start_response: StartResponse, status: str, content_type: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data)))])
    return [data]


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    return _send(start_response, status, "text/plain; charset=utf-8", body)


class _WSGIServer(exposition.ThreadingWSGIServer):
    """prometheus_client's threading WSGI server on a socket made by `ironlb_io.listening`
    (both families), not one it binds itself (IPv4 only)."""

    def __init__(self, sock: socket.socket, application: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Quiet, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), listening.port_of(sock)
        self.setup_environ()
        self.set_app(application)


class Server:
    def __init__(
        self,
        port: int,
        registry: prom_registry.CollectorRegistry,
        not_ready: Callable[[], Sequence[str]],
        host: str | None = None,
        explain: Explain | None = None,
    ) -> None:
        self._server = _WSGIServer(listening.listen(port, host), app(registry, not_ready, explain))
        self.port: int = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
