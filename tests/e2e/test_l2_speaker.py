"""L2 mode end to end: controller + three speakers in the lab, with arping, ndisc6 and the ToR's
neighbour table as independent witnesses."""

from __future__ import annotations

import ipaddress
import json
import signal
from collections.abc import Iterator

import pytest

from hack import deploy, objects, witness
from hack import lab as network_lab
from speaker import election

pytestmark = pytest.mark.e2e

NS = "metallb-system"
POOL = "lab-l2"
TOR_LAN = "br0"


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    objects.apply(
        lab,
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": POOL, "namespace": NS},
            "spec": {
                "addresses": [
                    f"{network_lab.L2_POOL_V4[0]}-{network_lab.L2_POOL_V4[1]}",
                    f"{network_lab.L2_POOL_V6[0]}-{network_lab.L2_POOL_V6[1]}",
                ]
            },
        },
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "L2Advertisement",
            "metadata": {"name": "lab-l2", "namespace": NS},
            "spec": {"ipAddressPools": [POOL]},
        },
    )
    with deploy.deployed(lab) as d:
        yield d


def expected_owner(lab: network_lab.Lab, vip: str, nodes: list[int] | None = None) -> int:
    names = [lab.node_names[i - 1] for i in (nodes or range(1, lab.nodes + 1))]
    owner = election.owner(vip, names)
    assert owner is not None
    return lab.node_names.index(owner) + 1


def node_index_of_mac(lab: network_lab.Lab, mac: str | None) -> int | None:
    for i in range(1, lab.nodes + 1):
        if lab.node_mac(i) == mac:
            return i
    return None


def wait_for_l2_status_of(lab: network_lab.Lab, namespace: str, node: int, who: str) -> None:
    """Until the namespace's ServiceL2Status objects name that node and no other."""
    objects.wait_equal(
        f"only the ServiceL2Status of {who}",
        lambda: objects.status_nodes(lab, "servicel2statuses", namespace),
        {lab.node_names[node - 1]},
        timeout=30,
    )


def touch(lab: network_lab.Lab, vip: str) -> None:
    """Make the ToR resolve the VIP, as a client talking to it would."""
    flag = "-6" if ":" in vip else "-4"
    lab.exec("tor", "ping", flag, "-c", "1", "-W", "1", vip)


def test_one_node_answers_arp_and_ndp(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "web", dual=True)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    ips = objects.ingress(lab, app_namespace, "web", 2)
    v4, v6 = sorted(ips, key=lambda a: ":" in a)
    # As in MetalLB, the Service's first address elects the node for every one of them.
    owner = expected_owner(lab, ips[0])
    objects.wait_equal("one ARP answer", lambda: witness.arp_macs(lab, v4), {lab.node_mac(owner)})
    objects.wait_equal("the NDP answer", lambda: witness.ndp_mac(lab, v6), lab.node_mac(owner))
    touch(lab, v4)
    assert witness.neighbour_mac(lab, v4) == lab.node_mac(owner)

    objects.wait_equal(
        "the owner's ServiceL2Status",
        lambda: objects.status_nodes(lab, "servicel2statuses", app_namespace),
        {lab.node_names[owner - 1]},
    )
    events = json.loads(lab.kubectl("get", "events", "-n", app_namespace, "-o", "json"))["items"]
    assert any(
        e["reason"] == "nodeAssigned" and lab.node_names[owner - 1] in e["message"] for e in events
    )


