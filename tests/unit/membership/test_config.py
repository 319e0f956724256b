"""Timings: validation, memberlist's formulas, and the expected-detection model."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.membership import config as cfg


def test_profiles_are_valid() -> None:
    for profile in cfg.PROFILES.values():
        assert cfg.validate(profile) == []


def test_bad_values_name_their_field() -> None:
    problems = cfg.validate(
        cfg.DEFAULT.replace(probe_interval=-1.0, gossip_nodes=0, max_datagram=100)
    )
    fields = {p.field for p in problems}
    assert fields == {"probe_interval", "gossip_nodes", "max_datagram"}
    assert cfg.validate(cfg.DEFAULT.replace(probe_timeout=math.nan))[0].field == "probe_timeout"


def test_indirect_round_must_fit_in_the_interval() -> None:
    problems = cfg.validate(cfg.DEFAULT.replace(probe_interval=0.1, probe_timeout=0.08))
    assert [p.field for p in problems] == ["probe_interval"]


def test_memberlist_lan_suspicion_bounds() -> None:
    # metallb-behaviour.md §4.7: 4 s minimum below 10 members, 6 x that as the maximum.
    assert cfg.suspicion_bounds(cfg.MEMBERLIST_LAN, 8) == (4.0, 24.0)
    low, _ = cfg.suspicion_bounds(cfg.MEMBERLIST_LAN, 100)
    assert math.isclose(low, 8.0)


def test_retransmit_limit_grows_logarithmically() -> None:
    limits = [cfg.retransmit_limit(cfg.DEFAULT, n) for n in (1, 9, 10, 99, 100, 999)]
    assert limits == [4, 4, 8, 8, 12, 12]


@settings(max_examples=200, deadline=None)
@given(
    low=st.floats(0.1, 10),
    spread=st.floats(1, 10),
    k=st.integers(1, 6),
)
def test_lifeguard_timeout_shrinks_from_max_to_min(low: float, spread: float, k: int) -> None:
    high = low * spread
    values = [cfg.lifeguard_timeout(low, high, k, c) for c in range(k + 3)]
    assert math.isclose(values[0], high)
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert math.isclose(values[k], low) and values[-1] == low


def test_expected_detection_beats_the_memberlist_baseline() -> None:
    for n in (3, 8, 32):
        ours = cfg.expected_detection(cfg.DEFAULT, n)
        baseline = cfg.expected_detection(cfg.MEMBERLIST_LAN, n)
        assert ours < baseline / 4
    assert cfg.expected_detection(cfg.DEFAULT, 1) == math.inf
