"""The speaker's HTTP port, called as a WSGI app (/healthz, /readyz and /explain), and its
server over real connections."""

from __future__ import annotations

import json
import math
import socket
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from ironlb_io import prometheus
from speaker import health

VERDICT: dict[str, Any] = {
    "node": "node1",
    "service": "app/web",
    "datapath": {"ready": True, "reason": None, "message": ""},
    "verdicts": [
        {
            "protocol": "layer2",
            "announcing": False,
            "reason": "notOwner",
            "message": "node2 is elected",
            "ips": ["10.0.0.1"],
        }
    ],
    "conflicts": [],
}


def call(
    path: str,
    query: str = "",
    explain: health.Explain | None = None,
    method: str = "GET",
    not_ready: tuple[str, ...] = (),
) -> tuple[str, dict[str, str], bytes]:
    serve = health.app(prometheus.Registry(), lambda: not_ready, explain)
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen.append((status, headers))

    environ = {"PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": method}
    body = b"".join(serve(environ, start_response))
    ((status, headers),) = seen
    return status, dict(headers), body


def known(key: str) -> Mapping[str, Any] | None:
    return VERDICT if key == "app/web" else None


def test_healthz_and_readyz() -> None:
    assert call("/healthz")[0] == "200 OK"
    assert call("/readyz")[0] == "200 OK"
    status, _, body = call("/readyz", not_ready=("loading", "seeds_unresolved"))
    assert (status, body) == ("503 Service Unavailable", b"loading\nseeds_unresolved\n")


def test_explain_answers_the_callables_document_as_json() -> None:
    asked: list[str] = []

    def explain(key: str) -> Mapping[str, Any] | None:
        asked.append(key)
        return VERDICT

    status, headers, body = call("/explain", "service=app%2Fweb", explain)
    assert status == "200 OK"
    assert headers["Content-Type"] == "application/json"
    assert headers["Content-Length"] == str(len(body))
    assert json.loads(body) == VERDICT
    assert asked == ["app/web"]
    # An unescaped slash is the same key.
    assert json.loads(call("/explain", "service=app/web", explain)[2]) == VERDICT


def test_an_unknown_service_or_no_callable_is_a_json_404() -> None:
    status, headers, body = call("/explain", "service=app/other", known)
    assert (status, headers["Content-Type"]) == ("404 Not Found", "application/json")
    assert json.loads(body) == {"error": "unknown Service app/other"}
    status, _, body = call("/explain", "service=app/web", None)
    assert status == "404 Not Found"
    assert set(json.loads(body)) == {"error"}


@pytest.mark.parametrize(
    "query",
    [
        "",
        "service=",
        "service=web",
        "service=app/",
        "service=/web",
        "service=a/b/c",
        "service=app/web&service=app/other",
        "svc=app/web",
        "service=app/" + "x" * 200,
        "service=app/we%0Ab",
    ],
)
def test_a_missing_or_malformed_service_is_a_400(query: str) -> None:
    called: list[str] = []

    def explain(key: str) -> Mapping[str, Any] | None:
        called.append(key)
        return VERDICT

    status, headers, body = call("/explain", query, explain)
    assert status == "400 Bad Request"
    assert headers["Content-Type"] == "application/json"
    assert "NAMESPACE/NAME" in json.loads(body)["error"]
    assert called == []


class Broken(Exception):
    def __str__(self) -> str:
        raise RuntimeError("even the message fails")


@pytest.mark.parametrize(
    "failure",
    [
        KeyError("app/web"),
        Broken(),
        {"not": {"json"}},  # a set does not serialize
        {"nan": math.nan},  # nor NaN, which would be invalid JSON
        ["not", "a", "mapping"],
    ],
)
def test_a_failing_callable_is_a_json_500_never_an_exception(failure: Any) -> None:
    def explain(key: str) -> Mapping[str, Any] | None:
        if isinstance(failure, Exception):
            raise failure
        result: Mapping[str, Any] = failure
        return result

    status, headers, body = call("/explain", "service=app/web", explain)
    assert status == "500 Internal Server Error"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"].startswith("cannot explain app/web: ")


def test_explain_is_read_only() -> None:
    status, _, body = call("/explain", "service=app/web", known, method="POST")
    assert status == "405 Method Not Allowed"
    assert set(json.loads(body)) == {"error"}


def test_other_paths_still_serve_metrics() -> None:
    status, headers, _ = call("/metrics", explain=known)
    assert status == "200 OK"
    assert headers["Content-Type"].startswith("text/plain")


def test_the_server_serves_explain_from_its_thread() -> None:
    server = health.Server(0, prometheus.Registry(), list, "127.0.0.1", known)
    try:
        url = f"http://127.0.0.1:{server.port}/explain?service=app%2Fweb"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert json.loads(response.read()) == VERDICT
    finally:
        server.close()


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


class _Failing:
    def collect(self) -> Iterator[prometheus.Family]:
        raise RuntimeError("collector bug")


def test_the_server_answers_http_1_1_and_closes() -> None:
    registry = prometheus.Registry()
    prometheus.Gauge("up_here", "Up", registry=registry).set(1)
    server = health.Server(0, registry, list, "127.0.0.1", known)
    try:
        got = _exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")
        head, _, body = got.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 200 OK"
        assert "Connection: close" in lines
        assert f"Content-Length: {len(body)}" in lines
        assert b"up_here 1.0\n" in body
        # HEAD: the same head, no body.
        got = _exchange(server.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\n")
        # An escaped path is the same path.
        assert _exchange(server.port, b"GET /%68ealthz HTTP/1.1\r\n\r\n").endswith(b"\r\n\r\nok\n")
    finally:
        server.close()


@pytest.mark.parametrize(
    "request_bytes",
    [b"GARBAGE\r\n\r\n", b"GET /healthz\r\n\r\n", b"GET /healthz SPDY/3\r\n\r\n"],
)
def test_a_malformed_request_line_is_a_400(request_bytes: bytes) -> None:
    server = health.Server(0, prometheus.Registry(), list, "127.0.0.1")
    try:
        assert _exchange(server.port, request_bytes).startswith(b"HTTP/1.1 400 Bad Request\r\n")
    finally:
        server.close()


def test_an_oversized_head_is_dropped_and_the_server_keeps_serving() -> None:
    server = health.Server(0, prometheus.Registry(), list, "127.0.0.1")
    try:
        huge = b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * health.MAX_HEAD + b"\r\n\r\n"
        assert _exchange(server.port, huge) == b""
        assert _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"ok\n")
    finally:
        server.close()


def test_a_silent_client_does_not_hold_up_others() -> None:
    server = health.Server(0, prometheus.Registry(), list, "127.0.0.1")
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        silent.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the end of its head
        assert _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"ok\n")
    finally:
        silent.close()
        server.close()


def test_a_failing_collector_is_a_500_and_the_server_keeps_serving() -> None:
    registry = prometheus.Registry()
    registry.register(_Failing())
    server = health.Server(0, registry, list, "127.0.0.1")
    try:
        got = _exchange(server.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
        assert got.endswith(b"RuntimeError: collector bug\n")
        assert _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"ok\n")
    finally:
        server.close()
