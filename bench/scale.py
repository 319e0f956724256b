"""Scale, measured in the lab: many Nodes and Services around three real speakers.

The lab's three nodes run the real controller and speakers (as the chart's ServiceAccounts),
kube-proxy and kube-controller-manager; kwok (hack/kwok.py) adds N fake Nodes, Ready, whose
Pods it makes Running and Ready. M LoadBalancer Services, half in an L2 pool and half in a BGP
pool, one in five `externalTrafficPolicy: Local`, each with P Pods bound to the fake Nodes; a
quarter of the Local ones instead select one real Pod on each lab node (so some Local Services
are announced; a Local Service whose Pods are all on fake Nodes has no speaker to announce it,
as in a cluster where no speaker runs beside its Pods); the others select one of G Pod groups
(`--groups`, default min(M, 1,000)) in turn, P Pods each. EndpointSlices come from
kube-controller-manager. Nodes, Pods and the M Services exist before the clock starts: the
Services name pools that do not exist yet, and the controller and speakers start and settle with
them pending. At t0 the two pools are created (one request), and then:

* `assign_all_s`: until every Service has an ingress address (a watch on the Services);
* `routes_all_s`: until the ToR's kernel FIB holds a /32 for every BGP Service that should be
  announced (`_ecmp`: with all three nodes as nexthops), from the netlink watcher in ilb-tor;
* `status_converged_s`: until every ServiceL2Status and ServiceBGPStatus the speakers should
  write exists with its status (a watch on both kinds): one ServiceL2Status per announced L2
  Service, one ServiceBGPStatus per announced BGP Service and node;
* then an idle window (60 s; `--quick`: 15 s): the speakers' CPU from /proc/<pid>/stat,
  scaled to a minute (`speaker_cpu_s_idle_per_min`, the busiest speaker; its ExaBGP apart);
* `first_route_s`: until the first of those /32s is in the FIB;
* `speaker_rss_mb` / `controller_rss_mb`: VmRSS at the end (the largest speaker);
  `speaker_hwm_mb`: the largest speaker's VmHWM (its peak);
* after the idle window, what one change costs a speaker, from its own
  `ironlb_speaker_pass_seconds` (the change of its sum over the change of its count, the
  busiest node), and the same from `ironlb_speaker_pass_cpu_seconds` (`..._cpu_s`: the wall
  time includes waiting for a core while kube-proxy, the controller and the other speakers
  take up the same change): `speaker_pass_one_change_s` after a label set on one Service, five
  times 2 s apart; `speaker_pass_node_change_s` after one on a lab Node (a label no
  advertisement reads: nothing is judged anew); `speaker_pass_full_s` after the
  L2Advertisement's configuration changed but not what it selects (every Service is judged
  anew);
* `status_floor_s`: a bare client writing the status objects the speakers wrote (each created,
  then its status set: the speakers' two requests), as three writers of the speakers'
  concurrency each, into a scratch namespace of the same apiserver, in the same run; and
  `status_vs_floor` = `status_converged_s` / `status_floor_s`;
* `apiserver_requests_per_s_per_speaker`: from the apiserver's audit log, which this bench
  turns on for the speakers' ServiceAccount only (level Metadata): each request is one audit
  ID, attributed to a speaker by its source address (each node has its own), counted from t0
  to the end of the idle window; a watch counts once, when it starts. Also split into the
  converging part and the idle window. The apiserver's own `apiserver_request_total` has no
  client label, so it cannot tell the speakers from kube-proxy, kwok and the controller.
* last, `l2_failover_p99_s` (and `l2_failover_median_s`, `l2_failover`): with every Service
  still there, F times (`--failovers`, default 20; `--quick`: 6) the speaker owning a layer 2
  address is SIGKILLed, one address owned by each node in turn, and the ToR's ARP witness
  (as in bench.failover_l2: a request every 10 ms) times the fault to the successor's first
  answer; the speaker is started again and owns the address again before the next. With six
  trials the p99 is, in effect, the worst of them. `l2_failover_lost`: trials with no answer.

    python -m bench.scale [--quick] [--nodes N] [--services M] [--groups G] [--pods P] [--idle S]
        [--failovers F]

`--quick`: N = 100, M = 1,000, G = 1,000, P = 1 (the measured part takes under a minute; the
lab's start-up, kwok's Nodes, the Pods and the Services before t0 are not measured and not
counted in it). Full: N = 1,000, M = 10,000, G = 1,000, P = 1. The last line printed is one
JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import ipaddress
import json
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import bgp as bgp_bench
from bench import failover_l2
from bench.figures import distribution
from bench.session import Session
from hack import deploy, hitless, kwok, objects, processes
from hack import lab as network_lab
from ironlb_io import kube
from speaker import election

NS = "metallb-system"
APP_NS = "bench-scale"
L2_POOL, BGP_POOL = "scale-l2", "scale-bgp"
# Outside every network the lab uses (docs/lab.md); an L2 address need not be in the LAN's
# subnet for a speaker to answer for it, and only the status objects are checked here.
L2_NET = ipaddress.IPv4Network("10.246.0.0/16")
BGP_NET = ipaddress.IPv4Network("10.247.0.0/16")
LAB_BACKEND = "lab-backend"
SPEAKER_USER = "system:serviceaccount:metallb-system:ironlb-speaker"
SETUP_CONCURRENCY = 32
LOCAL_EVERY = 5  # one Service in five is Local
LAB_LOCAL_EVERY = 4  # one Local Service in four selects the lab's real Pods
ECHO_PORT = 8080


class BenchError(Exception):
    """Something the bench needs did not happen; the message says what."""


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the plan (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    name: str
    mode: str  # "l2" or "bgp"
    local: bool
    # The Pods it selects: its own on fake Nodes, or the lab's real ones (LAB_BACKEND).
    app: str

    @property
    def lab_backed(self) -> bool:
        return self.app == LAB_BACKEND


def group(i: int, groups: int) -> str:
    """The app label of the i-th Pod group (`groups` of them, like Deployments)."""
    return f"g{i % groups:05d}"


def plan(services: int, groups: int | None = None) -> list[Planned]:
    """The Services: L2 and BGP alternate; every LOCAL_EVERY-th is Local, and every
    LAB_LOCAL_EVERY-th of those selects the lab's Pods; the others select one of `groups` Pod
    groups in turn (default: one each), so several Services may front the same Pods, as
    Services of one app do (each still gets EndpointSlices of its own)."""
    groups = groups or services
    out = []
    for i in range(services):
        name = f"s{i:05d}"
        local = i % LOCAL_EVERY == LOCAL_EVERY - 1
        # Local Services come in pairs of modes (LOCAL_EVERY is odd): every LAB_LOCAL_EVERY-th
        # pair selects the lab's Pods, so both modes have announced Local Services.
        lab_backed = local and (i // LOCAL_EVERY) % (2 * LAB_LOCAL_EVERY) in (0, 1)
        out.append(
            Planned(
                name,
                "l2" if i % 2 == 0 else "bgp",
                local,
                LAB_BACKEND if lab_backed else group(i, groups),
            )
        )
    return out


@dataclass(frozen=True)
class Expected:
    l2_services: frozenset[str]  # one ServiceL2Status each (one node answers)
    bgp_services: frozenset[str]  # one ServiceBGPStatus each per lab node, and a /32
    bgp_nodes: int

    @property
    def l2_statuses(self) -> int:
        return len(self.l2_services)

    @property
    def bgp_statuses(self) -> int:
        return len(self.bgp_services) * self.bgp_nodes


def expected(planned: Sequence[Planned], lab_nodes: int) -> Expected:
    """What the speakers should announce once every Pod is Ready: a Cluster Service everywhere
    (it has ready endpoints), a Local one only where a lab node has a ready endpoint: the
    lab-backed ones have one on every lab node, the others none on any."""
    announced = [p for p in planned if not p.local or p.lab_backed]
    return Expected(
        frozenset(p.name for p in announced if p.mode == "l2"),
        frozenset(p.name for p in announced if p.mode == "bgp"),
        lab_nodes,
    )


def service(p: Planned) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": p.name,
            "namespace": APP_NS,
            "annotations": {"metallb.io/address-pool": L2_POOL if p.mode == "l2" else BGP_POOL},
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": p.app},
            # No NodePorts: 10,000 Services would exhaust the range (Local ones still get a
            # healthCheckNodePort, which kube-proxy answers and the speakers probe).
            "allocateLoadBalancerNodePorts": False,
            "externalTrafficPolicy": "Local" if p.local else "Cluster",
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": ECHO_PORT}],
        },
    }


def pools() -> list[dict[str, Any]]:
    """The two pools: created at t0, they are what the pending Services were waiting for."""
    return [
        objects.metallb(
            "IPAddressPool", L2_POOL, {"addresses": [str(L2_NET)], "autoAssign": False}
        ),
        objects.metallb(
            "IPAddressPool", BGP_POOL, {"addresses": [str(BGP_NET)], "autoAssign": False}
        ),
    ]


def configuration() -> list[dict[str, Any]]:
    """Everything but the pools (MetalLB, and so ironlb, accept references to pools that do not
    exist yet: they are ignored until they do)."""
    return [
        objects.metallb("L2Advertisement", L2_POOL, {"ipAddressPools": [L2_POOL]}),
        objects.tor_peer("scale-tor", my_asn=bgp_bench.MY_ASN, hold_time="3s"),
        objects.metallb("BGPAdvertisement", BGP_POOL, {"ipAddressPools": [BGP_POOL]}),
    ]


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [SPEAKER_USER]}, {"level": "None"}],
}


def parse_time(stamp: str) -> float:
    """An audit timestamp (RFC 3339, microseconds, Z) as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def count_requests(
    lines: Iterable[str], user: str, start: float, end: float
) -> dict[str, Counter[str]]:
    """Requests by `user` received in [start, end) (epoch seconds), by source address and verb.

    One request is one audit ID, however many stages were logged for it (a watch logs when it
    starts and when it ends); lines that are not audit events are skipped. The keys of each
    counter are "verb resource[/subresource]"."""
    seen: set[str] = set()
    out: dict[str, Counter[str]] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("kind") != "Event":
            continue
        if (event.get("user") or {}).get("username") != user:
            continue
        audit_id = event.get("auditID")
        if not audit_id or audit_id in seen:
            continue
        received = event.get("requestReceivedTimestamp")
        if not received or not start <= parse_time(received) < end:
            continue
        seen.add(audit_id)
        source = (event.get("sourceIPs") or ["?"])[0]
        ref = event.get("objectRef") or {}
        what = "/".join(str(ref[k]) for k in ("resource", "subresource") if ref.get(k))
        out.setdefault(source, Counter())[f"{event.get('verb', '?')} {what or '-'}".strip()] += 1
    return out


