"""speaker.loop_thread and the members, BFD endpoints and ARP responders that run on one.

The point of the thread: a main loop busy for longer than a probe timeout must not make this
node look dead to its peers. Shown on loopback UDP with two real members: while the main loop
is blocked for three seconds, the peer of a member on a loop thread never suspects it; the
same member on the main loop is suspected (so the test can tell the two apart)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from speaker import loop_thread
from speaker.membership import messages as m
from speaker.membership import node, sealing, threaded

KEYS = sealing.Keyring.from_secrets([b"loop thread test"])
BLOCK_S = 3.0


@pytest.fixture
def thread() -> Iterator[loop_thread.LoopThread]:
    t = loop_thread.LoopThread("test")
    yield t
    t.stop()


def test_call_runs_on_the_thread_and_returns_its_result(thread: loop_thread.LoopThread) -> None:
    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    async def main() -> str:
        return await thread.call(where())

    assert asyncio.run(main()) == "test"


def test_call_blocking_returns_raises_and_runs_inline_on_its_own_thread(
    thread: loop_thread.LoopThread,
) -> None:
    assert thread.call_blocking(lambda: threading.current_thread().name) == "test"

    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        thread.call_blocking(fail)
    assert thread.call_blocking(lambda: thread.call_blocking(lambda: thread.inside)) is True


def test_stop_ends_the_thread() -> None:
    t = loop_thread.LoopThread("short")
    t.stop()
    assert t.loop.is_closed()
    t.stop()  # twice is harmless


async def _peer_sees(blocked_member_threaded: bool) -> list[m.State]:
    """States the peer reported for `a` while the main loop was blocked."""
    seen: list[m.State] = []
    peer_node = node.Node(
        "b",
        m.Address("127.0.0.1", 0),
        keyring=KEYS,
        on_change=lambda c: seen.append(c.state) if c.name == "a" else None,
    )
    peer = threaded.ThreadedNode(peer_node)
    await peer.start()
    a_node = node.Node("a", m.Address("127.0.0.1", 0), keyring=KEYS, seeds=[peer_node.advertise])
    a: threaded.ThreadedNode | node.Node = (
        threaded.ThreadedNode(a_node) if blocked_member_threaded else a_node
    )
    await a.start()
    try:
        for _ in range(100):
            if a.members() == {"a", "b"} and peer.members() == {"a", "b"}:
                break
            await asyncio.sleep(0.05)
        assert peer.members() == {"a", "b"}, "the members never met"
        seen.clear()
        time.sleep(BLOCK_S)  # the main loop does nothing else meanwhile
        await asyncio.sleep(0.5)
        return list(seen)
    finally:
        await a.leave()
        await peer.leave()


def test_a_member_on_its_own_thread_stays_alive_while_the_main_loop_is_blocked() -> None:
    assert asyncio.run(_peer_sees(blocked_member_threaded=True)) == []


def test_a_member_on_the_main_loop_is_suspected_while_it_is_blocked() -> None:
    states = asyncio.run(_peer_sees(blocked_member_threaded=False))
    assert m.State.SUSPECT in states or m.State.DEAD in states, states


def test_changes_reach_the_main_loop_event() -> None:
    async def main() -> bool:
        first = threaded.ThreadedNode(node.Node("x", m.Address("127.0.0.1", 0), keyring=KEYS))
        await first.start()
        second = threaded.ThreadedNode(
            node.Node("y", m.Address("127.0.0.1", 0), keyring=KEYS, seeds=[first.node.advertise])
        )
        await second.start()
        try:
            await asyncio.wait_for(first.changed.wait(), 5)
            return "y" in first.members()
        finally:
            await second.leave()
            await first.leave()

    assert asyncio.run(main())
