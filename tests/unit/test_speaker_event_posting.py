"""speaker.event_posting: the speaker's Events go out after the routes are taken and the status
writer is quiet, a few at a time, and only about objects still there."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from ironlb_io import kube
from speaker import event_posting, snapshot
from tests.unit.test_speaker_snapshot import node, service

EVENTS = "/api/v1/namespaces/app/events"


class EventsApi:
    """Records each Event created as (path, body); `hold` set: every create waits for `answer`;
    `refuse`: every create fails with it."""

    def __init__(self, refuse: kube.ApiError | None = None, hold: bool = False) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.refuse = refuse
        self.hold = hold
        self.answer = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hold:
                await self.answer.wait()
            if self.refuse is not None:
                raise self.refuse
            self.created.append((path, body))
            return body
        finally:
            self.in_flight -= 1


class Setup:
    """A poster on a store holding Service app/web and Node n1; the routes are taken when
    `routes_taken` is set, the status writer quiet when `quiet` is."""

    def __init__(self, api: EventsApi) -> None:
        self.api = api
        self.store = snapshot.Store()
        self.store.put("Service", None, service("web"))
        self.store.put("Node", None, node("n1"))
        self.routes_taken = asyncio.Event()
        self.quiet = asyncio.Event()
        self.settles = 0
        self.poster = event_posting.EventPoster(
            api, self.store, "n1", status_quiet=self.quiet, settled=self.settled
        )

    async def settled(self) -> None:
        self.settles += 1
        await self.routes_taken.wait()

    def ready(self) -> None:
        self.routes_taken.set()
        self.quiet.set()


async def until(predicate: Callable[[], bool]) -> None:
    """Let the loop run until `predicate` holds (a bounded number of steps, no clock)."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def steps(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_node_assigned_events_are_posted_after_the_routes_are_taken() -> None:
    s = Setup(EventsApi())
    s.store.put("Service", None, service("api", ips=("10.250.0.201",)))
    s.quiet.set()
    s.poster.post_assigned("app/web", "bgp")
    s.poster.post_assigned("app/api", "layer2")
    await steps()
    assert s.api.created == [] and s.settles == 1  # one task waits for the routes, for both
    s.routes_taken.set()
    await until(lambda: len(s.api.created) == 2)
    assert [(b["involvedObject"]["name"], b["reason"], b["message"]) for _, b in s.api.created] == [
        ("web", "nodeAssigned", 'announcing from node "n1" with protocol "bgp"'),
        ("api", "nodeAssigned", 'announcing from node "n1" with protocol "layer2"'),
    ]
    assert {path for path, _ in s.api.created} == {EVENTS}
    assert {b["type"] for _, b in s.api.created} == {"Normal"}


async def test_an_assigned_event_queued_after_the_others_went_is_posted_too() -> None:
    s = Setup(EventsApi())
    s.ready()
    s.poster.post_assigned("app/web", "bgp")
    await until(lambda: len(s.api.created) == 1)
    await steps()  # the posting task has ended
    s.poster.post_assigned("app/web", "layer2")
    await until(lambda: len(s.api.created) == 2)


async def test_an_event_for_a_service_gone_meanwhile_is_not_posted() -> None:
    s = Setup(EventsApi())
    s.store.put("Service", None, service("api", ips=("10.250.0.201",)))
    s.poster.post_assigned("app/web", "bgp")
    s.poster.post_assigned("app/api", "bgp")
    s.poster.post_service_event("app/absent", "nodeWithdrawn", "gone", warning=False)
    assert s.poster.posting == set()  # nothing to post about: no task either
    s.store.put("Service", "DELETED", service("web"))  # while the routes were being taken
    s.ready()
    await until(lambda: len(s.api.created) == 1)
    await steps()
    assert [b["involvedObject"]["name"] for _, b in s.api.created] == ["api"]


async def test_events_wait_for_the_status_writer_to_be_quiet() -> None:
    s = Setup(EventsApi())
    s.routes_taken.set()
    s.poster.post_service_event("app/web", "announceFailed", "no interface", warning=True)
    await steps()
    assert s.api.created == []
    s.quiet.set()
    await asyncio.gather(*s.poster.posting)
    ((path, body),) = s.api.created
    assert path == EVENTS
    assert (body["type"], body["reason"], body["message"]) == (
        "Warning",
        "announceFailed",
        "no interface",
    )
    assert body["source"] == {"component": "metallb-speaker", "host": "n1"}


async def test_a_node_event_lives_in_default_and_none_without_the_node() -> None:
    s = Setup(EventsApi())
    s.ready()
    s.poster.post_node_event("DataPathNotReady", "kube-proxy refused", warning=True)
    await asyncio.gather(*s.poster.posting)
    ((path, body),) = s.api.created
    assert path == "/api/v1/namespaces/default/events"
    assert body["involvedObject"]["kind"] == "Node" and body["involvedObject"]["name"] == "n1"
    s.store.put("Node", "DELETED", node("n1"))
    s.poster.post_node_event("DataPathReady", "Ready", warning=False)
    assert s.poster.posting == set()


async def test_a_few_events_at_a_time() -> None:
    s = Setup(EventsApi(hold=True))
    s.ready()
    for i in range(3 * event_posting.EVENT_CONCURRENCY):
        s.poster.post_service_event("app/web", "nodeWithdrawn", f"#{i}", warning=False)
    await until(lambda: s.api.in_flight == event_posting.EVENT_CONCURRENCY)
    await steps()
    assert s.api.in_flight == event_posting.EVENT_CONCURRENCY
    s.api.answer.set()
    await asyncio.gather(*s.poster.posting)
    assert len(s.api.created) == 3 * event_posting.EVENT_CONCURRENCY
    assert s.api.most_in_flight == event_posting.EVENT_CONCURRENCY


async def test_a_refused_event_is_logged_and_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(EventsApi(refuse=kube.ApiError(403, "Forbidden", "events is forbidden")))
    s.ready()
    s.poster.post_service_event("app/web", "nodeWithdrawn", "withdrawn", warning=False)
    tasks = list(s.poster.posting)
    with caplog.at_level(logging.WARNING, logger=event_posting.__name__):
        await asyncio.gather(*tasks)
    assert all(t.exception() is None for t in tasks)
    assert [r.getMessage() for r in caplog.records] == ["could not post event"]
    assert s.poster.posting == set()