def per_second(
    counts: Mapping[str, Counter[str]], sources: Sequence[str], seconds: float
) -> dict[str, Any]:
    """Requests a second per source (every one of `sources`, zero if absent), their mean and
    maximum, and the verbs over all of them."""
    rates = {s: round(sum(counts.get(s, Counter()).values()) / seconds, 3) for s in sources}
    verbs: Counter[str] = Counter()
    for s in sources:
        verbs.update(counts.get(s, Counter()))
    return {
        "mean": round(sum(rates.values()) / len(rates), 3) if rates else None,
        "max": max(rates.values()) if rates else None,
        "by_speaker": rates,
        "verbs": dict(sorted(verbs.items())),
        "window_s": round(seconds, 1),
    }


# --- watching the apiserver -----------------------------------------------------------------------


class Watch:
    """The objects of one collection, kept current by a watch in a thread of its own; `wait`
    returns when a predicate over them holds (the time it first held is the event's)."""

    def __init__(self, lab: network_lab.Lab, path: str) -> None:
        d = lab.cluster.directory
        self.context = ssl.create_default_context(cafile=str(d / "ca.crt"))
        self.context.load_cert_chain(d / "admin.crt", d / "admin.key")
        self.path = path
        self.objects: dict[str, dict[str, Any]] = {}
        self.condition = threading.Condition()
        self.stopping = threading.Event()
        self.error: str | None = None
        self.connection: http.client.HTTPSConnection | None = None
        listed = lab.api_get(f"{path}?limit=0")
        for item in listed.get("items") or []:
            self.objects[item["metadata"]["name"]] = item
        self.version = str(listed["metadata"]["resourceVersion"])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._watch()
            except Exception as e:  # a stream closed under it raises anything
                if self.stopping.is_set():
                    return
                self.error = f"{type(e).__name__}: {e}"
                time.sleep(0.5)

    def _watch(self) -> None:
        self.connection = http.client.HTTPSConnection(
            str(network_lab.CP_HOST_V4),
            network_lab.APISERVER_PORT,
            context=self.context,
            timeout=3600,
        )
        query = (
            f"watch=1&resourceVersion={self.version}&allowWatchBookmarks=true&timeoutSeconds=1800"
        )
        self.connection.request("GET", f"{self.path}?{query}")
        response = self.connection.getresponse()
        if response.status != 200:
            raise ValueError(f"watch {self.path}: HTTP {response.status}")
        for line in response:
            event = json.loads(line)
            item = event["object"]
            meta = item.get("metadata") or {}
            with self.condition:
                if event["type"] == "ERROR":
                    raise ValueError(f"watch {self.path}: {item.get('message')}")
                self.version = str(meta.get("resourceVersion", self.version))
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.objects[meta["name"]] = item
                elif event["type"] == "DELETED":
                    self.objects.pop(meta["name"], None)
                self.condition.notify_all()

    def wait(
        self, check: Callable[[dict[str, dict[str, Any]]], bool], timeout: float
    ) -> float | None:
        """Monotonic time at which `check` first held, or None after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while not check(self.objects):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.condition.wait(min(left, 1.0))
            return time.monotonic()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.condition:
            return dict(self.objects)

    def close(self) -> None:
        self.stopping.set()
        if self.connection is not None:
            with contextlib.suppress(OSError):
                if self.connection.sock is not None:
                    self.connection.sock.shutdown(2)
            self.connection.close()
        self.thread.join(5)


PASS_METRIC = "ironlb_speaker_pass_seconds"
PASS_CPU_METRIC = "ironlb_speaker_pass_cpu_seconds"
PASS_CHANGES, PASS_SPACING_S = 5, 2.0
FLOOR_NS = "bench-scale-floor"
FLOOR_WRITERS, FLOOR_CONCURRENCY = 3, 8  # the speakers, and each one's status writer


def pass_totals(metrics: str | None, name: str = PASS_METRIC) -> tuple[float, float] | None:
    """(seconds, passes) so far of one of a speaker's pass histograms, from its /metrics."""
    total = re.search(rf"^{name}_sum (\S+)$", metrics or "", re.MULTILINE)
    count = re.search(rf"^{name}_count (\S+)$", metrics or "", re.MULTILINE)
    return (float(total.group(1)), float(count.group(1))) if total and count else None


