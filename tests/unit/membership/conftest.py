"""Membership tests run on a simulated clock and network (sim.py): no sockets, no sleeps."""

from __future__ import annotations

import pytest

from speaker.membership import messages as m

from . import sim


@pytest.fixture
def gone() -> set[m.State]:
    return {m.State.DEAD, m.State.LEFT}


@pytest.fixture
def network() -> sim.Network:
    return sim.Network(seed=7)
