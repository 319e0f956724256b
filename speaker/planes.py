"""What the agent needs from the data planes and from membership: small interfaces, so that the
agent can be driven in tests with fakes (`speaker.appliers` builds the real planes,
`speaker.joining` the real membership)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from ironlb import addresses, model
from ironlb.problems import Problem
from speaker import desired


class Conflict(Protocol):
    """Another machine (`mac`) claiming `ip`, last seen on `interface` at `last_seen` (Unix
    time): what the layer 2 plane reports (`speaker.layer2.conflicts.Conflict`)."""

    @property
    def ip(self) -> addresses.IPAddress: ...

    @property
    def mac(self) -> str: ...

    @property
    def interface(self) -> str: ...

    @property
    def last_seen(self) -> float: ...


class Layer2(Protocol):
    """What the agent needs from the ARP/NDP data plane."""

    def set_owned(self, owned: Mapping[addresses.IPAddress, tuple[str, ...]]) -> None: ...

    def announce_again(self, owned: Collection[addresses.IPAddress]) -> None:
        """A gratuitous burst for these owned addresses, as when they were gained."""
        ...

    def interfaces(self) -> frozenset[str] | None:
        """The interfaces answering ARP/NDP now (None before the first scan)."""
        ...

    def conflicts(self) -> Mapping[addresses.IPAddress, Conflict]:
        """The split brains seen lately: a snapshot, readable from any thread."""
        ...

    async def close(self) -> None: ...


class BGP(Protocol):
    """What the agent needs from the BGP data plane: `announce` hands the routes over first,
    `apply` (with the same plan) the sessions and returns Service key -> peers reached;
    `problems` are what the latest `apply` could not honour on this node."""

    @property
    def problems(self) -> Sequence[Problem]: ...

    def announce(
        self,
        config: model.Config,
        node: desired.Node | None,
        plan: desired.BGPPlan,
        passwords: Mapping[str, str],
        complete: bool = True,
    ) -> None: ...

    async def handed_over(self, timeout: float) -> None: ...

    async def apply(
        self,
        config: model.Config,
        node: desired.Node | None,
        plan: desired.BGPPlan,
        passwords: Mapping[str, str],
        complete: bool = True,
        handing_over: bool = False,
    ) -> Mapping[str, tuple[model.PeerName, ...]]: ...

    async def wait_synced(self, timeout: float) -> bool: ...

    async def close(self, restarting: bool = False) -> None: ...


class Membership(Protocol):
    changed: asyncio.Event

    def members(self) -> frozenset[str] | None: ...  # None: Node Ready decides

    def metadata(self) -> Mapping[str, bytes]: ...  # what each alive member gossips

    def returns(self) -> int: ...  # verdicts of our own death we refuted, so far

    def set_metadata(self, data: bytes) -> None: ...

    async def leave(self) -> None: ...