def mean_pass_s(
    before: Mapping[int, tuple[float, float] | None],
    after: Mapping[int, tuple[float, float] | None],
) -> float | None:
    """The mean pass between two readings, on the node whose passes took longest."""
    means = []
    for node, b in before.items():
        a = after.get(node)
        if a is not None and b is not None and a[1] > b[1]:
            means.append((a[0] - b[0]) / (a[1] - b[1]))
    return round(max(means), 4) if means else None


def pass_cost(
    lab: network_lab.Lab, change: Callable[[int], object]
) -> tuple[float | None, float | None]:
    """Mean speaker pass over PASS_CHANGES changes made PASS_SPACING_S apart: (wall, CPU)."""

    def totals() -> dict[str, dict[int, tuple[float, float] | None]]:
        found = hitless.speaker_metrics(lab)
        return {
            metric: {i: pass_totals(m, metric) for i, m in found.items()}
            for metric in (PASS_METRIC, PASS_CPU_METRIC)
        }

    before = totals()
    for k in range(PASS_CHANGES):
        change(k)
        time.sleep(PASS_SPACING_S)
    after = totals()
    return (
        mean_pass_s(before[PASS_METRIC], after[PASS_METRIC]),
        mean_pass_s(before[PASS_CPU_METRIC], after[PASS_CPU_METRIC]),
    )


