"""Data-path readiness scenarios on the lab's real kube-proxy, shared by the e2e tests and
`bench/datapath.py`: kill a node's kube-proxy and time the handover (L2, seen by the ToR's ARP
watcher) or the withdrawal (BGP, seen in the ToR's FIB); start it again and check that the node
comes back only after kube-proxy answered healthy; drain a node (taint, label, cordon) under
client load and count the client's failed requests.

Every time here is CLOCK_MONOTONIC of this machine, taken by the witnesses themselves.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hack import hitless, loadgen, objects, witness
from hack import lab as network_lab
from ironlb import annotations as keys
from ironlb import datapath
from speaker import election

L2_POOL = "datapath-l2"
BGP_POOL = "datapath-bgp"
L2_RANGES = ["10.250.0.150-10.250.0.160"]
BGP_RANGES = ["10.252.0.96/28"]
FROM_BGP_POOL = {"metallb.io/address-pool": BGP_POOL}
UNADVERTISED_POOL = "datapath-none"  # a pool no advertisement selects
FROM_UNADVERTISED_POOL = {"metallb.io/address-pool": UNADVERTISED_POOL}
HEALTHZ_EVERY_S = 0.05
MOVE_TIMEOUT_S = 20.0
LOAD_RATE = 40.0
TAINT = datapath.TO_BE_DELETED_TAINTS[0]


def configuration() -> list[dict[str, Any]]:
    return [
        objects.metallb("IPAddressPool", L2_POOL, {"addresses": L2_RANGES}),
        objects.metallb("L2Advertisement", L2_POOL, {"ipAddressPools": [L2_POOL]}),
        objects.metallb("IPAddressPool", BGP_POOL, {"addresses": BGP_RANGES, "autoAssign": False}),
        objects.tor_peer("datapath-tor", hold_time="3s"),
        objects.metallb("BGPAdvertisement", BGP_POOL, {"ipAddressPools": [BGP_POOL]}),
        objects.metallb(
            "IPAddressPool",
            UNADVERTISED_POOL,
            {"addresses": ["10.250.0.161-10.250.0.165"], "autoAssign": False},
        ),
    ]


def service(lab: network_lab.Lab, namespace: str, name: str, mode: str, nodes: list[int]) -> str:
    """A Cluster Service with a ready Pod on each of `nodes`; its IPv4 address once announced
    from every node that should (BGP) or answered by its owner (L2)."""
    objects.create_service(
        lab, namespace, name, annotations=FROM_BGP_POOL if mode == "bgp" else None
    )
    objects.set_backends(lab, namespace, name, nodes)
    (vip,) = objects.ingress(lab, namespace, name, 1)
    # Every node's kube-proxy forwards the Service (its NodePort answers), whichever node the
    # load's connections land on: a failure later is the drain's, not a new Service's.
    spec = objects.get(lab, "service", name, "-n", namespace)["spec"]
    node_port = int(spec["ports"][0]["nodePort"])
    targets = [(str(lab.node_v4(i)), node_port) for i in range(1, lab.nodes + 1)]
    objects.wait_until(
        "every node to forward the Service",
        lambda: all(a is not None for a in objects.requests(lab, targets, timeout=1.0)),
    )
    if mode == "bgp":
        every = {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1)}
        objects.wait_equal("every nexthop", lambda: witness.fib(lab, vip), every)
    else:
        owner = l2_owner(lab, vip)
        objects.wait_equal(
            "the owner to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(owner)}
        )
    return vip


def l2_owner(lab: network_lab.Lab, vip: str, excluding: tuple[int, ...] = ()) -> int:
    names = [n for i, n in enumerate(lab.node_names, 1) if i not in excluding]
    return lab.node_names.index(election.owner(vip, names) or "") + 1


@dataclass
class Cycle:
    """One kube-proxy failure and restart on one node."""

    fail_to_move_s: float  # kube-proxy killed -> the ToR sees the address moved / nexthop gone
    back_after_healthy: bool  # the node came back only after kube-proxy answered healthy
    unhealthy_to_back_s: float  # last unhealthy answer seen -> the node back


def healthz_ok(lab: network_lab.Lab, index: int) -> bool:
    return lab.kube_proxy_healthz([index])[index] == 200


def _restart_kube_proxy(lab: network_lab.Lab, index: int) -> float:
    """Start kube-proxy again; the time of the last /healthz probe (from the ToR) that was not
    yet healthy, once one is."""
    lab.start_kube_proxy(index)
    last_unhealthy = time.monotonic()
    deadline = last_unhealthy + network_lab.KUBE_PROXY_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        probed = time.monotonic()
        if healthz_ok(lab, index):
            return last_unhealthy
        last_unhealthy = probed
        time.sleep(HEALTHZ_EVERY_S)
    raise AssertionError(f"kube-proxy on node{index} never answered healthy")


def l2_cycle(lab: network_lab.Lab, vip: str) -> Cycle:
    owner = l2_owner(lab, vip)
    successor = l2_owner(lab, vip, excluding=(owner,))
    watcher = witness.ArpWatcher(lab, vip, 0.01)
    try:
        if watcher.until(lambda macs: macs == [lab.node_mac(owner)], MOVE_TIMEOUT_S) is None:
            raise AssertionError(f"node{owner} never answered for {vip}")
        killed = time.monotonic()
        lab.stop_kube_proxy(owner, signal.SIGKILL)
        moved = watcher.until(lambda macs: macs == [lab.node_mac(successor)], MOVE_TIMEOUT_S)
        if moved is None:
            raise AssertionError(f"{vip} did not move to node{successor} without kube-proxy")
        last_unhealthy = _restart_kube_proxy(lab, owner)
        back = watcher.until(lambda macs: macs == [lab.node_mac(owner)], MOVE_TIMEOUT_S)
        if back is None:
            raise AssertionError(f"{vip} did not come back to node{owner}")
        return Cycle(moved[0] - killed, back[0] > last_unhealthy, back[0] - last_unhealthy)
    finally:
        watcher.close()


def bgp_cycle(lab: network_lab.Lab, vip: str, index: int) -> Cycle:
    every = {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1)}
    without = every - {str(lab.node_v4(index))}
    fib = witness.start_fib_watcher(lab, [f"{vip}/32"])
    try:
        events = _FibEvents(fib, vip)
        if events.until(lambda hops: hops == every) is None:
            raise AssertionError(f"{vip} not routed to every node")
        killed = time.monotonic()
        lab.stop_kube_proxy(index, signal.SIGKILL)
        gone = events.until(lambda hops: hops == without)
        if gone is None:
            raise AssertionError(f"node{index} still a nexthop of {vip} without kube-proxy")
        last_unhealthy = _restart_kube_proxy(lab, index)
        back = events.until(lambda hops: hops == every)
        if back is None:
            raise AssertionError(f"node{index} did not come back as a nexthop of {vip}")
        return Cycle(gone - killed, back > last_unhealthy, back - last_unhealthy)
    finally:
        fib.kill()
        fib.wait(5)


class _FibEvents:
    """The FIB watcher's view of one prefix: (time, nexthops) as it changes."""

    def __init__(self, process: Any, vip: str) -> None:
        self.lines = witness.lines_of(process)
        self.prefix = f"{vip}/32"
        self.hops: set[str] = set()

    def until(self, wanted: Callable[[set[str]], bool]) -> float | None:
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        while time.monotonic() < deadline:
            while self.lines.queue:
                event = self.lines.queue.popleft()
                if event.get("d") != self.prefix:
                    continue
                self.hops = set(event.get("v") or ())
                if wanted(self.hops):
                    return float(event["t"])
            if self.lines.ended:
                return None
            self.lines.fill(wait_s=0.2)
        return None


