"""The lab's own promises: addressing and routing, the control plane, FRR, strict ARP, teardown."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import cluster as local_cluster
from hack import lab as network_lab
from hack import processes

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def ping(lab: network_lab.Lab, ns: str, address: object) -> subprocess.CompletedProcess[str]:
    return lab.exec(ns, "ping", "-c", "1", "-W", "2", str(address))


def assert_pings(lab: network_lab.Lab, ns: str, address: object) -> None:
    result = ping(lab, ns, address)
    assert result.returncode == 0, f"{ns} -> {address}: {result.stdout}{result.stderr}"


def test_tor_and_nodes_reach_each_other_v4_and_v6(lab: network_lab.Lab) -> None:
    for i in range(1, lab.nodes + 1):
        ns = network_lab.node_namespace(i)
        assert_pings(lab, ns, network_lab.TOR_LAN_V4)
        assert_pings(lab, ns, network_lab.TOR_LAN_V6)
        assert_pings(lab, network_lab.NS_TOR, lab.node_v4(i))
        assert_pings(lab, network_lab.NS_TOR, lab.node_v6(i))


def test_node_interfaces_follow_the_plan(lab: network_lab.Lab) -> None:
    for i in range(1, lab.nodes + 1):
        shown = json.loads(lab.exec(f"node{i}", "ip", "-j", "addr", "show", "eth0").stdout)[0]
        assert shown["address"] == lab.node_mac(i)
        addresses = {a["local"] for a in shown["addr_info"]}
        assert {str(lab.node_v4(i)), str(lab.node_v6(i))} <= addresses
    assert str(lab.node_v6(1)) == "fd00:250::11"


def test_client_is_routed_through_the_tor(lab: network_lab.Lab) -> None:
    assert_pings(lab, "client", network_lab.TOR_CLIENT_V4)
    assert_pings(lab, "client", network_lab.TOR_CLIENT_V6)
    # Node addresses are on the LAN, not on the client's link: only the ToR's routing joins them.
    assert_pings(lab, "client", lab.node_v4(2))
    assert_pings(lab, "client", lab.node_v6(2))
    route = lab.exec("client", "ip", "route", "get", str(lab.node_v4(2))).stdout
    assert f"via {network_lab.TOR_CLIENT_V4}" in route


def test_apiserver_reachable_from_root_namespace(lab: network_lab.Lab) -> None:
    assert lab.api_get("/api/v1/nodes")["items"]
    assert network_lab.APISERVER_FROM_HOST in lab.kubeconfig.read_text()


def test_apiserver_reachable_from_a_node_namespace(lab: network_lab.Lab) -> None:
    kubectl = str(local_cluster.binary("kubectl"))
    result = lab.exec(
        "node2", kubectl, f"--kubeconfig={lab.node_kubeconfig}", "get", "nodes", "-o", "name"
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == [f"node/{n}" for n in lab.node_names]


def test_nodes_are_registered_ready(lab: network_lab.Lab) -> None:
    nodes = {n["metadata"]["name"]: n for n in lab.api_get("/api/v1/nodes")["items"]}
    assert sorted(nodes) == lab.node_names
    for i, name in enumerate(lab.node_names, start=1):
        status = nodes[name]["status"]
        ready = [c for c in status["conditions"] if c["type"] == "Ready"]
        assert [c["status"] for c in ready] == ["True"]
        assert {a["address"] for a in status["addresses"]} >= {
            str(lab.node_v4(i)),
            str(lab.node_v6(i)),
        }


def test_crds_and_namespace_are_there(lab: network_lab.Lab) -> None:
    crds = lab.api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    names = {c["metadata"]["name"] for c in crds}
    assert {"ipaddresspools.metallb.io", "l2advertisements.metallb.io"} <= names
    assert lab.api_get("/api/v1/namespaces/metallb-system")["metadata"]["name"]


def test_frr_answers_and_can_be_reconfigured(lab: network_lab.Lab) -> None:
    config = lab.vtysh("show running-config").stdout
    assert "router bgp 64500" in config
    assert "bgp listen range 10.250.0.0/24 peer-group nodes" in config
    assert "bgp listen range fd00:250::/64 peer-group nodes" in config
    # Every node's addresses are configured neighbours (see hack/frr/tor.conf), passive.
    for i in range(1, lab.nodes + 1):
        assert f"neighbor {lab.node_v4(i)} peer-group nodes" in config
        assert f"neighbor {lab.node_v6(i)} peer-group nodes" in config
    assert "neighbor nodes passive" in config
    assert lab.vtysh("show bfd peers").returncode == 0
    lab.vtysh("configure terminal", "router bgp 64500", "neighbor nodes password s3cret")
    try:
        assert "neighbor nodes password s3cret" in lab.vtysh("show running-config").stdout
    finally:
        lab.vtysh("configure terminal", "router bgp 64500", "no neighbor nodes password")
    assert "password" not in lab.vtysh("show running-config").stdout


def test_cli_vtysh_env_exec_status(lab: network_lab.Lab) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "hack" / "lab"), "--dir", str(lab.directory), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert "ilb-tor" in cli("vtysh", "-c", "show running-config").stdout
    assert cli("env").stdout.strip() == f"export KUBECONFIG={lab.kubeconfig}"
    assert str(lab.node_v4(3)) in cli("exec", "node3", "--", "ip", "-br", "addr").stdout
    status = cli("status").stdout
    assert all(ns in status for ns in lab.namespaces)


@pytest.fixture
def vip_on_node1_lo(lab: network_lab.Lab) -> Iterator[tuple[str, str]]:
    """Like kube-proxy IPVS: a VIP on a node's loopback, which must not make it answer ARP/NDP."""
    v4, v6 = "10.250.0.240", "fd00:250::240"
    lab.exec("node1", "ip", "addr", "add", f"{v4}/32", "dev", "lo", check=True)
    lab.exec("node1", "ip", "addr", "add", f"{v6}/128", "dev", "lo", check=True)
    try:
        yield v4, v6
    finally:
        lab.exec("node1", "ip", "addr", "del", f"{v4}/32", "dev", "lo")
        lab.exec("node1", "ip", "addr", "del", f"{v6}/128", "dev", "lo")


