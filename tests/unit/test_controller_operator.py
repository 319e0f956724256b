"""controller.operator.run with every collaborator faked: which task's end ends the process,
and that nothing a task raised is dropped unsaid."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import kopf
import pytest

from controller import config_reporting, leader, operator, reconciling
from ironlb_io import kube

FOREVER = asyncio.Event  # awaiting a fresh Event's wait() never returns


class FakeClient:
    total_writes = 0

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def close(self) -> None:
        pass


class FakeElector:
    lose_after: float | None = None  # seconds until `keep` returns (the Lease lost)
    released = 0

    def __init__(self, *_: Any, **__: Any) -> None:
        self.reachable = True

    def holding(self) -> bool:
        return True

    async def acquire(self) -> None:
        pass

    async def keep(self) -> None:
        if self.lose_after is None:
            await FOREVER().wait()
        else:
            await asyncio.sleep(self.lose_after)

    async def release(self) -> None:
        FakeElector.released += 1


class FakeReconciler:
    resync_error: BaseException | None = None
    load_error: BaseException | None = None  # raised by every `load`

    def __init__(self, *_: Any, **__: Any) -> None:
        self.ready = asyncio.Event()
        self.services: dict[str, Any] = {}

    async def load(self) -> None:
        if self.load_error is not None:
            raise self.load_error

    async def run(self) -> None:
        self.ready.set()
        await FOREVER().wait()

    async def resync_forever(self, period_s: float) -> None:
        await asyncio.sleep(0.01)
        if self.resync_error is not None:
            raise self.resync_error
        await FOREVER().wait()


class FakeReporter:
    error: BaseException | None = None
    error_when_cancelled: BaseException | None = None

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def run_forever(self) -> None:
        await asyncio.sleep(0.01)
        if self.error is not None:
            raise self.error
        try:
            await FOREVER().wait()
        except asyncio.CancelledError:
            if self.error_when_cancelled is not None:
                raise self.error_when_cancelled from None
            raise


async def fake_kopf(*, stop_flag: asyncio.Event, **_: Any) -> None:
    await stop_flag.wait()


@pytest.fixture
def faked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "load", lambda _: None)
    monkeypatch.setattr(kube, "Client", FakeClient)
    monkeypatch.setattr(leader, "Elector", FakeElector)
    monkeypatch.setattr(reconciling, "Reconciler", FakeReconciler)
    monkeypatch.setattr(config_reporting, "Reporter", FakeReporter)
    monkeypatch.setattr(kopf, "operator", fake_kopf)
    monkeypatch.setattr(operator, "registry", lambda *_: None)


OPTIONS = operator.Options(metrics_port=0, webhook_port=0)


@pytest.mark.parametrize("which", ["resync", "reporter"])
async def test_a_background_loop_that_dies_ends_the_process_and_says_why(
    faked: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    """The resync and configuration-check loops retry API errors; anything else ended them and
    the controller ran on without them, saying nothing (the final gather swallowed it)."""
    boom = RuntimeError(f"{which} bug")
    if which == "resync":
        monkeypatch.setattr(FakeReconciler, "resync_error", boom)
    else:
        monkeypatch.setattr(FakeReporter, "error", boom)
    with caplog.at_level(logging.ERROR, logger=operator.__name__):
        code = await asyncio.wait_for(operator.run(OPTIONS), 5)
    assert code == 1
    said = [r for r in caplog.records if r.exc_info and r.exc_info[1] is boom]
    assert len(said) == 1  # once, not again when the tasks are gathered at the end


async def test_a_failure_while_stopping_is_logged_once(
    faked: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    boom = RuntimeError("cleanup bug")
    monkeypatch.setattr(FakeReporter, "error_when_cancelled", boom)
    monkeypatch.setattr(FakeElector, "lose_after", 0.05)
    with caplog.at_level(logging.ERROR, logger=operator.__name__):
        code = await asyncio.wait_for(operator.run(OPTIONS), 5)
    assert code == operator.EXIT_LEASE_LOST
    said = [r for r in caplog.records if r.exc_info and r.exc_info[1] is boom]
    assert len(said) == 1


async def test_the_lease_lost_while_the_cluster_state_cannot_be_listed_says_so_and_exits_3(
    faked: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up LIST keeps failing (e.g. no CRDs yet) and the Lease goes meanwhile: the
    process exits with EXIT_LEASE_LOST, says why, reports that code in its last line, and does
    not try to release a Lease that is no longer its own. It used to return 3 while logging
    `stopped` with exit_code 0, after a release."""
    monkeypatch.setattr(FakeReconciler, "load_error", kube.ApiError(404, "NotFound", "no CRDs"))
    monkeypatch.setattr(FakeElector, "lose_after", 0.05)
    monkeypatch.setattr(FakeElector, "released", 0)
    with caplog.at_level(logging.INFO, logger=operator.__name__):
        code = await asyncio.wait_for(operator.run(OPTIONS), 5)
    assert code == operator.EXIT_LEASE_LOST
    assert "leader lease lost: exiting" in [r.getMessage() for r in caplog.records]
    (stopped,) = [r for r in caplog.records if r.getMessage() == "stopped"]
    assert stopped.__dict__["exit_code"] == operator.EXIT_LEASE_LOST
    assert FakeElector.released == 0


async def test_asked_to_stop_while_the_cluster_state_cannot_be_listed_releases_and_exits_0(
    faked: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(FakeReconciler, "load_error", kube.ApiError(404, "NotFound", "no CRDs"))
    monkeypatch.setattr(FakeElector, "released", 0)
    running = asyncio.ensure_future(operator.run(OPTIONS))
    await asyncio.sleep(0.1)
    signal.raise_signal(signal.SIGTERM)
    with caplog.at_level(logging.INFO, logger=operator.__name__):
        code = await asyncio.wait_for(running, 5)
    assert code == 0
    (stopped,) = [r for r in caplog.records if r.getMessage() == "stopped"]
    assert stopped.__dict__["exit_code"] == 0
    assert FakeElector.released == 1