@pytest.mark.parametrize("how", ["sigkill", "linkcut"])
def test_failover_moves_the_tor_neighbour_entry(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str, how: str
) -> None:
    objects.create_service(lab, app_namespace, "web", dual=False)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    (vip,) = objects.ingress(lab, app_namespace, "web", 1)
    owner = expected_owner(lab, vip)
    objects.wait_equal(
        "the owner to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(owner)}
    )
    touch(lab, vip)
    assert witness.neighbour_mac(lab, vip) == lab.node_mac(owner)
    survivors = [i for i in range(1, lab.nodes + 1) if i != owner]
    successor = expected_owner(lab, vip, survivors)
    try:
        if how == "sigkill":
            deployment.signal_speaker(owner, signal.SIGKILL)
        else:
            deploy.cut_link(lab, owner)
        # No flush: the new owner's gratuitous ARP must move the existing entry.
        objects.wait_equal(
            "the ToR's entry to move to the successor",
            lambda: witness.neighbour_mac(lab, vip),
            lab.node_mac(successor),
            timeout=30,
        )
        assert witness.arp_macs(lab, vip) == {lab.node_mac(successor)}
        # The old owner cannot remove its ServiceL2Status (dead, or cut off from the API
        # server): the successor does, so that status names one announcer.
        wait_for_l2_status_of(lab, app_namespace, successor, "the successor")
    finally:
        if how == "sigkill":
            deployment.stop_speaker(owner, signal.SIGKILL)
            deployment.start_speaker(owner)
        else:
            deploy.restore_link(lab, owner)
    # The original owner wins the hash again once it is back.
    objects.wait_equal(
        "the owner to take its address back",
        lambda: witness.arp_macs(lab, vip),
        {lab.node_mac(owner)},
        timeout=40,
    )
    wait_for_l2_status_of(lab, app_namespace, owner, "the owner again")


def test_local_policy_follows_the_endpoint(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "local", local=True, dual=False)
    objects.set_backends(lab, app_namespace, "local", [2])
    (vip,) = objects.ingress(lab, app_namespace, "local", 1)
    objects.wait_equal("node2 to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(2)})
    objects.set_backends(lab, app_namespace, "local", [3])
    objects.wait_equal("node3 to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(3)})
    objects.set_backends(lab, app_namespace, "local", [])
    objects.wait_equal("nobody to answer", lambda: witness.arp_macs(lab, vip), set())


def test_client_reaches_the_vip_with_its_source_address_kept(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    objects.create_service(lab, app_namespace, "echo", local=True, dual=False)
    objects.set_backends(lab, app_namespace, "echo", [1])
    (vip,) = objects.ingress(lab, app_namespace, "echo", 1)
    objects.wait_equal("node1 to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(1)})
    answer = objects.wait_until("an answer through the VIP", lambda: objects.request(lab, vip))
    pod, node, source = answer.split()
    assert (pod, node) == (objects.pod_name("echo", 1), lab.node_names[0])
    assert ipaddress.ip_address(source) == network_lab.CLIENT_V4


def test_an_interface_the_owner_lacks_is_answered_nowhere_and_said(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    """An L2Advertisement naming only an interface no node has (MetalLB's layer2 SetBalancer):
    the elected node answers no ARP, writes no ServiceL2Status and posts announceFailed; named
    alongside eth0, the address is answered again from the same node."""
    objects.create_service(lab, app_namespace, "iface", dual=False)
    objects.set_backends(lab, app_namespace, "iface", [1, 2, 3])
    (vip,) = objects.ingress(lab, app_namespace, "iface", 1)
    owner = expected_owner(lab, vip)
    owner_mac = lab.node_mac(owner)
    objects.wait_equal(
        "the owner to answer",
        lambda: witness.arp_macs(lab, vip),
        {owner_mac},
    )

    def advertise(spec: dict[str, object]) -> None:
        objects.apply(lab, objects.metallb("L2Advertisement", "lab-l2", spec))

    try:
        advertise({"ipAddressPools": [POOL], "interfaces": ["eth9"]})
        objects.wait_equal("nobody to answer", lambda: witness.arp_macs(lab, vip), set())
        objects.wait_equal(
            "no ServiceL2Status",
            lambda: objects.status_nodes(lab, "servicel2statuses", app_namespace),
            set(),
        )

        def announce_failed() -> list[str] | objects.Missing:
            events = objects.get(lab, "events", "-n", app_namespace)["items"]
            found = [
                e["message"]
                for e in events
                if e.get("reason") == "announceFailed"
                and e.get("involvedObject", {}).get("name") == "iface"
            ]
            return found or objects.Missing(f"reasons: {sorted({e.get('reason') for e in events})}")

        (message, *_) = objects.wait_until("an announceFailed Event", announce_failed)
        assert vip in message and lab.node_names[owner - 1] in message, message

        advertise({"ipAddressPools": [POOL], "interfaces": ["eth9", "eth0"]})
        objects.wait_equal(
            "the owner to answer again", lambda: witness.arp_macs(lab, vip), {owner_mac}
        )
        wait_for_l2_status_of(lab, app_namespace, owner, "the owner")
    finally:
        advertise({"ipAddressPools": [POOL]})
