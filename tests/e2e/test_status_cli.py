"""`ironlb status` against the lab: controller and speakers running, one layer-2 Service, one BGP
Service and one that cannot get an address. Every fact the command reports is checked against a
witness that does not go through it: arping and vtysh on the ToR, the API itself.

The command runs in the ToR's namespace, which reaches the apiserver (through the nodes'
kubeconfig) and every speaker's metrics port; its JSON must match `ironlb_cli.schema.STATUS`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import deploy, objects, witness
from hack import lab as network_lab
from ironlb_cli import schema

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NS = "metallb-system"
APP = "status-app"
L2_POOL = "status-l2"
BGP_POOL = "status-bgp"
PEER = "status-tor"
L2_RANGE = "10.250.0.100-10.250.0.120"  # on the LAN, clear of the lab's other pools
BGP_RANGE = "10.252.0.128/28"
METRICS_PORT = 7473


def metallb(kind: str, name: str, spec: dict[str, Any], version: str = "v1beta1") -> Any:
    return objects.metallb(kind, name, spec, version)


def service(name: str, pool: str | None = None) -> dict[str, Any]:
    return objects.service(
        APP, name, local=True, annotations={"metallb.io/address-pool": pool} if pool else None
    )


def ingress(lab: network_lab.Lab, name: str) -> list[str]:
    svc = json.loads(lab.kubectl("get", "service", name, "-n", APP, "-o", "json"))
    return [e["ip"] for e in svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []]


def established_on_tor(lab: network_lab.Lab) -> set[str]:
    """Node addresses with an Established IPv4 session on the ToR, from vtysh."""
    shown = json.loads(lab.vtysh("show bgp ipv4 unicast summary json").stdout or "{}")
    return {a for a, n in (shown.get("peers") or {}).items() if n.get("state") == "Established"}


@pytest.fixture(scope="module")
def cluster(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    # Earlier modules leave their configuration behind; overlapping pools would make ours
    # invalid, so this module starts from an empty configuration.
    objects.clear_configuration(lab)
    objects.apply(
        lab,
        metallb("IPAddressPool", L2_POOL, {"addresses": [L2_RANGE]}),
        metallb("L2Advertisement", L2_POOL, {"ipAddressPools": [L2_POOL]}),
        metallb("IPAddressPool", BGP_POOL, {"addresses": [BGP_RANGE], "autoAssign": False}),
        objects.tor_peer(PEER),
        metallb("BGPAdvertisement", BGP_POOL, {"ipAddressPools": [BGP_POOL]}),
    )
    lab.kubectl("create", "namespace", APP)
    objects.apply(
        lab, service("web"), service("routed", pool=BGP_POOL), service("stuck", pool="nonexistent")
    )
    objects.set_backends(lab, APP, "web", [1, 2, 3])
    objects.set_backends(lab, APP, "routed", [2])
    try:
        with deploy.deployed(lab) as d:
            yield d
    finally:
        lab.kubectl("delete", "namespace", APP, "--wait=false")
        objects.clear_configuration(lab)
        lab.kubectl(
            "delete", "servicel2statuses,servicebgpstatuses", "--all", "-n", NS, "--wait=false"
        )


def run_status(lab: network_lab.Lab, *args: str, program: list[str] | None = None) -> str:
    urls = ",".join(
        f"http://{lab.node_v4(i)}:{METRICS_PORT}/metrics" for i in range(1, lab.nodes + 1)
    )
    argv = [
        *(program or [sys.executable, "-m", "ironlb_cli"]),
        "status",
        "--kubeconfig",
        str(lab.node_kubeconfig),
        "--speaker-metrics",
        urls,
        *args,
    ]
    result = lab.exec("tor", "env", f"PYTHONPATH={ROOT}", *argv, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def settled(lab: network_lab.Lab) -> tuple[str, str, int, str]:
    """Wait for the world to be in the state the checks expect; returns the witnesses' view."""
    (vip,) = objects.wait_until("web's address", lambda: ingress(lab, "web") or None, timeout=60)
    (routed,) = objects.wait_until("routed's address", lambda: ingress(lab, "routed") or None)
    macs = objects.wait_until(
        "one ARP answer", lambda: (m := witness.arp_macs(lab, vip)) and len(m) == 1 and m
    )
    (mac,) = macs
    owner = next(i for i in range(1, lab.nodes + 1) if lab.node_mac(i) == mac)
    node2 = str(lab.node_v4(2))
    objects.wait_equal(
        "routed's route via node2", lambda: witness.fib(lab, f"{routed}/32"), {node2}
    )
    everyone = {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1)}
    objects.wait_until("three BGP sessions", lambda: established_on_tor(lab) >= everyone)
    return vip, routed, owner, mac


def document(lab: network_lab.Lab) -> dict[str, Any]:
    """`ironlb status -o json` once the speakers report what the witnesses see."""

    def read() -> dict[str, Any] | None:
        doc: dict[str, Any] = json.loads(run_status(lab, "-o", "json"))
        by_name = {s["name"]: s for s in doc["services"]}
        ready = (
            by_name.get("web", {}).get("state") == "announced"
            and by_name.get("routed", {}).get("state") == "announced"
            and all(s["bgp"] == "up" for s in doc["sessions"])
            and all((n["members"] or {}).get("alive") == lab.nodes for n in doc["nodes"])
        )
        return doc if ready else None

    found: dict[str, Any] = objects.wait_until("ironlb status to agree", read, timeout=30, every=1)
    return found


