"""The Speaker's runners against a fake ExaBGP: convergence, restarts, shutdown order, BFD.

The fake has ExaBGP's surface (start / command / stop / kill / exited) and answers like it: acks
every command and reports the UPDATEs it would send. No process, no socket, no sleep: restart
delays are set to zero and every wait is on an event the test controls.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from speaker.bgp import events, exabgp, peers, routes, speaking
from speaker.bgp.bfd import machine as bfd_machine
from speaker.bgp.bfd import packet as bfd_packet

net = ipaddress.ip_network
A = routes.RouteAttributes


def _prefixes(text: str) -> frozenset[routes.Prefix]:
    words = text.split()
    if "nlri" in words:
        return frozenset(net(w) for w in words[words.index("nlri") + 1 :])
    return frozenset({net(words[2])})


class FakeExaBGP:
    def __init__(
        self, peer: peers.Peer, options: exabgp.Options, on_event: Callable[[events.Event], None]
    ) -> None:
        self.peer = peer
        self.on_event = on_event
        self.commands: list[str] = []
        self.timeline: list[str] = []
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        self.refuse: set[str] = set()
        self.hold_sent = False  # keep withdrawals "in ExaBGP" until release()
        self._held: list[events.Sent] = []
        self.hold_down = False  # after a teardown, report the session down only on report_down()
        self.connect_on_start = True  # False: the peer answers only on connect()
        self.connected = False
        self.pid = id(self)

    @property
    def alive(self) -> bool:
        return not self.exited.is_set()

    def _emit(self, event: events.Event) -> None:
        self.on_event(event)

    async def start(self) -> None:
        if self.connect_on_start:
            self.connect()

    def connect(self) -> None:
        self.connected = True
        self._emit(events.StateChange(str(self.peer.peer_address), "connected"))
        self._emit(events.StateChange(str(self.peer.peer_address), "up"))

    async def command(self, text: str) -> bool:
        if not self.alive:
            raise exabgp.ExaBGPError("dead")
        self.commands.append(text)
        self.timeline.append(text.split()[0] if not text.startswith("neighbor") else "teardown")
        if any(text.startswith(r) for r in self.refuse):
            return False
        if "next-hop self" in text and not self.connected:
            return False  # as ExaBGP: no local address to use as `self` before a connection
        address = str(self.peer.peer_address)
        if text.startswith("announce eor"):
            pass
        elif text.startswith("announce"):
            self._emit(events.Sent(address, announced=_prefixes(text)))
        elif text.startswith("withdraw"):
            sent = events.Sent(address, withdrawn=_prefixes(text))
            if self.hold_sent:
                self._held.append(sent)
            else:
                self._emit(sent)
        elif text.endswith("teardown 6") and not self.hold_down:
            self._emit(events.StateChange(address, "down", "teardown"))
        return True

    def report_down(self) -> None:
        self._emit(events.StateChange(str(self.peer.peer_address), "down", "teardown"))

    def release(self) -> None:
        for sent in self._held:
            self.timeline.append("sent-withdraw")
            self._emit(sent)
        self._held.clear()

    async def stop(self, timeout: float = 5.0) -> None:
        self.timeline.append("stop")
        self.die(0)

    async def kill(self) -> None:
        self.die(-9)

    def die(self, code: int = -9) -> None:
        if self.alive:
            self.returncode = code
            self.exited.set()


class Fakes(list[FakeExaBGP]):
    """Every fake ExaBGP the speaker made, in order; `factory` is what the speaker calls.
    `overlaps`: fakes made while another one for the same peer address was still alive (two
    ExaBGPs holding a session to the same peer: must never happen)."""

    connect_on_start = True

    def __init__(self) -> None:
        super().__init__()
        self.overlaps: list[FakeExaBGP] = []

    def factory(self, *args: Any) -> Any:
        fake = FakeExaBGP(*args)
        fake.connect_on_start = self.connect_on_start
        if any(f.alive and f.peer.peer_address == fake.peer.peer_address for f in self):
            self.overlaps.append(fake)
        self.append(fake)
        return fake


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    monkeypatch.setattr(speaking, "FIRST_RESTART_DELAY", 0.0)
    yield Fakes()


def make_speaker(fakes: Fakes) -> speaking.Speaker:
    return speaking.Speaker(exabgp.Options(node_name="n1"), process_factory=fakes.factory)


def peer(name: str = "tor", address: str = "10.0.0.1", **kw: Any) -> peers.Peer:
    return peers.Peer(name, 64512, 64500, ipaddress.ip_address(address), **kw)


async def settle(speaker: speaking.Speaker) -> None:
    assert await speaker.wait_synced(5.0)
    for _ in range(5):
        await asyncio.sleep(0)


async def spin(turns: int = 30) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def stopped(speaker: speaking.Speaker) -> None:
    """Until the sessions that set_peers took away have ended (they end in the background)."""
    await asyncio.wait_for(asyncio.gather(*list(speaker._stopping.values())), 5)


async def returns_at_once(call: Any) -> Any:
    """`call` (a coroutine) must be done after a few turns of the loop: not held by anything
    the fakes keep pending."""
    task = asyncio.ensure_future(call)
    await spin()
    assert task.done(), "still waiting"
    return task.result()


async def test_routes_reach_exabgp_and_later_diffs_are_minimal(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    one, two, three = net("10.1.0.1/32"), net("10.1.0.2/32"), net("10.1.0.3/32")
    speaker.set_routes({"tor": {one: A(), two: A()}})
    await settle(speaker)
    (fake,) = fakes
    assert fake.commands == [
        "announce attributes next-hop self origin igp nlri 10.1.0.1/32 10.1.0.2/32"
    ]
    speaker.set_routes(
        {"tor": {one: A(), three: A(communities=frozenset({routes.Community(1, 2)}))}}
    )
    await settle(speaker)
    assert fake.commands[1:] == [
        "withdraw route 10.1.0.2/32",
        "announce route 10.1.0.3/32 next-hop self origin igp community [ 1:2 ]",
    ]
    status = speaker.session_states()["tor"]
    assert status.up and status.announced == 2 and status.updates == 3
    await speaker.close()


async def test_dead_exabgp_is_restarted_and_everything_reannounced(
    fakes: Fakes,
) -> None:
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await settle(speaker)
    fakes[0].die()
    for _ in range(50):
        await asyncio.sleep(0)
        if len(fakes) == 2 and fakes[1].commands:
            break
    assert len(fakes) == 2
    assert fakes[1].commands == ["announce route 10.1.0.1/32 next-hop self origin igp"]
    assert speaker.session_states()["tor"].restarts == 1
    await speaker.close()


async def test_shutdown_sends_one_cease_and_stops_exabgp_once_the_session_is_down(
    fakes: Fakes,
) -> None:
    """Without graceful restart the peer drops every route when the session ends: no
    withdrawals; ExaBGP is stopped only once it reported the session down (the NOTIFICATION is
    out by then; stopping it first would only close the connection)."""
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A(), net("10.1.0.2/32"): A(local_pref=5)}})
    await settle(speaker)
    (fake,) = fakes
    fake.hold_down = True
    closing = asyncio.create_task(speaker.close())
    for _ in range(20):
        await asyncio.sleep(0)
    assert fake.timeline == ["announce", "announce", "teardown"]
    fake.report_down()
    await asyncio.wait_for(closing, 5)
    assert fake.timeline == ["announce", "announce", "teardown", "stop"]
    assert speaker.session_states() == {}


async def test_shutdown_of_a_graceful_restart_peer_withdraws_and_waits_for_the_wire(
    fakes: Fakes,
) -> None:
    """ExaBGP closes a graceful-restart session without a NOTIFICATION even on teardown, and the
    peer would keep our routes as stale: they are withdrawn first, and on the wire before the
    session closes."""
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer(graceful_restart=True)])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A(), net("10.1.0.2/32"): A(local_pref=5)}})
    await settle(speaker)
    (fake,) = fakes
    fake.hold_sent = True
    closing = asyncio.create_task(speaker.close())
    for _ in range(20):
        await asyncio.sleep(0)
    # Withdrawn, but not yet on the wire: the session must stay up.
    assert fake.commands[-1] == "withdraw attributes nlri 10.1.0.1/32 10.1.0.2/32"
    assert "teardown" not in fake.timeline and "stop" not in fake.timeline
    fake.release()
    await asyncio.wait_for(closing, 5)
    order = fake.timeline[fake.timeline.index("withdraw") :]
    assert order == ["withdraw", "sent-withdraw", "teardown", "stop"]
    assert speaker.session_states() == {}


async def test_graceful_restart_peers_keep_routes_when_the_speaker_restarts(
    fakes: Fakes,
) -> None:
    """A stopping speaker (restarting=True) withdraws nothing from a graceful-restart peer and
    sends no NOTIFICATION; other peers get a Cease."""
    speaker = make_speaker(fakes)
    gr, plain = peer("gr", "10.0.0.1", graceful_restart=True), peer("plain", "10.0.0.2")
    await speaker.set_peers([gr, plain])
    speaker.set_routes({"gr": {net("10.1.0.1/32"): A()}, "plain": {net("10.1.0.2/32"): A()}})
    await settle(speaker)
    kept, withdrawn = fakes
    await speaker.close(restarting=True)
    assert kept.timeline == ["announce", "announce", "stop"]
    assert withdrawn.timeline == ["announce", "teardown", "stop"]


async def test_graceful_restart_peer_is_withdrawn_when_only_its_configuration_goes(
    fakes: Fakes,
) -> None:
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer(graceful_restart=True)])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await settle(speaker)
    await speaker.set_peers([])
    await stopped(speaker)
    assert fakes[0].timeline[-3:] == ["withdraw", "teardown", "stop"]
    await speaker.close(restarting=True)


async def test_sessions_handed_over_to_another_speaker_on_the_node_end_as_for_a_restart(
    fakes: Fakes,
) -> None:
    """Standing down for MetalLB's speaker starting on this node (`ironlb.taking_over`): the
    node stays, so a graceful-restart peer keeps our routes (no withdrawal, no NOTIFICATION)
    until the new speaker's End-of-RIB; a plain peer gets a Cease."""
    speaker = make_speaker(fakes)
    gr, plain = peer("gr", "10.0.0.1", graceful_restart=True), peer("plain", "10.0.0.2")
    await speaker.set_peers([gr, plain])
    speaker.set_routes({"gr": {net("10.1.0.1/32"): A()}, "plain": {net("10.1.0.2/32"): A()}})
    await settle(speaker)
    await speaker.set_peers([], handing_over=True)
    await stopped(speaker)
    kept, ended = fakes
    assert kept.timeline == ["announce", "announce", "stop"]
    assert ended.timeline == ["announce", "teardown", "stop"]
    await speaker.close(restarting=True)


