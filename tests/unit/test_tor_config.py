"""The lab ToR's frr.conf (`hack.lab.tor_config` over hack/frr/tor.conf): every lab node's two
addresses are configured neighbours in the peer group `nodes`, inside `router bgp`, and nothing
is left unfilled. A dynamic neighbour can be hidden after a connection collision
(FRRouting/frr#9929); configured ones cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack import lab as network_lab


def rendered(nodes: int) -> list[str]:
    text = network_lab.tor_config(
        network_lab.FRR_TEMPLATE.read_text(), Path("/run/x/frr.log"), nodes
    )
    return text.splitlines()


def router_bgp(lines: list[str]) -> list[str]:
    """The lines of the `router bgp` block, stripped."""
    start = next(i for i, line in enumerate(lines) if line.startswith("router bgp "))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "!")
    return [line.strip() for line in lines[start:end]]


@pytest.mark.parametrize("nodes", [1, 3, network_lab.MAX_NODES])
def test_each_node_address_is_a_member_of_the_peer_group_nodes(nodes: int) -> None:
    block = router_bgp(rendered(nodes))
    members = {
        line.split()[1]
        for line in block
        if line.startswith("neighbor ") and line.endswith(" peer-group nodes")
    }
    want = {str(network_lab.node_v4(i)) for i in range(1, nodes + 1)}
    want |= {str(network_lab.node_v6(i)) for i in range(1, nodes + 1)}
    assert members == want
    # The group is defined before its members, and the ToR never opens a session itself.
    group = block.index("neighbor nodes peer-group")
    first_member = min(i for i, line in enumerate(block) if line.endswith(" peer-group nodes"))
    assert group < first_member
    assert "neighbor nodes passive" in block


def test_the_listen_ranges_stay_and_every_placeholder_is_filled() -> None:
    lines = rendered(2)
    block = router_bgp(lines)
    assert "bgp listen range 10.250.0.0/24 peer-group nodes" in block
    assert "bgp listen range fd00:250::/64 peer-group nodes" in block
    assert "log file /run/x/frr.log informational" in lines
    assert not [line for line in lines if "$" in line]