def test_json_matches_the_schema_and_the_witnesses(
    lab: network_lab.Lab, cluster: deploy.Deployment
) -> None:
    vip, routed, owner, _ = settled(lab)
    doc = document(lab)
    assert schema.check(doc) == []
    services = {s["name"]: s for s in doc["services"] if s["namespace"] == APP}

    web = services["web"]
    assert web["addresses"] == [vip]
    assert (web["pool"], web["externalTrafficPolicy"], web["modes"]) == (
        L2_POOL,
        "Local",
        ["layer2"],
    )
    # The node the ToR hears answering ARP is the one the status objects name.
    assert [a["node"] for a in web["announcements"]] == [lab.node_names[owner - 1]]

    bgp = services["routed"]
    assert bgp["addresses"] == [routed]
    assert bgp["announcements"] == [
        {"protocol": "bgp", "node": "node2", "peers": [PEER], "interfaces": []}
    ]

    stuck = services["stuck"]
    assert (stuck["state"], stuck["addresses"]) == ("pending", [])
    assert stuck["reason"] is not None and 'unknown pool "nonexistent"' in stuck["reason"]

    # Pool counters as the controller wrote them in the pool's status.
    raw = json.loads(lab.kubectl("get", "ipaddresspool", L2_POOL, "-n", NS, "-o", "json"))
    pools = {p["name"]: p for p in doc["pools"]}
    (v4,) = pools[L2_POOL]["families"]
    assert (v4["assigned"], v4["available"]) == (
        raw["status"]["assignedIPv4"],
        raw["status"]["availableIPv4"],
    )
    assert (v4["assigned"], v4["total"]) == (1, 21)
    assert pools[L2_POOL]["l2Advertisements"] == [L2_POOL]
    assert pools[BGP_POOL]["bgpAdvertisements"] == [BGP_POOL]

    # One session per node, up, as the ToR sees them established; node2 announces one prefix.
    sessions = {s["node"]: s for s in doc["sessions"] if s["peer"] == PEER}
    assert set(sessions) == set(lab.node_names)
    assert established_on_tor(lab) >= {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1)}
    assert {n: s["bgp"] for n, s in sessions.items()} == dict.fromkeys(lab.node_names, "up")
    assert sessions["node2"]["prefixes"] == 1
    assert sessions["node2"]["address"] == f"{network_lab.TOR_LAN_V4}:179"

    nodes = {n["name"]: n for n in doc["nodes"]}
    assert {n["speaker"] for n in nodes.values()} == {"scraped"}
    assert {n["ready"] for n in nodes.values()} == {"True"}
    assert all(n["configStale"] is False for n in nodes.values())
    assert [s["ok"] for s in doc["scrapes"]] == [True] * lab.nodes


def test_text_output_and_a_dead_speaker(lab: network_lab.Lab, cluster: deploy.Deployment) -> None:
    vip, _, owner, _ = settled(lab)
    document(lab)
    program = [str(Path(sys.executable).parent / "ironlb")]
    assert Path(program[0]).exists(), "the console script is missing: run hack/setup"
    text = run_status(lab, program=program)
    assert re.search(rf"{APP}/web\s+{re.escape(vip)}\s+{L2_POOL}\s+Local\s+layer2\s+node", text)
    assert 'unknown pool "nonexistent"' in text
    assert re.search(rf"{L2_POOL}\s+IPv4\s+\[#-+\]\s+1/21 5%", text)

    # Stop one speaker: its scrape fails, the others see it leave, another node takes over.
    victim = owner
    cluster.stop_speaker(victim)
    try:

        def after() -> dict[str, Any] | None:
            doc: dict[str, Any] = json.loads(run_status(lab, "-o", "json"))
            nodes = {n["name"]: n for n in doc["nodes"]}
            gone = nodes[lab.node_names[victim - 1]]
            others = [n for name, n in nodes.items() if name != lab.node_names[victim - 1]]
            web = next(s for s in doc["services"] if s["name"] == "web")
            moved = [a["node"] for a in web["announcements"]] not in ([], [gone["name"]])
            ok = (
                gone["speaker"] == "error"
                and moved
                and all((n["members"] or {}).get("alive") == lab.nodes - 1 for n in others)
            )
            return doc if ok else None

        doc = objects.wait_until("the status to show the stopped speaker", after, every=1)
        assert schema.check(doc) == []
        sessions = [s for s in doc["sessions"] if s["node"] == lab.node_names[victim - 1]]
        assert [s["bgp"] for s in sessions] == ["unknown"]
        named = {
            a["node"] for s in doc["services"] if s["name"] == "web" for a in s["announcements"]
        }
        # The stopped speaker's ServiceL2Status may outlive it (nothing deletes it until that
        # speaker is back); the text says its speaker is unreachable.
        (new_owner,) = named - {lab.node_names[victim - 1]}
        new_mac = lab.node_mac(lab.node_names.index(new_owner) + 1)
        objects.wait_equal("the new owner to answer", lambda: witness.arp_macs(lab, vip), {new_mac})
        if lab.node_names[victim - 1] in named:
            text = run_status(lab)
            assert f"{lab.node_names[victim - 1]} (speaker unreachable)" in text
    finally:
        cluster.start_speaker(victim)


def test_the_command_explains_a_missing_api_clearly() -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "ironlb_cli", "status", "--kubeconfig", "/nonexistent/kubeconfig"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith("ironlb: cannot read kubeconfig /nonexistent/kubeconfig")
