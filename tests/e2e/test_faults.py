"""Faults in the middle of change, judged by what holds once things settle: the controller
SIGKILLed while Services are being posted, a speaker SIGKILLed in a burst of Service changes, a
node's link flapping. Witnesses: the apiserver's objects (Service status, Events, the speakers'
status objects), and the ToR's own view of the data plane (who answers ARP and NDP, the nexthops
in its kernel FIB). Every process is real; the lab restarts a killed one, as a kubelet would.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import itertools
import json
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from hack import deploy, hitless, objects, witness
from hack import lab as network_lab
from ironlb import annotations as keys

pytestmark = pytest.mark.e2e

NS = objects.METALLB_NAMESPACE
POOL = keys.ADDRESS_POOL.name
SHARED = keys.ALLOW_SHARED_IP.name
# Pools for the allocation test: not advertised, only allocated from.
ALLOC_POOL = "faults-alloc"
ALLOC_POOL2 = "faults-alloc2"
# Pools for the speaker test, one per mode. hitless.configuration()'s pools and BGP peers serve
# the link-flap test; every pool here lies in its own range.
L2_POOL = "faults-l2"
BGP_POOL = "faults-bgp"
RANGES = {
    ALLOC_POOL: ["10.252.0.160/27", "fd00:252::a0/123"],
    ALLOC_POOL2: ["10.252.0.192-10.252.0.223", "fd00:252::c0-fd00:252::df"],
    L2_POOL: ["10.250.0.230-10.250.0.249", "fd00:250::230-fd00:250::249"],
    BGP_POOL: ["10.252.0.128/27", "fd00:252::80/123"],
    hitless.L2_POOL: hitless.L2_RANGES,  # the only auto-assign pool
}
CONVERGE_TIMEOUT_S = 90.0
ROUND_PAUSE_S = 0.5
FLAPS = 20
WITNESSES = 16  # witness processes run at once (each mostly waits for answers)


def configuration() -> list[dict[str, Any]]:
    return [
        *hitless.configuration(),
        *(
            objects.metallb("IPAddressPool", name, {"addresses": RANGES[name], "autoAssign": False})
            for name in (ALLOC_POOL, ALLOC_POOL2, L2_POOL, BGP_POOL)
        ),
        objects.metallb("L2Advertisement", L2_POOL, {"ipAddressPools": [L2_POOL]}),
        objects.metallb("BGPAdvertisement", BGP_POOL, {"ipAddressPools": [BGP_POOL]}),
    ]


def nodes(lab: network_lab.Lab) -> range:
    return range(1, lab.nodes + 1)


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    # Earlier modules leave their configuration behind; overlapping pools would make ours invalid.
    objects.clear_configuration(lab)
    objects.apply(lab, *configuration())
    try:
        with deploy.deployed(lab) as d:
            objects.wait_until(
                "every speaker ready",
                lambda: all(hitless.speaker_ready(lab, i) for i in nodes(lab)),
            )
            yield d
    finally:
        objects.clear_configuration(lab)
        # The speakers delete their status objects as the tests' namespaces go, unless they were
        # stopped first: what is left of this module's goes with it.
        for plural in ("servicel2statuses", "servicebgpstatuses"):
            left = [
                item["metadata"]["name"]
                for item in objects.get(lab, plural, "-n", NS)["items"]
                if (item["metadata"].get("labels") or {})
                .get(keys.STATUS_SERVICE_NAMESPACE, "")
                .startswith("faults-")
            ]
            if left:
                lab.kubectl("delete", plural, *left, "-n", NS, "--wait=false")


def running_again(deployment: deploy.Deployment, index: int | None = None) -> None:
    """Start the controller (index None) or a speaker if it is not running: a kubelet's job."""
    if index is None:
        if deployment.controller is None or deployment.controller.poll() is not None:
            deployment.stop_controller()
            deployment.start_controller()
        return
    process = deployment.speakers.get(index)
    if process is None or process.poll() is not None:
        deployment.stop_speaker(index)
        deployment.start_speaker(index)


