"""Fuzzing the admission webhook: HTTP body -> JSON -> AdmissionReview -> verdict -> response.

`webhook.answer` is what the HTTP handler runs for every body. Its contract: a body that is no
admission.k8s.io/v1 AdmissionReview gets 400 with an error text, and is counted once under a
reason of `webhook.MALFORMED_REASONS` (`ironlb_controller_malformed_admission_reviews_total`);
anything else gets 200 and a response with the request's uid, allowed or denied with a message
(403 for a bad object, 400 for a request without one). A 500, the fail-closed answer to an
internal error, is a bug when the API lists fine, so the fuzzers require that it never happens.
Inputs: random bytes, random JSON, valid reviews of the documented example objects with their
envelope or object mutated, and bodies nested deeper than Python's recursion limit. One test
runs the real aiohttp app on 127.0.0.1 (an ephemeral port) to check status codes and the
counter end to end.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp import test_utils
from hypothesis import given
from hypothesis import strategies as st

from controller import metrics, webhook
from ironlb import model
from tests.unit import fuzzing
from tests.unit.test_parsing import docs_objects

EXAMPLES = docs_objects()  # parsed once: YAML is slow next to the code under test

AREA = "admission reviews"
NS = "metallb-system"
KINDS = [*model.CONFIG_KINDS, "Service", "", "IPAddressPool "]
OPERATIONS = ["CREATE", "UPDATE", "DELETE", "CONNECT", "", "create"]
KEYS = fuzzing.OBJECT_KEYS


class Lister:
    """The objects that exist now: the documented examples, so that new objects meet overlaps,
    references and conflicts."""

    def __init__(self) -> None:
        self.objects: dict[str, list[Mapping[str, Any]]] = {}
        for obj in EXAMPLES:
            self.objects.setdefault(obj["kind"], []).append(obj)

    async def __call__(self, kind: str) -> Sequence[Mapping[str, Any]]:
        return self.objects.get(kind, [])


LISTER = Lister()


async def NOTHING(kind: str) -> Sequence[Mapping[str, Any]]:
    return []


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


def answer(
    runner: asyncio.Runner, body: bytes, lister: webhook.Lister | None = None
) -> tuple[int, dict[str, Any]]:
    """One body through `webhook.answer`, checked against the contract."""
    reasons: Counter[str] = Counter()
    status, reply = fuzzing.feed(
        AREA,
        runner.run,
        webhook.answer(body, lister or LISTER, NS, lambda reason: reasons.update([reason])),
    )
    json.dumps(reply)  # what aiohttp will send must serialise
    if status == 400:
        assert set(reply) == {"error"} and reply["error"].startswith("not an AdmissionReview")
        assert sum(reasons.values()) == 1 and set(reasons) <= set(webhook.MALFORMED_REASONS)
        return status, reply
    assert status == 200 and not reasons
    assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
    response = reply["response"]
    assert response["uid"] == json.loads(body)["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        # 403 for a bad object, 400 for a request without one; never 500 (an internal error).
        assert response["status"]["code"] in (400, 403), response["status"]["message"]
        assert response["status"]["message"]
    return status, reply


def review(request: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def request_for(obj: Any, operation: str, old: Any = None) -> dict[str, Any]:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "metallb.io", "version": "v1beta1", "kind": kind},
        "resource": {"group": "metallb.io", "version": "v1beta1", "resource": "x"},
        "namespace": NS,
        "operation": operation,
        "object": obj,
        "userInfo": {"username": "admin"},
    }
    if old is not None:
        request["oldObject"] = old
    return request


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


@fuzzing.fuzz_settings(200)
@given(st.binary(max_size=300))
def test_random_bodies(runner: asyncio.Runner, body: bytes) -> None:
    answer(runner, body)


@fuzzing.fuzz_settings(200)
@given(fuzzing.json_values())
def test_random_json_bodies(runner: asyncio.Runner, value: Any) -> None:
    answer(runner, encode(value))


@fuzzing.fuzz_settings(250)
@given(
    st.fixed_dictionaries(
        {"uid": st.text(max_size=10)},
        optional={
            "kind": st.fixed_dictionaries({"kind": st.sampled_from(KINDS)}) | fuzzing.json_values(),
            "operation": st.sampled_from(OPERATIONS) | fuzzing.json_values(),
            "name": fuzzing.json_values(),
            "namespace": st.sampled_from([NS, "default", ""]) | fuzzing.json_values(),
            "object": fuzzing.json_values(KEYS),
            "oldObject": fuzzing.json_values(KEYS),
        },
    )
)
def test_random_requests_in_a_valid_envelope(runner: asyncio.Runner, request: Any) -> None:
    answer(runner, encode(review(request)))


@fuzzing.fuzz_settings(250)
@given(st.data())
def test_mutated_objects_of_valid_reviews(runner: asyncio.Runner, data: st.DataObject) -> None:
    obj = data.draw(st.sampled_from(EXAMPLES))
    operation = data.draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
    mutated = fuzzing.mutate_json(obj, data.draw, KEYS)
    old = obj if operation != "CREATE" else None
    request = request_for(mutated, operation, old)
    request["kind"]["kind"] = obj["kind"]  # the kind the apiserver routed it as
    answer(runner, encode(review(request)))


@fuzzing.fuzz_settings(100)
@given(st.data())
def test_mutated_envelopes_of_valid_reviews(runner: asyncio.Runner, data: st.DataObject) -> None:
    obj = data.draw(st.sampled_from(EXAMPLES))
    body = review(request_for(obj, data.draw(st.sampled_from(["CREATE", "UPDATE"])), obj))
    answer(runner, encode(fuzzing.mutate_json(body, data.draw, KEYS)))


@fuzzing.fuzz_settings(40)
@given(
    depth=st.integers(1, 200_000),
    opener=st.sampled_from([b"[", b'{"a":', b'{"request":']),
    inside=st.booleans(),
)
def test_deeply_nested_bodies(
    runner: asyncio.Runner, depth: int, opener: bytes, inside: bool
) -> None:
    closer = b"]" if opener == b"[" else b"}"
    nested = opener * depth + b"1" + closer * depth
    if inside:  # a valid review whose object is the nested value
        prefix = encode(review(request_for({"kind": "IPAddressPool"}, "CREATE")))
        body = prefix.replace(b'"object": {"kind": "IPAddressPool"}', b'"object": ' + nested)
    else:
        body = nested
    answer(runner, body)


@fuzzing.fuzz_settings(100)
@given(st.sampled_from(EXAMPLES), st.sampled_from(["CREATE", "UPDATE"]))
def test_valid_reviews_are_answered(runner: asyncio.Runner, obj: dict[str, Any], op: str) -> None:
    # Alone (the examples conflict with each other), each documented example is allowed.
    body = encode(review(request_for(obj, op, obj if op == "UPDATE" else None)))
    status, reply = answer(runner, body, NOTHING)
    assert status == 200 and reply["response"]["allowed"], reply


async def test_malformed_bodies_are_refused_and_counted_over_http() -> None:
    stats = metrics.Metrics()
    app = webhook.make_app(LISTER, NS, stats.count_malformed_review)
    name = "ironlb_controller_malformed_admission_reviews_total"

    def count(reason: str) -> float | None:
        return stats.registry.get_sample_value(name, {"reason": reason})

    assert [count(r) for r in webhook.MALFORMED_REASONS] == [0.0, 0.0, 0.0]
    async with (
        test_utils.TestServer(app, host="127.0.0.1", port=0) as server,
        aiohttp.ClientSession() as session,
    ):
        path = server.make_url(webhook.PATHS[model.IP_ADDRESS_POOL])
        for body in (b"[" * 100_000, b"\xff\xfe{", b"{}"):
            async with session.post(path, data=body) as response:
                assert response.status == 400
                assert (await response.json())["error"].startswith("not an AdmissionReview")
        async with session.post(path, data=b" " * (5 * 1024 * 1024)) as response:
            assert response.status == 413
        good = encode(review(request_for(EXAMPLES[0], "CREATE")))
        async with session.post(path, data=good) as response:
            assert response.status == 200
    assert [count(r) for r in webhook.MALFORMED_REASONS] == [2.0, 1.0, 1.0]
