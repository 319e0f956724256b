"""The speaker's status writer (`speaker.status_writing`): its writes against a recording apiserver,
and against one whose answers arrive late: the watch (another connection) may report what
happened to an object before the answer to our own request does."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

import pytest

from ironlb import model
from ironlb_io import kube, retrying
from speaker import agent, snapshot, status, status_writing

KIND = model.SERVICE_L2_STATUS
NS = "metallb-system"


class SlowClient:
    """Answers a create only when `answer` is set; a status PATCH at once."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.creating = asyncio.Event()
        self.created: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.creating.set()
        await self.answer.wait()
        made = {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}}
        self.created.append(made)
        return made

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return {}


async def routes_taken() -> None:
    """ExaBGP took the routes at once (the writer's `settled`)."""


def make_writer(client: Any) -> status_writing.StatusWriter:
    store = snapshot.Store(status_node="n1")  # as the agent's: other nodes' objects are no pass's
    return status_writing.StatusWriter(client, store, "n1", NS, routes_taken)


def wanted() -> status.Wanted:
    return status.Wanted(KIND, "l2-abc", "app", "web", {"node": "n1", "interfaces": []})


async def test_an_object_deleted_before_its_create_answered_is_not_taken_for_present() -> None:
    """Another node evicts our new object while our create's answer is still on its way (a cut
    link heals, the watch stream resumes first): the store must not get the object back from
    our answer, or no later event would ever make the writer create it again."""
    client = SlowClient()
    writer = make_writer(client)
    syncing = asyncio.ensure_future(writer.sync(KIND, [wanted()]))
    await asyncio.wait_for(client.creating.wait(), 5)
    body = status.body(wanted(), "n1", NS)
    gone = {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}}
    writer.observe(KIND, "DELETED", gone)
    client.answer.set()
    assert await asyncio.wait_for(syncing, 5)
    assert f"{NS}/l2-abc" not in writer.store.config.get(KIND, {})
    assert writer.dirty.is_set()  # the writer looks again, and creates it anew
    assert writer._creating == {}


async def test_an_object_created_undisturbed_is_in_the_store_at_once() -> None:
    client = SlowClient()
    client.answer.set()
    writer = make_writer(client)
    assert await writer.sync(KIND, [wanted()])
    assert f"{NS}/l2-abc" in writer.store.config.get(KIND, {})
    assert writer._creating == {}


async def test_the_echo_of_our_create_is_dropped_once_and_nothing_is_kept_after() -> None:
    """The watch's ADDED for our own create carries an empty status: dropped (the store holds
    what we set). Whichever comes first, that event or the create's answer, nothing about
    the object is remembered once both have come."""
    body = status.body(wanted(), "n1", NS)
    added = {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}}
    patched = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": "8"},
        "status": {"node": "n1", "interfaces": []},
    }

    # The answer first, then the watch's events.
    client = SlowClient()
    client.answer.set()
    writer = make_writer(client)
    assert await writer.sync(KIND, [wanted()])
    writer.dirty.clear()
    writer.observe(KIND, "ADDED", added)
    assert not writer.dirty.is_set()  # the echo: dropped
    writer.observe(KIND, "MODIFIED", patched)
    assert writer._superseded == {}

    # The watch's ADDED first (another connection), then the answer.
    client = SlowClient()
    writer = make_writer(client)
    syncing = asyncio.ensure_future(writer.sync(KIND, [wanted()]))
    await asyncio.wait_for(client.creating.wait(), 5)
    writer.observe(KIND, "ADDED", added)
    client.answer.set()
    assert await asyncio.wait_for(syncing, 5)
    writer.observe(KIND, "MODIFIED", patched)
    assert writer._superseded == {}  # the version our answer carried was not kept
    assert writer.store.config[KIND][f"{NS}/l2-abc"]["status"] == patched["status"]


# --- ownership: our Pod owns our objects ----------------------------------------------------

POD = status.Owner("speaker-abcde", "uid-1")
BASE = f"/apis/metallb.io/v1beta1/namespaces/{NS}/servicel2statuses"


class RecordingClient:
    """Answers at once; records each merge patch, or refuses it with `refuse`."""

    def __init__(self, refuse: kube.ApiError | None = None) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.refuse = refuse

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        self.patches.append((path, body))
        return {}