def arping_macs(lab: network_lab.Lab, address: str) -> list[str]:
    result = lab.exec("tor", "arping", "-b", "-c", "2", "-w", "3", "-I", "br0", address)
    return [m.lower() for m in re.findall(r"reply from \S+ \[([0-9A-Fa-f:]{17})\]", result.stdout)]


def ndisc_macs(lab: network_lab.Lab, address: str) -> list[str]:
    result = lab.exec("tor", "ndisc6", "-n", "-r", "2", "-w", "500", address, "br0")
    return [
        m.lower()
        for m in re.findall(r"Target link-layer address: ([0-9A-Fa-f:]{17})", result.stdout)
    ]


def test_nodes_do_not_answer_arp_or_ndp_for_a_vip_on_lo(
    lab: network_lab.Lab, vip_on_node1_lo: tuple[str, str]
) -> None:
    v4, v6 = vip_on_node1_lo
    # The same probes do get answers for the node's own address: the tools and links work.
    assert arping_macs(lab, str(lab.node_v4(1))) == [lab.node_mac(1)] * 2
    assert ndisc_macs(lab, str(lab.node_v6(1))) == [lab.node_mac(1)]
    assert arping_macs(lab, v4) == []
    assert ndisc_macs(lab, v6) == []


def test_up_refuses_while_a_lab_runs(lab: network_lab.Lab, tmp_path: Path) -> None:
    other = network_lab.Lab(nodes=1, directory=tmp_path / "other")
    with pytest.raises(network_lab.LabError, match="already running"):
        other.up()
    assert_pings(lab, "node1", network_lab.TOR_LAN_V4)


def lab_leftovers() -> list[str]:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found = [
        f"netns {line.split()[0]}" for line in namespaces.splitlines() if line.startswith("ilb-")
    ]
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if line.split(":")[1].strip().startswith("ilb-")
    ]
    return found


class FailingLab(network_lab.Lab):
    def _start_frr(self) -> None:
        super()._start_frr()
        raise network_lab.LabError("injected failure after FRR started")


class BadKubeProxyLab(network_lab.Lab):
    """kube-proxy refuses this configuration and exits, after the control plane is up."""

    def kube_proxy_config(self, index: int) -> dict[str, Any]:
        config = super().kube_proxy_config(index)
        if index == 2:
            config["mode"] = "no-such-mode"
        return config


def test_down_leaves_nothing_and_up_is_all_or_nothing(lab: network_lab.Lab, tmp_path: Path) -> None:
    # Runs last in this module: it takes the session's lab down and brings it back.
    helper = lab.popen("node2", "sleep", "600")
    frr_pids = lab.status()[network_lab.NS_TOR]
    cluster_pids = list(lab.cluster.running_pids().values())
    assert frr_pids and len(cluster_pids) == len(local_cluster.COMPONENTS)
    proxy_pids = [lab.kube_proxy_pid(i) for i in range(1, lab.nodes + 1)]
    assert all(proxy_pids), proxy_pids
    try:
        assert lab.down() is True
        assert lab_leftovers() == []
        helper.wait(timeout=10)
        for pid in [*frr_pids, *cluster_pids, *proxy_pids]:
            assert pid is not None
            assert not processes.alive(pid), pid
        assert not lab.directory.exists()
        assert not lab.frr_directory.exists()
        assert lab.down() is False

        failing = FailingLab(nodes=2, directory=tmp_path / "failing")
        with pytest.raises(network_lab.LabError, match="injected failure"):
            failing.up()
        assert lab_leftovers() == []
        assert not failing.frr_directory.exists()
        assert not (tmp_path / "failing").exists()

        # A node component that cannot start: one line naming it and its node, nothing left.
        broken = BadKubeProxyLab(nodes=2, directory=tmp_path / "broken")
        with pytest.raises(network_lab.LabError) as raised:
            broken.up()
        message = str(raised.value)
        assert "kube-proxy in ilb-node2" in message and "\n" not in message, message
        assert lab_leftovers() == []
        assert not (tmp_path / "broken").exists()
    finally:
        if helper.poll() is None:
            helper.kill()
        lab.up()
    assert_pings(lab, "node1", network_lab.TOR_LAN_V4)


def test_a_node_taken_down_and_up_is_repaired_with_its_pod_routes(lab: network_lab.Lab) -> None:
    """The kernel flushes every route through a device taken down; the lab puts back the
    default routes and the routes to the other nodes' Pods (kube-proxy DNATs to those)."""
    ns = network_lab.node_namespace(1)

    def routes() -> set[str]:
        found = set()
        for family in ("-4", "-6"):
            for line in lab.exec(ns, "ip", family, "route", check=True).stdout.splitlines():
                if " via " in line:
                    found.add(" ".join(line.split()[:3]))
        return found

    wanted = routes()
    assert f"{network_lab.pod_cidr_v6(2)} via {lab.node_v6(2)}" in wanted, wanted
    lab.exec(ns, "ip", "link", "set", "eth0", "down", check=True)
    lab.exec(ns, "ip", "link", "set", "eth0", "up", check=True)
    assert not routes() & wanted
    lab.repair_nodes()
    assert routes() == wanted
