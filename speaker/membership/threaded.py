"""A `node.Node` on a loop of its own (`speaker.loop_thread`): what the speaker's agent uses.

Probe timeouts are a few hundred milliseconds; the speaker's main loop can be busy longer than
that with a pass over 10,000 Services, and a member that answers late is suspected and declared
dead by the others (measured: flapping under such a pass on one loop). Here the member answers
from its own thread whatever the main loop does; the agent sees the same things as on a plain
node: `changed` (an asyncio.Event of the main loop, set on a change of the alive set or of a
member's metadata, or when we refuted a verdict of our own death), `members()`, `metadata()`,
`returns()`, `set_metadata(data)` (before or after `start`;
it raises ValueError in the caller's thread for metadata too long) and `leave()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from speaker import loop_thread
from speaker.membership import messages, sealing
from speaker.membership import node as node_module


class ThreadedNode:
    def __init__(self, node: node_module.Node) -> None:
        self.node = node
        self.changed = asyncio.Event()
        self._thread: loop_thread.LoopThread | None = None
        self._relay: asyncio.Future[None] | None = None

    async def start(self) -> None:
        main = asyncio.get_running_loop()
        self._thread = loop_thread.LoopThread("membership")

        async def relay() -> None:
            while True:
                await self.node.changed.wait()
                self.node.changed.clear()
                main.call_soon_threadsafe(self.changed.set)

        async def begin() -> None:
            await self.node.start()
            self._relay = asyncio.ensure_future(relay())

        try:
            await self._thread.call(begin())
        except BaseException:
            # e.g. the address cannot be bound yet: no thread left behind for the next attempt.
            self._thread.stop()
            self._thread = None
            raise

    def _loop_thread(self) -> loop_thread.LoopThread:
        if self._thread is None:
            raise RuntimeError("membership not started")
        return self._thread

    def members(self) -> frozenset[str]:
        return self._loop_thread().call_blocking(self.node.members)

    def metadata(self) -> dict[str, bytes]:
        return self._loop_thread().call_blocking(self.node.metadata)

    def returns(self) -> int:
        """How many verdicts of our own death we refuted (`node.Node.returns`)."""
        return self._loop_thread().call_blocking(lambda: self.node.returns)

    def set_metadata(self, data: bytes) -> None:
        if self._thread is None:
            self.node.set_metadata(data)  # not started: nothing runs on the node yet
            return
        self._thread.call_blocking(lambda: self.node.set_metadata(data))

    def set_keyring(self, keyring: sealing.Keyring) -> None:
        self._loop_thread().call_blocking(lambda: self.node.set_keyring(keyring))

    def join(self, seeds: Iterable[messages.Address]) -> None:
        seed_list = list(seeds)
        self._loop_thread().loop.call_soon_threadsafe(self.node.join, seed_list)

    async def leave(self) -> None:
        thread = self._loop_thread()

        async def end() -> None:
            if self._relay is not None:
                self._relay.cancel()
            await self.node.leave()

        try:
            await thread.call(end())
        finally:
            thread.stop()