def writer_with(client: Any, *existing: dict[str, Any]) -> status_writing.StatusWriter:
    writer = make_writer(client)
    for obj in existing:
        writer.observe(KIND, "ADDED", obj)
    return writer


def settled(owner: status.Owner | None = None) -> dict[str, Any]:
    """Our object as the server holds it, its status as wanted."""
    return {**status.body(wanted(), "n1", NS, owner), "status": dict(wanted().status)}


async def test_an_object_made_before_the_pod_was_known_is_adopted_once() -> None:
    client = RecordingClient()
    writer = writer_with(client, settled())
    assert await writer.sync(KIND, [wanted()])
    assert client.patches == []  # no Pod known yet: nothing to do
    writer.owner = POD
    assert await writer.sync(KIND, [wanted()])
    owner_patch = {"metadata": {"ownerReferences": [POD.reference()]}}
    assert client.patches == [(f"{BASE}/l2-abc", owner_patch)]  # the object, not /status
    assert await writer.sync(KIND, [wanted()])
    assert len(client.patches) == 1  # the store knows it is ours now
    writer.dirty.clear()
    writer.observe(KIND, "MODIFIED", settled(POD))  # the echo of our patch
    assert not writer.dirty.is_set()


async def test_a_new_object_is_created_owned() -> None:
    client = RecordingClient()
    writer = writer_with(client)
    writer.owner = POD
    assert await writer.sync(KIND, [wanted()])
    (created,) = writer.store.config[KIND].values()
    assert POD.owns(created)
    assert [path for path, _ in client.patches] == [f"{BASE}/l2-abc/status"]


async def test_a_refused_adoption_is_a_failed_write_and_a_vanished_object_is_not() -> None:
    refused = RecordingClient(kube.ApiError(403, "Forbidden", "patch"))
    writer = writer_with(refused, settled())
    writer.owner = POD
    assert not await writer.sync(KIND, [wanted()])  # the writer tries again
    gone = RecordingClient(kube.ApiError(404, "NotFound", "gone"))
    writer = writer_with(gone, settled())
    writer.owner = POD
    assert await writer.sync(KIND, [wanted()])  # its DELETED event brings a create


