"""The agent's reading of members coming back, for `election.to_announce_again`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from speaker import agent


class CountingMembership:
    """Membership whose count of refuted deaths of our own the test sets."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        self.refuted = 0

    def members(self) -> frozenset[str] | None:
        return None

    def metadata(self) -> Mapping[str, bytes]:
        return {}

    def returns(self) -> int:
        return self.refuted

    def set_metadata(self, data: bytes) -> None:
        pass

    async def leave(self) -> None:
        pass


def test_members_back_after_being_seen_count_and_new_ones_do_not() -> None:
    membership = CountingMembership()
    a = agent.Agent(agent.Options(node_name="n1"), None, membership=membership)  # type: ignore[arg-type]
    everyone = frozenset({"n1", "n2", "n3"})
    assert a._returns(everyone) == (frozenset(), False)  # the first pass compares with nothing
    assert a._returns(frozenset({"n1", "n3"})) == (frozenset(), False)  # n2 gone
    assert a._returns(everyone) == (frozenset({"n2"}), False)  # n2 back
    assert a._returns(everyone | {"n4"}) == (frozenset(), False)  # n4 is new, not back
    membership.refuted = 1
    assert a._returns(everyone | {"n4"}) == (frozenset(), True)  # we refuted our death
    assert a._returns(everyone | {"n4"}) == (frozenset(), False)  # once
