"""The speaker's HTTP port: `/metrics`, `/healthz` and `/readyz`, served from a thread.

From a thread of its own, so that scrapes and probes are answered while the main loop is busy
with a pass.

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

import contextlib
import json
import socket
import socketserver
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ironlb_io import listening, prometheus

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
# A WSGI application, of which the server fills in REQUEST_METHOD, PATH_INFO and QUERY_STRING.
Application = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# The request line and headers together; a client's request head is a few hundred bytes.
MAX_HEAD = 8192
READ_TIMEOUT_S = 5.0
# Service key "namespace/name" -> this node's verdict document, or None for an unknown Service.
Explain = Callable[[str], Mapping[str, Any] | None]
# A namespace is a DNS label (63), a Service name too; anything longer is no Service key.
MAX_SERVICE_KEY = 63 + 1 + 63


def app(
    registry: prometheus.Registry,
    not_ready: Callable[[], Sequence[str]],
    explain: Explain | None = None,
) -> Application:
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
        return _metrics(environ, start_response, registry)  # any other path, as before

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


def _metrics(
    environ: dict[str, Any], start_response: StartResponse, registry: prometheus.Registry
) -> list[bytes]:
    if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
        return _text(start_response, "405 Method Not Allowed", "only GET\n")
    data = registry.exposition()
    headers = [("Content-Type", prometheus.CONTENT_TYPE), ("Content-Length", str(len(data)))]
    start_response("200 OK", headers)
    return [data]  # the server sends no body for a HEAD


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


class _Handler(socketserver.StreamRequestHandler):
    """One request a connection, as HTTP/1.1 with `Connection: close`: the request line and
    headers (at most MAX_HEAD bytes, each read within READ_TIMEOUT_S, so a slow or endless
    client holds one thread for a bounded time), the WSGI app's answer, then the close. No
    request body is read: every path answers GET (and HEAD); others get the app's 405."""

    timeout = READ_TIMEOUT_S
    server: _Server

    def handle(self) -> None:
        try:
            request = self._read_head()
        except (OSError, ValueError):  # a timeout, a reset, an oversized or garbled head
            return
        if request is None:
            self._answer("400 Bad Request", [("Content-Type", "text/plain")], b"bad request\n")
            return
        method, target = request
        path, _, query = target.partition("?")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": urllib.parse.unquote(path, "iso-8859-1"),
            "QUERY_STRING": query,
        }
        answered: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            answered.append((status, headers))

        try:
            body = b"".join(self.server.application(environ, start_response))
            ((status, headers),) = answered
        except Exception as e:  # a collector's bug: the scrape fails, the thread answers
            headers = [("Content-Type", "text/plain; charset=utf-8")]
            status, body = "500 Internal Server Error", f"{_describe(e)}\n".encode()
        self._answer(status, headers, b"" if method == "HEAD" else body)

    def _read_head(self) -> tuple[str, str] | None:
        line = self.rfile.readline(MAX_HEAD + 1)
        read = len(line)
        parts = line.decode("latin-1").split()
        while True:
            header = self.rfile.readline(MAX_HEAD + 1)
            read += len(header)
            if read > MAX_HEAD:
                raise ValueError("request head too long")
            if header in (b"\r\n", b"\n", b""):
                break
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return None
        return parts[0], parts[1]

    def _answer(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        head = [f"HTTP/1.1 {status}"]
        head += [f"{name}: {value}" for name, value in headers]
        head += ["Connection: close", "", ""]
        with contextlib.suppress(OSError):  # the client went away: nothing to answer
            self.wfile.write("\r\n".join(head).encode("latin-1") + body)


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """Each request in a thread of its own, on a socket made by `ironlb_io.listening` (both
    families), not one it binds itself (IPv4 only)."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, application: Application) -> None:
        super().__init__(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()
        self.server_port = listening.port_of(sock)
        self.application = application


class Server:
    def __init__(
        self,
        port: int,
        registry: prometheus.Registry,
        not_ready: Callable[[], Sequence[str]],
        host: str | None = None,
        explain: Explain | None = None,
    ) -> None:
        self._server = _Server(listening.listen(port, host), app(registry, not_ready, explain))
        self.port: int = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
