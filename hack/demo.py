"""The demo: ironlb in a small data centre, from nothing to a measured failover, with witnesses.

    ./hack/demo [--non-interactive] [--keep]

It brings up the network lab (a real kube-apiserver, three node namespaces, an FRR top-of-rack
router, a client; see docs/lab.md), starts ironlb's controller and one speaker per node, applies
MetalLB's configuration objects unchanged (two pools, an L2Advertisement, a BGPPeer and a
BGPAdvertisement), creates a layer-2 Service and a BGP Service, and shows, each from an
independent witness: the addresses assigned, which node answers ARP and NDP, the ECMP route on
the ToR, a request from the client reaching a backend with its source address kept, and
`ironlb status`. Then it kills the speaker of the node answering for the layer-2 address and
measures how long until another node answers (the ToR probes the address every 10 ms).

Underneath runs what a cluster runs: kube-controller-manager and kube-scheduler beside the
apiserver, a real kube-proxy in every node, and Pods (echo servers, each in a network namespace
of its own, run by the lab's kubelet stand-in). So the demo also shows the externalTrafficPolicy
experiment for real: with Cluster the backend sees a node's address, with Local the client's, and
each node's healthCheckNodePort says whether it has a local endpoint.
Everything is removed at the end, on Ctrl-C and on SIGTERM, unless --keep.

`--chart` installs ironlb as users do instead: every node runs a real kubelet with containerd
(`hack/lab up --kubelet-nodes`), the images are built from the project's Dockerfile
(`hack/images.py`), and `helm install` of charts/ironlb runs the controller Deployment and the
speaker DaemonSet as Pods (webhook on, with the chart's certificate and memberlist Secret).

`--lab-dir DIR` runs the demo on a lab that is already up (`hack/lab up --dir DIR`, or a test
session's) and leaves the lab itself running afterwards, removing only what the demo added.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml

from hack import cluster as local_cluster
from hack import deploy, objects, processes, witness
from hack import lab as network_lab

ROOT = Path(__file__).resolve().parent.parent
MS = "metallb-system"
NAMESPACE = "demo"
L2_POOL = "demo-l2"
BGP_POOL = "demo-bgp"
L2_SERVICE = "web"
BGP_SERVICE = "web-bgp"
PORT = 80
BGP_ENDPOINT_NODES = (1, 3)  # the BGP Service's backends: the ToR should route via these two
CONTROLLER_METRICS_PORT = 7472
SPEAKER_METRICS_PORT = 7473
STEP_TIMEOUT_S = 120.0  # what a step needs on a 2-core machine that is busy building
PROBE_EVERY_S = 0.01

T = TypeVar("T")


class DemoError(Exception):
    """A step that did not work; the message says what was seen."""


# --- the console ----------------------------------------------------------------------------------


class Console:
    """Step titles, indented command output, progress on long waits, and prompts."""

    def __init__(self, interactive: bool, out: IO[str] = sys.stdout) -> None:
        self.interactive = interactive
        self.out = out
        self.tty = out.isatty()
        self._lock = threading.Lock()
        self._step = 0

    def _emit(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()

    def line(self, text: str = "") -> None:
        self._emit(text + "\n")

    def step(self, title: str) -> None:
        self._step += 1
        heading = f"== {self._step}. {title}"
        self.line()
        self.line(f"\033[1m{heading}\033[0m" if self.tty else heading)

    def say(self, text: str) -> None:
        for part in text.splitlines() or [""]:
            self.line(f"   {part}")

    def shell(self, where: str, argv: Sequence[str], output: str) -> None:
        """A command as a person would type it, and what it printed."""
        prompt = f"   [{where}]$ {' '.join(argv)}"
        self.line(f"\033[2m{prompt}\033[0m" if self.tty else prompt)
        for part in output.rstrip().splitlines():
            self.line(f"     {part}")

    def ok(self, text: str) -> None:
        self.line(f"   \033[32m✓\033[0m {text}" if self.tty else f"   OK {text}")

    def fail(self, text: str) -> None:
        self.line(f"   \033[31m✗ {text}\033[0m" if self.tty else f"   FAILED {text}")

    def pause(self, what: str) -> None:
        if not self.interactive:
            return
        try:
            input(f"\n   [Enter] {what}   (Ctrl-C stops and cleans up) ")
        except EOFError:
            self.interactive = False

    def ask(self, question: str) -> bool:
        if not self.interactive:
            return True
        try:
            answer = input(f"   {question} [Y/n] ").strip().lower()
        except EOFError:
            return True
        return answer in ("", "y", "yes")

    @contextlib.contextmanager
    def progress(self, what: str) -> Iterator[None]:
        """Shows that a long step is alive: a spinner on a terminal, a line every 10 s if not."""
        started = time.monotonic()
        done = threading.Event()

        def spin() -> None:
            frames, i, next_note = "|/-\\", 0, 10.0
            while not done.wait(0.1 if self.tty else 1.0):
                elapsed = time.monotonic() - started
                if self.tty:
                    self._emit(f"\r   {frames[i % 4]} {what} ({elapsed:.0f} s)")
                    i += 1
                elif elapsed >= next_note:
                    self.line(f"   ... {what}: {elapsed:.0f} s so far")
                    next_note += 10.0

        if not self.tty:
            self.line(f"   ... {what}")
        spinner = threading.Thread(target=spin, daemon=True)
        spinner.start()
        try:
            yield
        finally:
            done.set()
            spinner.join()
            if self.tty:
                self._emit("\r\033[K")
        self.line(f"   {what}: {time.monotonic() - started:.1f} s")


def until(check: Callable[[], T | None], timeout: float, every: float = 0.1) -> T | None:
    """Poll `check` until it returns something truthy, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


