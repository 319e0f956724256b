"""ironlb_io.retrying: a start-up step retried on the backoff schedule, each failure logged once.

The waits are a fake sleep that records its delays and returns at once; the backoff has no
jitter, so the delays are the schedule itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from ironlb import backoff
from ironlb_io import retrying

LOGGER = "tests.retrying"


def exact() -> backoff.Backoff:
    return backoff.Backoff(jitter=0.0)


class Sleeps:
    """A sleep that records the delays asked for and waits for none of them."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def failing(*failures: BaseException, then: str = "done") -> Callable[[], Awaitable[str]]:
    """An attempt that raises each of `failures` in turn, then returns `then`."""
    pending = list(failures)

    async def attempt() -> str:
        if pending:
            raise pending.pop(0)
        return then

    return attempt


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage() == message]


async def test_named_failures_are_retried_on_the_backoff_schedule_until_a_result() -> None:
    sleeps = Sleeps()
    result = await retrying.retry(
        failing(OSError("no key"), OSError("no key"), OSError("no key"), then="keyring"),
        OSError,
        message="key missing",
        new_backoff=exact,
        sleep=sleeps,
    )
    assert result == "keyring"
    assert sleeps.delays == [1.0, 2.0, 4.0]


async def test_a_failure_not_named_is_raised_at_once() -> None:
    sleeps = Sleeps()
    attempt = failing(ValueError("a bug"), then="never")
    with pytest.raises(ValueError, match="a bug"):
        await retrying.retry(attempt, OSError, message="key missing", sleep=sleeps)
    assert sleeps.delays == []
    # A subclass of a named exception is named too.
    result = await retrying.retry(
        failing(FileNotFoundError("gone")), OSError, message="key missing", sleep=sleeps
    )
    assert result == "done"
    assert len(sleeps.delays) == 1


async def test_each_distinct_failure_is_logged_once_with_its_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    failures = [OSError("no key"), OSError("no key"), OSError("bad key"), OSError("bad key")]
    await retrying.retry(
        failing(*failures, OSError("no key")),
        OSError,
        message="key missing",
        fields={"path": "/keys"},
        logger=logging.getLogger(LOGGER),
        new_backoff=exact,
        sleep=Sleeps(),
    )
    records = logged(caplog, "key missing")
    # The failure changed twice after the first: three lines for five failures.
    assert [r.__dict__["error"] for r in records] == ["no key", "bad key", "no key"]
    assert [r.__dict__["retry_s"] for r in records] == [1.0, 4.0, 16.0]
    assert all(r.levelno == logging.WARNING for r in records)
    assert all(r.__dict__["path"] == "/keys" for r in records)


async def test_failure_text_decides_what_counts_as_the_same_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    await retrying.retry(
        failing(OSError(111, "refused by 10.0.0.1"), OSError(111, "refused by 10.0.0.2")),
        OSError,
        message="cannot connect",
        logger=logging.getLogger(LOGGER),
        level=logging.ERROR,
        failure_text=lambda e: str(e.errno),
        sleep=Sleeps(),
    )
    records = logged(caplog, "cannot connect")
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR
    # The line still carries the whole text of the failure it reports.
    assert records[0].__dict__["error"] == "[Errno 111] refused by 10.0.0.1"


async def test_every_failure_is_reported_and_a_logged_one_hears_of_the_recovery() -> None:
    seen: list[str] = []
    recovered: list[str] = []
    result = await retrying.retry(
        failing(OSError("no key"), OSError("no key"), then="keyring"),
        OSError,
        message="key missing",
        on_failure=lambda e: seen.append(str(e)),
        on_recovery=recovered.append,
        sleep=Sleeps(),
    )
    assert result == "keyring"
    assert seen == ["no key", "no key"]
    assert recovered == ["keyring"]
    # Nothing was logged when the first attempt works: nothing to say it recovered from.
    await retrying.retry(
        failing(), OSError, message="key missing", on_recovery=recovered.append, sleep=Sleeps()
    )
    assert recovered == ["keyring"]


async def test_a_stop_future_done_during_a_wait_ends_the_retry() -> None:
    loop = asyncio.get_running_loop()
    stopping: asyncio.Future[None] = loop.create_future()
    attempts: list[str] = []
    waits_cancelled: list[float] = []

    async def attempt() -> str:
        attempts.append("tried")
        raise OSError("no key")

    async def sleep_until_cancelled(delay: float) -> None:
        loop.call_soon(stopping.set_result, None)
        try:
            await loop.create_future()  # a wait that would never end by itself
        except asyncio.CancelledError:
            waits_cancelled.append(delay)
            raise

    with pytest.raises(retrying.Stopped):
        await retrying.retry(
            attempt,
            OSError,
            message="key missing",
            new_backoff=exact,
            sleep=sleep_until_cancelled,
            stop_at=(stopping,),
        )
    assert attempts == ["tried"]
    await asyncio.sleep(0)  # the abandoned wait takes its cancellation
    assert waits_cancelled == [1.0]


async def test_a_wait_that_ends_first_tries_again_despite_stop_futures() -> None:
    stopping: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    result = await retrying.retry(
        failing(OSError("no key")),
        OSError,
        message="key missing",
        sleep=Sleeps(),
        stop_at=(stopping,),
    )
    assert result == "done"
    assert not stopping.done()


async def test_cancelling_a_retry_while_it_waits_cancels_it() -> None:
    waiting = asyncio.Event()

    async def sleep_for_ever(delay: float) -> None:
        waiting.set()
        await asyncio.get_running_loop().create_future()

    task = asyncio.ensure_future(
        retrying.retry(failing(OSError("no key")), OSError, message="m", sleep=sleep_for_ever)
    )
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
