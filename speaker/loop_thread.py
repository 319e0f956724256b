"""An event loop of its own, in a daemon thread, for protocols whose timers must fire on time.

Membership probes and BFD packets have deadlines of a few hundred milliseconds. The speaker's
main loop also rebuilds its view of 10,000 Services, which takes longer than that; on one loop
a busy pass made healthy peers look dead (measured: members flapping suspect/dead/alive while a
pass over 10,000 Services ran). On a loop of their own they get the interpreter at least every
switch interval (5 ms) whatever the main loop does.

Whatever runs on it talks to the main loop only through `call` (await a coroutine there),
`call_blocking` (for short synchronous work, from a thread that is not this one) and the main
loop's `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

STOP_TIMEOUT_S = 5.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def inside(self) -> bool:
        return threading.current_thread() is self._thread

    async def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on this loop; await its result from another loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def call_blocking(self, function: Callable[[], T], timeout: float = STOP_TIMEOUT_S) -> T:
        """Run a short synchronous function on this loop and wait for it (or run it at once
        when already on this loop's thread)."""
        if self.inside:
            return function()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as e:  # handed to the caller, who re-raises it
                future.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()