async def test_graceful_restart_end_of_rib_follows_the_routes_on_every_session(
    fakes: Fakes,
) -> None:
    """With manual End-of-RIB, the marker for each family goes out after the routes the speaker
    computed, on the first session and again after ExaBGP is restarted."""
    speaker = make_speaker(fakes)
    dual = peer(graceful_restart=True, dual_stack=True)
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await speaker.set_peers([dual])
    await settle(speaker)
    assert fakes[0].commands == [
        "announce route 10.1.0.1/32 next-hop self origin igp",
        "announce eor ipv4 unicast",
        "announce eor ipv6 unicast",
    ]
    # A later change sends no new marker: it belongs to the session's start.
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A(), net("10.1.0.2/32"): A()}})
    await settle(speaker)
    assert fakes[0].commands[-1] == "announce route 10.1.0.2/32 next-hop self origin igp"
    fakes[0].die()
    for _ in range(50):
        await asyncio.sleep(0)
        if len(fakes) == 2 and len(fakes[1].commands) == 3:
            break
    assert fakes[1].commands == [
        "announce attributes next-hop self origin igp nlri 10.1.0.1/32 10.1.0.2/32",
        "announce eor ipv4 unicast",
        "announce eor ipv6 unicast",
    ]
    await speaker.close()


async def test_no_end_of_rib_before_the_routes_are_this_nodes_answer(fakes: Fakes) -> None:
    """A restarted speaker whose first data-path verdicts are still missing computes no routes
    yet (complete=False): an End-of-RIB then would have the peer drop the stale routes of a
    node that is ready, until the verdict came. The marker follows the routes once complete."""
    speaker = make_speaker(fakes)
    speaker.set_routes({}, complete=False)
    await speaker.set_peers([peer(graceful_restart=True)])
    await settle(speaker)
    assert not any("eor" in c for c in fakes[0].commands)
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}}, complete=True)
    await settle(speaker)
    assert fakes[0].commands == [
        "announce route 10.1.0.1/32 next-hop self origin igp",
        "announce eor ipv4 unicast",
    ]
    await speaker.close()


