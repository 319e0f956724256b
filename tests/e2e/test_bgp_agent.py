"""BGP mode end to end through the API: BGPPeer and BGPAdvertisement objects, the controller,
three speakers, and the ToR's FRR. Witnesses: the ToR's kernel FIB and vtysh JSON."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import pytest

from hack import deploy, objects, witness
from hack import lab as network_lab

pytestmark = pytest.mark.e2e

NS = "metallb-system"
MY_ASN = 64512
FROM_BGP_POOL = {"metallb.io/address-pool": "lab-bgp"}


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    objects.apply(
        lab,
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": "lab-bgp", "namespace": NS},
            "spec": {
                "addresses": [str(network_lab.BGP_POOL_V4), str(network_lab.BGP_POOL_V6)],
                "autoAssign": False,
            },
        },
        objects.tor_peer("tor", my_asn=MY_ASN, hold_time="3s"),
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "Community",
            "metadata": {"name": "lab", "namespace": NS},
            "spec": {"communities": [{"name": "no-export-lab", "value": "65535:65281"}]},
        },
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "BGPAdvertisement",
            "metadata": {"name": "lab-bgp", "namespace": NS},
            "spec": {
                "ipAddressPools": ["lab-bgp"],
                "communities": ["no-export-lab", "64512:100", "large:64512:1:2"],
            },
        },
    )
    with deploy.deployed(lab) as d:
        yield d
    lab.kubectl("delete", "bgpadvertisement", "lab-bgp", "-n", NS)
    lab.kubectl("delete", "bgppeer", "tor", "-n", NS)


def nexthops_of(lab: network_lab.Lab, nodes: list[int], v6: bool = False) -> set[str]:
    return {str(lab.node_v6(i) if v6 else lab.node_v4(i)) for i in nodes}


def test_cluster_policy_gives_ecmp_over_every_node(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "web", dual=True, annotations=FROM_BGP_POOL)
    objects.set_backends(lab, app_namespace, "web", [1])
    v4, v6 = sorted(objects.ingress(lab, app_namespace, "web", 2), key=lambda a: ":" in a)
    everyone = [1, 2, 3]
    objects.wait_equal(
        "ECMP over all three nodes",
        lambda: witness.fib(lab, f"{v4}/32"),
        nexthops_of(lab, everyone),
    )
    path = json.loads(lab.vtysh(f"show bgp ipv4 unicast {v4}/32 json").stdout)["paths"][0]
    # The alias resolved to 65535:65281, which FRR prints by its well-known name.
    assert path["community"]["string"].split() == ["64512:100", "no-export"]
    assert path["largeCommunity"]["string"] == "64512:1:2"
    objects.wait_equal(
        "a ServiceBGPStatus from every node",
        lambda: objects.status_nodes(lab, "servicebgpstatuses", app_namespace),
        set(lab.node_names),
    )
    statuses = json.loads(lab.kubectl("get", "servicebgpstatuses", "-n", NS, "-o", "json"))
    mine = [s for s in statuses["items"] if s["status"]["serviceNamespace"] == app_namespace]
    assert all(s["status"]["peers"] == ["tor"] for s in mine)
    # The IPv4 session carries no IPv6 routes unless it is dual-stack (MetalLB's rule).
    assert witness.fib(lab, f"{v6}/128") == set()


def test_local_policy_follows_the_endpoints(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "local", local=True, annotations=FROM_BGP_POOL)
    objects.set_backends(lab, app_namespace, "local", [2])
    (vip,) = objects.ingress(lab, app_namespace, "local", 1)
    prefix = f"{vip}/32"
    objects.wait_equal("node2 alone", lambda: witness.fib(lab, prefix), nexthops_of(lab, [2]))
    objects.set_backends(lab, app_namespace, "local", [1, 3])
    objects.wait_equal("nodes 1 and 3", lambda: witness.fib(lab, prefix), nexthops_of(lab, [1, 3]))
    objects.set_backends(lab, app_namespace, "local", [])
    objects.wait_equal("the route to go", lambda: witness.fib(lab, prefix), set())


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_a_lost_speaker_leaves_the_ecmp_set(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str, how: str
) -> None:
    objects.create_service(lab, app_namespace, "web", annotations=FROM_BGP_POOL)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    (vip,) = objects.ingress(lab, app_namespace, "web", 1)
    prefix = f"{vip}/32"
    objects.wait_equal(
        "three nexthops", lambda: witness.fib(lab, prefix), nexthops_of(lab, [1, 2, 3])
    )
    try:
        deployment.signal_speaker(3, signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
        objects.wait_equal(
            "node3 to leave", lambda: witness.fib(lab, prefix), nexthops_of(lab, [1, 2])
        )
    finally:
        deployment.stop_speaker(3, signal.SIGKILL)
        deployment.start_speaker(3)
    objects.wait_equal("node3 back", lambda: witness.fib(lab, prefix), nexthops_of(lab, [1, 2, 3]))
