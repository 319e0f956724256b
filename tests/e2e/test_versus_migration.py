"""The switch from MetalLB (as its chart installs it: FRR beside its speaker) to ironlb on a
live cluster, and back, done as docs/migration.md says, under client load (`bench.migrate`
with two Services besides the two under load). What must hold both ways: every Service keeps
its addresses, the new system serves them (the ToR sees every node announce the BGP addresses
and one node answer for the L2 one), and the status objects become the new system's. What a
client pays is measured, not asserted here (`python -m bench.migrate`).

Last of the tier, after test_versus_metallb (MetalLB's CRDs replace ours while it runs;
`bench.migrate` puts ours back and the configuration is cleared after).
"""

from __future__ import annotations

import argparse

from bench import migrate
from hack import lab as network_lab
from hack import metallb, objects


def test_services_keep_their_addresses_from_metallb_to_ironlb_and_back(
    lab: network_lab.Lab,
) -> None:
    args = argparse.Namespace(services=2, metallb_mode=metallb.DEFAULT_MODE)
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
        assert figures[f"{way}_serving_s"] is not None
        assert figures[f"{way}_status_s"] is not None
