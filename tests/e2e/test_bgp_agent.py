"""BGP mode end to end through the API: BGPPeer and BGPAdvertisement objects, the controller,
three speakers, and the ToR's FRR. Witnesses: the ToR's kernel FIB and vtysh JSON."""

from __future__ import annotations

import hashlib
import json
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from hack import deploy
from hack import lab as network_lab

pytestmark = pytest.mark.e2e

NS = "metallb-system"
MY_ASN = 64512


def apply(lab: network_lab.Lab, *objects: dict[str, Any]) -> None:
    lab.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def fib(lab: network_lab.Lab, prefix: str) -> set[str]:
    """Nexthop gateways of `prefix` in the ToR's kernel FIB."""
    family = "-6" if ":" in prefix else "-4"
    out = lab.exec("tor", "ip", "-j", family, "route", "show", prefix).stdout
    gateways: set[str] = set()
    for route in json.loads(out or "[]"):
        if "gateway" in route:
            gateways.add(route["gateway"])
        for hop in route.get("nexthops", []):
            gateways.add(hop["gateway"])
    return gateways


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    apply(
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
        {
            "apiVersion": "metallb.io/v1beta2",
            "kind": "BGPPeer",
            "metadata": {"name": "tor", "namespace": NS},
            "spec": {
                "myASN": MY_ASN,
                "peerASN": network_lab.TOR_ASN,
                "peerAddress": str(network_lab.TOR_LAN_V4),
                "holdTime": "3s",
            },
        },
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


@pytest.fixture
def app_namespace(lab: network_lab.Lab, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:30].strip("-")
    name = f"bgp-{slug}-{hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]}"
    lab.kubectl("create", "namespace", name)
    yield name
    lab.kubectl("delete", "service", "--all", "-n", name, "--wait=false")


def create_service(
    lab: network_lab.Lab, namespace: str, name: str, *, local: bool = False, dual: bool = False
) -> None:
    spec: dict[str, Any] = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
    if dual:
        spec["ipFamilyPolicy"] = "RequireDualStack"
    if local:
        spec["externalTrafficPolicy"] = "Local"
    apply(
        lab,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": {"metallb.io/address-pool": "lab-bgp"},
            },
            "spec": spec,
        },
    )


def set_endpoints(lab: network_lab.Lab, namespace: str, service: str, nodes: list[int]) -> None:
    apply(
        lab,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-v4",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [str(lab.node_v4(i))], "nodeName": lab.node_names[i - 1]}
                for i in nodes
            ],
        },
    )


def ingress(lab: network_lab.Lab, namespace: str, name: str, count: int) -> list[str]:
    def read() -> list[str] | None:
        svc = json.loads(lab.kubectl("get", "service", name, "-n", namespace, "-o", "json"))
        entries = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        ips = [e["ip"] for e in entries]
        return ips if len(ips) == count else None

    found: list[str] = deploy.wait_until(f"{namespace}/{name} to get an address", read)
    return found


def nexthops_of(lab: network_lab.Lab, nodes: list[int], v6: bool = False) -> set[str]:
    return {str(lab.node_v6(i) if v6 else lab.node_v4(i)) for i in nodes}


def test_cluster_policy_gives_ecmp_over_every_node(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    create_service(lab, app_namespace, "web", dual=True)
    set_endpoints(lab, app_namespace, "web", [1])
    v4, v6 = sorted(ingress(lab, app_namespace, "web", 2), key=lambda a: ":" in a)
    everyone = [1, 2, 3]
    deploy.wait_until(
        "ECMP over all three nodes", lambda: fib(lab, f"{v4}/32") == nexthops_of(lab, everyone)
    )
    path = json.loads(lab.vtysh(f"show bgp ipv4 unicast {v4}/32 json").stdout)["paths"][0]
    # The alias resolved to 65535:65281, which FRR prints by its well-known name.
    assert path["community"]["string"].split() == ["64512:100", "no-export"]
    assert path["largeCommunity"]["string"] == "64512:1:2"
    statuses = json.loads(lab.kubectl("get", "servicebgpstatuses", "-n", NS, "-o", "json"))
    mine = [s for s in statuses["items"] if s["status"]["serviceNamespace"] == app_namespace]
    assert {s["status"]["node"] for s in mine} == set(lab.node_names)
    assert all(s["status"]["peers"] == ["tor"] for s in mine)
    # The IPv4 session carries no IPv6 routes unless it is dual-stack (MetalLB's rule).
    assert fib(lab, f"{v6}/128") == set()


def test_local_policy_follows_the_endpoints(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    create_service(lab, app_namespace, "local", local=True)
    set_endpoints(lab, app_namespace, "local", [2])
    (vip,) = ingress(lab, app_namespace, "local", 1)
    prefix = f"{vip}/32"
    deploy.wait_until("node2 alone", lambda: fib(lab, prefix) == nexthops_of(lab, [2]))
    set_endpoints(lab, app_namespace, "local", [1, 3])
    deploy.wait_until("nodes 1 and 3", lambda: fib(lab, prefix) == nexthops_of(lab, [1, 3]))
    set_endpoints(lab, app_namespace, "local", [])
    deploy.wait_until("the route to go", lambda: fib(lab, prefix) == set())


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_a_lost_speaker_leaves_the_ecmp_set(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str, how: str
) -> None:
    create_service(lab, app_namespace, "web")
    set_endpoints(lab, app_namespace, "web", [1, 2, 3])
    (vip,) = ingress(lab, app_namespace, "web", 1)
    prefix = f"{vip}/32"
    deploy.wait_until("three nexthops", lambda: fib(lab, prefix) == nexthops_of(lab, [1, 2, 3]))
    try:
        deployment.signal_speaker(3, signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
        deploy.wait_until("node3 to leave", lambda: fib(lab, prefix) == nexthops_of(lab, [1, 2]))
    finally:
        deployment.stop_speaker(3, signal.SIGKILL)
        deployment.start_speaker(3)
    deploy.wait_until("node3 back", lambda: fib(lab, prefix) == nexthops_of(lab, [1, 2, 3]))
