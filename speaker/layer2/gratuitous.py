"""When to send gratuitous ARP / unsolicited NA for addresses this node has just taken over.

Neighbours only update entries they already have, and Linux ignores an ARP update that arrives
within `locktime` (1 s) of the previous one, so a single announcement can be lost right after a
failover. As MetalLB's spam loop does, an address gained is announced at once and then every
1.1 s (just over the locktime) for 5 s: t = 0, 1.1, 2.2, 3.3, 4.4. Gaining it again while the
burst runs only extends the window, like MetalLB; losing it stops the burst at once.

Pure: the caller passes the time and sends the frames for the addresses `due` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from speaker.layer2 import packets

INTERVAL_S: Final = 1.1
WINDOW_S: Final = 5.0
# A timer may fire a hair early (asyncio runs handles due within its clock resolution) and float
# sums drift (2.2 + 1.1 > 3.3); a round this close to its time counts as due.
SLACK_S: Final = 0.001


@dataclass
class Schedule:
    interval: float = INTERVAL_S
    window: float = WINDOW_S
    _next: dict[packets.IPAddress, float] = field(default_factory=dict)
    _until: dict[packets.IPAddress, float] = field(default_factory=dict)

    def gain(self, address: packets.IPAddress, now: float) -> None:
        if address not in self._next:
            self._next[address] = now
        self._until[address] = now + self.window

    def lose(self, address: packets.IPAddress) -> None:
        self._next.pop(address, None)
        self._until.pop(address, None)

    def due(self, now: float, limit: int | None = None) -> list[packets.IPAddress]:
        """Addresses to announce now (at most `limit`; the rest stay due), each then next due
        `interval` from now."""
        ready: list[packets.IPAddress] = []
        for address, at in list(self._next.items()):
            if limit is not None and len(ready) >= limit:
                break
            if at > now + SLACK_S:
                continue
            until = self._until[address]
            if now > until + SLACK_S:
                # Nobody woke us within the window: announcing this late would be noise.
                self.lose(address)
                continue
            ready.append(address)
            following = now + self.interval
            if following > until + SLACK_S:
                self.lose(address)
            else:
                self._next[address] = following
        return ready

    def next_due(self) -> float | None:
        return min(self._next.values(), default=None)

    def pending(self) -> frozenset[packets.IPAddress]:
        return frozenset(self._next)