def speaker_restart_without_kube_proxy(
    lab: network_lab.Lab, deployment: Any, l2_vip: str, bgp_vip: str, quiet_s: float = 3.0
) -> dict[str, Any]:
    """kube-proxy stopped on the L2 owner, then its speaker restarted: for `quiet_s` the node
    must announce nothing (no ARP answer from it, not a nexthop), then kube-proxy starts and
    the node comes back. What the ToR saw, for the caller to judge."""
    node = l2_owner(lab, l2_vip)
    mac, hop = lab.node_mac(node), str(lab.node_v4(node))
    lab.stop_kube_proxy(node)
    try:
        objects.wait_until(
            f"node{node} to stand down", lambda: mac not in witness.arp_macs(lab, l2_vip)
        )
        objects.wait_until(f"node{node} to leave", lambda: hop not in witness.fib(lab, bgp_vip))
        deployment.stop_speaker(node)
        deployment.start_speaker(node)
        seen_macs: set[str] = set()
        seen_hops: set[str] = set()
        deadline = time.monotonic() + quiet_s
        while time.monotonic() < deadline:
            seen_macs |= witness.arp_macs(lab, l2_vip, count=1, wait_s=1)
            seen_hops |= witness.fib(lab, bgp_vip)
    finally:
        lab.start_kube_proxy(node)
    objects.wait_equal(f"node{node} to answer again", lambda: witness.arp_macs(lab, l2_vip), {mac})
    objects.wait_until(f"node{node} back", lambda: hop in witness.fib(lab, bgp_vip))
    return {"node": node, "announced_while_down": mac in seen_macs or hop in seen_hops}


