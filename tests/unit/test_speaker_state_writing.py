"""speaker.state_writing: our `speaker-<node>` ConfigurationState is written after the first pass,
with this node's conditions beside the configuration's problems, and read back when asked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from ironlb import configuration_state, datapath
from ironlb.problems import Problem
from speaker import conflict_watching, state_writing

READY = configuration_state.Verdict("True", "Ready", "kube-proxy answers healthy")
PROBLEM = Problem("IPAddressPool", "lan", "spec.addresses", "not an address")


class RecordingWriter:
    """`configuration_states.Writer.sync`, recorded; answers `ok`."""

    def __init__(self) -> None:
        self.synced: list[tuple[list[Problem], bool, dict[str, Any]]] = []
        self.ok = True
        self.wrote = asyncio.Event()

    async def sync(
        self,
        problems: list[Problem],
        *,
        refresh: bool = False,
        extra: Mapping[str, configuration_state.Verdict] | None = None,
    ) -> bool:
        self.synced.append((list(problems), refresh, dict(extra or {})))
        self.wrote.set()
        return self.ok


async def steps(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_written_after_the_first_pass_with_our_conditions_and_read_back_when_asked() -> None:
    state = state_writing.ConfigurationStateWriter(
        None,  # type: ignore[arg-type]  # the recording writer below answers instead
        "metallb-system",
        "n1",
        conflict=conflict_watching.NO_CONFLICT,
    )
    recorded = RecordingWriter()
    state.writer = recorded  # type: ignore[assignment]
    task = asyncio.ensure_future(state.run())
    try:
        state.dirty.set()  # a condition before any pass: nothing to say yet
        await steps()
        assert recorded.synced == []

        state.datapath = READY
        state.set_problems([PROBLEM])
        await asyncio.wait_for(recorded.wrote.wait(), 5)
        assert recorded.synced == [
            (
                [PROBLEM],
                False,
                {
                    datapath.CONFLICT_CONDITION_TYPE: conflict_watching.NO_CONFLICT,
                    datapath.CONDITION_TYPE: READY,
                },
            )
        ]

        # The same problems again: nothing to write.
        state.set_problems([PROBLEM])
        await steps()
        assert len(recorded.synced) == 1

        recorded.wrote.clear()
        state.refresh_soon()
        await asyncio.wait_for(recorded.wrote.wait(), 5)
        assert [refresh for _, refresh, _ in recorded.synced] == [False, True]
        assert state.refresh is False  # once
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_nothing_is_written_while_standing_by_and_the_object_is_read_back_after() -> None:
    """Standing by for MetalLB's speaker (`ironlb.taking_over`), whose ConfigurationState has our
    object's name: nothing is written, whatever changes; after, the object is read first."""
    state = state_writing.ConfigurationStateWriter(
        None,  # type: ignore[arg-type]  # the recording writer below answers instead
        "metallb-system",
        "n1",
        conflict=None,
    )
    recorded = RecordingWriter()
    state.writer = recorded  # type: ignore[assignment]
    task = asyncio.ensure_future(state.run())
    try:
        state.stand_by(True)
        state.set_problems([PROBLEM])
        state.datapath = READY
        state.refresh_soon()
        await steps()
        assert recorded.synced == []

        state.stand_by(False)
        await asyncio.wait_for(recorded.wrote.wait(), 5)
        assert recorded.synced == [([PROBLEM], True, {datapath.CONDITION_TYPE: READY})]

        recorded.wrote.clear()
        state.stand_by(True)  # MetalLB back on this node: it writes the object from now on
        state.set_problems([])
        await steps()
        assert len(recorded.synced) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
