"""externalTrafficPolicy on the lab's real data plane: kube-proxy in every node, Pods made Ready
by a real probe, EndpointSlices from kube-controller-manager; ironlb's controller and speakers on
top. Witnesses: the client's own connections (what the backend saw), the ToR's probes of each
node's healthCheckNodePort, arping from the ToR and the ToR's kernel FIB. No test writes a slice.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hack import deploy, objects, witness
from hack import lab as network_lab
from speaker import election

pytestmark = pytest.mark.e2e

L2_POOL = "policy-l2"
BGP_POOL = "policy-bgp"
L2_RANGES = ["10.250.0.130-10.250.0.140", "fd00:250::130-fd00:250::140"]
BGP_RANGES = ["10.252.0.64/28", "fd00:252::40/124"]
FROM_BGP_POOL = {"metallb.io/address-pool": BGP_POOL}


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    # Earlier modules leave their configuration behind; overlapping pools would make ours
    # invalid, so this module starts from an empty configuration.
    objects.clear_configuration(lab)
    objects.apply(
        lab,
        objects.metallb("IPAddressPool", L2_POOL, {"addresses": L2_RANGES}),
        objects.metallb("L2Advertisement", L2_POOL, {"ipAddressPools": [L2_POOL]}),
        objects.metallb("IPAddressPool", BGP_POOL, {"addresses": BGP_RANGES, "autoAssign": False}),
        objects.tor_peer("policy-tor", hold_time="3s"),
        objects.metallb("BGPAdvertisement", BGP_POOL, {"ipAddressPools": [BGP_POOL]}),
    )
    try:
        with deploy.deployed(lab) as d:
            yield d
    finally:
        objects.clear_configuration(lab)


# --- witnesses ----------------------------------------------------------------------------------


def hops(lab: network_lab.Lab, nodes: list[int]) -> set[str]:
    return {str(lab.node_v4(i)) for i in nodes}


def health_codes(lab: network_lab.Lab, port: int) -> list[int | None]:
    """Each node's healthCheckNodePort as the ToR probes it."""
    urls = [f"http://{lab.node_v4(i)}:{port}/" for i in range(1, lab.nodes + 1)]
    return lab.http_status(network_lab.NS_TOR, urls)


def node_addresses(lab: network_lab.Lab, version: int) -> set[ipaddress.IPv4Address | Any]:
    """Every address a node can masquerade to: its LAN address and its Pod bridge's."""
    found: set[Any] = set()
    for i in range(1, lab.nodes + 1):
        if version == 4:
            found |= {lab.node_v4(i), network_lab.pod_gateway_v4(i)}
        else:
            found |= {lab.node_v6(i), network_lab.pod_gateway_v6(i)}
    return found