# --- the lab's witnesses --------------------------------------------------------------------------

# --- the objects ----------------------------------------------------------------------------------


def configuration() -> list[dict[str, Any]]:
    """MetalLB's objects, exactly as one would write them for MetalLB."""
    l2_v4 = f"{network_lab.L2_POOL_V4[0]}-{network_lab.L2_POOL_V4[1]}"
    l2_v6 = f"{network_lab.L2_POOL_V6[0]}-{network_lab.L2_POOL_V6[1]}"

    obj = objects.metallb
    return [
        obj("IPAddressPool", L2_POOL, {"addresses": [l2_v4, l2_v6]}),
        obj("L2Advertisement", L2_POOL, {"ipAddressPools": [L2_POOL]}),
        # Not auto-assigned: only Services that ask for it (by annotation) get these addresses.
        obj(
            "IPAddressPool",
            BGP_POOL,
            {"addresses": [str(network_lab.BGP_POOL_V4)], "autoAssign": False},
        ),
        objects.tor_peer("tor"),
        obj("BGPAdvertisement", BGP_POOL, {"ipAddressPools": [BGP_POOL]}),
    ]


def service(name: str, *, dual: bool, pool: str | None = None) -> dict[str, Any]:
    return objects.service(
        NAMESPACE,
        name,
        local=True,
        dual=dual,
        annotations={"metallb.io/address-pool": pool} if pool else None,
    )


