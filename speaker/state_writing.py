"""The ConfigurationState writer: keeps our `speaker-<node>` object saying what the latest pass's
configuration problems mean, with this node's own conditions beside them (split brain,
DataPathReady, Honoured), apart from the passes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from ironlb import backoff, configuration_state, datapath
from ironlb.problems import Problem
from ironlb_io import configuration_states, kube


class ConfigurationStateWriter:
    """Whoever changes `problems` or a condition sets `dirty`; `conflict` is None on a node
    that does no layer 2 (the condition is then left out)."""

    def __init__(
        self,
        client: kube.Client,
        namespace: str,
        node_name: str,
        *,
        conflict: configuration_state.Verdict | None,
    ) -> None:
        self.writer = configuration_states.Writer(
            client, namespace, configuration_state.speaker(node_name)
        )
        # The latest pass's problems (None before the first pass); `dirty`: changed since
        # written; `refresh`: read the object again first.
        self.problems: list[Problem] | None = None
        self.dirty = asyncio.Event()
        self.refresh = False
        self.conflict = conflict  # split brain (`speaker.conflict_watching`)
        self.datapath: configuration_state.Verdict | None = None  # our DataPathReady condition
        self.honoured: configuration_state.Verdict | None = None  # our Honoured condition
        # Standing by for another load balancer's speaker (`ironlb.taking_over`): its
        # `speaker-<node>` has our object's name, so nothing is written until it has gone.
        self.standing_by = False

    def stand_by(self, standing_by: bool) -> None:
        if standing_by != self.standing_by:
            self.standing_by = standing_by
            # Back from standing by: the other speaker wrote the object meanwhile; read it.
            self.refresh = not standing_by
            self.dirty.set()

    def set_problems(self, problems: list[Problem]) -> None:
        if problems != self.problems:
            self.problems = problems
            self.dirty.set()

    def refresh_soon(self) -> None:
        """One GET of our ConfigurationState: a deleted or edited one is put back."""
        self.refresh = True
        self.dirty.set()

    def conditions(self) -> Mapping[str, configuration_state.Verdict]:
        """Our conditions beside the configuration's (`configuration_states.Writer`'s extra)."""
        extra = {}
        if self.conflict is not None:
            extra[datapath.CONFLICT_CONDITION_TYPE] = self.conflict
        if self.datapath is not None:
            extra[datapath.CONDITION_TYPE] = self.datapath
        if self.honoured is not None:
            extra[configuration_state.HONOURED_CONDITION] = self.honoured
        return extra

    async def run(self) -> None:
        """A write happens only when what the object should say changes (or the object was
        found deleted or edited), and a failed one is retried with a backoff."""
        wait = backoff.Backoff()
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            if self.problems is None or self.standing_by:
                continue
            refresh, self.refresh = self.refresh, False
            if await self.writer.sync(self.problems, refresh=refresh, extra=self.conditions()):
                wait.reset()
            else:
                await asyncio.sleep(wait.next())
                self.dirty.set()
