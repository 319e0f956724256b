"""The side-by-side bench's pure parts: how two systems' figures become one JSON line, and which
conformance cases a run takes (their comparison is `hack.conformance.compare_all`'s)."""

from __future__ import annotations

import pytest

from bench import versus
from hack import conformance_cases


def test_every_figure_of_either_side_gets_both_values_and_their_ratio() -> None:
    line = versus.side_by_side(
        {
            "ironlb": {"l2_kill_median_s": 0.5, "speaker_rss_mb": 80.0},
            "metallb": {"l2_kill_median_s": 5.0, "bgp_routes_all_s": 2.0},
        }
    )
    assert line == {
        "bgp_routes_all_s_ironlb": None,
        "bgp_routes_all_s_metallb": 2.0,
        "bgp_routes_all_s_ratio": None,
        "l2_kill_median_s_ironlb": 0.5,
        "l2_kill_median_s_metallb": 5.0,
        "l2_kill_median_s_ratio": 0.1,
        "speaker_rss_mb_ironlb": 80.0,
        "speaker_rss_mb_metallb": None,
        "speaker_rss_mb_ratio": None,
    }


@pytest.mark.parametrize(
    "ironlb, metallb, expected",
    [(1.0, 4.0, 0.25), (3.0, 1.0, 3.0), (0.0, 2.0, 0.0), (1.0, 0.0, None), (None, 1.0, None)],
)
def test_ratio_is_ironlb_over_metallb(
    ironlb: float | None, metallb: float | None, expected: float | None
) -> None:
    assert versus.ratio(ironlb, metallb) == expected


def test_l2_figures_give_median_and_worst_per_fault_and_none_for_no_sample() -> None:
    figures = versus.l2_figures({"kill": [0.3, 0.9, 0.5], "linkcut": [1.2]})
    assert figures["l2_kill_median_s"] == 0.5
    assert figures["l2_kill_max_s"] == 0.9
    assert figures["l2_linkcut_median_s"] == 1.2
    assert figures["l2_graceful_median_s"] is None
    assert figures["l2_graceful_max_s"] is None


def test_cases_by_default_quick_all_or_named() -> None:
    assert versus.pick_cases("", quick=True) == conformance_cases.QUICK
    assert versus.pick_cases("quick", quick=False) == conformance_cases.QUICK
    assert versus.pick_cases("", quick=False) == conformance_cases.CASES
    assert versus.pick_cases("all", quick=True) == conformance_cases.CASES
    named = versus.pick_cases("request-ip,l2-announce", quick=True)
    assert [c.name for c in named] == ["request-ip", "l2-announce"]
    with pytest.raises(versus.VersusError, match="no-such-case"):
        versus.pick_cases("no-such-case", quick=False)


def test_each_load_scenario_reports_failed_and_made_requests() -> None:
    figures = versus.cost_figures(
        {
            "rolling_restart": {"failed": 3, "total": 400},
            "kube_proxy_kill": {"failed": 0, "total": 9},
        }
    )
    assert figures == {
        "rolling_restart_failed_requests": 3,
        "rolling_restart_requests": 400,
        "kube_proxy_kill_failed_requests": 0,
        "kube_proxy_kill_requests": 9,
    }