def spec_of(lab: network_lab.Lab, namespace: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = objects.get(lab, "service", name, "-n", namespace)["spec"]
    return spec


def set_policy(lab: network_lab.Lab, namespace: str, name: str, policy: str) -> None:
    lab.kubectl(
        "patch", "service", name, "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"externalTrafficPolicy": policy}}),
    )  # fmt: skip


def seen_source(answer: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    return ipaddress.ip_address(answer.split()[2]) if answer else None


def client_of(vip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    v6 = ipaddress.ip_address(vip).version == 6
    return network_lab.CLIENT_V6 if v6 else network_lab.CLIENT_V4


def answer_from(
    lab: network_lab.Lab, vip: str, masqueraded: bool = False
) -> Callable[[], str | None]:
    """A check for `wait_until`: an answer through `vip` (with a source other than the
    client's, if `masqueraded`)."""

    def check() -> str | None:
        answer = objects.request(lab, vip)
        if answer and masqueraded and seen_source(answer) == client_of(vip):
            return None
        return answer

    return check


# --- tests --------------------------------------------------------------------------------------


def test_local_keeps_the_client_address_and_cluster_masquerades(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "web", local=True, dual=True)
    objects.set_backends(lab, app_namespace, "web", [1, 2])
    addresses = objects.ingress(lab, app_namespace, "web", 2)
    for vip in addresses:
        answer = objects.wait_until(f"an answer from {vip} (Local)", answer_from(lab, vip))
        assert seen_source(answer) == client_of(vip), answer
        pod, node, _ = answer.split()
        assert node in ("node1", "node2") and pod == objects.pod_name("web", int(node[-1]))

    set_policy(lab, app_namespace, "web", "Cluster")
    for vip in addresses:
        answer = objects.wait_until(
            f"kube-proxy to masquerade {vip} (Cluster)", answer_from(lab, vip, masqueraded=True)
        )
        # What the backend sees is a node's own address: the one that forwarded the packet.
        version = ipaddress.ip_address(vip).version
        assert seen_source(answer) in node_addresses(lab, version), answer


def test_a_node_without_a_local_endpoint_drops_and_says_503(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "local", local=True, annotations=FROM_BGP_POOL)
    objects.set_backends(lab, app_namespace, "local", [1])
    (vip,) = objects.ingress(lab, app_namespace, "local", 1)
    objects.wait_equal(
        "the ToR to route via node1 only", lambda: witness.fib(lab, vip), hops(lab, [1])
    )
    spec = spec_of(lab, app_namespace, "local")
    port, node_port = int(spec["healthCheckNodePort"]), int(spec["ports"][0]["nodePort"])
    objects.wait_equal(
        "healthCheckNodePort 200 on node1, 503 elsewhere",
        lambda: health_codes(lab, port),
        [200, 503, 503],
    )
    targets = [(str(lab.node_v4(i)), node_port) for i in range(1, lab.nodes + 1)]
    answers = objects.requests(lab, targets, timeout=1.0)
    assert answers[0] is not None and answers[0].split()[1] == "node1", answers
    assert answers[1:] == [None, None], "nodes without a local endpoint must drop Local traffic"
    # Through the VIP the client reaches the one node that has the endpoint, address kept.
    assert seen_source(objects.request(lab, vip)) == network_lab.CLIENT_V4

    # Cluster: every node forwards, and the health port is gone (kube-proxy frees it).
    set_policy(lab, app_namespace, "local", "Cluster")
    assert "healthCheckNodePort" not in spec_of(lab, app_namespace, "local")
    objects.wait_until(
        "every node to forward",
        lambda: all(a is not None for a in objects.requests(lab, targets, timeout=1.0)),
    )
    objects.wait_equal("ECMP over every node", lambda: witness.fib(lab, vip), hops(lab, [1, 2, 3]))


def test_readiness_flips_move_the_l2_owner(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "web", local=True)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    (vip,) = objects.ingress(lab, app_namespace, "web", 1)
    owner = lab.node_names.index(election.owner(vip, lab.node_names) or "") + 1
    objects.wait_equal(
        "the owner to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(owner)}
    )
    others = [lab.node_names[i - 1] for i in range(1, lab.nodes + 1) if i != owner]
    successor = lab.node_names.index(election.owner(vip, others) or "") + 1

    objects.set_ready(lab, app_namespace, objects.pod_name("web", owner), False)
    objects.wait_equal(
        "the owner's endpoint to turn unready",
        lambda: objects.ready_endpoint_nodes(lab, app_namespace, "web"),
        {lab.node_names[i - 1] for i in range(1, lab.nodes + 1) if i != owner},
    )
    objects.wait_equal(
        "the successor to answer alone",
        lambda: witness.arp_macs(lab, vip),
        {lab.node_mac(successor)},
    )
    answer = objects.wait_until("an answer", lambda: objects.request(lab, vip))
    assert answer.split()[1] == lab.node_names[successor - 1]

    objects.set_ready(lab, app_namespace, objects.pod_name("web", owner), True)
    objects.wait_equal(
        "the owner to answer again", lambda: witness.arp_macs(lab, vip), {lab.node_mac(owner)}
    )


def test_readiness_flips_move_bgp_nexthops(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "web", local=True, annotations=FROM_BGP_POOL)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    (vip,) = objects.ingress(lab, app_namespace, "web", 1)
    objects.wait_equal("three nexthops", lambda: witness.fib(lab, vip), hops(lab, [1, 2, 3]))
    objects.set_ready(lab, app_namespace, objects.pod_name("web", 2), False)
    objects.wait_equal("node2 to leave", lambda: witness.fib(lab, vip), hops(lab, [1, 3]))
    objects.set_ready(lab, app_namespace, objects.pod_name("web", 2), True)
    objects.wait_equal("node2 back", lambda: witness.fib(lab, vip), hops(lab, [1, 2, 3]))


@pytest.mark.parametrize("mode", ["l2", "bgp"])
def test_a_terminating_but_serving_endpoint_keeps_the_announcement(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str, mode: str
) -> None:
    """MetalLB counts an endpoint that is terminating but still serving (`serving: true`) as
    one that can serve, and kube-proxy sends Local traffic to it when there is no ready one:
    the address stays announced from that node until the Pod is really gone."""
    annotations = FROM_BGP_POOL if mode == "bgp" else None
    objects.create_service(lab, app_namespace, "web", local=True, annotations=annotations)
    objects.set_backends(lab, app_namespace, "web", [2], drain_s=20.0)
    (vip,) = objects.ingress(lab, app_namespace, "web", 1)

    def announced() -> bool:
        if mode == "bgp":
            return witness.fib(lab, vip) == hops(lab, [2])
        return witness.arp_macs(lab, vip) == {lab.node_mac(2)}

    def withdrawn() -> bool:
        return not (witness.fib(lab, vip) if mode == "bgp" else witness.arp_macs(lab, vip))

    objects.wait_until("node2 to announce", announced)
    lab.kubectl(
        "delete", "pod", objects.pod_name("web", 2), "-n", app_namespace,
        "--grace-period=60", "--wait=false",
    )  # fmt: skip

    def terminating_and_serving() -> bool:
        found = objects.endpoints(lab, app_namespace, "web")
        return bool(found) and all(
            e["conditions"] == {"ready": False, "serving": True, "terminating": True} for e in found
        )

    objects.wait_until("the endpoint to be terminating but serving", terminating_and_serving)
    assert announced(), "a serving endpoint must keep the announcement"

    def answered_by_node2() -> str | None:
        answer = objects.request(lab, vip)
        return answer if answer is not None and answer.split()[1] == "node2" else None

    # kube-proxy programs the terminating endpoint on its own schedule (the Pod went from
    # starting to terminating within a second): wait for it, well within the 20 s drain.
    objects.wait_until("an answer from node2's draining Pod", answered_by_node2, timeout=15.0)
    assert announced(), "the announcement stays while the Pod drains"
    # The drain ends, the process exits, the Pod goes: the address is withdrawn.
    objects.wait_until("the announcement to go with the Pod", withdrawn)