# --- reading the cluster ------------------------------------------------------------------------


def ingress_of(item: dict[str, Any] | None) -> list[str]:
    entries = ((item or {}).get("status") or {}).get("loadBalancer", {}).get("ingress") or []
    return [e["ip"] for e in entries if "ip" in e]


def services(lab: network_lab.Lab, namespace: str) -> dict[str, dict[str, Any]]:
    items = objects.get(lab, "services", "-n", namespace)["items"]
    return {item["metadata"]["name"]: item for item in items}


def addresses(lab: network_lab.Lab, namespace: str) -> dict[str, list[str]]:
    return {name: ingress_of(item) for name, item in services(lab, namespace).items()}


def allocated_pool(item: dict[str, Any]) -> str | None:
    pool: str | None = (item["metadata"].get("annotations") or {}).get(keys.IP_ALLOCATED_FROM_POOL)
    return pool


def in_ranges(address: str, ranges: Iterable[str]) -> bool:
    ip = ipaddress.ip_address(address)
    for text in ranges:
        if "-" in text:
            first, last = (ipaddress.ip_address(part.strip()) for part in text.split("-"))
            if first.version == ip.version and int(first) <= int(ip) <= int(last):
                return True
        elif ip in ipaddress.ip_network(text):
            return True
    return False


def status_nodes(lab: network_lab.Lab, plural: str, namespace: str) -> dict[str, set[str]]:
    """Service name -> nodes that have a status object of this kind for it."""
    found: dict[str, set[str]] = {}
    for item in objects.get(lab, plural, "-n", NS)["items"]:
        labels = item["metadata"].get("labels") or {}
        if labels.get(keys.STATUS_SERVICE_NAMESPACE) != namespace:
            continue
        node = (item.get("status") or {}).get("node") or labels.get(keys.STATUS_NODE, "?")
        found.setdefault(labels.get(keys.STATUS_SERVICE_NAME, "?"), set()).add(node)
    return found