def as_list(*objects: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


# --- the demo -------------------------------------------------------------------------------------


@dataclass
class Results:
    l2_addresses: list[str] = field(default_factory=list)
    bgp_addresses: list[str] = field(default_factory=list)
    l2_owner: str | None = None  # answers ARP for the IPv4 address
    l2_owner_v6: str | None = None  # answers NDP for the IPv6 address (elected separately)
    bgp_nexthops: list[str] = field(default_factory=list)
    source_kept: bool | None = None
    # The policy experiment: what the backend saw, and each node's healthCheckNodePort answer.
    source_seen: dict[str, str] = field(default_factory=dict)
    health_codes: dict[str, int | None] = field(default_factory=dict)
    failover_s: float | None = None
    successor: str | None = None
    failures: list[str] = field(default_factory=list)


@dataclass
class Demo:
    console: Console
    lab: network_lab.Lab
    own_lab: bool  # False: the lab was up before and stays up
    keep: bool = False
    chart: bool = False  # ironlb from `helm install` onto kubelet nodes, not processes
    deployment: deploy.Deployment | None = None
    controller: subprocess.Popen[Any] | None = None
    results: Results = field(default_factory=Results)
    _logs: list[IO[bytes]] = field(default_factory=list)

    # helpers ------------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, show: bool = False) -> str:
        out = self.lab.kubectl(*args, input=input)
        if show:
            self.console.shell("root", ["kubectl", *args], out)
        return out

    def run(self, ns: str, *argv: str, show: bool = True, timeout: float = 30.0) -> str:
        result = self.lab.exec(ns, *argv, timeout=timeout)
        text = result.stdout + (result.stderr if result.returncode else "")
        if show:
            self.console.shell(network_lab.namespace(ns), argv, text)
        return result.stdout

    def vtysh(self, command: str) -> str:
        """FRR's shell on the ToR (`hack/lab vtysh -c ...` for a person)."""
        result = self.lab.vtysh(command, check=False)
        self.console.shell(
            "ilb-tor", ["vtysh", "-c", f'"{command}"'], result.stdout + result.stderr
        )
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.lab.kubectl("get", *args, "-o", "json"))

    def wait(self, what: str, check: Callable[[], T | None], timeout: float = STEP_TIMEOUT_S) -> T:
        with self.console.progress(what):
            value = until(check, timeout)
        if not value:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
        return value

    def node_of_mac(self, mac: str) -> str:
        for i in range(1, self.lab.nodes + 1):
            if self.lab.node_mac(i) == mac.lower():
                return self.lab.node_names[i - 1]
        return f"unknown MAC {mac}"

    def index_of(self, node: str) -> int:
        return self.lab.node_names.index(node) + 1

    def ingress(self, name: str) -> list[str]:
        svc = self.get("service", name, "-n", NAMESPACE)
        entries = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        return [str(e["ip"]) for e in entries if e.get("ip")]

    def request(self, vip: str) -> str | None:
        return objects.request(self.lab, vip, PORT)

    def request_until(self, vip: str, timeout: float = 15.0) -> str | None:
        return until(lambda: self.request(vip), timeout, every=0.2)

    def arp_macs(self, vip: str) -> list[str]:
        return sorted(witness.arp_macs(self.lab, vip))

    def fib(self, prefix: str) -> list[str]:
        return sorted(witness.fib(self.lab, prefix))

    # steps --------------------------------------------------------------------------------------

    def bring_up(self, nodes: int) -> None:
        c = self.console
        c.step("A small data centre in network namespaces")
        c.say(
            "ilb-tor: a top-of-rack router (FRR, AS 64500) bridging the node LAN 10.250.0.0/24\n"
            "ilb-node1..3: the Kubernetes nodes (10.250.0.11-13), strict ARP like kube-proxy\n"
            "ilb-cp: etcd and a real kube-apiserver; ilb-client: a client behind the ToR"
        )
        if self.own_lab:
            with c.progress(f"bringing up the lab ({nodes} nodes) and the control plane"):
                self.lab.up()
        else:
            c.say(f"using the lab that is already up in {self.lab.directory}")
        if self.chart:
            c.say(
                "every node runs containerd and a real kubelet (its own mount namespace and "
                "cgroup); the images come from our Dockerfile, built locally with buildah"
            )
        c.ok("lab up; the metallb.io CRDs are installed:")
        crds = self.kubectl("get", "crd", "-o", "name")
        c.say(", ".join(sorted(line.split("/")[-1] for line in crds.split())))

    def start_ironlb(self) -> None:
        c = self.console
        c.step("ironlb: a controller and one speaker per node")
        # As the Helm chart's ServiceAccounts, with its RBAC: what runs here is what a cluster
        # would grant. A kept lab uses the admin instead: the accounts' tokens expire in 2 h.
        deployment = deploy.Deployment(self.lab, as_chart_accounts=not self.keep)
        self.deployment = deployment
        log = open(deployment.log_dir / "controller.log", "ab")  # noqa: SIM115 - closed at the end
        self._logs.append(log)
        self.controller = self.lab.popen(
            network_lab.NS_CP,
            "env",
            f"PYTHONPATH={ROOT}",
            sys.executable,
            "-m",
            "controller",
            "--kubeconfig",
            str(deployment.kubeconfig("controller")),
            "--metrics-port",
            str(CONTROLLER_METRICS_PORT),
            "--lease-duration",
            "3",
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for i in range(1, self.lab.nodes + 1):
            deployment.start_speaker(i)
        identity = (
            "the lab's admin (a kept lab outlives ServiceAccount tokens)"
            if self.keep
            else "the Helm chart's ServiceAccounts, with the chart's RBAC"
        )
        c.say(
            f"controller in ilb-cp; speakers in ilb-node1..{self.lab.nodes} (membership on UDP "
            f"7946, encrypted); running as {identity}; logs in {deployment.log_dir}\n"
            f"underneath, as in a cluster: kube-proxy ({self.lab.proxy_mode} mode) on every "
            "node, kube-controller-manager and kube-scheduler in ilb-cp"
        )

    def install_chart(self) -> None:
        from hack import images, tools

        c = self.console
        c.step("ironlb from its Helm chart: a controller Deployment and a speaker DaemonSet")
        try:
            with c.progress("the images (built from the Dockerfile once, then cached)"):
                built = images.build()
            helm = tools.helm()
        except (images.ImageError, tools.ToolError) as e:
            raise DemoError(str(e)) from e
        # No cluster DNS in the lab: the membership seeds are the nodes' addresses.
        seeds = ",".join(str(self.lab.node_v4(i)) for i in range(1, self.lab.nodes + 1))
        values = [
            f"controller.image.repository={built.controller.repository}",
            f"controller.image.tag={built.controller.tag}",
            f"speaker.image.repository={built.speaker.repository}",
            f"speaker.image.tag={built.speaker.tag}",
            f"prometheus.metricsPort={SPEAKER_METRICS_PORT}",
            f"speaker.memberlist.seeds={{{seeds}}}",
        ]
        argv = ["helm", "install", "ironlb", "charts/ironlb", "-n", MS, "--wait"]
        for value in values:
            argv += ["--set", value]
        home = self.lab.directory / "helm"
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(self.lab.kubeconfig),
        }
        with c.progress("helm install --wait (every Pod Ready through the chart's probes)"):
            result = subprocess.run(
                [str(helm), *argv[1:], "--timeout", "240s"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
        head = "\n".join(result.stdout.splitlines()[:6])
        self.console.shell("root", argv, head + result.stderr)
        if result.returncode != 0:
            raise DemoError(f"helm install failed: {result.stderr.strip()[-300:]}")
        self.kubectl("get", "pods", "-n", MS, "-o", "wide", show=True)
        c.ok(
            f"controller and speakers run as Pods from {built.controller.repository} and "
            f"{built.speaker.repository}:{built.speaker.tag}; the webhook is served by the "
            "controller Pod"
        )

    def speaker_pid(self, index: int) -> int | None:
        """The speaker container's process on node `index` (host network: in the node's netns)."""
        for pid in network_lab.namespace_pids(network_lab.node_namespace(index)):
            argv = processes.argv(pid) or []
            if any(a.endswith("ironlb-speaker") for a in argv[:2]):
                return pid
        return None

    def configure(self) -> None:
        c = self.console
        c.step("MetalLB's configuration, unchanged")
        objects = configuration()
        text = yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=None)
        c.say(text.rstrip())
        self.kubectl("apply", "-f", "-", input=as_list(*objects))

        def counted() -> bool:
            pool = self.get("ipaddresspool", L2_POOL, "-n", MS)
            return "availableIPv4" in (pool.get("status") or {})

        self.wait("the controller to read the pools", counted)
        c.ok("applied; the controller has counted the pools' addresses")

    def create_services(self) -> None:
        c = self.console
        c.step("Two Services of type LoadBalancer, externalTrafficPolicy: Local")
        c.say(
            f"{NAMESPACE}/{L2_SERVICE}: dual-stack, backends on every node, addresses from "
            f"{L2_POOL} (layer 2)\n"
            f"{NAMESPACE}/{BGP_SERVICE}: annotation metallb.io/address-pool: {BGP_POOL}, "
            f"backends on {', '.join(f'node{i}' for i in BGP_ENDPOINT_NODES)} only (BGP)"
        )
        with contextlib.suppress(network_lab.LabError):
            self.kubectl("create", "namespace", NAMESPACE)
        self.kubectl(
            "apply",
            "-f",
            "-",
            input=as_list(
                service(L2_SERVICE, dual=True), service(BGP_SERVICE, dual=False, pool=BGP_POOL)
            ),
        )
        everywhere = range(1, self.lab.nodes + 1)
        with c.progress("Pods Ready (a real readiness probe) and in the EndpointSlices"):
            objects.set_backends(self.lab, NAMESPACE, L2_SERVICE, everywhere, wait=False)
            objects.set_backends(self.lab, NAMESPACE, BGP_SERVICE, BGP_ENDPOINT_NODES, wait=False)
            objects.wait_backends(self.lab, NAMESPACE, L2_SERVICE, everywhere)
            objects.wait_backends(self.lab, NAMESPACE, BGP_SERVICE, BGP_ENDPOINT_NODES)
        self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", show=True)

        def assigned() -> bool:
            return len(self.ingress(L2_SERVICE)) == 2 and len(self.ingress(BGP_SERVICE)) == 1

        self.wait("the controller to assign addresses", assigned)
        self.results.l2_addresses = self.ingress(L2_SERVICE)
        self.results.bgp_addresses = self.ingress(BGP_SERVICE)
        self.kubectl("get", "services", "-n", NAMESPACE, "-o", "wide", show=True)
        for svc in (L2_SERVICE, BGP_SERVICE):
            notes = self.get("service", svc, "-n", NAMESPACE)["metadata"].get("annotations", {})
            pool = notes.get("metallb.io/ip-allocated-from-pool")
            c.say(f"{svc}: metallb.io/ip-allocated-from-pool = {pool}")
        c.ok("assigned: " + ", ".join(self.results.l2_addresses + self.results.bgp_addresses))

    def show_layer2(self) -> None:
        c = self.console
        c.step("Layer 2: exactly one node answers ARP and NDP for the address")
        v4 = next(a for a in self.results.l2_addresses if ":" not in a)
        v6 = next((a for a in self.results.l2_addresses if ":" in a), None)

        def one_answer() -> list[str] | None:
            macs = self.arp_macs(v4)
            return macs if len(macs) == 1 else None

        macs = self.wait(f"one node to answer ARP for {v4}", one_answer)
        self.run("tor", "arping", "-c", "3", "-I", "br0", v4)
        owner = self.node_of_mac(macs[0])
        self.results.l2_owner = owner
        c.ok(f"{v4} is answered by {owner} ({macs[0]}), and by no other node")
        if v6 is not None:
            out = self.run("tor", "ndisc6", "-r", "3", "-w", "1000", v6, "br0")
            found = re.search(r"Target link-layer address: ([0-9A-Fa-f:]{17})", out)
            if found:
                self.results.l2_owner_v6 = self.node_of_mac(found.group(1))
                c.ok(f"{v6} is answered by {self.results.l2_owner_v6} (NDP; elected on its own)")
            else:
                self.problem(f"nobody answered NDP for {v6}")

        def reported() -> bool:
            statuses = self.get("servicel2statuses", "-n", MS)["items"]
            return any(
                s.get("status", {}).get("serviceName") == L2_SERVICE
                and s["status"].get("node") == owner
                for s in statuses
            )

        self.wait("the speaker's ServiceL2Status", reported)
        self.kubectl("get", "servicel2statuses", "-n", MS, show=True)

    def show_bgp(self) -> None:
        c = self.console
        c.step("BGP: the ToR routes the address with ECMP to the nodes with a backend")
        vip = self.results.bgp_addresses[0]
        want = sorted(str(self.lab.node_v4(i)) for i in BGP_ENDPOINT_NODES)
        try:
            self.wait(
                f"the ToR to learn {vip}/32 from {' and '.join(want)}",
                lambda: self.fib(f"{vip}/32") == want,
                timeout=45,
            )
        except DemoError as e:
            self.problem(f"BGP: {e}; the ToR has next hops {self.fib(vip + '/32') or 'none'}")
            self.vtysh("show bgp summary")
            self.speaker_log_tail("bgp")
            return
        self.run("tor", "ip", "route", "show", f"{vip}/32")
        self.vtysh(f"show bgp ipv4 unicast {vip}/32")
        by_address = {
            str(self.lab.node_v4(i)): name for i, name in enumerate(self.lab.node_names, 1)
        }
        self.results.bgp_nexthops = [by_address[h] for h in want]
        c.ok(f"{vip} via {', '.join(self.results.bgp_nexthops)}; node2 has no backend, no route")

    def show_client(self) -> None:
        c = self.console
        c.step("A client request, routed by the ToR, keeps its source address")
        c.say('the backend Pod answers "<pod> <node> <address it saw the client connect from>"')
        client = str(network_lab.CLIENT_V4)
        kept = True
        for vip in (*self.results.l2_addresses, *self.results.bgp_addresses):
            if vip in self.results.bgp_addresses and not self.results.bgp_nexthops:
                continue  # BGP did not come up; already reported
            answer = self.request_until(vip)
            self.console.shell("ilb-client", ["connect", f"{vip}:{PORT}"], answer or "(no answer)")
            if not answer:
                self.problem(f"no answer from {vip}:{PORT}")
                kept = False
                continue
            _, node, seen = answer.split()[:3]
            family_client = str(network_lab.CLIENT_V6) if ":" in vip else client
            same = ipaddress.ip_address(seen) == ipaddress.ip_address(family_client)
            kept = kept and same
            if same:
                c.ok(f"{vip}: served on {node}; the backend saw {seen}, the client itself")
            else:
                self.problem(f"{vip}: the backend saw {seen}, not the client {family_client}")
        self.results.source_kept = kept

    def policies(self) -> None:
        """One Service switched between the two policies, seen from the client and the ToR."""
        c, lab = self.console, self.lab
        c.step("externalTrafficPolicy: Cluster, then Local, on one Service (real kube-proxy)")
        if not self.results.bgp_nexthops:
            self.problem("the BGP Service has no route; the policy experiment needs it")
            return
        vip = self.results.bgp_addresses[0]
        with_pods = [lab.node_names[i - 1] for i in BGP_ENDPOINT_NODES]
        c.say(
            f"{NAMESPACE}/{BGP_SERVICE} has Pods on {' and '.join(with_pods)}; the client "
            "connects to its address and to each node's NodePort; the ToR probes each node's "
            "healthCheckNodePort, as a cloud load balancer does"
        )
        for policy in ("Cluster", "Local"):
            self.kubectl(
                "patch", "service", BGP_SERVICE, "-n", NAMESPACE, "--type=merge",
                "-p", json.dumps({"spec": {"externalTrafficPolicy": policy}}), show=True,
            )  # fmt: skip
            announcing = range(1, lab.nodes + 1) if policy == "Cluster" else BGP_ENDPOINT_NODES
            hops = sorted(str(lab.node_v4(i)) for i in announcing)
            self.wait(f"the ToR to route {vip} via {', '.join(hops)}", self.routed(vip, hops))
            c.ok(f"{policy}: the ToR routes {vip} via {len(hops)} node(s)")
            spec = self.get("service", BGP_SERVICE, "-n", NAMESPACE)["spec"]
            node_port = int(spec["ports"][0]["nodePort"])

            def forwarding(
                policy: str = policy, node_port: int = node_port
            ) -> list[str | None] | None:
                answers = objects.requests(
                    lab,
                    [(str(lab.node_v4(i)), node_port) for i in range(1, lab.nodes + 1)],
                    timeout=1.0,
                )
                local = policy == "Local"
                expected = [
                    not local or lab.node_names[i] in with_pods for i in range(len(answers))
                ]
                return answers if [a is not None for a in answers] == expected else None

            answers = self.wait(f"kube-proxy on every node to apply {policy}", forwarding)
            for name, answer in zip(lab.node_names, answers, strict=True):
                shown = f"answered by {answer.split()[0]}" if answer else "dropped (no answer)"
                c.say(f"{name}:{node_port} (NodePort) -> {shown}")
            answer = self.request_until(vip)
            self.console.shell("ilb-client", ["connect", f"{vip}:{PORT}"], answer or "(none)")
            if not answer:
                self.problem(f"{policy}: no answer from {vip}:{PORT}")
                continue
            seen = answer.split()[2]
            self.results.source_seen[policy] = seen
            whose = "the client's own" if seen == str(network_lab.CLIENT_V4) else "a node's"
            c.ok(f"{policy}: the backend saw {seen}, {whose} address")
            if policy == "Local":
                port = int(spec["healthCheckNodePort"])
                urls = [f"http://{lab.node_v4(i)}:{port}/" for i in range(1, lab.nodes + 1)]
                codes = lab.http_status(network_lab.NS_TOR, urls)
                self.results.health_codes = dict(zip(lab.node_names, codes, strict=True))
                for name, url, code in zip(lab.node_names, urls, codes, strict=True):
                    c.say(f"[ilb-tor] GET {url} -> {code} ({name})")

    def routed(self, vip: str, hops: list[str]) -> Callable[[], bool]:
        return lambda: self.fib(f"{vip}/32") == hops

    def show_status(self) -> None:
        c = self.console
        c.step("ironlb status")
        urls = ",".join(
            f"http://{self.lab.node_v4(i)}:{SPEAKER_METRICS_PORT}/metrics"
            for i in range(1, self.lab.nodes + 1)
        )
        argv = [
            sys.executable, "-m", "ironlb_cli", "status",
            "--kubeconfig", str(self.lab.node_kubeconfig),
            "--speaker-metrics", urls,
        ]  # fmt: skip
        # From the ToR: it reaches the apiserver and every speaker's metrics port.
        result = self.lab.exec("tor", "env", f"PYTHONPATH={ROOT}", *argv, timeout=60)
        shown = ["ironlb", "status", "--speaker-metrics", "http://10.250.0.1{1,2,3}:7473/metrics"]
        self.console.shell("ilb-tor", shown, result.stdout + result.stderr)
        if result.returncode != 0:
            self.problem("ironlb status failed")

    def failover(self) -> None:
        c = self.console
        v4 = next(a for a in self.results.l2_addresses if ":" not in a)
        owner = self.results.l2_owner
        assert owner is not None and (self.chart or self.deployment is not None)
        index = self.index_of(owner)
        c.step(f"Failover: kill {owner}'s speaker (SIGKILL: no goodbye to anyone)")
        watcher = witness.ArpWatcher(self.lab, v4, PROBE_EVERY_S)
        try:
            if not watcher.until(lambda macs: macs == [self.lab.node_mac(index)], STEP_TIMEOUT_S):
                raise DemoError(f"{owner} does not answer ARP for {v4} on the ToR's watcher")
            c.say(f"the ToR asks who has {v4} every {PROBE_EVERY_S * 1000:.0f} ms; {owner} answers")
            self.console.pause(f"kill {owner}'s speaker")
            started = time.monotonic()
            if self.deployment is not None:
                self.deployment.signal_speaker(index, signal.SIGKILL)
            else:
                pid = self.speaker_pid(index)
                if pid is None:
                    raise DemoError(f"no speaker process in {network_lab.node_namespace(index)}")
                os.kill(pid, signal.SIGKILL)  # the kubelet restarts the container later
            with c.progress("waiting for another node to answer"):
                answered = watcher.until(
                    lambda m: len(m) == 1 and m[0] != self.lab.node_mac(index), STEP_TIMEOUT_S
                )
            if answered is None:
                raise DemoError(f"no other node answered for {v4} within {STEP_TIMEOUT_S:.0f} s")
            seen, macs = answered
        finally:
            watcher.close()
        self.results.failover_s = seen - started
        self.results.successor = self.node_of_mac(macs[0])
        c.ok(
            f"{self.results.successor} answers for {v4} {self.results.failover_s:.3f} s after "
            f"{owner}'s speaker died"
        )
        answer = self.request_until(v4)
        self.console.shell("ilb-client", ["connect", f"{v4}:{PORT}"], answer or "(no answer)")
        if answer and answer.split()[1] == self.results.successor:
            c.ok(f"the client's requests now reach {self.results.successor}")
        else:
            self.problem(f"after failover the client got {answer!r}")
        if self.results.bgp_nexthops and owner in self.results.bgp_nexthops:
            vip = self.results.bgp_addresses[0]
            by_address = {str(self.lab.node_v4(i)): n for i, n in enumerate(self.lab.node_names, 1)}

            def fewer() -> list[str] | None:
                hops = self.fib(f"{vip}/32")
                return hops if len(hops) < 2 else None

            left = until(fewer, 10) or []
            via = ", ".join(by_address.get(h, h) for h in left) or "nothing"
            c.say(f"BGP: {owner}'s sessions died with it; the ToR now routes {vip} via {via}")
        if self.keep and self.deployment is not None:
            self.deployment.stop_speaker(index, signal.SIGKILL)
            self.deployment.start_speaker(index)
            c.say(f"{owner}'s speaker restarted: it takes {v4} back once it has rejoined")
        if self.chart:
            # The DaemonSet's Pod stays; the kubelet restarts its container (after its own
            # back-off). Waited for, so that the summary shows every speaker Running.
            restarted = self.wait(
                f"the kubelet to restart {owner}'s speaker", lambda: self._restarted(owner)
            )
            c.say(
                f"the kubelet restarted {owner}'s speaker ({restarted}); it takes {v4} back "
                "once it has rejoined"
            )

    def _restarted(self, node: str) -> str | None:
        """The speaker Pod on `node` if its container was restarted and is ready again."""
        pods = self.get(
            "pods",
            "-n",
            MS,
            "-l",
            "app.kubernetes.io/component=speaker",
            "--field-selector",
            f"spec.nodeName={node}",
        )
        for pod in pods.get("items") or []:
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if statuses and all(
                s.get("ready") and int(s.get("restartCount") or 0) >= 1 for s in statuses
            ):
                restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
                return f"{pod['metadata']['name']}, restarts {restarts}"
        return None

    def problem(self, text: str) -> None:
        self.results.failures.append(text)
        self.console.fail(text)

    def speaker_log_tail(self, word: str, lines: int = 4) -> None:
        for name in self.lab.node_names:
            if self.deployment is not None:
                text = self.deployment.logs(f"speaker-{name}")
            else:
                try:
                    pods = self.get("pods", "-n", MS, "--field-selector", f"spec.nodeName={name}")
                    names = [p["metadata"]["name"] for p in pods["items"]]
                    speaker = next(n for n in names if "speaker" in n)
                    text = self.lab.kubectl("logs", "-n", MS, speaker)
                except (network_lab.LabError, StopIteration):
                    continue
            hits = [line for line in text.splitlines() if word in line.lower()][-lines:]
            if hits:
                self.console.say(f"speaker-{name}.log, last lines about {word!r}:")
                self.console.say("\n".join(f"  {h[:200]}" for h in hits))

    def summary(self) -> None:
        c, r = self.console, self.results
        c.step("Summary")
        c.say(f"addresses: {' '.join(r.l2_addresses + r.bgp_addresses) or 'none'}")
        answered = [
            f"{a} by {(r.l2_owner_v6 if ':' in a else r.l2_owner) or 'nobody'}"
            for a in r.l2_addresses
        ]
        c.say(f"layer 2: {NAMESPACE}/{L2_SERVICE} answered: {', '.join(answered) or '-'}")
        c.say(
            f"BGP: {NAMESPACE}/{BGP_SERVICE} {', '.join(r.bgp_addresses) or '-'}"
            f" via {', '.join(r.bgp_nexthops) or 'NO ROUTE'}"
        )
        kept = {None: "not checked", True: "kept", False: "NOT kept"}[r.source_kept]
        c.say(f"client source address: {kept}")
        for policy in ("Cluster", "Local"):
            c.say(f"source address ({policy}): {r.source_seen.get(policy, 'not measured')}")
        codes = " ".join(
            f"{name}={r.health_codes.get(name, 'none')}" for name in self.lab.node_names
        )
        c.say(f"healthCheckNodePort: {codes}")
        if r.failover_s is not None:
            c.say(
                f"failover time: {r.failover_s:.3f} s "
                f"({r.l2_owner}'s speaker killed, {r.successor} answered ARP)"
            )
        else:
            c.say("failover time: not measured")
        if self.chart:
            with contextlib.suppress(network_lab.LabError):
                self.kubectl("get", "pods", "-n", MS, "-o", "wide", show=True)
        if r.failures:
            c.say(f"result: {len(r.failures)} problem(s):")
            for failure in r.failures:
                c.say(f"  - {failure}")
        else:
            c.say("result: every step worked")

    # the end ------------------------------------------------------------------------------------

    def keep_instructions(self) -> None:
        c = self.console
        kubectl = shutil.which("kubectl") or str(local_cluster.binary("kubectl"))
        urls = ",".join(
            f"{self.lab.node_v4(i)}:{SPEAKER_METRICS_PORT}" for i in range(1, self.lab.nodes + 1)
        )
        c.step("The lab keeps running")
        c.say(
            f"export KUBECONFIG={self.lab.kubeconfig}\n"
            f"{kubectl} get ipaddresspools,l2advertisements,bgppeers,bgpadvertisements -n {MS}\n"
            f"{kubectl} get services -n {NAMESPACE}; {kubectl} get servicel2statuses -n {MS}\n"
            f"hack/lab exec tor -- {ROOT}/.venv/bin/ironlb status --kubeconfig "
            f"{self.lab.node_kubeconfig} --speaker-metrics {urls}\n"
            'hack/lab vtysh -c "show bgp summary"          # the ToR\n'
            "ip netns exec ilb-node1 nft list table ip kube-proxy   # kube-proxy's rules\n"
            "hack/lab exec client -- curl -s --http0.9 "
            f"http://{(self.results.l2_addresses or ['10.250.0.200'])[0]}/   # a request\n"
            f"logs: {self.lab.directory / 'logs'}\n"
            "when done: hack/lab down"
            + (
                ""
                if self.lab.directory == network_lab.DEFAULT_DIR
                else f" --dir {self.lab.directory}"
            )
        )

    def clean_up(self) -> None:
        """Remove what the demo made; in a borrowed lab, leave the lab as it was."""
        try:
            if self.own_lab:
                # The lab goes away with everything in it: no point in a graceful goodbye.
                self.stop_ironlb(signal.SIGKILL)
                self.lab.down()
            else:
                self._clean_borrowed_lab()
        finally:
            self.stop_ironlb(signal.SIGKILL)
            for log in self._logs:
                log.close()

    def stop_ironlb(self, sig: signal.Signals) -> None:
        """Signal every speaker and the controller at once, then wait for each."""
        running = [] if self.deployment is None else list(self.deployment.speakers.values())
        if self.controller is not None:
            running.append(self.controller)
        processes.stop_pids([p.pid for p in running if p.poll() is None], sig=sig, group=True)
        for process in running:
            processes.stop(process)  # reaps it
        if self.deployment is not None:
            self.deployment.stop()  # reaps what is left, closes its log files
        self.controller = None

    def _clean_borrowed_lab(self) -> None:
        def delete_namespace() -> None:
            with contextlib.suppress(network_lab.LabError):
                self.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")

        delete_namespace()

        def statuses_gone() -> bool:
            found = self.get(
                "servicel2statuses,servicebgpstatuses",
                "-n", MS, "-l", f"metallb.io/service-namespace={NAMESPACE}",
            )  # fmt: skip
            return not found["items"]

        def namespace_gone() -> bool:
            found = self.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "json")
            if not found.strip():
                return True
            # A Ctrl-C during the step that creates the namespace kills that kubectl, but its
            # request may reach the apiserver after the delete above: delete what is not yet
            # being deleted, or this waits for nothing until its time is up.
            if not json.loads(found)["metadata"].get("deletionTimestamp"):
                delete_namespace()
            return False

        # kube-controller-manager empties the namespace, the Pods' agents confirm their exit.
        until(namespace_gone, STEP_TIMEOUT_S)
        if self.deployment is not None:
            # The speakers delete their own status objects once the Services are gone.
            until(statuses_gone, 10)
        self.stop_ironlb(signal.SIGTERM)
        with contextlib.suppress(network_lab.LabError):
            self.kubectl(
                "delete", "servicel2statuses,servicebgpstatuses", "-n", MS,
                "-l", f"metallb.io/service-namespace={NAMESPACE}", "--wait=false",
            )  # fmt: skip
        names: dict[str, list[str]] = {}
        for o in configuration():
            names.setdefault(o["kind"], []).append(o["metadata"]["name"])
        for kind, those in names.items():
            with contextlib.suppress(network_lab.LabError):
                self.kubectl("delete", kind.lower(), *those, "-n", MS, "--ignore-not-found")


