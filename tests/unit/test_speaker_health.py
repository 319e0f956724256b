"""The speaker's HTTP port, called as a WSGI app: /healthz, /readyz and /explain."""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import registry as prom_registry

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
    serve = health.app(prom_registry.CollectorRegistry(), lambda: not_ready, explain)
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
    server = health.Server(0, prom_registry.CollectorRegistry(), list, "127.0.0.1", known)
    try:
        url = f"http://127.0.0.1:{server.port}/explain?service=app%2Fweb"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert json.loads(response.read()) == VERDICT
    finally:
        server.close()