def converge(what: str, problems: Callable[[], list[str]]) -> list[str]:
    """Evaluate `problems` until it finds none or CONVERGE_TIMEOUT_S passed; the last finding.
    Prints what the first round found (what the fault did) and how many rounds it took."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    found = problems()
    print(f"{what}: first round found {len(found)} problem(s): {found[:5]}")
    rounds = 1
    # Bounded in rounds too: each round takes at least the pause.
    while found and time.monotonic() < deadline and rounds < CONVERGE_TIMEOUT_S / ROUND_PAUSE_S:
        time.sleep(ROUND_PAUSE_S)
        found = problems()
        rounds += 1
    print(f"{what}: {'not converged' if found else 'converged'} after {rounds} round(s)")
    return found


# --- 1. the controller killed while Services are being posted ------------------------------------


@dataclass(frozen=True)
class Posted:
    name: str
    dual: bool
    pool: str | None  # None: the auto-assign pool
    sharing_key: str | None
    ports: tuple[int, ...]

    def may_share_with(self, other: Posted) -> bool:
        """MetalLB's rule: the same non-empty sharing key, no port in common (both Cluster,
        so their backend keys are equal)."""
        return (
            bool(self.sharing_key)
            and self.sharing_key == other.sharing_key
            and not set(self.ports) & set(other.ports)
        )

    def manifest(self, namespace: str) -> dict[str, Any]:
        annotations = {}
        if self.pool is not None:
            annotations[POOL] = self.pool
        if self.sharing_key is not None:
            annotations[SHARED] = self.sharing_key
        service = objects.service(namespace, self.name, dual=self.dual, annotations=annotations)
        service["spec"]["ports"] = [
            {"name": f"p{port}", "port": port, "protocol": "TCP", "targetPort": objects.ECHO_PORT}
            for port in self.ports
        ]
        return service


def posted_services() -> list[Posted]:
    """Twenty Services, those that may share interleaved with those that may not, so the kill
    after the first half falls inside every group: four dual-stack ones with one sharing key
    and distinct ports (may share), two with one key and the same port (may not), two with
    different keys (may not), twelve without a key, over three pools and both families."""
    keyed = [
        Posted("web0", True, ALLOC_POOL, "web", (80,)),
        Posted("clash0", False, ALLOC_POOL, "clash", (80,)),
        Posted("keyed-a", False, ALLOC_POOL2, "a", (90,)),
        Posted("web1", True, ALLOC_POOL, "web", (81,)),
        Posted("web2", True, ALLOC_POOL, "web", (82,)),
        Posted("clash1", False, ALLOC_POOL, "clash", (80,)),
        Posted("keyed-b", False, ALLOC_POOL2, "b", (91,)),
        Posted("web3", True, ALLOC_POOL, "web", (83,)),
    ]
    pools = [ALLOC_POOL, ALLOC_POOL2, None]
    plain = [Posted(f"plain{i}", i % 2 == 0, pools[i % 3], None, (80,)) for i in range(12)]
    return [s for pair in itertools.zip_longest(keyed, plain) for s in pair if s is not None]


def allocation_problems(
    posted: list[Posted], items: dict[str, dict[str, Any]], kept: dict[str, list[str]]
) -> list[str]:
    problems = []
    holders: dict[str, list[Posted]] = {}
    for service in posted:
        item = items[service.name]
        ips = ingress_of(item)
        for ip in ips:
            holders.setdefault(ip, []).append(service)
        versions = sorted(ipaddress.ip_address(ip).version for ip in ips)
        if versions != ([4, 6] if service.dual else [4]):
            problems.append(f"{service.name} has {ips}")
        pool = service.pool or hitless.L2_POOL
        if allocated_pool(item) != pool:
            problems.append(f"{service.name} is from pool {allocated_pool(item)}, not {pool}")
        outside = [ip for ip in ips if not in_ranges(ip, RANGES[pool])]
        if outside:
            problems.append(f"{service.name}: {outside} outside pool {pool} {RANGES[pool]}")
        if service.name in kept and sorted(kept[service.name]) != sorted(ips):
            problems.append(
                f"{service.name} had {kept[service.name]} from the killed controller, now {ips}"
            )
    for ip, users in holders.items():
        for a, b in itertools.combinations(users, 2):
            if not a.may_share_with(b):
                problems.append(f"{ip} is held by {a.name} and {b.name}, which may not share it")
    return problems


def test_controller_killed_while_services_are_posted(
    lab: network_lab.Lab,
    deployment: deploy.Deployment,
    app_namespace: str,
    record_property: Callable[[str, object], None],
) -> None:
    posted = posted_services()
    first, second = posted[: len(posted) // 2], posted[len(posted) // 2 :]
    try:
        # One request for the first half: kubectl creates them back to back, faster than the
        # controller writes their addresses, so the kill finds it in the middle of that.
        objects.apply(lab, *(s.manifest(app_namespace) for s in first))
        deployment.stop_controller(signal.SIGKILL)
        # What the killed controller had written; nothing it held in memory only.
        kept = {n: ips for n, ips in addresses(lab, app_namespace).items() if ips}
        deployment.start_controller()
        # The second half one by one, while the new controller starts, lists and takes the Lease.
        for service in second:
            objects.apply(lab, service.manifest(app_namespace))
    finally:
        running_again(deployment)
    record_property("services_with_addresses_at_kill", len(kept))
    print(f"the controller was killed with {len(kept)} of {len(first)} Services allocated")

    def all_allocated() -> dict[str, dict[str, Any]] | None:
        items = services(lab, app_namespace)
        done = all(len(ingress_of(items.get(s.name))) == (2 if s.dual else 1) for s in posted)
        return items if done else None

    items = objects.wait_until("every Service to get its addresses", all_allocated)
    assert allocation_problems(posted, items, kept) == []
    events = objects.get(lab, "events", "-n", app_namespace)["items"]
    warnings = [
        f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message')}"
        for e in events
        if e.get("type") == "Warning"
    ]
    assert warnings == []


# --- 2. a speaker killed in a burst of Service changes -------------------------------------------

APPS = {"everywhere": (1, 2, 3), "one": (2,)}  # the Pods behind the Services, by node
KILLED = 2  # the node of the "one" Pods: its Local Services lose their only announcer


@dataclass(frozen=True)
class Wanted:
    mode: str  # "l2" or "bgp"
    dual: bool = False
    local: bool = False
    app: str = "everywhere"

    @property
    def pool(self) -> str:
        return L2_POOL if self.mode == "l2" else BGP_POOL

    def announcers(self, lab: network_lab.Lab) -> set[int]:
        """Nodes that may announce it: any for Cluster, those with an endpoint for Local."""
        return set(APPS[self.app]) if self.local else set(nodes(lab))

    def manifest(self, namespace: str, name: str) -> dict[str, Any]:
        service = objects.service(
            namespace, name, local=self.local, dual=self.dual, annotations={POOL: self.pool}
        )
        service["spec"]["selector"] = {"app": self.app}
        return service


L2, BGP = Wanted("l2"), Wanted("bgp")
INITIAL = {
    "s00": L2,
    "s01": L2,
    "s02": L2,
    "s03": L2,
    "s04": L2,
    "s05": replace(L2, dual=True),
    "s06": replace(L2, dual=True),
    "s07": replace(L2, local=True, app="one"),
    "s08": replace(L2, local=True, app="one"),
    "s09": replace(L2, dual=True, local=True),
    "s10": BGP,
    "s11": BGP,
    "s12": BGP,
    "s13": BGP,
    "s14": replace(BGP, dual=True),
    "s15": replace(BGP, dual=True),
    "s16": replace(BGP, local=True, app="one"),
    "s17": replace(BGP, local=True, app="one"),
    "s18": replace(BGP, dual=True, local=True),
    "s19": replace(BGP, dual=True, local=True, app="one"),
}
# (operation, Service, what a created one is); the speaker is killed after the first half.
BURST: list[tuple[str, str, Wanted | None]] = [
    ("delete", "s00", None),
    ("switch-mode", "s01", None),
    ("switch-mode", "s10", None),
    ("switch-policy", "s02", None),
    ("switch-policy", "s16", None),
    ("create", "n00", L2),
    ("delete", "s11", None),
    ("create", "n01", replace(BGP, dual=True)),
    ("switch-mode", "s05", None),
    ("switch-policy", "s12", None),
    ("delete", "s07", None),
    ("delete", "s14", None),
    ("switch-mode", "s15", None),
    ("create", "n02", replace(L2, dual=True)),
    ("create", "n03", replace(BGP, local=True, app="one")),
    ("switch-policy", "s08", None),
    ("delete", "s03", None),
    ("switch-mode", "s17", None),
    ("delete", "n00", None),
    ("switch-policy", "s18", None),
]


@dataclass
class Burst:
    lab: network_lab.Lab
    namespace: str
    wanted: dict[str, Wanted]

    def perform(self, operation: str, name: str, created: Wanted | None) -> None:
        if operation == "create":
            assert created is not None
            self.wanted[name] = created
            objects.apply(self.lab, created.manifest(self.namespace, name))
        elif operation == "delete":
            del self.wanted[name]
            self.lab.kubectl("delete", "service", name, "-n", self.namespace, "--wait=false")
        else:
            old = self.wanted[name]
            new = (
                replace(old, mode="bgp" if old.mode == "l2" else "l2")
                if operation == "switch-mode"
                else replace(old, local=not old.local)
            )
            self.wanted[name] = new
            patch = {
                "metadata": {"annotations": {POOL: new.pool}},
                "spec": {"externalTrafficPolicy": "Local" if new.local else "Cluster"},
            }
            self.lab.kubectl(
                "patch", "service", name, "-n", self.namespace, "--type=merge",
                "-p", json.dumps(patch),
            )  # fmt: skip


def node_of_mac(lab: network_lab.Lab, mac: str | None) -> int | None:
    return hitless.mac_owner(lab, mac) if mac else None


def announcement_problems(
    lab: network_lab.Lab, namespace: str, wanted: dict[str, Wanted], seen: set[str]
) -> list[str]:
    """Everything that differs from the settled state `wanted` describes: each Service with its
    addresses from its pool; each L2 address answered by exactly one node, one that may
    announce it and that its ServiceL2Status names; each BGP address routed by the ToR through
    exactly the nodes that may announce it, which its ServiceBGPStatus objects name; no status
    object, ARP/NDP answer or route for an address in `seen` that no Service holds any more."""
    items = services(lab, namespace)
    problems = []
    if set(items) != set(wanted):
        problems.append(f"Services {sorted(items)}, wanted {sorted(wanted)}")
    l2_status = status_nodes(lab, "servicel2statuses", namespace)
    bgp_status = status_nodes(lab, "servicebgpstatuses", namespace)
    for name in sorted(set(l2_status) | set(bgp_status)):
        if name not in wanted:
            problems.append(f"status objects left for {name}, which is gone: "
                            f"L2 {l2_status.get(name)}, BGP {bgp_status.get(name)}")  # fmt: skip
    held = {ip for item in items.values() for ip in ingress_of(item)}
    stale = sorted(seen - held)
    # Every witness at once: arping and ndisc6 mostly wait for answers that may not come.
    with concurrent.futures.ThreadPoolExecutor(WITNESSES) as pool:
        arp: dict[str, concurrent.futures.Future[set[str]]] = {}
        ndp: dict[str, concurrent.futures.Future[str | None]] = {}
        fib: dict[str, concurrent.futures.Future[set[str]]] = {}
        for name, item in items.items():
            mode = wanted[name].mode if name in wanted else ""
            for ip in ingress_of(item):
                if mode == "bgp":
                    fib[ip] = pool.submit(witness.fib, lab, ip)
                elif mode == "l2" and ":" in ip:
                    ndp[ip] = pool.submit(witness.ndp_mac, lab, ip)
                elif mode == "l2":
                    arp[ip] = pool.submit(witness.arp_macs, lab, ip, 2, 3)
        for ip in stale:
            fib[ip] = pool.submit(witness.fib, lab, ip)
            if in_ranges(ip, RANGES[L2_POOL]):
                if ":" in ip:
                    ndp[ip] = pool.submit(witness.ndp_mac, lab, ip)
                else:
                    arp[ip] = pool.submit(witness.arp_macs, lab, ip, 2, 3)
    names = lab.node_names
    for name, spec in sorted(wanted.items()):
        ips = ingress_of(items.get(name))
        versions = sorted(ipaddress.ip_address(ip).version for ip in ips)
        if versions != ([4, 6] if spec.dual else [4]):
            problems.append(f"{name} ({spec}) has addresses {ips}")
            continue
        if allocated_pool(items[name]) != spec.pool or not all(
            in_ranges(ip, RANGES[spec.pool]) for ip in ips
        ):
            problems.append(f"{name} has {ips} from pool {allocated_pool(items[name])}, "
                            f"not from {spec.pool} {RANGES[spec.pool]}")  # fmt: skip
        may = spec.announcers(lab)
        if spec.mode == "bgp":
            for ip in ips:
                route = fib[ip].result()
                via = {str(lab.node_v6(i) if ":" in ip else lab.node_v4(i)) for i in may}
                if route != via:
                    problems.append(f"{name} {ip}: the ToR routes via {sorted(route)}, "
                                    f"wanted {sorted(via)}")  # fmt: skip
            if bgp_status.get(name, set()) != {names[i - 1] for i in may}:
                problems.append(f"{name}: ServiceBGPStatus of {bgp_status.get(name)}, "
                                f"wanted {sorted(names[i - 1] for i in may)}")  # fmt: skip
            if name in l2_status:
                problems.append(f"{name} is BGP but has a ServiceL2Status of {l2_status[name]}")
            continue
        answering = set()
        for ip in ips:
            macs = {m for m in [ndp[ip].result()] if m} if ":" in ip else arp[ip].result()
            owners = {node_of_mac(lab, m) for m in macs}
            if len(macs) != 1 or not owners <= may:
                problems.append(f"{name} {ip}: answered by nodes {owners}, wanted one of {may}")
            answering |= {names[i - 1] for i in owners if i is not None}
        if l2_status.get(name, set()) != answering:
            problems.append(f"{name}: ServiceL2Status of {l2_status.get(name)}, "
                            f"but {sorted(answering)} answer")  # fmt: skip
        if name in bgp_status:
            problems.append(f"{name} is L2 but has a ServiceBGPStatus of {bgp_status[name]}")
    for ip in stale:
        route = fib[ip].result()
        macs = arp[ip].result() if ip in arp else set()
        mac = ndp[ip].result() if ip in ndp else None
        if route or macs or mac:
            problems.append(
                f"{ip}, held by no Service any more: route via {sorted(route)}, "
                f"ARP answers {sorted(macs)}, NDP answer {mac}"
            )
    return problems


def test_speaker_killed_in_a_burst_of_changes(
    lab: network_lab.Lab,
    deployment: deploy.Deployment,
    app_namespace: str,
    record_property: Callable[[str, object], None],
) -> None:
    for app, on in APPS.items():
        objects.set_backends(lab, app_namespace, app, on)
    burst = Burst(lab, app_namespace, dict(INITIAL))
    objects.apply(lab, *(spec.manifest(app_namespace, n) for n, spec in INITIAL.items()))
    seen: set[str] = set()

    def remember() -> None:
        seen.update(ip for ips in addresses(lab, app_namespace).values() for ip in ips)

    # The state before the faults must be the settled one, or the check below proves nothing.
    before = converge("before", lambda: announcement_problems(lab, app_namespace, INITIAL, seen))
    assert before == []
    remember()
    try:
        for count, operation in enumerate(BURST, start=1):
            burst.perform(*operation)
            if count == len(BURST) // 2:
                deployment.stop_speaker(KILLED, signal.SIGKILL)
                remember()
        remember()
        deployment.start_speaker(KILLED)
    finally:
        running_again(deployment, KILLED)
    objects.wait_until("the speaker ready again", lambda: hitless.speaker_ready(lab, KILLED))
    started = time.monotonic()
    problems = converge(
        "after", lambda: announcement_problems(lab, app_namespace, burst.wanted, seen)
    )
    record_property("converged_after_restart_s", round(time.monotonic() - started, 1))
    assert problems == []
    # Settled means quiet: nothing is written again while nothing changes (two speakers that
    # delete each other's status objects would rewrite them for ever, and look settled between).
    quiet = hitless.written(lab, app_namespace)
    assert announcement_problems(lab, app_namespace, burst.wanted, seen) == []
    again = hitless.written(lab, app_namespace)
    assert {k: v["rv"] for k, v in again.items()} == {k: v["rv"] for k, v in quiet.items()}, again


# --- 3. a node's link flapping -------------------------------------------------------------------


def test_link_flapping_leaves_nothing_stuck(
    lab: network_lab.Lab,
    deployment: deploy.Deployment,
    app_namespace: str,
    record_property: Callable[[str, object], None],
) -> None:
    vips = hitless.serve(lab, app_namespace)
    # The node answering for the L2 address: its flapping moves that address back and forth.
    index = hitless.l2_owner(lab, vips)
    report = hitless.link_flap(lab, deployment, vips, index, FLAPS, print, seed=20)
    record_property("link_flap", json.dumps(report))
    assert report["flaps"] == FLAPS
    assert report["stuck"] == []


# --- 4. the apiserver connection dead without a word ---------------------------------------------

BLACKHOLE_TABLE = "ilb_blackhole"
# The kernel's keepalive finds the dead connections about a minute after they fell silent
# (kube.KEEPALIVE_*); the watch's own read timeout would end them only after 290 + 30 s. The wait
# stays below that, so that only the keepalive can make the test pass.
DEAD_CONNECTION_WAIT_S = 200.0


def apiserver_connections(lab: network_lab.Lab, index: int, pid: int) -> list[int]:
    """The local ports of process `pid`'s established connections to the apiserver."""
    out = lab.exec(
        f"node{index}",
        "ss",
        "-Htnp",
        "state",
        "established",
        "dst",
        f"{network_lab.CP_LAN_V4}:{network_lab.APISERVER_PORT}",
        check=True,
    ).stdout
    # Recv-Q Send-Q Local:Port Peer:Port users:(("python3",pid=123,fd=7))
    return sorted(
        int(line.split()[2].rsplit(":", 1)[1]) for line in out.splitlines() if f"pid={pid}," in line
    )


