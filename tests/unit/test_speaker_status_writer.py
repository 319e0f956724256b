"""The speaker's status writer against an apiserver whose answers arrive late: the watch (another
connection) may report what happened to an object before the answer to our own request does."""

from __future__ import annotations

import asyncio
from typing import Any

from ironlb import model
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
