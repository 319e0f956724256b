"""BGPPeer and BGPAdvertisement fields end to end, each witnessed on the ToR: ironlb deployed
in the lab, configured through the API, and what FRR received read back with vtysh and the
ToR's kernel FIB.

The module starts from an empty metallb.io configuration and deploys ironlb once; each test
applies the objects it needs and deletes them afterwards (`configured`), and undoes whatever it
changed on the ToR, also on failure.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hack import deploy, objects, witness
from hack import lab as network_lab

pytestmark = pytest.mark.e2e

NS = objects.METALLB_NAMESPACE
MY_ASN = 64512


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    # Earlier modules leave their configuration behind; overlapping pools or peers would get in
    # the way, so this module starts from none.
    objects.clear_configuration(lab)
    try:
        with deploy.deployed(lab) as d:
            yield d
    finally:
        objects.clear_configuration(lab)


@contextlib.contextmanager
def configured(lab: network_lab.Lab, *items: dict[str, Any]) -> Iterator[None]:
    """The metallb.io objects for the block, deleted afterwards (the last applied first)."""
    objects.apply(lab, *items)
    try:
        yield
    finally:
        for item in reversed(items):
            name = item["metadata"]["name"]
            lab.kubectl("delete", item["kind"].lower(), name, "-n", NS, "--ignore-not-found")


def tor_paths(lab: network_lab.Lab, prefix: str) -> set[tuple[str, str]]:
    """(the session's peer address, a global next hop) of every path the ToR's bgpd holds for
    `prefix`: which session carried the route, and where it points."""
    family = "ipv6" if ":" in prefix else "ipv4"
    shown = lab.vtysh(f"show bgp {family} unicast {prefix} json", check=False).stdout
    found: set[tuple[str, str]] = set()
    for path in json.loads(shown or "{}").get("paths", []):
        peer = str(path.get("peer", {}).get("peerId", "?"))
        for hop in path.get("nexthops", []):
            # An IPv6 path may carry a link-local next hop beside the global one.
            if hop.get("scope", "global") == "global":
                found.add((peer, str(hop.get("ip", "?"))))
    return found


def paths_include(
    lab: network_lab.Lab, prefix: str, wanted: set[tuple[str, str]]
) -> Callable[[], bool | objects.Missing]:
    """A check for `objects.wait_until`: the ToR holds at least the `wanted` paths."""

    def check() -> bool | objects.Missing:
        got = tor_paths(lab, prefix)
        return wanted <= got or objects.Missing(
            f"the ToR's paths (session, next hop) for {prefix}: {sorted(got)}"
        )

    return check


def honoured(lab: network_lab.Lab) -> dict[str, str]:
    """Each speaker's `Honoured` condition status, by ConfigurationState name."""
    states: dict[str, str] = {}
    for item in objects.get(lab, "configurationstates", "-n", NS).get("items", []):
        name = item["metadata"]["name"]
        for condition in (item.get("status") or {}).get("conditions") or []:
            if name.startswith("speaker-") and condition.get("type") == "Honoured":
                states[name] = str(condition.get("status"))
    return states


def test_dual_stack_peer_carries_the_other_family(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    """dualStackAddressFamily: over the IPv4 session go the IPv6 routes with the node's IPv6
    address as next hop, and over the IPv6 session the IPv4 routes with its IPv4 address.

    The ToR's peer group `nodes` (hack/frr/tor.conf) activates both unicast families for every
    node, IPv4 and IPv6 sessions alike, as MetalLB's FRR configuration does for a dual-stack
    peer: nothing to change on the ToR."""
    pool = "dual-stack-peers"
    peer = {"myASN": MY_ASN, "peerASN": network_lab.TOR_ASN, "holdTime": "3s"}
    with configured(
        lab,
        objects.metallb(
            "IPAddressPool",
            pool,
            {
                "addresses": [str(network_lab.BGP_POOL_V4), str(network_lab.BGP_POOL_V6)],
                "autoAssign": False,
            },
        ),
        objects.metallb(
            "BGPPeer",
            "dual-over-v4",
            {**peer, "peerAddress": str(network_lab.TOR_LAN_V4), "dualStackAddressFamily": True},
            version="v1beta2",
        ),
        objects.metallb(
            "BGPPeer",
            "dual-over-v6",
            {**peer, "peerAddress": str(network_lab.TOR_LAN_V6), "dualStackAddressFamily": True},
            version="v1beta2",
        ),
        objects.metallb("BGPAdvertisement", pool, {"ipAddressPools": [pool]}),
    ):
        objects.create_service(
            lab, app_namespace, "dual", dual=True, annotations={"metallb.io/address-pool": pool}
        )
        objects.set_backends(lab, app_namespace, "dual", [1])
        v4, v6 = sorted(objects.ingress(lab, app_namespace, "dual", 2), key=lambda a: ":" in a)
        nodes = range(1, lab.nodes + 1)
        node_v4 = {i: str(lab.node_v4(i)) for i in nodes}
        node_v6 = {i: str(lab.node_v6(i)) for i in nodes}

        # Each session carries both families, the other one with the node's own address.
        objects.wait_until(
            f"{v6}/128 over every node's IPv4 session, via the node's IPv6 address",
            paths_include(lab, f"{v6}/128", {(node_v4[i], node_v6[i]) for i in nodes}),
        )
        objects.wait_until(
            f"{v4}/32 over every node's IPv6 session, via the node's IPv4 address",
            paths_include(lab, f"{v4}/32", {(node_v6[i], node_v4[i]) for i in nodes}),
        )
        # No path points anywhere but at a node's address of the route's own family.
        assert {hop for _, hop in tor_paths(lab, f"{v6}/128")} == set(node_v6.values())
        assert {hop for _, hop in tor_paths(lab, f"{v4}/32")} == set(node_v4.values())
        # And the ToR forwards by them.
        for prefix, hops in ((f"{v6}/128", node_v6), (f"{v4}/32", node_v4)):
            objects.wait_equal(
                f"{prefix} in the ToR's FIB via every node",
                functools.partial(witness.fib, lab, prefix),
                set(hops.values()),
            )
        # Nothing is reported as not honoured: the field is, on every node.
        objects.wait_equal(
            "every speaker's Honoured condition",
            lambda: honoured(lab),
            {f"speaker-{name}": "True" for name in lab.node_names},
        )
