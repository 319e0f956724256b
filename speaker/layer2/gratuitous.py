"""When to send gratuitous ARP / unsolicited NA for addresses this node has just taken over.

Neighbours only update entries they already have, and Linux ignores an ARP update that arrives
within `locktime` (1 s) of the previous one, so a single announcement can be lost right after a
failover. As MetalLB's spam loop does, an address gained is announced at once and then every
1.1 s (just over the locktime) for 5 s: t = 0, 1.1, 2.2, 3.3, 4.4. Gaining it again while the
burst runs only extends the window, like MetalLB; losing it stops the burst at once.

`Refresh` is the optional periodic announcement of every owned address (MetalLB's
`--gratuitous-arp-interval`, off by default). A switch that ages its FDB entry for the owner's MAC
sooner than a router ages its ARP entry for the address floods, or drops, the router's frames
until something makes the owner speak (MetalLB #2910); announcing every `interval` seconds keeps
the entry fresh. The wait runs from an address's last gratuitous frame of either kind, and no
periodic round goes out while the address's takeover burst runs: a round just before a burst
round would put that burst round inside the neighbours' locktime, where it is ignored. Losing the
address ends its refresh at once: a periodic frame from a node that no longer owns the address
would take the traffic back from the new owner.

Pure: the caller passes the time and sends the frames for the addresses `due` returns.
"""

from __future__ import annotations

from collections.abc import Collection
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


@dataclass
class Refresh:
    """When each owned address is next announced periodically; `interval` 0 turns it off.

    Every due time is set to `now + interval`, and `now` never goes back (a monotonic clock), so
    keeping each rescheduled address at the end keeps the addresses in due order: a round over
    10,000 addresses in batches looks at each once, and `next_due` is the first one's time.
    """

    interval: float = 0.0
    _next: dict[packets.IPAddress, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.interval < 0:
            raise ValueError(f"refresh interval must be 0 (off) or positive, not {self.interval}")

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def own(self, address: packets.IPAddress, now: float) -> None:
        """Start refreshing `address` (nothing when off or already refreshed). Its takeover
        burst announces it now; the first periodic round comes a whole interval after the
        burst's last round (`sent`)."""
        if self.enabled and address not in self._next:
            self._next[address] = now + self.interval

    def lose(self, address: packets.IPAddress) -> None:
        self._next.pop(address, None)

    def sent(self, address: packets.IPAddress, now: float) -> None:
        """A gratuitous frame for `address` went out at `now` (a burst round): wait anew."""
        if address in self._next:
            self._wait(address, now)

    def due(
        self,
        now: float,
        limit: int | None = None,
        busy: Collection[packets.IPAddress] = frozenset(),
    ) -> list[packets.IPAddress]:
        """Addresses to announce now (at most `limit`; the rest stay due), each then next due
        `interval` from now. An address in `busy` (its takeover burst still runs) is not
        announced now: it waits a whole interval again."""
        ready: list[packets.IPAddress] = []
        for address, at in list(self._next.items()):
            if at > now + SLACK_S or (limit is not None and len(ready) >= limit):
                break  # in due order: the rest are later
            self._wait(address, now)
            if address not in busy:
                ready.append(address)
        return ready

    def next_due(self) -> float | None:
        return next(iter(self._next.values()), None)

    def pending(self) -> frozenset[packets.IPAddress]:
        return frozenset(self._next)

    def _wait(self, address: packets.IPAddress, now: float) -> None:
        del self._next[address]
        self._next[address] = now + self.interval
