"""The split-brain watcher: another machine answering for an address we announce is reported
(an Event on each Service holding it, and our condition on `speaker-<node>`) as soon as the
layer 2 plane saw it (the plane counts the metric itself)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ironlb import configuration_state
from speaker import explaining, planes
from speaker.accounting import SERVICE_EVENTS_PER_PASS
from speaker.event_posting import EventPoster
from speaker.state_writing import ConfigurationStateWriter

log = logging.getLogger(__name__)

CONFLICT_POLL_S = 0.2  # a rogue answer for an owned address is reported within a second
NO_CONFLICT = configuration_state.Verdict("False", "NoConflict", "")


class ConflictWatcher:
    """`seen` is what the latest pass decided: the Services holding a claimed address."""

    def __init__(
        self,
        layer2: planes.Layer2,
        node_name: str,
        poster: EventPoster,
        state: ConfigurationStateWriter,
        seen: Callable[[], explaining.Seen | None],
    ) -> None:
        self.layer2 = layer2
        self.node_name = node_name
        self.poster = poster
        self.state = state
        self.seen = seen
        self._reported: frozenset[tuple[str, str]] = frozenset()  # (address, foreign MAC)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CONFLICT_POLL_S)
            found = self.layer2.conflicts()
            now = frozenset((str(c.ip), c.mac) for c in found.values())
            if now == self._reported:
                continue
            for conflict in found.values():
                if (str(conflict.ip), conflict.mac) not in self._reported:
                    self._report(conflict)
            self._reported = now
            if now:
                text = "; ".join(
                    f"{c.ip} claimed by {c.mac} on {c.interface}" for c in found.values()
                )
                self.state.conflict = configuration_state.Verdict("True", "ForeignClaim", text)
            else:
                self.state.conflict = NO_CONFLICT
            self.state.dirty.set()

    def _report(self, conflict: planes.Conflict) -> None:
        log.warning(
            "another machine claims an announced address",
            extra={"event": "addressConflict", "ip": str(conflict.ip), "mac": conflict.mac},
        )
        seen = self.seen()
        holders = (
            [] if seen is None else [s for s in seen.services.values() if conflict.ip in s.ips]
        )
        message = (
            f"{conflict.ip} is also claimed by {conflict.mac} (seen on {conflict.interface} of "
            f'node "{self.node_name}", which announces it): two machines answer for it'
        )
        for service in holders[:SERVICE_EVENTS_PER_PASS]:
            self.poster.post_service_event(service.key, "addressConflict", message, warning=True)

    def described(self) -> list[dict[str, Any]]:
        """The current conflicts as `/explain` shows them (called from the HTTP thread)."""
        now = time.time()
        return [
            {
                "ip": str(c.ip),
                "mac": c.mac,
                "interface": c.interface,
                "last_seen_s_ago": round(max(0.0, now - c.last_seen), 3),
            }
            for c in self.layer2.conflicts().values()
        ]
