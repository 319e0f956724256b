"""A start-up step retried until it works: what every program does with a dependency that is
not there yet (the apiserver, its RBAC, a mounted key, the node's address).

Each failure waits the `ironlb.backoff` delay and tries again; none is fatal. A failure that
lasts is logged once, not on every retry: a line is written only when the failure's text differs
from the last one logged, so a log says when the reason changed, not how often it was retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ironlb import backoff

log = logging.getLogger(__name__)

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


class Stopped(Exception):
    """One of the futures a retry was told to stop at was done after a wait."""


async def retry(
    attempt: Callable[[], Awaitable[T]],
    retried: type[E] | tuple[type[E], ...],
    *,
    message: str,
    fields: Mapping[str, object] | None = None,
    logger: logging.Logger = log,
    level: int = logging.WARNING,
    failure_text: Callable[[E], str] = str,
    on_failure: Callable[[E], object] | None = None,
    on_recovery: Callable[[T], object] | None = None,
    stop_at: Sequence[asyncio.Future[Any]] = (),
    new_backoff: Callable[[], backoff.Backoff] = backoff.Backoff,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """The result of the first call of `attempt` that does not raise one of `retried`.

    Every failure is handed to `on_failure` (a readiness reason, say). A failure whose
    `failure_text` differs from the last one logged is logged as `message`, with `fields` and
    the failure's `error` and `retry_s`. When a failure had been logged, `on_recovery` gets the
    result, to say that it came. Any other exception ends the retry at once. With `stop_at`,
    each wait also ends when one of those futures is done, and the retry then raises Stopped.
    """
    wait = new_backoff()
    last_logged: str | None = None
    while True:
        try:
            result = await attempt()
        except retried as e:
            if on_failure is not None:
                on_failure(e)
            delay = wait.next()
            text = failure_text(e)
            if text != last_logged:
                last_logged = text
                logger.log(
                    level,
                    message,
                    extra={**(fields or {}), "error": str(e), "retry_s": round(delay, 1)},
                )
            await _pause(sleep(delay), stop_at)
            continue
        if last_logged is not None and on_recovery is not None:
            on_recovery(result)
        return result


async def _pause(waiting: Awaitable[object], stop_at: Sequence[asyncio.Future[Any]]) -> None:
    if not stop_at:
        await waiting
        return
    pausing = asyncio.ensure_future(waiting)
    try:
        await asyncio.wait([pausing, *stop_at], return_when=asyncio.FIRST_COMPLETED)
    finally:
        pausing.cancel()
    if any(future.done() for future in stop_at):
        raise Stopped()