def failover_vips(
    planned: Sequence[Planned],
    ingress: Mapping[str, str],
    nodes: Sequence[str],
) -> list[str]:
    """One layer 2 address owned by each node (in `nodes`' order), for the failover trials: a
    Cluster Service's (every node is a candidate, so its owner is the election's among all of
    them), the first such Service in name order whose owner is that node. `ingress`: Service
    name -> its address. A node that owns none of them is left out."""
    owned: dict[str, str] = {}
    for p in sorted(planned, key=lambda p: p.name):
        address = ingress.get(p.name)
        if p.mode != "l2" or p.local or address is None:
            continue
        owner = election.owner(address, list(nodes))
        if owner is not None:
            owned.setdefault(owner, address)
    return [owned[n] for n in nodes if n in owned]


def ingress_of(items: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Service name -> its first ingress address, from a Watch's snapshot."""
    out = {}
    for item in items.values():
        found = (item.get("status") or {}).get("loadBalancer", {}).get("ingress") or []
        if found and found[0].get("ip"):
            out[item["metadata"]["name"]] = found[0]["ip"]
    return out


def l2_failovers(
    lab: network_lab.Lab, deployment: deploy.Deployment, vips: Sequence[str], trials: int
) -> tuple[list[float], int]:
    """`trials` SIGKILLs of an address's owner, the addresses in turn (so each node's speaker
    is killed as often as the others), each with the ToR's ARP witness (bench.failover_l2);
    the seconds until the successor answered, and how many trials saw no answer."""
    took: list[float] = []
    lost = 0
    for k in range(trials):
        vip = vips[k % len(vips)]
        # Killed and started again, a speaker lists 1,000 Services before it answers: a longer
        # bound for its return than the bare lab's.
        seconds = failover_l2.trial(lab, deployment, vip, "kill", back_timeout=120.0)
        say(f"failover #{k + 1} ({vip}): {'lost' if seconds is None else f'{seconds:.3f} s'}")
        if seconds is None:
            lost += 1
        else:
            took.append(seconds)
    return took, lost


def every_node_selector(k: int) -> str:
    """A patch of the L2Advertisement that changes the configuration but not what it selects:
    every node, through an empty selector or through none (every Service is judged anew)."""
    return json.dumps({"spec": {"nodeSelectors": [{}] if k % 2 == 0 else None}})


def floor_objects(
    l2: int, bgp: int, nodes: Sequence[str]
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """What the speakers write, to a bare client's measure: (plural, object, status) for `l2`
    ServiceL2Statuses and a ServiceBGPStatus per node for each of `bgp` Services."""
    out = []

    def one(
        kind: str, plural: str, name: str, node: str, service: str, extra: dict[str, Any]
    ) -> None:
        labels = {
            "metallb.io/node": node,
            "metallb.io/service-name": service,
            "metallb.io/service-namespace": APP_NS,
        }
        obj = {
            "apiVersion": "metallb.io/v1beta1",
            "kind": kind,
            "metadata": {"name": name, "namespace": FLOOR_NS, "labels": labels},
            "spec": {},
        }
        status = {"node": node, "serviceName": service, "serviceNamespace": APP_NS, **extra}
        out.append((plural, obj, status))

    for i in range(l2):
        one("ServiceL2Status", "servicel2statuses", f"l2-{i}", nodes[i % len(nodes)], f"s{i}",
            {"interfaces": []})  # fmt: skip
    for i in range(bgp):
        for node in nodes:
            one("ServiceBGPStatus", "servicebgpstatuses", f"bgp-{i}-{node}", node, f"s{i}",
                {"peers": ["tor"]})  # fmt: skip
    return out


async def write_floor(
    lab: network_lab.Lab, items: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]
) -> float:
    """Seconds for FLOOR_WRITERS clients, FLOOR_CONCURRENCY requests each, to create every
    object and set its status."""
    credentials = kube.from_kubeconfig(lab.kubeconfig)
    clients = [
        kube.Client(credentials, concurrency=FLOOR_CONCURRENCY) for _ in range(FLOOR_WRITERS)
    ]
    try:
        started = time.monotonic()

        async def writer(
            client: kube.Client, share: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]
        ) -> None:
            gate = asyncio.Semaphore(FLOOR_CONCURRENCY)

            async def one(plural: str, obj: dict[str, Any], status: dict[str, Any]) -> None:
                base = kube.group_path("metallb.io", "v1beta1", plural, FLOOR_NS)
                async with gate:
                    await client.create(base, obj)
                    await client.merge_patch(
                        f"{base}/{obj['metadata']['name']}/status", {"status": status}
                    )

            await asyncio.gather(*(one(*item) for item in share))

        await asyncio.gather(*(writer(c, items[k::FLOOR_WRITERS]) for k, c in enumerate(clients)))
        return time.monotonic() - started
    finally:
        for client in clients:
            await client.close()


def status_floor(lab: network_lab.Lab, l2: int, bgp: int) -> float:
    lab.kubectl("create", "namespace", FLOOR_NS)
    try:
        items = floor_objects(l2, bgp, lab.node_names)
        return round(asyncio.run(write_floor(lab, items)), 2)
    finally:
        lab.kubectl("delete", "namespace", FLOOR_NS, "--wait=false", "--ignore-not-found")


def has_ingress(item: Mapping[str, Any]) -> bool:
    return bool(((item.get("status") or {}).get("loadBalancer") or {}).get("ingress"))