# --- node lifecycle -----------------------------------------------------------------------------

DRAINS = ("taint", "exclude-label", "cordon")


def _patch_node(lab: network_lab.Lab, index: int, patch: dict[str, Any]) -> None:
    lab.kubectl("patch", "node", lab.node_names[index - 1], "--type=merge", "-p", json.dumps(patch))


def start_drain(lab: network_lab.Lab, index: int, how: str) -> None:
    if how == "taint":
        taint = {"key": TAINT, "value": str(int(time.time())), "effect": "NoSchedule"}
        _patch_node(lab, index, {"spec": {"taints": [taint]}})
    elif how == "exclude-label":
        _patch_node(
            lab, index, {"metadata": {"labels": {keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: ""}}}
        )
    elif how == "cordon":
        _patch_node(lab, index, {"spec": {"unschedulable": True}})
    else:
        raise ValueError(how)


def end_drain(lab: network_lab.Lab, index: int) -> None:
    _patch_node(
        lab,
        index,
        {
            "metadata": {"labels": {keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: None}},
            "spec": {"taints": None, "unschedulable": None},
        },
    )


@contextmanager
def loaded(lab: network_lab.Lab, vips: list[str], duration: float) -> Iterator[loadgen.LoadGen]:
    with loadgen.LoadGen(
        lab,
        [(vip, objects.SERVICE_PORT) for vip in vips],
        duration=duration,
        rate=LOAD_RATE,
        log=lab.directory / "logs" / "loadgen.log",
    ) as load:
        yield load


@dataclass
class Drained:
    how: str
    mode: str
    moved_s: float  # drain started -> the address moved / the nexthop gone, as the ToR saw it
    failed_requests: int
    requests: int
    failures: dict[str, Any]  # the load's first failures (kind, time since its start)
    # Those failures that the move does not explain (`hitless.unexplained_failures`: a
    # handshake in flight when the ToR's ECMP set or ARP entry changed is reset, whatever the
    # load balancer does); any other failure, or one not kept in detail, is here.
    unexplained: list[dict[str, Any]]


def _moved(
    lab: network_lab.Lab, vip: str, mode: str, successor: int, hops: set[str]
) -> Callable[[], bool]:
    """A check: the L2 address answered by `successor` alone, or the BGP nexthops now `hops`."""

    def check() -> bool:
        if mode == "l2":
            return witness.arp_macs(lab, vip, count=1, wait_s=1) == {lab.node_mac(successor)}
        return witness.fib(lab, vip) == hops

    return check


