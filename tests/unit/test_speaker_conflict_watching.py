"""speaker.conflict_watching: a split brain the layer 2 plane saw becomes an Event on each Service
holding the address and our condition on `speaker-<node>`; each claim is reported once."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Collection, Mapping
from typing import Any

import pytest

from ironlb import configuration_state, datapath
from speaker import agent, conflict_watching, desired, explaining, state_writing
from speaker.layer2 import conflicts

VIP = ipaddress.ip_address("10.250.0.200")
OTHER = ipaddress.ip_address("10.250.0.201")
ROGUE = "02:00:0b:ad:00:01"
WEB = desired.Service("app", "web", (VIP,))
API = desired.Service("app", "api", (OTHER,))


class FakeLayer2:
    """The conflicts the plane reports now (`found`), as `ThreadedLayer2.conflicts` does."""

    def __init__(self) -> None:
        self.found: dict[Any, conflicts.Conflict] = {}

    def set_owned(self, owned: Mapping[Any, tuple[str, ...]]) -> None:
        pass

    def announce_again(self, owned: Collection[Any]) -> None:
        pass

    def interfaces(self) -> frozenset[str] | None:
        return None

    def conflicts(self) -> Mapping[Any, conflicts.Conflict]:
        return dict(self.found)

    async def close(self) -> None:
        pass


class RecordingPoster:
    def __init__(self) -> None:
        self.service_events: list[tuple[str, str, str, bool]] = []

    def post_service_event(self, key: str, reason: str, message: str, *, warning: bool) -> None:
        self.service_events.append((key, reason, message, warning))


def claim(ip: Any = VIP, mac: str = ROGUE) -> conflicts.Conflict:
    return conflicts.Conflict(ip, mac, "eth0", first_seen=1.0, last_seen=2.0, count=3)


def seen() -> explaining.Seen:
    return explaining.Seen({WEB.key: WEB, API.key: API}, None, None, {}, None)


@pytest.fixture
def watcher(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[conflict_watching.ConflictWatcher, FakeLayer2, RecordingPoster]:
    monkeypatch.setattr(conflict_watching, "CONFLICT_POLL_S", 0.0)  # no real waiting
    layer2, poster = FakeLayer2(), RecordingPoster()
    state = state_writing.ConfigurationStateWriter(
        None,  # type: ignore[arg-type]  # never written here
        "metallb-system",
        "n1",
        conflict=conflict_watching.NO_CONFLICT,
    )
    return (
        conflict_watching.ConflictWatcher(layer2, "n1", poster, state, seen),  # type: ignore[arg-type]
        layer2,
        poster,
    )


async def polls(watcher: conflict_watching.ConflictWatcher, n: int = 5) -> None:
    """Let the watcher look `n` times or so."""
    task = asyncio.ensure_future(watcher.run())
    for _ in range(n):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_claim_is_reported_once_on_the_services_holding_it_and_in_our_condition(
    watcher: tuple[conflict_watching.ConflictWatcher, FakeLayer2, RecordingPoster],
    caplog: pytest.LogCaptureFixture,
) -> None:
    w, layer2, poster = watcher
    layer2.found = {VIP: claim()}
    with caplog.at_level(logging.WARNING, logger=conflict_watching.__name__):
        await polls(w)
    message = (
        f'10.250.0.200 is also claimed by {ROGUE} (seen on eth0 of node "n1", which '
        "announces it): two machines answer for it"
    )
    assert poster.service_events == [("app/web", "addressConflict", message, True)]
    assert [r.getMessage() for r in caplog.records] == [
        "another machine claims an announced address"
    ]
    assert w.state.conflict == configuration_state.Verdict(
        "True", "ForeignClaim", f"10.250.0.200 claimed by {ROGUE} on eth0"
    )
    assert w.state.dirty.is_set()

    # Seen again on later polls: nothing new to say.
    w.state.dirty.clear()
    await polls(w)
    assert len(poster.service_events) == 1 and not w.state.dirty.is_set()

    # Over: the condition says so, and no Event is posted for the end.
    layer2.found = {}
    await polls(w)
    assert w.state.conflict == conflict_watching.NO_CONFLICT and w.state.dirty.is_set()
    assert len(poster.service_events) == 1


def test_the_conflicts_as_explain_shows_them(
    watcher: tuple[conflict_watching.ConflictWatcher, FakeLayer2, RecordingPoster],
) -> None:
    w, layer2, _ = watcher
    layer2.found = {VIP: claim()}
    (described,) = w.described()
    assert {k: v for k, v in described.items() if k != "last_seen_s_ago"} == {
        "ip": "10.250.0.200",
        "mac": ROGUE,
        "interface": "eth0",
    }
    assert described["last_seen_s_ago"] >= 0.0


def test_only_a_layer2_agent_watches_conflicts_and_has_the_condition() -> None:
    options = agent.Options(node_name="n1")
    layer2 = FakeLayer2()
    with_layer2 = agent.Agent(options, None, layer2=layer2)  # type: ignore[arg-type]
    assert with_layer2.conflicts is not None
    assert with_layer2.state_writer.conditions() == {
        datapath.CONFLICT_CONDITION_TYPE: conflict_watching.NO_CONFLICT
    }
    without = agent.Agent(options, None)  # type: ignore[arg-type]
    assert without.conflicts is None
    assert without.state_writer.conditions() == {}


def test_explain_shows_the_conflicts_of_the_service() -> None:
    layer2 = FakeLayer2()
    a = agent.Agent(agent.Options(node_name="n1"), None, layer2=layer2)  # type: ignore[arg-type]
    a._explained = explaining.Seen({WEB.key: WEB}, desired.L2Plan((), {VIP: "n1"}), None, {}, None)
    layer2.found = {VIP: claim(), OTHER: claim(OTHER)}
    body = a.explain(WEB.key)
    assert body is not None
    assert [c["ip"] for c in body["conflicts"]] == ["10.250.0.200"]
    assert body["node"] == "n1"
