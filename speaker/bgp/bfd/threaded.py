"""`transport.Endpoint` on a loop of its own (`speaker.loop_thread`), same surface.

A BFD session at 300 ms x 3 is declared down 900 ms after the last packet it read, and the peer
does the same with ours: a main loop busy for a second with a pass over 10,000 Services would
tear down healthy sessions on both sides (measured before this existed). State changes are
handed to the main loop's `on_change`; everything else is a short call into the BFD thread.
"""

from __future__ import annotations

import asyncio

from speaker import loop_thread
from speaker.bgp.bfd import machine, transport


class ThreadedEndpoint:
    def __init__(self, on_change: transport.ChangeCallback, port: int = transport.CONTROL_PORT):
        main = asyncio.get_running_loop()

        def relay(peer: str, change: machine.StateChange) -> None:
            main.call_soon_threadsafe(on_change, peer, change)

        self._thread = loop_thread.LoopThread("bfd")
        self._endpoint = self._thread.call_blocking(lambda: transport.Endpoint(relay, port=port))

    @property
    def stats(self) -> transport.Stats:
        return self._endpoint.stats

    def add(self, peer: str, timers: machine.Timers, local: str | None = None) -> None:
        self._thread.call_blocking(lambda: self._endpoint.add(peer, timers, local))

    def update(self, peer: str, timers: machine.Timers) -> None:
        self._thread.call_blocking(lambda: self._endpoint.update(peer, timers))

    async def remove(self, peer: str, linger: float = 0.5) -> None:
        await self._thread.call(self._endpoint.remove(peer, linger))

    def session(self, peer: str) -> machine.Session | None:
        return self._thread.call_blocking(lambda: self._endpoint.session(peer))

    def sessions(self) -> dict[str, machine.Session]:
        return self._thread.call_blocking(self._endpoint.sessions)

    def source_port(self, peer: str) -> int | None:
        return self._thread.call_blocking(lambda: self._endpoint.source_port(peer))

    def close(self) -> None:
        try:
            self._thread.call_blocking(self._endpoint.close)
        finally:
            self._thread.stop()