def written_statuses(items: Mapping[str, Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(Service name, node) of every status object whose status the speaker has written."""
    out = set()
    for item in items.values():
        status = item.get("status") or {}
        if status.get("node") and status.get("serviceNamespace") == APP_NS:
            out.add((str(status["serviceName"]), str(status["node"])))
    return out


# --- creating things ------------------------------------------------------------------------------


async def create_all(
    lab: network_lab.Lab, paths_and_bodies: Sequence[tuple[str, dict[str, Any]]]
) -> None:
    """POST every object, SETUP_CONCURRENCY at a time, retrying what the apiserver says to retry."""
    credentials = kube.from_kubeconfig(lab.kubeconfig)
    async with kube.Client(credentials, concurrency=SETUP_CONCURRENCY) as client:
        gate = asyncio.Semaphore(SETUP_CONCURRENCY)

        async def one(path: str, body: dict[str, Any]) -> None:
            for attempt in range(6):
                try:
                    async with gate:
                        await client.create(path, body)
                    return
                except kube.ApiError as e:
                    if e.conflict and attempt:
                        return  # an earlier attempt got through
                    # A new namespace's `default` ServiceAccount comes a moment later (Pods).
                    waiting = "serviceaccount" in str(e).lower()
                    if not (e.retryable or waiting) or attempt == 5:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))

        await asyncio.gather(*(one(p, b) for p, b in paths_and_bodies))


def wait_for(what: str, check: Callable[[], bool], timeout: float, every: float = 1.0) -> float:
    started = time.monotonic()
    deadline = started + timeout
    while not check():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - started


def count_where(lab: network_lab.Lab, path: str, test: Callable[[dict[str, Any]], bool]) -> int:
    total, token = 0, ""
    while True:
        page = lab.api_get(
            f"{path}{'&' if '?' in path else '?'}limit=500"
            + (f"&continue={token}" if token else "")
        )
        total += sum(1 for item in page.get("items") or [] if test(item))
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return total


def node_ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# --- /proc ----------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float | None:
    sample = bgp_bench._sample(pid, "any")
    return None if sample is None else sample.rss_mb


def cpu_s(pid: int) -> float | None:
    sample = bgp_bench._sample(pid, "any")
    return None if sample is None else sample.cpu_s


# Who else uses the two cores: the lab's processes by the start of their command line.
CLUSTER_ROLES = (
    ("kube-apiserver", "/kube-apiserver"),
    ("etcd", "/etcd"),
    ("kube-proxy", "/kube-proxy"),
    ("kube-controller-manager", "/kube-controller-manager"),
    ("kwok", "/kwok"),
)


def cluster_cpu(controller_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the control plane's processes, kube-proxy (all nodes), kwok and
    our controller, by role (from /proc: each process's first argument)."""
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        role = next((r for r, tail in CLUSTER_ROLES if argv0.endswith(tail)), None)
        if int(entry.name) == controller_pid:
            role = "ironlb-controller"
        if role is None:
            continue
        used = cpu_s(int(entry.name))
        if used is not None:
            out[role] = out.get(role, 0.0) + used
    return out


def cpu_between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 2) for k, v in sorted(after.items())}


def wait_quiet(pid: int, timeout: float) -> float | None:
    """Until the process uses under 10 % of a core over half a second: how long that took, or
    None if it did not before `timeout`."""
    started = time.monotonic()
    last = cpu_s(pid)
    while time.monotonic() - started < timeout:
        time.sleep(0.5)
        now = cpu_s(pid)
        if now is None or last is None:
            return None
        if now - last < 0.05:
            return round(time.monotonic() - started, 1)
        last = now
    return None


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Sizes:
    nodes: int
    services: int
    pods: int
    groups: int
    idle_s: float
    quick: bool
    failovers: int


