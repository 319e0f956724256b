"""`announcing.Layer2Announcer` on a loop of its own (`speaker.loop_thread`).

ARP and NDP are answered from that loop, so a client's request is not kept waiting behind a
pass of the main loop over 10,000 Services (a reply normally takes 0.05 ms; on a shared loop it
would wait for the pass to end). Ownership changes are queued to that loop in order, so the
last `set_owned` before `close` is the one applied.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from speaker import loop_thread
from speaker.layer2 import announcing, conflicts, metrics, packets


class ThreadedLayer2:
    def __init__(self, announcer: announcing.Layer2Announcer | None = None) -> None:
        self.announcer = announcer or announcing.Layer2Announcer()
        self._thread: loop_thread.LoopThread | None = None

    @property
    def stats(self) -> metrics.Stats:
        return self.announcer.stats

    def conflicts(self) -> Mapping[packets.IPAddress, conflicts.Conflict]:
        """The announcer's current conflicts: an immutable snapshot, readable from this thread.
        Its `on_conflict` callback, though, runs on the layer-2 loop's thread."""
        return self.announcer.conflicts()

    async def start(self) -> None:
        self._thread = loop_thread.LoopThread("layer2")
        await self._thread.call(self.announcer.start())

    def interfaces(self) -> frozenset[str] | None:
        return self.announcer.answering

    def set_owned(self, owned: Mapping[packets.IPAddress, Collection[str]]) -> None:
        if self._thread is None:
            raise RuntimeError("ThreadedLayer2.start() must be awaited first")
        self._thread.loop.call_soon_threadsafe(self.announcer.set_owned, dict(owned))

    def announce_again(self, addresses: Collection[packets.IPAddress]) -> None:
        if self._thread is None:
            raise RuntimeError("ThreadedLayer2.start() must be awaited first")
        self._thread.loop.call_soon_threadsafe(self.announcer.announce_again, frozenset(addresses))

    async def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            await thread.call(self.announcer.close())
        finally:
            thread.stop()