class PodClient:
    """GET of a Pod: refused `failures` times, then answered."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.paths: list[str] = []

    async def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        if len(self.paths) <= self.failures:
            raise kube.ApiError(403, "Forbidden", "pods is forbidden")
        return {"metadata": {"name": POD.pod_name, "uid": POD.uid}}


async def test_the_pod_is_read_until_it_answers_then_owns_our_objects(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def no_wait(_: float) -> None:
        pass

    monkeypatch.setattr(retrying, "retry", functools.partial(retrying.retry, sleep=no_wait))
    client = PodClient(failures=3)
    writer = make_writer(client)
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(writer.learn_owner(POD.pod_name), 5)
    assert client.paths == [f"/api/v1/namespaces/{NS}/pods/{POD.pod_name}"] * 4
    assert writer.owner == POD
    assert writer.dirty.is_set()  # existing objects get adopted
    refusals = [r for r in caplog.records if "our own Pod" in r.getMessage()]
    assert len(refusals) == 1  # the same failure is logged once


# --- writes against a recording apiserver ----------------------------------------------------


class RecordingApi:
    """Records every request as (verb, path, body); `refuse` maps (verb, path) to the error
    the apiserver answers with. A create answers the body with a resourceVersion."""

    def __init__(self, refuse: dict[tuple[str, str], kube.ApiError] | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any] | None]] = []
        self.refuse = refuse or {}

    def _request(self, verb: str, path: str, body: dict[str, Any] | None) -> None:
        self.calls.append((verb, path, body))
        refused = self.refuse.get((verb, path))
        if refused is not None:
            raise refused

    async def get(self, path: str) -> dict[str, Any]:
        self._request("get", path, None)
        return {}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._request("create", path, body)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._request("merge_patch", path, body)
        return {}

    async def delete(self, path: str) -> None:
        self._request("delete", path, None)


EXISTS = kube.ApiError(409, "AlreadyExists", "servicel2statuses l2-abc already exists")
GONE = kube.ApiError(404, "NotFound", "servicel2statuses l2-old not found")
REFUSED = kube.ApiError(403, "Forbidden", "servicel2statuses is forbidden")


def ours(name: str, node: str = "n1") -> dict[str, Any]:
    """A status object of `node` as the server holds it (another Service than `wanted`'s)."""
    other = status.Wanted(KIND, name, "app", "old", {"node": node, "interfaces": []})
    return {**status.body(other, node, NS), "status": dict(other.status)}


async def test_a_create_that_conflicts_is_patched_and_kept() -> None:
    """The object exists already (our earlier create, whose answer was lost): its status is
    set all the same, and the store holds what the server now holds."""
    api = RecordingApi(refuse={("create", BASE): EXISTS})
    writer = make_writer(api)
    assert await writer.sync(KIND, [wanted()])
    assert [(verb, path) for verb, path, _ in api.calls] == [
        ("create", BASE),
        ("merge_patch", f"{BASE}/l2-abc/status"),
    ]
    assert api.calls[1][2] == {"status": dict(wanted().status)}
    assert writer.store.config[KIND][f"{NS}/l2-abc"]["status"] == dict(wanted().status)
    assert writer._superseded == {}  # no version of ours to wait for: the create made none


async def test_a_refused_create_is_a_failed_write_and_no_status_is_set() -> None:
    api = RecordingApi(refuse={("create", BASE): REFUSED})
    writer = make_writer(api)
    assert not await writer.sync(KIND, [wanted()])
    assert [verb for verb, _, _ in api.calls] == ["create"]
    assert f"{NS}/l2-abc" not in writer.store.config.get(KIND, {})


async def test_a_delete_of_an_object_already_gone_is_fine() -> None:
    api = RecordingApi(refuse={("delete", f"{BASE}/l2-old"): GONE})
    writer = writer_with(api, ours("l2-old"))
    assert await writer.sync(KIND, [])
    assert api.calls == [("delete", f"{BASE}/l2-old", None)]
    assert f"{NS}/l2-old" not in writer.store.config.get(KIND, {})


async def test_a_refused_delete_is_a_failed_write_and_the_object_stays_known() -> None:
    api = RecordingApi(refuse={("delete", f"{BASE}/l2-old"): REFUSED})
    writer = writer_with(api, ours("l2-old"))
    assert not await writer.sync(KIND, [])
    assert f"{NS}/l2-old" in writer.store.config[KIND]


async def test_a_changed_status_is_patched_in_place_and_another_nodes_object_left_alone() -> None:
    before = {**settled(), "status": {"node": "n1", "interfaces": ["eth9"]}}
    api = RecordingApi()
    writer = writer_with(api, before, ours("l2-theirs", node="n2"))
    assert await writer.sync(KIND, [wanted()])
    assert api.calls == [
        ("merge_patch", f"{BASE}/l2-abc/status", {"status": dict(wanted().status)})
    ]
    assert writer.store.config[KIND][f"{NS}/l2-abc"]["status"] == dict(wanted().status)
    assert f"{NS}/l2-theirs" in writer.store.config[KIND]


async def test_the_writer_waits_for_the_routes_then_writes_and_is_quiet_after() -> None:
    """Nothing is written before ExaBGP took the routes (`settled`); the writer is quiet, which
    Events wait for, only once everything wanted is written."""
    api = RecordingApi()
    taken = asyncio.Event()

    async def settle() -> None:
        await taken.wait()

    writer = status_writing.StatusWriter(api, snapshot.Store(status_node="n1"), "n1", NS, settle)
    writing = asyncio.ensure_future(writer.run())
    try:
        writer.want({KIND: [wanted()]}, {})
        for _ in range(10):
            await asyncio.sleep(0)
        assert api.calls == [] and not writer.quiet.is_set()
        taken.set()
        await asyncio.wait_for(writer.quiet.wait(), 5)
        assert [verb for verb, _, _ in api.calls] == ["create", "merge_patch"]
    finally:
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing


def test_the_agent_hands_our_status_objects_events_to_the_writer_not_the_loop() -> None:
    writer_client = RecordingApi()
    a = agent.Agent(agent.Options(node_name="n1", namespace=NS), writer_client)  # type: ignore[arg-type]
    a.observe(KIND, "ADDED", settled())
    assert a.status_writer.dirty.is_set() and not a.dirty.is_set()
    a.status_writer.dirty.clear()
    a.relisted(KIND, [])
    assert a.status_writer.dirty.is_set() and not a.dirty.is_set()