def run(lab: network_lab.Lab, sizes: Sizes, r: dict[str, Any], phases: dict[str, float]) -> None:
    started = time.monotonic()

    def phase(name: str) -> None:
        nonlocal started
        phases[name] = round(time.monotonic() - started, 1)
        say(f"{name}: {phases[name]} s")
        started = time.monotonic()

    work = lab.directory / "bench-scale"
    work.mkdir(parents=True, exist_ok=True)
    kwok_log = (work / "kwok.log").open("ab")
    fake = lab.popen(
        network_lab.NS_CP,
        *kwok.argv(lab.kubeconfig, kwok.write_config(work)),
        stdout=kwok_log,
        stderr=subprocess.STDOUT,
    )
    deployment: deploy.Deployment | None = None
    watches: list[Watch] = []
    fib: bgp_bench.Fib | None = None
    try:
        asyncio.run(
            create_all(lab, [("/api/v1/nodes", kwok.node(i)) for i in range(1, sizes.nodes + 1)])
        )
        wait_for(
            f"{sizes.nodes} kwok Nodes Ready",
            lambda: (
                count_where(lab, "/api/v1/nodes?labelSelector=type%3Dkwok", node_ready)
                >= sizes.nodes
            ),
            timeout=120 + sizes.nodes / 10,
        )
        if fake.poll() is not None:
            raise BenchError(f"kwok exited ({fake.returncode}); see {work / 'kwok.log'}")
        phase("kwok_nodes")

        lab.kubectl("create", "namespace", APP_NS)
        planned = plan(sizes.services, sizes.groups)
        want = expected(planned, lab.nodes)
        objects.set_backends(lab, APP_NS, LAB_BACKEND, list(range(1, lab.nodes + 1)))
        names = [kwok.node_name(i) for i in range(1, sizes.nodes + 1)]
        apps = sorted({p.app for p in planned if not p.lab_backed})
        pods = [
            kwok.pod(APP_NS, f"{app}-{k}", app, names[(n * sizes.pods + k) % len(names)])
            for n, app in enumerate(apps)
            for k in range(sizes.pods)
        ]
        asyncio.run(create_all(lab, [(kube.core_path("pods", APP_NS), pod) for pod in pods]))
        wait_for(
            f"{len(pods)} Pods Ready",
            lambda: (
                count_where(lab, f"/api/v1/namespaces/{APP_NS}/pods", objects.is_ready)
                >= len(pods) + lab.nodes
            ),
            timeout=120 + len(pods) / 20,
        )
        phase("pods_ready")

        # The Services exist before ironlb starts, waiting for pools that do not exist yet:
        # creating 10,000 Services takes minutes on two cores, and what is measured is
        # ironlb's answer to a burst, not the client's creation rate.
        asyncio.run(
            create_all(lab, [(kube.core_path("services", APP_NS), service(p)) for p in planned])
        )
        phase("services_created")

        objects.apply(lab, *configuration())
        deployment = deploy.Deployment(lab)
        deployment.start_controller()
        for i in range(1, lab.nodes + 1):
            deployment.start_speaker(i)
        everyone = bgp_bench.node_addresses(lab, range(1, lab.nodes + 1))
        objects.wait_until(
            "every speaker's BGP session",
            lambda: bgp_bench.tor_established(lab) >= everyone,
            60 + sizes.services / 100,
        )
        phase("ironlb_up")

        fib = bgp_bench.Fib(lab, [str(BGP_NET)], str(BGP_NET), lab.nodes)
        services = Watch(lab, f"/api/v1/namespaces/{APP_NS}/services")
        l2 = Watch(lab, f"/apis/metallb.io/v1beta1/namespaces/{NS}/servicel2statuses")
        bgp = Watch(lab, f"/apis/metallb.io/v1beta1/namespaces/{NS}/servicebgpstatuses")
        watches += [services, l2, bgp]
        # Settle: the start-up work (listing 10,000 pending Services) is not what is measured.
        settled_s, settled, _ = bgp_bench.wait_idle(
            lab, deployment, timeout=60 + sizes.services / 100
        )
        assert deployment.controller is not None
        controller_s = wait_quiet(deployment.controller.pid, timeout=60 + sizes.services / 100)
        r["settled_before_t0_s"] = round(settled_s, 1) if settled else None
        r["controller_settled_before_t0_s"] = controller_s
        phase("settled")
        before = bgp_bench.Usage.take(lab, deployment)
        cluster_before = cluster_cpu(deployment.controller.pid)
        say(
            f"creating the pools for {sizes.services} pending Services "
            f"({len(want.l2_services)} L2 and {len(want.bgp_services)} BGP of them to be "
            "announced)"
        )
        t0, t0_wall = time.monotonic(), time.time()
        objects.apply(lab, *pools())
        # Bounds, not expectations: on two shared cores 10,000 addresses took 5.5 minutes (the
        # controller's status writes compete with kube-proxy in three nodes reprogramming 10,000
        # Services); a slow convergence must be measured, not cut off. Status objects, three per
        # BGP Service, may lag the routes: a longer bound still.
        budget = 120 + sizes.services / 15
        status_budget = budget + 120 + sizes.services / 20

        assigned = services.wait(
            lambda o: sum(map(has_ingress, o.values())) >= sizes.services, budget
        )
        r["assign_all_s"] = None if assigned is None else round(assigned - t0, 2)
        say(f"all addressed: {r['assign_all_s']} s")

        bgp_count = len(want.bgp_services)
        fib.wait(
            lambda: fib.full_count >= bgp_count, timeout=max(1.0, t0 + budget - time.monotonic())
        )
        first = fib.reached(t0, bgp_count, full=False)
        full = fib.reached(t0, bgp_count, full=True)
        one = fib.reached(t0, 1, full=False)
        r["first_route_s"] = None if one is None else round(one - t0, 2)
        r["routes_all_s"] = None if first is None else round(first - t0, 2)
        r["routes_all_ecmp_s"] = None if full is None else round(full - t0, 2)
        r["routes_in_fib"] = fib.any_count
        say(f"routes: all {r['routes_all_s']} s, with every nexthop {r['routes_all_ecmp_s']} s")

        want_l2 = want.l2_statuses
        want_bgp = want.bgp_statuses
        l2_done = l2.wait(
            lambda o: len(written_statuses(o)) >= want_l2,
            max(1.0, t0 + status_budget - time.monotonic()),
        )
        bgp_done = bgp.wait(
            lambda o: len(written_statuses(o)) >= want_bgp,
            max(1.0, t0 + status_budget - time.monotonic()),
        )
        r["status_l2_s"] = None if l2_done is None else round(l2_done - t0, 2)
        r["status_bgp_s"] = None if bgp_done is None else round(bgp_done - t0, 2)
        converged = None if l2_done is None or bgp_done is None else max(l2_done, bgp_done)
        r["status_converged_s"] = None if converged is None else round(converged - t0, 2)
        say(f"status objects: L2 {r['status_l2_s']} s, BGP {r['status_bgp_s']} s")
        end_converging, end_converging_wall = time.monotonic(), time.time()
        after = bgp_bench.Usage.take(lab, deployment)
        r["cpu_converging"] = after.cpu_since(before)
        r["cpu_converging_cluster"] = cpu_between(
            cluster_before, cluster_cpu(deployment.controller.pid)
        )
        # What the speakers still do once every status object is written (Events wait for
        # the status writer) is converging too: the idle window starts when they are quiet.
        quiet_s, quiet, _ = bgp_bench.wait_idle(lab, deployment, timeout=60 + sizes.services / 50)
        r["speakers_quiet_after_status_s"] = round(quiet_s, 1) if quiet else None

        # Idle: nothing changes but kwok's lease renewals (and the heartbeat stage).
        idle_start, idle_wall = time.monotonic(), time.time()
        speaker_pids = {i: p.pid for i, p in deployment.speakers.items()}
        idle_before = {i: cpu_s(pid) for i, pid in speaker_pids.items()}
        tree_before = bgp_bench.Usage.take(lab, deployment)
        # In slices, so that a reader sees whether the use decays (work left over) or is steady.
        slices: list[float] = []
        last = sum(v or 0.0 for v in idle_before.values())
        while time.monotonic() - idle_start < sizes.idle_s - 0.01:
            time.sleep(min(5.0, sizes.idle_s - (time.monotonic() - idle_start)))
            now = sum(v or 0.0 for v in (cpu_s(pid) for pid in speaker_pids.values()))
            slices.append(round(now - last, 3))
            last = now
        r["speaker_cpu_s_idle_slices_5s"] = slices
        idle_after = {i: cpu_s(pid) for i, pid in speaker_pids.items()}
        tree_after = bgp_bench.Usage.take(lab, deployment)
        idle_s = time.monotonic() - idle_start
        idle_end_wall = time.time()
        per_min = {}
        for i, b in idle_before.items():
            a = idle_after.get(i)
            if a is not None and b is not None:
                per_min[f"node{i}"] = round((a - b) * 60 / idle_s, 3)
        r["speaker_cpu_s_idle_per_min_by_node"] = per_min
        r["speaker_cpu_s_idle_per_min"] = max(per_min.values()) if per_min else None
        r["idle_window_s"] = round(idle_s, 1)
        r["cpu_idle_trees"] = tree_after.cpu_since(tree_before)

        # What one change costs a speaker, once idle.
        touched = sorted(want.l2_services | want.bgp_services)[0]
        r["speaker_pass_one_change_s"], r["speaker_pass_one_change_cpu_s"] = pass_cost(
            lab,
            lambda k: lab.kubectl(
                "label", "service", touched, "-n", APP_NS, f"bench-touch={k}", "--overwrite"
            ),
        )
        r["speaker_pass_node_change_s"], r["speaker_pass_node_change_cpu_s"] = pass_cost(
            lab,
            lambda k: lab.kubectl(
                "label", "node", lab.node_names[0], f"bench-touch={k}", "--overwrite"
            ),
        )
        r["speaker_pass_full_s"], r["speaker_pass_full_cpu_s"] = pass_cost(
            lab,
            lambda k: lab.kubectl(
                "patch",
                "l2advertisement",
                L2_POOL,
                "-n",
                objects.METALLB_NAMESPACE,
                "--type=merge",
                "-p",
                every_node_selector(k),
            ),
        )
        say(
            f"a pass after one Service changed: {r['speaker_pass_one_change_s']} s "
            f"({r['speaker_pass_one_change_cpu_s']} s CPU); after a Node changed: "
            f"{r['speaker_pass_node_change_s']} s ({r['speaker_pass_node_change_cpu_s']} s CPU); "
            f"after the configuration changed: {r['speaker_pass_full_s']} s "
            f"({r['speaker_pass_full_cpu_s']} s CPU)"
        )

        # The end state: exactly what should be there, nothing else.
        got_l2, got_bgp = written_statuses(l2.snapshot()), written_statuses(bgp.snapshot())
        bgp_want = {(s, n) for s in want.bgp_services for n in lab.node_names}
        r["status_l2_missing"] = sorted(want.l2_services - {s for s, _ in got_l2})[:10]
        r["status_l2_unexpected"] = sorted({s for s, _ in got_l2} - want.l2_services)[:10]
        r["status_l2_duplicated"] = len(got_l2) - len({s for s, _ in got_l2})
        r["status_bgp_missing"] = sorted(bgp_want - got_bgp)[:10]
        r["status_bgp_unexpected"] = sorted(got_bgp - bgp_want)[:10]
        r["expected"] = {
            "l2_statuses": want_l2,
            "bgp_statuses": want_bgp,
            "bgp_routes": bgp_count,
            "services_not_announced": sizes.services - want_l2 - len(want.bgp_services),
        }

        end = bgp_bench.Usage.take(lab, deployment)
        memory = end.memory()["nodes"]
        rss = {n: m.get("speaker", {}).get("rss_mb") for n, m in memory.items()}
        r["speaker_rss_mb_by_node"] = rss
        r["speaker_rss_mb"] = max((v for v in rss.values() if v is not None), default=None)
        r["speaker_hwm_mb"] = max(
            (m.get("speaker", {}).get("hwm_mb") or 0.0 for m in memory.values()), default=None
        )
        r["exabgp_rss_mb"] = max(
            (m.get("exabgp", {}).get("rss_mb") or 0.0 for m in memory.values()), default=None
        )
        assert deployment.controller is not None
        r["controller_rss_mb"] = rss_mb(deployment.controller.pid)

        audit = lab.cluster.audit_log.read_text(errors="replace").splitlines()
        sources = [str(lab.node_v4(i)) for i in range(1, lab.nodes + 1)]
        r["requests_all"] = per_second(
            count_requests(audit, SPEAKER_USER, t0_wall, idle_end_wall),
            sources,
            idle_end_wall - t0_wall,
        )
        r["requests_converging"] = per_second(
            count_requests(audit, SPEAKER_USER, t0_wall, end_converging_wall),
            sources,
            end_converging_wall - t0_wall,
        )
        r["requests_idle"] = per_second(
            count_requests(audit, SPEAKER_USER, idle_wall, idle_end_wall),
            sources,
            idle_end_wall - idle_wall,
        )
        r["measured_s"] = round(time.monotonic() - t0, 1)
        # The floor last: its writes must not share the apiserver with what is measured.
        r["status_floor_s"] = status_floor(lab, want_l2, len(want.bgp_services))
        converged_s = r.get("status_converged_s")
        r["status_vs_floor"] = (
            round(converged_s / r["status_floor_s"], 2)
            if converged_s is not None and r["status_floor_s"]
            else None
        )
        say(f"status floor: {r['status_floor_s']} s ({r['status_vs_floor']}x)")
        del end_converging
        phase("measured")

        # Last, as it restarts speakers (their memory and the end state are read above).
        vips = failover_vips(planned, ingress_of(services.snapshot()), lab.node_names)
        if not vips:
            raise BenchError("no announced layer 2 address to fail over")
        took, lost = l2_failovers(lab, deployment, vips, sizes.failovers)
        spread = distribution(took)
        r["l2_failover"] = spread
        r["l2_failover_p99_s"] = spread["p99"]
        r["l2_failover_median_s"] = spread["median"]
        r["l2_failover_lost"] = lost
        phase("failovers")
    finally:
        for watch in watches:
            watch.close()
        if fib is not None:
            fib.close()
        if deployment is not None:
            deployment.stop()
        processes.stop(fake)
        kwok_log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 Nodes, 1,000 Services")
    parser.add_argument("--nodes", type=int, default=None, help="kwok Nodes (1,000)")
    parser.add_argument("--services", type=int, default=None, help="Services (10,000)")
    parser.add_argument("--pods", type=int, default=1, help="Pods per group (1)")
    parser.add_argument(
        "--groups", type=int, default=None, help="Pod groups the Services select (1,000)"
    )
    parser.add_argument("--idle", type=float, default=None, help="idle window, s (60; quick 15)")
    parser.add_argument(
        "--failovers", type=int, default=None, help="layer 2 owner kills (20; quick 6)"
    )
    parser.add_argument("--logs", type=Path, default=None, help="copy the lab's logs here")
    args = parser.parse_args(argv)
    sizes = Sizes(
        nodes=args.nodes or (100 if args.quick else 1000),
        services=args.services or (1000 if args.quick else 10000),
        pods=args.pods,
        groups=args.groups or min(1000, args.services or (1000 if args.quick else 10000)),
        idle_s=args.idle or (15.0 if args.quick else 60.0),
        quick=args.quick,
        failovers=args.failovers or (6 if args.quick else 20),
    )
    if (
        not 1 <= sizes.nodes <= 5000
        or not 1 <= sizes.services <= 20000
        or not 1 <= sizes.pods <= 10
        or not 1 <= sizes.groups <= sizes.services
        or not 1 <= sizes.failovers <= 200
    ):
        parser.error(
            "--nodes 1..5000, --services 1..20000, --pods 1..10, --groups 1..services, "
            "--failovers 1..200"
        )
    signal.signal(signal.SIGTERM, processes.interrupt)
    r: dict[str, Any] = {}
    session = Session(say)
    base = Path(tempfile.mkdtemp(prefix="ironlb-scale-"))
    try:
        with session.incomplete_on(
            BenchError,
            network_lab.LabError,
            kwok.KwokError,
            AssertionError,
            KeyboardInterrupt,
        ):
            kwok.install()
            policy = base / "audit-policy.json"
            policy.write_text(json.dumps(AUDIT_POLICY))
            with session.lab(directory=base, audit_policy=policy) as lab:
                try:
                    run(lab, sizes, r, session.phases)
                finally:
                    if args.logs is not None:
                        shutil.copytree(lab.directory / "logs", args.logs, dirs_exist_ok=True)
                        with contextlib.suppress(FileNotFoundError):
                            shutil.copy(lab.directory / "bench-scale" / "kwok.log", args.logs)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return session.report(summarise(sizes, r, session.phases, session.incomplete, session.started))


