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
import time
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
        *(
            objects.tor_peer(
                name,
                my_asn=MY_ASN,
                peer_address=address,
                hold_time="3s",
                dualStackAddressFamily=True,
            )
            for name, address in (
                ("dual-over-v4", network_lab.TOR_LAN_V4),
                ("dual-over-v6", network_lab.TOR_LAN_V6),
            )
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


# --- localASN -------------------------------------------------------------------------------------

TOR_V4 = str(network_lab.TOR_LAN_V4)
LOCAL_ASN = 65410


def as_paths(lab: network_lab.Lab, prefix: str) -> dict[str, str]:
    """The AS_PATH of every path the ToR's bgpd holds for `prefix`, by the session's peer."""
    family = "ipv6" if ":" in prefix else "ipv4"
    shown = lab.vtysh(f"show bgp {family} unicast {prefix} json", check=False).stdout
    return {
        str(path.get("peer", {}).get("peerId", "?")): str(path.get("aspath", {}).get("string"))
        for path in json.loads(shown or "{}").get("paths", [])
    }


def tor_neighbor_state(lab: network_lab.Lab, address: str) -> dict[str, Any]:
    """The ToR's `show bgp neighbors ADDRESS json` entry; empty when it has no such neighbor."""
    shown = lab.vtysh(f"show bgp neighbors {address} json", check=False).stdout
    return dict(json.loads(shown or "{}").get(address, {}))


@contextlib.contextmanager
def tor_neighbor(lab: network_lab.Lab, address: str, remote_as: int) -> Iterator[None]:
    """A neighbor of the ToR's own for `address`, expecting `remote_as`, put back into the peer
    group `nodes` afterwards (also on failure). The peer group takes any AS but the ToR's, so
    only a neighbor configured for one AS refuses an OPEN carrying another (Bad Peer AS). A
    session an earlier test left goes first, so that this test's speaker makes the one seen."""

    def gone() -> bool | objects.Missing:
        state = tor_neighbor_state(lab, address).get("bgpState", "absent")
        return state in ("absent", "Idle", "Active", "Connect") or objects.Missing(
            f"the ToR still has a session with {address}: {state}"
        )

    objects.wait_until(f"the ToR to hold no session with {address}", gone)
    router = f"router bgp {network_lab.TOR_ASN}"
    lab.vtysh(
        "configure terminal",
        router,
        *network_lab.leave_tor_group(address),
        f"neighbor {address} remote-as {remote_as}",
        f"neighbor {address} timers 1 3",
        f"neighbor {address} timers connect 1",
        "address-family ipv4 unicast",
        f"neighbor {address} activate",
    )
    try:
        yield
    finally:
        undone = lab.vtysh(
            "configure terminal", router, *network_lab.tor_group_member(address), check=False
        )
    assert undone.returncode == 0, f"could not restore the ToR: {undone.stdout}{undone.stderr}"


def test_local_asn_is_the_remote_as_the_tor_sees(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    """localASN: node1's session presents 65410 instead of myASN, as MetalLB's FRR `local-as
    65410 no-prepend replace-as` does. A ToR neighbor configured for 65410 brings it up and
    reports 65410 as the remote AS, and the route's AS_PATH is 65410 alone (myASN nowhere).
    Without localASN the OPEN carries myASN, which that neighbor refuses."""
    node = str(lab.node_v4(1))
    pool = "local-asn"
    only_node1 = [{"matchLabels": {"kubernetes.io/hostname": lab.node_names[0]}}]

    def peer(local_asn: int | None) -> dict[str, Any]:
        extra: dict[str, Any] = {} if local_asn is None else {"localASN": local_asn}
        return objects.tor_peer(
            "tor-local-as",
            my_asn=MY_ASN,
            peer_address=TOR_V4,
            hold_time="3s",
            nodeSelectors=only_node1,
            **extra,
        )

    with (
        tor_neighbor(lab, node, LOCAL_ASN),
        configured(
            lab,
            objects.metallb(
                "IPAddressPool",
                pool,
                {"addresses": [str(network_lab.BGP_POOL_V4)], "autoAssign": False},
            ),
            peer(LOCAL_ASN),
            objects.metallb("BGPAdvertisement", pool, {"ipAddressPools": [pool]}),
        ),
    ):
        objects.create_service(
            lab, app_namespace, "local-as", annotations={"metallb.io/address-pool": pool}
        )
        objects.set_backends(lab, app_namespace, "local-as", [1])
        (vip,) = objects.ingress(lab, app_namespace, "local-as", 1)
        prefix = f"{vip}/32"

        def established() -> dict[str, Any] | objects.Missing:
            state = tor_neighbor_state(lab, node)
            return (
                state
                if state.get("bgpState") == "Established"
                else objects.Missing(f"the ToR's neighbor {node}: {state.get('bgpState')}")
            )

        state = objects.wait_until(f"the ToR's session with {node} established", established)
        assert (state.get("remoteAs"), state.get("localAs")) == (LOCAL_ASN, network_lab.TOR_ASN)
        objects.wait_equal(
            f"{prefix} from node1 with AS_PATH {LOCAL_ASN}",
            lambda: as_paths(lab, prefix),
            {node: str(LOCAL_ASN)},
        )
        objects.wait_equal(
            f"{prefix} in the ToR's FIB via node1",
            functools.partial(witness.fib, lab, prefix),
            {node},
        )
        objects.wait_equal(
            "every speaker's Honoured condition",
            lambda: honoured(lab),
            {f"speaker-{name}": "True" for name in lab.node_names},
        )

        # Without localASN (kubectl apply drops it) the OPEN carries myASN: refused.
        objects.apply(lab, peer(None))
        objects.wait_until(
            f"{prefix} to leave the ToR's FIB",
            lambda: not witness.fib(lab, prefix) or objects.Missing("still routed"),
        )
        # ExaBGP retries every few seconds and the ToR connects every second: long enough
        # for several OPENs, each refused.
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            state = tor_neighbor_state(lab, node)
            assert state.get("bgpState") != "Established", state
            time.sleep(0.5)
