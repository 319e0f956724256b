"""The switch from MetalLB (as its chart installs it: FRR beside its speaker) to ironlb on a
live cluster, and back, done as docs/migration.md says, under client load (`bench.migrate`
with two Services besides the two under load): ironlb's speakers installed beside MetalLB's,
taking each node over as MetalLB's speaker Pod there goes (`--take-over-from`), and standing
down as it comes back; the BGPPeers with graceful restart, as the doc recommends.

What must hold both ways: every Service keeps its addresses; the ToR's ARP probe of the L2
address never goes unanswered (the node answering does not change: the same election, the same
MAC, and one speaker serves until the other does); the ToR never lacks a route to the BGP
address (graceful restart keeps the old speaker's routes, with this node as next hop, until
the new one's End-of-RIB); the new system serves; the status objects become the new system's.
What a client pays otherwise is measured, not asserted here (`python -m bench.migrate`).

Last of the tier, after test_versus_metallb (MetalLB's CRDs replace ours while it runs;
`bench.migrate` puts ours back and the configuration is cleared after).
"""

from __future__ import annotations

import argparse

from bench import migrate
from hack import lab as network_lab
from hack import metallb, objects


def test_metallb_to_ironlb_and_back_keeps_every_address_an_answer_and_a_route(
    lab: network_lab.Lab,
) -> None:
    args = argparse.Namespace(
        services=2, metallb_mode=metallb.DEFAULT_MODE, cut_over=False, graceful_restart=True
    )
    try:
        figures = migrate.measure(lab, args, print)
    finally:
        objects.clear_configuration(lab)
    for way in ("to_ironlb", "to_metallb"):
        assert figures[f"{way}_services"] == 4, figures
        assert figures[f"{way}_addresses_changed"] == 0, figures
        # The load ran throughout: it saw the switch (a failure-free one would be a measurement
        # of nothing if it made no connections).
        assert figures[f"{way}_connections"] > 0, figures
        assert figures[f"{way}_l2_gap_s"] == 0, figures
        assert figures[f"{way}_bgp_gap_s"] == 0, figures
        assert figures[f"{way}_serving_s"] is not None
        assert figures[f"{way}_status_s"] is not None