def summarise(
    sizes: Sizes, r: dict[str, Any], phases: dict[str, float], incomplete: str | None, began: float
) -> dict[str, Any]:
    everything = r.get("requests_all") or {}
    return {
        "bench": "scale",
        "quick": sizes.quick,
        "incomplete": incomplete,
        "nodes": sizes.nodes,
        "services": sizes.services,
        "pod_groups": sizes.groups,
        "pods_per_group": sizes.pods,
        "speaker_rss_mb": r.get("speaker_rss_mb"),
        "controller_rss_mb": r.get("controller_rss_mb"),
        "assign_all_s": r.get("assign_all_s"),
        "routes_all_s": r.get("routes_all_s"),
        "routes_all_ecmp_s": r.get("routes_all_ecmp_s"),
        "status_converged_s": r.get("status_converged_s"),
        "status_floor_s": r.get("status_floor_s"),
        "status_vs_floor": r.get("status_vs_floor"),
        "first_route_s": r.get("first_route_s"),
        "speaker_pass_one_change_s": r.get("speaker_pass_one_change_s"),
        "speaker_pass_one_change_cpu_s": r.get("speaker_pass_one_change_cpu_s"),
        "speaker_pass_node_change_s": r.get("speaker_pass_node_change_s"),
        "speaker_pass_node_change_cpu_s": r.get("speaker_pass_node_change_cpu_s"),
        "speaker_pass_full_s": r.get("speaker_pass_full_s"),
        "speaker_pass_full_cpu_s": r.get("speaker_pass_full_cpu_s"),
        "speaker_hwm_mb": r.get("speaker_hwm_mb"),
        "l2_failover_p99_s": r.get("l2_failover_p99_s"),
        "apiserver_requests_per_s_per_speaker": everything.get("mean"),
        "speaker_cpu_s_idle_per_min": r.get("speaker_cpu_s_idle_per_min"),
        **{k: v for k, v in r.items() if k not in ("speaker_rss_mb", "controller_rss_mb")},
        "phases_s": phases,
        "elapsed_s": round(time.monotonic() - began, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