def _under_load(
    lab: network_lab.Lab,
    vip: str,
    mode: str,
    how: str,
    act: Callable[[], None],
    moved: Callable[[], bool],
) -> Drained:
    """`act` under client load; timed until `moved`, and the load kept on a while after."""
    with loaded(lab, [vip], duration=30.0) as load:
        time.sleep(1.0)  # requests flow before the node leaves
        began = time.monotonic()
        act()
        objects.wait_until(f"{how} to move {vip}", moved, MOVE_TIMEOUT_S)
        took = time.monotonic() - began
        time.sleep(2.0)  # and after it: connections through the new path
        report = load.stop()
    # The ToR is polled: the move happened at most one poll before it was seen.
    move = began + took
    return Drained(
        how,
        mode,
        took,
        int(report["requests_failed"]),
        int(report["requests_total"]),
        {
            "kinds": report["failures"],
            "first": report["first_failures"][:5],
            "began_s": began - float(report["started_monotonic"]),
        },
        hitless.unexplained_failures(report, [vip], [move]),
    )


def _wait_back(lab: network_lab.Lab, vip: str, mode: str, node: int) -> None:
    """Until node `node` answers for the L2 address again, or is a BGP nexthop of it again."""
    if mode == "l2":
        objects.wait_equal(
            f"node{node} to answer again", lambda: witness.arp_macs(lab, vip), {lab.node_mac(node)}
        )
    else:
        every = {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1)}
        objects.wait_equal(f"node{node} back", lambda: witness.fib(lab, vip), every)


def drain(lab: network_lab.Lab, vip: str, mode: str, how: str, index: int | None = None) -> Drained:
    """Drain one node under load: the L2 owner, or node `index` for BGP; undone afterwards."""
    node = l2_owner(lab, vip) if mode == "l2" else (index or 2)
    successor = l2_owner(lab, vip, excluding=(node,)) if mode == "l2" else 0
    rest = {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1) if i != node}
    try:
        drained = _under_load(
            lab,
            vip,
            mode,
            how,
            lambda: start_drain(lab, node, how),
            _moved(lab, vip, mode, successor, rest),
        )
    finally:
        end_drain(lab, node)
    _wait_back(lab, vip, mode, node)
    return drained


def local_service(
    lab: network_lab.Lab, namespace: str, name: str, mode: str, nodes: list[int]
) -> str:
    """A Local Service with a ready Pod on each of `nodes`, announced from each of them (BGP) or
    by its owner among them (L2), and forwarded by every one of those nodes."""
    objects.create_service(
        lab, namespace, name, local=True, annotations=FROM_BGP_POOL if mode == "bgp" else None
    )
    objects.set_backends(lab, namespace, name, nodes)
    (vip,) = objects.ingress(lab, namespace, name, 1)
    spec = objects.get(lab, "service", name, "-n", namespace)["spec"]
    node_port = int(spec["ports"][0]["nodePort"])
    targets = [(str(lab.node_v4(i)), node_port) for i in nodes]
    objects.wait_until(
        "each backend node to forward the Service",
        lambda: all(a is not None for a in objects.requests(lab, targets, timeout=1.0)),
    )
    if mode == "bgp":
        hops = {str(lab.node_v4(i)) for i in nodes}
        objects.wait_equal("a nexthop per backend node", lambda: witness.fib(lab, vip), hops)
    else:
        excluded = tuple(i for i in range(1, lab.nodes + 1) if i not in nodes)
        owner = l2_owner(lab, vip, excluding=excluded)
        objects.wait_equal(
            "the owner to answer", lambda: witness.arp_macs(lab, vip), {lab.node_mac(owner)}
        )
    return vip


def pod_unready(
    lab: network_lab.Lab, namespace: str, name: str, vip: str, mode: str, nodes: list[int]
) -> Drained:
    """Under load, the Local Service's Pod on one node (the L2 owner, or the first of `nodes`
    for BGP) turns unready: the node stops announcing; the client counts failures."""
    excluded = tuple(i for i in range(1, lab.nodes + 1) if i not in nodes)
    node = l2_owner(lab, vip, excluding=excluded) if mode == "l2" else nodes[0]
    others = {str(lab.node_v4(i)) for i in nodes if i != node}
    successor = l2_owner(lab, vip, excluding=(*excluded, node)) if mode == "l2" else 0
    pod = objects.pod_name(name, node)
    try:
        return _under_load(
            lab,
            vip,
            mode,
            "pod-unready",
            lambda: objects.set_ready(lab, namespace, pod, False),
            _moved(lab, vip, mode, successor, others),
        )
    finally:
        objects.set_ready(lab, namespace, pod, True)