async def test_no_end_of_rib_while_exabgp_refuses_the_routes(fakes: Fakes) -> None:
    """A refused announcement is not on the wire: an End-of-RIB behind it would end the
    peer's graceful restart without our route. The marker waits for the retry."""
    speaker = make_speaker(fakes)
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    fakes.connect_on_start = False
    await speaker.set_peers([peer(graceful_restart=True)])
    for _ in range(20):
        await asyncio.sleep(0)
    fakes[0].refuse.add("announce route")
    fakes[0].connect()
    for _ in range(20):
        await asyncio.sleep(0)
    assert fakes[0].commands.count("announce route 10.1.0.1/32 next-hop self origin igp") == 2
    assert not any("eor" in c for c in fakes[0].commands)
    fakes[0].refuse.clear()
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A(), net("10.1.0.2/32"): A()}})
    await settle(speaker)
    assert fakes[0].commands[-1] == "announce eor ipv4 unicast"
    assert "announce route 10.1.0.1/32 next-hop self origin igp" in fakes[0].commands
    await speaker.close()


async def test_end_of_rib_goes_out_at_the_latest_after_its_bound(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verdicts that never come do not hold the marker forever: after EOR_AT_THE_LATEST_S it
    goes out (the peer's restart timer would end the wait anyway)."""
    monkeypatch.setattr(speaking, "EOR_AT_THE_LATEST_S", 0.05)
    speaker = make_speaker(fakes)
    speaker.set_routes({}, complete=False)
    await speaker.set_peers([peer(graceful_restart=True)])
    await settle(speaker)
    assert not any("eor" in c for c in fakes[0].commands)
    for _ in range(100):
        await asyncio.sleep(0.01)
        if fakes[0].commands:
            break
    assert fakes[0].commands == ["announce eor ipv4 unicast"]
    await speaker.close()


async def test_without_graceful_restart_no_end_of_rib_is_sent_by_hand(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await speaker.set_peers([peer()])
    await settle(speaker)
    assert not any("eor" in c for c in fakes[0].commands)
    await speaker.close(restarting=True)
    assert fakes[0].timeline == ["announce", "teardown", "stop"]


async def test_a_refused_command_is_not_retried_in_a_loop(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    await asyncio.sleep(0)
    fakes[0].refuse = {"announce route 10.1.0.9/32"}
    speaker.set_routes({"tor": {net("10.1.0.9/32"): A()}})
    for _ in range(50):
        await asyncio.sleep(0)
    assert fakes[0].commands == ["announce route 10.1.0.9/32 next-hop self origin igp"]
    assert speaker.stats()["tor"]["refused"] == 1
    # A new desired state is tried at once.
    speaker.set_routes({"tor": {net("10.1.0.8/32"): A()}})
    await settle(speaker)
    assert fakes[0].commands[-1] == "announce route 10.1.0.8/32 next-hop self origin igp"
    await speaker.close()


async def test_routes_refused_before_the_peer_answered_go_out_once_it_does(
    fakes: Fakes,
) -> None:
    """ExaBGP refuses `next-hop self` until its session has a connection; the refused routes are
    announced as soon as the session comes up, not after RETRY_AFTER_REFUSAL."""
    fakes.connect_on_start = False
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    speaker.set_routes({"tor": {net("10.1.0.50/32"): A()}})
    for _ in range(50):
        await asyncio.sleep(0)
    (fake,) = fakes
    assert fake.commands == ["announce route 10.1.0.50/32 next-hop self origin igp"]
    assert speaker.stats()["tor"]["refused"] == 1
    fake.connect()
    await settle(speaker)
    assert fake.commands == ["announce route 10.1.0.50/32 next-hop self origin igp"] * 2
    assert speaker.session_states()["tor"].announced == 1
    await speaker.close()


async def test_peer_changes_leave_other_sessions_alone(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    a, b = peer("a", "10.0.0.1"), peer("b", "10.0.0.2")
    await speaker.set_peers([a])
    speaker.set_routes({"a": {net("10.1.0.1/32"): A()}, "b": {net("10.1.0.2/32"): A()}})
    await settle(speaker)
    await speaker.set_peers([a, b])
    await settle(speaker)
    first, second = fakes
    assert first.alive and "stop" not in first.timeline
    assert second.commands == ["announce route 10.1.0.2/32 next-hop self origin igp"]
    # Changing b (here its hold time) replaces b's process only.
    await speaker.set_peers([a, peer("b", "10.0.0.2", hold_time=30)])
    await settle(speaker)
    assert not second.alive and second.timeline[-1] == "stop"
    assert first.alive and len(fakes) == 3
    # Removing a closes a's session, then stops it; b's new process is untouched.
    await speaker.set_peers([peer("b", "10.0.0.2", hold_time=30)])
    await stopped(speaker)
    assert first.timeline[-3:] == ["announce", "teardown", "stop"]
    assert fakes[2].alive
    await speaker.close()


async def test_set_peers_returns_while_an_old_session_is_still_closing(fakes: Fakes) -> None:
    """Closing a session can take WITHDRAW_WAIT and more (a graceful-restart peer waits for its
    withdrawals on the wire): it happens in the background, so the agent's pass (L2 failover
    included) never waits for it."""
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer(graceful_restart=True)])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await settle(speaker)
    (old,) = fakes
    old.hold_sent = True
    assert await returns_at_once(speaker.set_peers([])) == []
    assert old.alive and old.timeline[-1] == "withdraw"  # still waiting for the wire
    assert speaker.session_states() == {} and speaker.peers() == {}
    old.release()
    await stopped(speaker)
    assert old.timeline[-3:] == ["sent-withdraw", "teardown", "stop"] and old.exited.is_set()
    await speaker.close()


async def test_a_replacement_starts_only_once_the_old_session_ended(fakes: Fakes) -> None:
    """Level-triggered: removed, added again, then changed while the old session still closes:
    one new session, with the latest configuration and the routes desired then, started only
    after the old ExaBGP ended (two sessions to one peer must never overlap). A new name for
    the same address waits as well."""
    speaker = make_speaker(fakes)
    one, two = net("10.1.0.1/32"), net("10.1.0.2/32")
    await speaker.set_peers([peer()])
    speaker.set_routes({"tor": {one: A()}})
    await settle(speaker)
    (old,) = fakes
    old.hold_down = True  # the Cease goes out; ExaBGP reports the session down on report_down
    await returns_at_once(speaker.set_peers([]))
    await returns_at_once(speaker.set_peers([peer(hold_time=30)]))
    await returns_at_once(speaker.set_peers([peer(hold_time=60)]))
    speaker.set_routes({"tor": {one: A(), two: A()}})
    await spin()
    assert len(fakes) == 1 and old.alive and old.timeline[-1] == "teardown"
    # Shown as configured, waiting: not as the old session's state.
    waiting = speaker.session_states()["tor"]
    assert waiting.bgp == "idle" and "previous session" in waiting.reason
    assert speaker.peers()["tor"].hold_time == 60
    old.report_down()
    await settle(speaker)
    assert len(fakes) == 2 and fakes.overlaps == []
    new = fakes[1]
    assert new.peer.hold_time == 60 and old.timeline[-1] == "stop"
    assert new.commands == [
        "announce attributes next-hop self origin igp nlri 10.1.0.1/32 10.1.0.2/32"
    ]
    assert speaker.session_states()["tor"].up

    # Renamed (same address): the new name waits for the old session as well.
    new.hold_down = True
    await returns_at_once(speaker.set_peers([peer("tor2")]))
    speaker.set_routes({"tor2": {one: A()}})
    await spin()
    assert len(fakes) == 2 and speaker.session_states()["tor2"].bgp == "idle"
    new.report_down()
    await settle(speaker)
    assert len(fakes) == 3 and fakes.overlaps == []
    assert fakes[2].commands == ["announce route 10.1.0.1/32 next-hop self origin igp"]
    await speaker.close()


async def test_a_closing_session_does_not_delay_another_peers(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer("a", "10.0.0.1", graceful_restart=True)])
    speaker.set_routes({"a": {net("10.1.0.1/32"): A()}, "b": {net("10.1.0.2/32"): A()}})
    await settle(speaker)
    (a,) = fakes
    a.hold_sent = True
    await returns_at_once(speaker.set_peers([peer("b", "10.0.0.2")]))
    await settle(speaker)
    assert a.alive and "stop" not in a.timeline  # still closing
    assert len(fakes) == 2 and fakes[1].commands == [
        "announce route 10.1.0.2/32 next-hop self origin igp"
    ]
    assert speaker.session_states()["b"].up
    a.release()
    await stopped(speaker)
    await speaker.close()


async def test_close_waits_for_sessions_still_closing(fakes: Fakes) -> None:
    """Including one whose replacement waits: that replacement never starts."""
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await settle(speaker)
    (old,) = fakes
    old.hold_down = True
    await returns_at_once(speaker.set_peers([peer(hold_time=30)]))
    closing = asyncio.ensure_future(speaker.close())
    await spin()
    assert not closing.done() and old.alive
    old.report_down()
    await asyncio.wait_for(closing, 5)
    assert old.exited.is_set() and old.timeline[-2:] == ["teardown", "stop"]
    assert len(fakes) == 1 and speaker.session_states() == {}


async def test_a_close_during_a_peer_change_leaves_no_session_behind(fakes: Fakes) -> None:
    """close() may come while a pass is inside set_peers; nothing may start after it."""
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    await settle(speaker)
    (old,) = fakes
    old.hold_down = True
    changing = asyncio.ensure_future(speaker.set_peers([peer(hold_time=30)]))
    await spin(3)
    closing = asyncio.ensure_future(speaker.close())
    await spin(3)
    old.report_down()
    await asyncio.wait_for(asyncio.gather(changing, closing), 5)
    await spin()
    assert [f.alive for f in fakes] == [False]
    assert speaker.session_states() == {}


async def test_set_peers_after_close_starts_nothing(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    await speaker.close()
    assert await speaker.set_peers([peer()]) == []
    await spin()
    assert fakes == [] and speaker.session_states() == {}


async def test_fatal_peer_problems_start_nothing(fakes: Fakes) -> None:
    speaker = make_speaker(fakes)
    found = await speaker.set_peers([peer(hold_time=2)])
    assert [p.field for p in found] == ["spec.holdTime"]
    assert speaker.session_states() == {} and fakes == []
    await speaker.close()


class FakeEndpoint:
    def __init__(self, on_change: Any, port: int = 0) -> None:
        self.on_change = on_change
        self.timers: dict[str, bfd_machine.Timers] = {}

    def add(self, peer: str, timers: bfd_machine.Timers, local: str | None = None) -> None:
        self.timers[peer] = timers

    async def remove(self, peer: str, linger: float = 0.5) -> None:
        self.timers.pop(peer, None)

    def sessions(self) -> dict[str, Any]:
        return dict(self.timers)

    def close(self) -> None:
        self.timers.clear()


async def test_bfd_down_tears_bgp_down_but_admin_down_does_not(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(speaking.bfd_threaded, "ThreadedEndpoint", FakeEndpoint)
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer(bfd=peers.BFDSettings(300, 300, 3))])
    await asyncio.sleep(0)
    (fake,) = fakes
    endpoint = speaker._bfd
    assert isinstance(endpoint, FakeEndpoint)
    assert endpoint.timers["10.0.0.1"] == bfd_machine.Timers(300_000, 300_000, 3)
    S, D = bfd_packet.State, bfd_packet.Diag
    endpoint.on_change(
        "10.0.0.1",
        bfd_machine.StateChange(
            S.UP, S.DOWN, D.NEIGHBOR_SIGNALED_SESSION_DOWN, remote_admin_down=True
        ),
    )
    for _ in range(10):
        await asyncio.sleep(0)
    assert "teardown" not in fake.timeline
    endpoint.on_change(
        "10.0.0.1", bfd_machine.StateChange(S.UP, S.DOWN, D.CONTROL_DETECTION_TIME_EXPIRED)
    )
    for _ in range(10):
        await asyncio.sleep(0)
    assert fake.commands[-1] == "neighbor 10.0.0.1 teardown 6"
    # New BFD timers alone do not restart BGP.
    await speaker.set_peers([peer(bfd=peers.BFDSettings(100, 100, 5))])
    assert fake.alive and len(fakes) == 1
    assert endpoint.timers["10.0.0.1"] == bfd_machine.Timers(100_000, 100_000, 5)
    await speaker.close()


async def test_bfd_down_on_a_graceful_restart_peer_withdraws_before_the_teardown(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graceful-restart session closed by ExaBGP leaves our routes stale at the peer: BFD's
    verdict withdraws them first, then tears down; they go back to ExaBGP afterwards."""
    monkeypatch.setattr(speaking.bfd_threaded, "ThreadedEndpoint", FakeEndpoint)
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer(bfd=peers.BFDSettings(300, 300, 3), graceful_restart=True)])
    speaker.set_routes({"tor": {net("10.1.0.1/32"): A()}})
    await settle(speaker)
    (fake,) = fakes
    endpoint = speaker._bfd
    assert isinstance(endpoint, FakeEndpoint)
    S, D = bfd_packet.State, bfd_packet.Diag
    endpoint.on_change(
        "10.0.0.1", bfd_machine.StateChange(S.UP, S.DOWN, D.CONTROL_DETECTION_TIME_EXPIRED)
    )
    for _ in range(50):
        await asyncio.sleep(0)
    sent = [c for c in fake.commands if not c.startswith("announce eor")]
    assert sent[:3] == [
        "announce route 10.1.0.1/32 next-hop self origin igp",
        "withdraw route 10.1.0.1/32",
        "neighbor 10.0.0.1 teardown 6",
    ], fake.commands
    await speaker.close()


async def test_handed_over_returns_once_the_first_command_is_written(fakes: Fakes) -> None:
    """The agent waits for this before its bookkeeping: when it returns, ExaBGP has the first
    command of the new routes, although their acknowledgements are still to come."""
    speaker = make_speaker(fakes)
    await speaker.set_peers([peer()])
    await settle(speaker)
    (fake,) = fakes
    many = {net(f"10.1.{i // 250}.{i % 250 + 1}/32"): A() for i in range(1200)}
    speaker.set_routes({"tor": many})
    assert fake.commands == []
    await speaker.handed_over(5.0)
    assert fake.commands and fake.commands[0].startswith("announce attributes")
    first_line = len(_prefixes(fake.commands[0]))
    await settle(speaker)
    assert len(fake.commands) > 1 and first_line < len(many)
    assert sum(len(_prefixes(c)) for c in fake.commands) == len(many)
    await speaker.handed_over(5.0)  # nothing new: returns at once
    await speaker.close()
