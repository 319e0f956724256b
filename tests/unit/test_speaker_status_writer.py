"""The speaker's status writer against an apiserver whose answers arrive late: the watch (another
connection) may report what happened to an object before the answer to our own request does."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import pytest

from ironlb import model
from ironlb_io import kube, retrying
from speaker import agent, status

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


def wanted() -> status.Wanted:
    return status.Wanted(KIND, "l2-abc", "app", "web", {"node": "n1", "interfaces": []})


async def test_an_object_deleted_before_its_create_answered_is_not_taken_for_present() -> None:
    """Another node evicts our new object while our create's answer is still on its way (a cut
    link heals, the watch stream resumes first): the store must not get the object back from
    our answer, or no later event would ever make the writer create it again."""
    client = SlowClient()
    writer = agent.Agent(agent.Options(node_name="n1", namespace=NS), client)  # type: ignore[arg-type]
    syncing = asyncio.ensure_future(writer._sync_status(KIND, [wanted()]))
    await asyncio.wait_for(client.creating.wait(), 5)
    body = status.body(wanted(), "n1", NS)
    gone = {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}}
    writer.observe(KIND, "DELETED", gone)
    client.answer.set()
    assert await asyncio.wait_for(syncing, 5)
    assert f"{NS}/l2-abc" not in writer.store.config.get(KIND, {})
    assert writer._status_dirty.is_set()  # the writer looks again, and creates it anew
    assert writer._creating == {}


async def test_an_object_created_undisturbed_is_in_the_store_at_once() -> None:
    client = SlowClient()
    client.answer.set()
    writer = agent.Agent(agent.Options(node_name="n1", namespace=NS), client)  # type: ignore[arg-type]
    assert await writer._sync_status(KIND, [wanted()])
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
    writer = agent.Agent(agent.Options(node_name="n1", namespace=NS), client)  # type: ignore[arg-type]
    assert await writer._sync_status(KIND, [wanted()])
    writer._status_dirty.clear()
    writer.observe(KIND, "ADDED", added)
    assert not writer._status_dirty.is_set()  # the echo: dropped
    writer.observe(KIND, "MODIFIED", patched)
    assert writer._superseded == {}

    # The watch's ADDED first (another connection), then the answer.
    client = SlowClient()
    writer = agent.Agent(agent.Options(node_name="n1", namespace=NS), client)  # type: ignore[arg-type]
    syncing = asyncio.ensure_future(writer._sync_status(KIND, [wanted()]))
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


def writer_with(client: Any, *existing: dict[str, Any]) -> agent.Agent:
    writer = agent.Agent(agent.Options(node_name="n1", namespace=NS), client)
    for obj in existing:
        writer.observe(KIND, "ADDED", obj)
    return writer


def settled(owner: status.Owner | None = None) -> dict[str, Any]:
    """Our object as the server holds it, its status as wanted."""
    return {**status.body(wanted(), "n1", NS, owner), "status": dict(wanted().status)}


async def test_an_object_made_before_the_pod_was_known_is_adopted_once() -> None:
    client = RecordingClient()
    writer = writer_with(client, settled())
    assert await writer._sync_status(KIND, [wanted()])
    assert client.patches == []  # no Pod known yet: nothing to do
    writer._owner = POD
    assert await writer._sync_status(KIND, [wanted()])
    owner_patch = {"metadata": {"ownerReferences": [POD.reference()]}}
    assert client.patches == [(f"{BASE}/l2-abc", owner_patch)]  # the object, not /status
    assert await writer._sync_status(KIND, [wanted()])
    assert len(client.patches) == 1  # the store knows it is ours now
    writer._status_dirty.clear()
    writer.observe(KIND, "MODIFIED", settled(POD))  # the echo of our patch
    assert not writer._status_dirty.is_set()


async def test_a_new_object_is_created_owned() -> None:
    client = RecordingClient()
    writer = writer_with(client)
    writer._owner = POD
    assert await writer._sync_status(KIND, [wanted()])
    (created,) = writer.store.config[KIND].values()
    assert POD.owns(created)
    assert [path for path, _ in client.patches] == [f"{BASE}/l2-abc/status"]


async def test_a_refused_adoption_is_a_failed_write_and_a_vanished_object_is_not() -> None:
    refused = RecordingClient(kube.ApiError(403, "Forbidden", "patch"))
    writer = writer_with(refused, settled())
    writer._owner = POD
    assert not await writer._sync_status(KIND, [wanted()])  # the writer tries again
    gone = RecordingClient(kube.ApiError(404, "NotFound", "gone"))
    writer = writer_with(gone, settled())
    writer._owner = POD
    assert await writer._sync_status(KIND, [wanted()])  # its DELETED event brings a create


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
    options = agent.Options(node_name="n1", namespace=NS, pod_name=POD.pod_name)
    writer = agent.Agent(options, client)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(writer.learn_owner(), 5)
    assert client.paths == [f"/api/v1/namespaces/{NS}/pods/{POD.pod_name}"] * 4
    assert writer._owner == POD
    assert writer._status_dirty.is_set()  # existing objects get adopted
    refusals = [r for r in caplog.records if "our own Pod" in r.getMessage()]
    assert len(refusals) == 1  # the same failure is logged once