HOLD = "lab.ironlb.io/hold"  # a finalizer: the Node stays "being deleted" while we watch


def delete_node(lab: network_lab.Lab, vip: str, mode: str) -> Drained:
    """Under load, delete a node's Node object (the L2 owner, or node2 for BGP), held by a
    finalizer so that it stays "being deleted" while the hand-over is watched; then let it go
    and create it again as the lab made it (its kube-proxy started again if it exited)."""
    node = l2_owner(lab, vip) if mode == "l2" else 2
    name = lab.node_names[node - 1]
    successor = l2_owner(lab, vip, excluding=(node,)) if mode == "l2" else 0
    rest = {str(lab.node_v4(i)) for i in range(1, lab.nodes + 1) if i != node}

    def delete() -> None:
        lab.kubectl("delete", "node", name, "--wait=false")

    _patch_node(lab, node, {"metadata": {"finalizers": [HOLD]}})
    try:
        drained = _under_load(
            lab, vip, mode, "delete", delete, _moved(lab, vip, mode, successor, rest)
        )
    finally:
        _patch_node(lab, node, {"metadata": {"finalizers": None}})
        objects.wait_equal(
            f"{name} gone",
            lambda: lab.kubectl("get", "nodes", "-o", "name").count(f"node/{name}\n"),
            0,
        )
        lab.restore_node(node)
        if lab.kube_proxy_pid(node) is None:
            lab.start_kube_proxy(node)
        objects.wait_until(f"kube-proxy on {name} healthy", lambda: healthz_ok(lab, node))
    _wait_back(lab, vip, mode, node)
    return drained


# --- split brain --------------------------------------------------------------------------------

DETECT_TIMEOUT_S = 10.0


def claim_and_wait(interface: str, address: str, explain_url: str) -> dict[str, Any]:
    """Run where a rogue sits (the ToR): claim `address` with a gratuitous ARP (iputils arping,
    the address put on `interface` for the while, as a misconfigured host would have it), then
    poll the owner's /explain until it reports a conflict. Times from this one process."""
    subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", interface], check=True)
    try:
        # arping sends its one frame at once, then waits a second for replies: poll meanwhile.
        began = time.monotonic()
        rogue = subprocess.Popen(
            ["arping", "-c", "1", "-U", "-s", address, "-I", interface, address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while time.monotonic() - began < DETECT_TIMEOUT_S:
                with urllib.request.urlopen(explain_url, timeout=2) as answer:
                    body = json.load(answer)
                found = [c for c in body.get("conflicts") or [] if c.get("ip") == address]
                if found:
                    return {"detect_s": round(time.monotonic() - began, 4), "conflicts": found}
                time.sleep(0.01)
            return {"detect_s": None, "conflicts": []}
        finally:
            rogue.wait(10)
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", interface], check=False)
        subprocess.run(["ip", "neigh", "flush", "to", address], check=False)


def split_brain(
    lab: network_lab.Lab, namespace: str, service_name: str, vip: str
) -> dict[str, Any]:
    """A rogue (the ToR) claims the owner's address: how long until the owner reports it."""
    owner = l2_owner(lab, vip)
    url = f"http://{lab.node_v4(owner)}:7473/explain?service={namespace}/{service_name}"
    result = lab.exec(
        network_lab.NS_TOR,
        "env", f"PYTHONPATH={network_lab.ROOT}",
        sys.executable, "-m", "hack.datapath", "claim", witness.TOR_LAN, vip, url,
        check=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(result.stdout)
    found["owner"] = owner
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.datapath")
    sub = parser.add_subparsers(dest="command", required=True)
    claim = sub.add_parser("claim", help="claim an address as a rogue, wait for the report")
    claim.add_argument("interface")
    claim.add_argument("address")
    claim.add_argument("explain_url")
    args = parser.parse_args(argv)
    print(json.dumps(claim_and_wait(args.interface, args.address, args.explain_url)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