# --- running it -----------------------------------------------------------------------------------


def ancestors() -> set[int]:
    """Our pid and those of every process above us."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def lab_lock(console: Console) -> contextlib.AbstractContextManager[None]:
    """The machine-wide lab lock, unless a process above us (a test session) already holds it."""
    holder = network_lab.lock_holder()
    if holder is not None and holder in ancestors():
        return contextlib.nullcontext()
    return network_lab.exclusive(waiting=lambda text: console.say(f"... {text}"))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hack/demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--non-interactive", action="store_true", help="no prompts (also when stdin is no terminal)"
    )
    parser.add_argument("--keep", action="store_true", help="leave everything running at the end")
    parser.add_argument(
        "--lab-dir", type=Path, default=None, help="use the lab already up in DIR; leave it up"
    )
    parser.add_argument(
        "--chart",
        action="store_true",
        help="kubelet nodes, images from the Dockerfile, ironlb installed with helm",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    interactive = not args.non_interactive and sys.stdin.isatty()
    console = Console(interactive)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, processes.interrupt)
    started = time.monotonic()
    try:
        with lab_lock(console):
            demo = prepare(console, args)
            if demo is None:
                return 1
            return play(demo, started)
    except network_lab.LabError as e:
        console.line(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        console.line("\ninterrupted")
        return 130


def prepare(console: Console, args: argparse.Namespace) -> Demo | None:
    if args.lab_dir is not None:
        marker = args.lab_dir / network_lab.MARKER
        if not marker.exists() or network_lab.NS_TOR not in network_lab.namespaces():
            console.line(f"error: no lab is up in {args.lab_dir} (hack/lab up --dir ...)")
            return None
        nodes = int(json.loads(marker.read_text())["nodes"])
        lab = network_lab.Lab(nodes=nodes, directory=args.lab_dir)
        existing = json.loads(lab.kubectl("get", "ipaddresspools", "-n", MS, "-o", "json"))
        others = [p["metadata"]["name"] for p in existing["items"]]
        if others:
            console.line(
                f"error: the lab already has pools ({', '.join(others)}); they would clash"
            )
            return None
        if args.chart:
            console.line("error: --chart brings up a lab of its own; leave out --lab-dir")
            return None
        return Demo(console, lab, own_lab=False, keep=args.keep)
    lab = network_lab.Lab(nodes=3, kubelet_nodes=(1, 2, 3) if args.chart else ())
    lab.check_prerequisites()
    if network_lab.lab_namespaces() or lab.directory.exists():
        console.say(f"a lab is already up (or left behind) in {lab.directory}")
        if not console.ask("remove it and start afresh?"):
            return None
        with console.progress("removing the old lab"):
            lab.down()
    return Demo(console, lab, own_lab=True, keep=args.keep, chart=args.chart)


def play(demo: Demo, started: float) -> int:
    c = demo.console
    c.line("ironlb demo: MetalLB's API, on bare metal, in a few network namespaces")
    c.pause("start")
    finished = interrupted = False
    try:
        demo.bring_up(demo.lab.nodes)
        if demo.chart:
            demo.install_chart()
        else:
            demo.start_ironlb()
        demo.configure()
        demo.create_services()
        c.pause("see who answers for the addresses")
        demo.show_layer2()
        demo.show_bgp()
        demo.show_client()
        demo.policies()
        demo.show_status()
        demo.failover()
        finished = True
    except (DemoError, network_lab.LabError) as e:
        demo.problem(str(e))
    except KeyboardInterrupt:
        interrupted = True
        demo.problem("interrupted")
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            demo.summary()
            c.say(f"took {time.monotonic() - started:.0f} s")
            if demo.keep and not interrupted:
                demo.keep_instructions()
            else:
                with c.progress("cleaning up"):
                    demo.clean_up()
        finally:
            signal.signal(signal.SIGINT, previous)
    if interrupted:
        return 130
    return 0 if finished and not demo.results.failures else 1


if __name__ == "__main__":
    sys.exit(main())