def black_hole(lab: network_lab.Lab, index: int, ports: list[int]) -> None:
    """Drop, in both directions and without a RST, every packet of these connections to the
    apiserver, as when a control-plane node dies or a NAT entry expires; new connections (other
    local ports) go through."""
    ports_set = "{ " + ", ".join(map(str, ports)) + " }"
    cp, api = network_lab.CP_LAN_V4, network_lab.APISERVER_PORT
    rules = (
        f"table inet {BLACKHOLE_TABLE} {{\n"
        "  chain out { type filter hook output priority -300; "
        f"ip daddr {cp} tcp dport {api} tcp sport {ports_set} drop; }}\n"
        "  chain in { type filter hook prerouting priority -300; "
        f"ip saddr {cp} tcp sport {api} tcp dport {ports_set} drop; }}\n"
        "}\n"
    )
    lab.exec(f"node{index}", "nft", "-f", "-", input=rules, check=True)


def lift_black_hole(lab: network_lab.Lab, index: int) -> None:
    lab.exec(f"node{index}", "nft", "delete", "table", "inet", BLACKHOLE_TABLE)


def test_a_speaker_whose_apiserver_connections_die_silently_sees_changes_again(
    lab: network_lab.Lab, deployment: deploy.Deployment, app_namespace: str
) -> None:
    """A speaker's watches whose connection died without a RST: the node must not keep
    answering for a Service deleted meanwhile (its view frozen), as it did with no bound on a
    silent watch; it finds the dead connections, watches again and withdraws."""
    objects.create_service(lab, app_namespace, "web", dual=False)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    (vip,) = objects.ingress(lab, app_namespace, "web", 1)
    macs = objects.wait_until(
        f"one ARP answer for {vip}",
        lambda: found if len(found := witness.arp_macs(lab, vip)) == 1 else None,
    )
    owner = hitless.mac_owner(lab, next(iter(macs)))
    assert owner is not None, f"{macs} is no node's MAC"
    speaker = deployment.speakers[owner]
    ports = apiserver_connections(lab, owner, speaker.pid)
    assert ports, f"the speaker of node{owner} holds no connection to the apiserver"
    log_before = len(deployment.logs(f"speaker-{lab.node_names[owner - 1]}"))
    black_hole(lab, owner, ports)
    try:
        lab.kubectl("delete", "service", "web", "-n", app_namespace)
        # The other nodes never announced it; the owner stops once it sees the deletion.
        objects.wait_equal(
            f"node{owner} to stop answering for {vip} (its {len(ports)} apiserver connections "
            "black-holed)",
            lambda: witness.arp_macs(lab, vip),
            set(),
            timeout=DEAD_CONNECTION_WAIT_S,
        )
    finally:
        lift_black_hole(lab, owner)
    log = deployment.logs(f"speaker-{lab.node_names[owner - 1]}")[log_before:]
    failed = [
        json.loads(line)
        for line in log.splitlines()
        if '"watch failed; will resume"' in line and '"Service"' in line
    ]
    print(f"node{owner}'s Service watch: {failed[:1]}")
    assert failed, "the withdrawal did not come from finding the Service watch dead"
