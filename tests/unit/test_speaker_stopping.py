"""How the speaker process stops: its passes and status writer end before membership leaves and
the BGP sessions close, so that no pass starts a session after the close and no status says
"announcing" for a node that is going away."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from ironlb.problems import Problem
from ironlb_io import kube, watching
from speaker import agent, running, status_writing


class FakeClient:
    """kube.Client's surface that `running.run` uses when everything else is faked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def close(self) -> None:
        pass


class FakeBGP:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.problems: Sequence[Problem] = ()

    def announce(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def handed_over(self, timeout: float) -> None:
        pass

    async def apply(self, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        return {}

    async def wait_synced(self, timeout: float) -> bool:
        return True

    async def close(self, restarting: bool = False) -> None:
        self.log.append("bgp closed")


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # running.run freezes what it loaded: not this test process's objects


async def test_passes_and_the_status_writer_end_before_the_sessions_close(
    monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    log: list[str] = []
    in_pass = asyncio.Event()

    async def load(self: agent.Agent) -> dict[Any, str]:
        return {"source": "1"}

    async def reconcile_once(self: agent.Agent) -> None:
        # A pass still under way (here: inside the BGP applier) when the process is told to stop.
        in_pass.set()
        try:
            await asyncio.Event().wait()
        finally:
            log.append("pass ended")

    async def write_status(self: status_writing.StatusWriter) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            log.append("status writer ended")

    async def follow(*args: Any) -> None:
        # The watch ends once the pass is under way: `run` stops (as on a failed task).
        await in_pass.wait()

    monkeypatch.setattr(kube, "load", lambda _: None)
    monkeypatch.setattr(kube, "Client", FakeClient)
    monkeypatch.setattr(agent.Agent, "load", load)
    monkeypatch.setattr(agent.Agent, "reconcile_once", reconcile_once)
    monkeypatch.setattr(status_writing.StatusWriter, "run", write_status)
    monkeypatch.setattr(watching, "follow", follow)

    code = await asyncio.wait_for(
        running.run(agent.Options(node_name="n1", metrics_port=0), bgp=FakeBGP(log)), 5
    )
    assert code == 0
    assert sorted(log[:2]) == ["pass ended", "status writer ended"]
    assert log[2:] == ["bgp closed"]
