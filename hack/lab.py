"""The network lab: a ToR router, a control plane, N nodes and a client in network namespaces.

Every end-to-end test, benchmark and the demo run against the same small data centre, so its
shape and addresses are fixed here (and in docs/lab.md) rather than chosen by each user:

    root ns --(10.253.0.0/30)-- ilb-cp (etcd, kube-apiserver, kube-controller-manager, scheduler)
                                  | eth0
    ilb-node1..N eth0 --------- br0 in ilb-tor (FRR: zebra, bgpd, bfdd) --- ilb-client
                  LAN 10.250.0.0/24, fd00:250::/64        client link 10.251.0.0/24, fd00:251::/64

The ToR owns the LAN bridge itself (a ToR is a switch and a router), so a client's packets to a
VIP are routed by the ToR: it resolves L2 VIPs with ARP/NDP on br0 and reaches BGP VIPs through
the routes the nodes announce. Nodes behave like kube-proxy with strictARP: their kernels never
answer ARP for addresses on other interfaces, so only the speaker answers for a VIP.

Each node runs a real kube-proxy (nftables mode, or iptables) and `hack/podagent`, which plays
the kubelet for the Pods bound to it: each Pod is a process in a network namespace of its own
(`ilb-pod-*`) on the node's bridge `cbr0`, with addresses from the node's podCIDRs. So a
Service's EndpointSlices come from kube-controller-manager, readiness from a real probe, and a
VIP's traffic reaches Pods through kube-proxy's rules, as in a cluster.

`up` is all-or-nothing (any failure removes everything it made and raises one line);
`down` removes every `ilb-*` namespace, veth and process in them, and is idempotent.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import ssl
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from hack import cluster as local_cluster
from hack import kubelet_node, processes

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT / "crds"
FRR_TEMPLATE = Path(__file__).resolve().parent / "frr" / "tor.conf"
DEFAULT_DIR = local_cluster.CACHE / "lab"
MARKER = "lab.json"
POD_BRIDGE = "cbr0"
NODE_CAPACITY = {"cpu": "4", "memory": "8Gi", "pods": "110"}

# --- the addressing plan (others rely on it; docs/lab.md repeats it) -----------------------------

PREFIX = "ilb-"
NS_CP = "ilb-cp"
NS_TOR = "ilb-tor"
NS_CLIENT = "ilb-client"
MAX_NODES = 50

LAN_V4 = ipaddress.IPv4Network("10.250.0.0/24")
LAN_V6 = ipaddress.IPv6Network("fd00:250::/64")
TOR_LAN_V4 = ipaddress.IPv4Address("10.250.0.1")
TOR_LAN_V6 = ipaddress.IPv6Address("fd00:250::1")
CP_LAN_V4 = ipaddress.IPv4Address("10.250.0.2")
CP_LAN_V6 = ipaddress.IPv6Address("fd00:250::2")

CLIENT_NET_V4 = ipaddress.IPv4Network("10.251.0.0/24")
CLIENT_NET_V6 = ipaddress.IPv6Network("fd00:251::/64")
TOR_CLIENT_V4 = ipaddress.IPv4Address("10.251.0.1")
TOR_CLIENT_V6 = ipaddress.IPv6Address("fd00:251::1")
CLIENT_V4 = ipaddress.IPv4Address("10.251.0.2")
CLIENT_V6 = ipaddress.IPv6Address("fd00:251::2")

HOST_NET = ipaddress.IPv4Network("10.253.0.0/30")
HOST_V4 = ipaddress.IPv4Address("10.253.0.1")
CP_HOST_V4 = ipaddress.IPv4Address("10.253.0.2")
HOST_LINK = "ilb-cp0"  # the root namespace's end of the root<->cp veth

APISERVER_PORT = 6443
APISERVER_FROM_HOST = f"https://{CP_HOST_V4}:{APISERVER_PORT}"
APISERVER_FROM_NODES = f"https://{CP_LAN_V4}:{APISERVER_PORT}"

L2_POOL_V4 = (ipaddress.IPv4Address("10.250.0.200"), ipaddress.IPv4Address("10.250.0.250"))
L2_POOL_V6 = (ipaddress.IPv6Address("fd00:250::200"), ipaddress.IPv6Address("fd00:250::250"))
BGP_POOL_V4 = ipaddress.IPv4Network("10.252.0.0/24")
BGP_POOL_V6 = ipaddress.IPv6Network("fd00:252::/120")

# Pods: node i owns 10.244.i.0/24 and fd00:244:0:i::/64 behind its bridge `cbr0`, and every node
# routes the other nodes' podCIDRs through their LAN addresses (a host-gateway network).
CLUSTER_CIDR_V4 = ipaddress.IPv4Network("10.244.0.0/16")
CLUSTER_CIDR_V6 = ipaddress.IPv6Network("fd00:244::/56")
KUBE_PROXY_HEALTHZ_PORT = 10256
PROXY_MODES = ("nftables", "iptables")

TOR_ASN = 64500
TOR_ROUTER_ID = TOR_LAN_V4

TOR_MAC = "02:00:0a:fa:00:01"
CP_MAC = "02:00:0a:fa:00:02"
TOR_CLIENT_MAC = "02:00:0a:fb:00:01"
CLIENT_MAC = "02:00:0a:fb:00:02"

REQUIRED_TOOLS = (
    "ip", "sysctl", "ss", "arping", "ndisc6", "tcpdump", "ping", "vtysh", "nft", "nsenter",
)  # fmt: skip
FRR_DAEMONS = ("zebra", "bgpd", "bfdd")
FRR_BIN = Path("/usr/lib/frr")
STOP_TIMEOUT_S = 5.0
READY_TIMEOUT_S = 20.0
# kube-proxy's first sync takes 0.5 s on an idle machine; a machine busy compiling is slower.
KUBE_PROXY_READY_TIMEOUT_S = 90.0


class LabError(Exception):
    """A failure a person can act on; its message is one line."""


def _load_yaml(path: Path) -> Any:
    import yaml  # the venv has PyYAML; imported late so `hack/lab down` needs nothing but stdlib

    return yaml.safe_load(path.read_text())


def log(message: str) -> None:
    print(f"lab: {message}", file=sys.stderr, flush=True)


def node_name(index: int) -> str:
    """Kubernetes Node name of node `index` (1-based)."""
    return f"node{index}"


def node_namespace(index: int) -> str:
    return f"{PREFIX}node{index}"


def node_v4(index: int) -> ipaddress.IPv4Address:
    return LAN_V4[10 + index]


def node_v6(index: int) -> ipaddress.IPv6Address:
    # The host part is written with decimal digits (node1 = fd00:250::11), like the v4 plan.
    return ipaddress.IPv6Address(f"{LAN_V6.network_address}{10 + index}")


def tor_config(template: str, log_file: Path, nodes: int) -> str:
    """The ToR's frr.conf: `template` with its log file and, as members of the peer group
    `nodes`, both addresses of each of the lab's `nodes` nodes (see hack/frr/tor.conf)."""
    neighbors = "\n".join(
        f" neighbor {address} peer-group nodes"
        for i in range(1, nodes + 1)
        for address in (node_v4(i), node_v6(i))
    )
    return string.Template(template).substitute(log_file=log_file, node_neighbors=neighbors)


def leave_tor_group(address: str) -> list[str]:
    """bgpd commands (under `router bgp`) that take a lab node's address out of the peer group
    `nodes` (tor_config makes every node address a member), so that a test can configure a
    neighbour of its own for it (another AS, a password). `tor_group_member` undoes it."""
    return [f"no neighbor {address}"]


def tor_group_member(address: str) -> list[str]:
    """bgpd commands (under `router bgp`) that make `address` a member of the peer group `nodes`
    again, as tor_config leaves every node address."""
    return [f"no neighbor {address}", f"neighbor {address} peer-group nodes"]


def node_mac(index: int) -> str:
    return f"02:00:0a:fa:00:{10 + index:02x}"


def pod_cidr_v4(index: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"10.244.{index}.0/24")


def pod_cidr_v6(index: int) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network(f"fd00:244:0:{index:x}::/64")


def pod_gateway_v4(index: int) -> ipaddress.IPv4Address:
    return pod_cidr_v4(index).network_address + 1


def pod_gateway_v6(index: int) -> ipaddress.IPv6Address:
    return pod_cidr_v6(index).network_address + 1


def namespace(name: str) -> str:
    """`tor`, `node1`, `ilb-tor` ... -> the namespace's full name."""
    return name if name.startswith(PREFIX) else PREFIX + name


# --- small process helpers ------------------------------------------------------------------------


def _run(argv: Sequence[str], what: str, input: str | None = None) -> str:
    try:
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{what}: {e}") from e
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["(no output)"]
        raise LabError(f"{what} failed: {lines[0]}")
    return result.stdout


def _ip_batch(commands: Sequence[str], netns: str | None, what: str) -> None:
    """Many `ip` commands in one process: the lab's set-up is mostly process start-up cost."""
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    _run(argv, what, input="\n".join(commands) + "\n")


def namespaces() -> list[str]:
    """Every named network namespace on this machine."""
    result = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout.strip():
        return []
    return [entry["name"] for entry in json.loads(result.stdout)]


def lab_namespaces() -> list[str]:
    """The network namespaces a lab made (`ilb-*`), whoever's lab it was."""
    return [n for n in namespaces() if n.startswith(PREFIX)]


def _root_links() -> list[str]:
    result = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout.strip():
        return []
    return [entry["ifname"] for entry in json.loads(result.stdout) if "ifname" in entry]


def namespace_pids(ns: str) -> list[int]:
    """The processes running in namespace `ns` (this one excepted)."""
    result = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in result.stdout.split() if p.isdigit() and int(p) != os.getpid()]


def _stop(pids: Sequence[int], timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGTERM, then SIGKILL what is left; returns pids that survived both."""
    return processes.stop_pids(pids, timeout=timeout)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:300]
    return "(empty log)"


@dataclasses.dataclass(frozen=True)
class _Pending:
    process: subprocess.Popen[str]
    what: str
    input: str | None


def _finish(pending: Sequence[_Pending]) -> list[str]:
    """Wait for every started command; the first failure (after all ended) is raised."""
    outputs, failure = [], None
    for p in pending:
        try:
            out, err = p.process.communicate(input=p.input, timeout=60)
        except subprocess.TimeoutExpired:
            p.process.kill()
            out, err = p.process.communicate()
            err = err or "timed out"
        outputs.append(out)
        if p.process.returncode != 0 and failure is None:
            lines = (err or out).strip().splitlines() or ["(no output)"]
            failure = f"{p.what} failed: {lines[0]}"
    if failure:
        raise LabError(failure)
    return outputs


# --- the lab --------------------------------------------------------------------------------------


LOCK_PATH = Path("/run/ironlb-lab.lock")


def lock_holder() -> int | None:
    """Pid of the live process holding the machine-wide lab lock, if any."""
    try:
        with open(LOCK_PATH) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = f.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        pass
    return None


@contextlib.contextmanager
def exclusive(
    timeout: float = 1800.0, waiting: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the machine-wide lab lock for a whole session (the namespace names are fixed, so
    two labs cannot coexist): a second test session waits here instead of tearing down the
    first one's lab. Released when the block ends or the process dies."""
    with open(LOCK_PATH, "a+") as f:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    waited = f" for over {timeout:.0f} s" if timeout else ""
                    raise LabError(
                        f"the lab is in use by another session (pid {lock_holder()}){waited}"
                    ) from None
                if waiting is not None and not told:
                    waiting(f"waiting for another lab session (pid {lock_holder()}) to end")
                    told = True
                time.sleep(0.5)
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def frr_directory(directory: Path) -> Path:
    """FRR's sockets and logs: outside the lab directory because FRR runs as user `frr`, which
    cannot enter root's home; named after the lab directory so `down` finds it without state."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"ironlb-lab-{digest}"


@dataclasses.dataclass
class Lab:
    """One lab rooted at a state directory; see the module docstring for the topology."""

    nodes: int = 3
    directory: Path = DEFAULT_DIR
    proxy_mode: str = "nftables"
    # Nodes (1-based) that run containerd + a real kubelet instead of hack/podagent
    # (hack/kubelet_node.py); they register their Node objects themselves.
    kubelet_nodes: tuple[int, ...] = ()
    # Passed to the apiserver (hack/cluster.py's `audit_policy`): the requests it selects are
    # logged to `cluster.audit_log`.
    audit_policy: Path | None = None

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()
        if not 1 <= self.nodes <= MAX_NODES:
            raise LabError(f"--nodes must be between 1 and {MAX_NODES}, not {self.nodes}")
        if self.proxy_mode not in PROXY_MODES:
            raise LabError(f"--proxy-mode must be one of {', '.join(PROXY_MODES)}")
        self.kubelet_nodes = tuple(sorted(set(self.kubelet_nodes)))
        if any(not 1 <= i <= self.nodes for i in self.kubelet_nodes):
            raise LabError(f"--kubelet-nodes must be node indexes in 1..{self.nodes}")
        self._node_wrappers: dict[int, subprocess.Popen[bytes]] = {}

    # names and addresses -------------------------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        return [node_name(i) for i in range(1, self.nodes + 1)]

    @property
    def node_namespaces(self) -> list[str]:
        return [node_namespace(i) for i in range(1, self.nodes + 1)]

    @property
    def namespaces(self) -> list[str]:
        return [NS_CP, NS_TOR, NS_CLIENT, *self.node_namespaces]

    def node_mac(self, index: int) -> str:
        self._check_index(index)
        return node_mac(index)

    def node_v4(self, index: int) -> ipaddress.IPv4Address:
        self._check_index(index)
        return node_v4(index)

    def node_v6(self, index: int) -> ipaddress.IPv6Address:
        self._check_index(index)
        return node_v6(index)

    def _check_index(self, index: int) -> None:
        if not 1 <= index <= self.nodes:
            raise LabError(f"node index {index} outside 1..{self.nodes}")

    @property
    def cluster(self) -> local_cluster.Cluster:
        # etcd and the apiserver's advertised address sit on the host link, the one address the
        # root namespace (where the readiness probe and the tests run) can reach; the apiserver
        # itself listens on every address of ilb-cp, so nodes use the LAN address.
        return local_cluster.Cluster(
            directory=self.directory / "cluster",
            bind=str(CP_HOST_V4),
            ports=local_cluster.Ports(APISERVER_PORT, 2379, 2380),
            netns=NS_CP,
            extra_addresses=(str(CP_LAN_V4), str(CP_LAN_V6)),
            # Pods on kubelet nodes reach the apiserver through the `kubernetes` Service, whose
            # endpoint must be an address they can route to: the LAN one.
            advertise_address=str(CP_LAN_V4) if self.kubelet_nodes else None,
            endpoint_reconciler="lease" if self.kubelet_nodes else "none",
            aggregator_routing=bool(self.kubelet_nodes),
            audit_policy=self.audit_policy,
        )

    @property
    def kubeconfig(self) -> Path:
        """Kubeconfig for the root namespace (tests, kubectl on the host)."""
        return self.cluster.kubeconfig

    @property
    def node_kubeconfig(self) -> Path:
        """Kubeconfig for processes inside node namespaces (server on the LAN address)."""
        return self.directory / "kubeconfig-nodes"

    @property
    def frr_directory(self) -> Path:
        return frr_directory(self.directory)

    # running commands ----------------------------------------------------------------------------

    def argv(self, ns: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", namespace(ns), *argv]

    def exec(
        self,
        ns: str,
        *argv: str,
        check: bool = False,
        timeout: float = 30.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in a lab namespace (`tor`, `node1`, `ilb-client`, ...) to completion.

        `env` is added to this process's environment (`ip netns exec` passes it on).
        """
        result = subprocess.run(
            self.argv(ns, *argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else {**os.environ, **env},
        )
        if check and result.returncode != 0:
            raise LabError(
                f"{' '.join(argv)} in {namespace(ns)} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[:300]}"
            )
        return result

    def popen(self, ns: str, *argv: str, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a long-running command in a namespace; `down` kills it if the caller did not."""
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.argv(ns, *argv), **kwargs)

    def http_status(self, ns: str, urls: Sequence[str], timeout: float = 1.0) -> list[int | None]:
        """HTTP status codes of GETs from inside namespace `ns`, one process for all of them
        (None: no answer within `timeout`)."""
        result = self.exec(
            ns,
            sys.executable,
            "-m",
            "hack.httpcheck",
            f"--timeout={timeout}",
            *urls,
            env={"PYTHONPATH": str(ROOT)},
            check=True,
            timeout=30 + timeout * len(urls),
        )
        codes: list[int | None] = json.loads(result.stdout)
        return codes

    def vtysh(self, *commands: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """vtysh on the ToR; each argument is one `-c` command."""
        args = ["vtysh", "--vty_socket", str(self.frr_directory)]
        for command in commands:
            args += ["-c", command]
        return self.exec(NS_TOR, *args, check=check)

    # up ------------------------------------------------------------------------------------------

    def check_prerequisites(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root (network namespaces, raw sockets): run as root")
        tools = [*REQUIRED_TOOLS, *(["iptables"] if self.proxy_mode == "iptables" else [])]
        missing = [t for t in tools if shutil.which(t) is None]
        missing += [str(FRR_BIN / d) for d in FRR_DAEMONS if not (FRR_BIN / d).exists()]
        if missing:
            raise LabError(
                f"missing {', '.join(missing)}: run hack/setup "
                "(Debian: iproute2 iputils-ping iputils-arping ndisc6 tcpdump frr)"
            )
        binaries = local_cluster.missing_binaries()
        if binaries:
            raise LabError(f"missing {', '.join(binaries)}: run `hack/cluster install` first")
        if self.kubelet_nodes:
            tools = ["containerd", "runc", "ctr", "unshare", "/usr/lib/cni/bridge"]
            missing = [t for t in tools if shutil.which(t) is None]
            if missing:
                raise LabError(
                    f"missing {', '.join(missing)} for kubelet nodes: run hack/setup "
                    "(Debian: containerd runc containernetworking-plugins)"
                )

    def up(self) -> None:
        self.check_prerequisites()
        existing = lab_namespaces()
        if existing and not any(namespace_pids(ns) for ns in existing):
            # A lab whose every process is gone (its session was killed: processes end, network
            # namespaces stay): nothing is using it, so it is removed rather than refused.
            log(f"removing the remains of a stopped lab: {', '.join(existing)}")
            self.down()
            existing = lab_namespaces()
        if existing:
            raise LabError(
                f"a lab is already running (namespaces {', '.join(existing)}); "
                "run `hack/lab down` first"
            )
        if HOST_LINK in _root_links():
            raise LabError(f"link {HOST_LINK} exists in the root namespace; run `hack/lab down`")
        if self.directory.exists() and any(self.directory.iterdir()):
            raise LabError(
                f"stale lab directory {self.directory}; run `hack/lab down --dir {self.directory}`"
            )
        built = None
        if self.kubelet_nodes:
            # Cached: only a changed Dockerfile, source or base is rebuilt.
            from hack import images

            try:
                built = images.build()
            except images.ImageError as e:
                raise LabError(str(e)) from e
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / MARKER).write_text(
                json.dumps(
                    {
                        "nodes": self.nodes,
                        "frr": str(self.frr_directory),
                        "proxy_mode": self.proxy_mode,
                        "kubelet_nodes": list(self.kubelet_nodes),
                    }
                )
                + "\n"
            )
            self._make_namespaces()
            self._make_links()
            self._start_frr()
            try:
                self.cluster.up()
            except local_cluster.ClusterError as e:
                raise LabError(str(e)) from e
            self._write_node_kubeconfig()
            self._prepare_cluster()
            for i in range(1, self.nodes + 1):
                self.start_kube_proxy(i)
                if i not in self.kubelet_nodes:
                    self._start_pod_agent(i)
            if built is not None:
                self._start_kubelet_nodes(built.for_nodes, built.pause.name)
            self._wait_frr()
            self.wait_kube_proxies()
            if built is not None:
                self.wait_kubelet_nodes()
        except BaseException:
            with contextlib.suppress(Exception):
                self.down()
            raise

    def _make_namespaces(self) -> None:
        _ip_batch([f"netns add {ns}" for ns in self.namespaces], None, "creating namespaces")
        # Sysctls before the links exist, so that every interface inherits `default`.
        common = [
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_ra=0",
            # Keep IPv6 addresses across a link flap, as IPv4 ones are kept.
            "net.ipv6.conf.all.keep_addr_on_down=1",
            "net.ipv6.conf.default.keep_addr_on_down=1",
            "net.ipv6.conf.default.accept_ra=0",
        ]
        per_ns = {ns: list(common) for ns in self.namespaces}
        per_ns[NS_TOR] += ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
        for ns in self.node_namespaces:
            # Nodes route: kube-proxy sends a VIP's traffic on to Pods, here or on another node.
            per_ns[ns] += ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
            # What kube-proxy's strictARP asks of a node: the kernel answers ARP only for
            # addresses on the receiving interface and picks a source on that interface.
            per_ns[ns] += [
                f"net.ipv4.conf.{scope}.{key}={value}"
                for scope in ("all", "default")
                for key, value in (("arp_ignore", 1), ("arp_announce", 2))
            ]
        procs = {
            ns: subprocess.Popen(
                self.argv(ns, "sysctl", "-q", "-w", *settings),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for ns, settings in per_ns.items()
        }
        for ns, proc in procs.items():
            _, err = proc.communicate(timeout=30)
            if proc.returncode != 0:
                raise LabError(f"sysctl in {ns} failed: {err.strip().splitlines()[0]}")

    def _make_links(self) -> None:
        root = [
            f"link add br0 netns {NS_TOR} address {TOR_MAC} type bridge mcast_snooping 0",
            f"link add eth0 netns {NS_CP} address {CP_MAC} type veth peer name p-cp netns {NS_TOR}",
            f"link add eth0 netns {NS_CLIENT} address {CLIENT_MAC} type veth "
            f"peer name eth-client netns {NS_TOR} address {TOR_CLIENT_MAC}",
            f"link add {HOST_LINK} type veth peer name eth-host netns {NS_CP}",
            f"addr add {HOST_V4}/{HOST_NET.prefixlen} dev {HOST_LINK}",
            f"link set {HOST_LINK} up",
        ]
        for i in range(1, self.nodes + 1):
            root.append(
                f"link add eth0 netns {node_namespace(i)} address {node_mac(i)} type veth "
                f"peer name p-node{i} netns {NS_TOR}"
            )
        _ip_batch(root, None, "creating links")
        ports = ["p-cp", *(f"p-node{i}" for i in range(1, self.nodes + 1))]
        tor = [
            "link set lo up",
            *(f"link set {p} master br0" for p in ports),
            *(f"link set {p} up" for p in ports),
            "link set br0 up",
            f"addr add {TOR_LAN_V4}/{LAN_V4.prefixlen} dev br0",
            f"addr add {TOR_LAN_V6}/{LAN_V6.prefixlen} dev br0 nodad",
            "link set eth-client up",
            f"addr add {TOR_CLIENT_V4}/{CLIENT_NET_V4.prefixlen} dev eth-client",
            f"addr add {TOR_CLIENT_V6}/{CLIENT_NET_V6.prefixlen} dev eth-client nodad",
        ]
        _ip_batch(tor, NS_TOR, f"configuring {NS_TOR}")
        hosts: dict[str, tuple[str, str, str, str, str, str]] = {
            NS_CP: (
                str(CP_LAN_V4), str(LAN_V4.prefixlen), str(CP_LAN_V6), str(LAN_V6.prefixlen),
                str(TOR_LAN_V4), str(TOR_LAN_V6),
            ),
            NS_CLIENT: (
                str(CLIENT_V4), str(CLIENT_NET_V4.prefixlen),
                str(CLIENT_V6), str(CLIENT_NET_V6.prefixlen),
                str(TOR_CLIENT_V4), str(TOR_CLIENT_V6),
            ),
        }  # fmt: skip
        for i in range(1, self.nodes + 1):
            hosts[node_namespace(i)] = (
                str(node_v4(i)), str(LAN_V4.prefixlen), str(node_v6(i)), str(LAN_V6.prefixlen),
                str(TOR_LAN_V4), str(TOR_LAN_V6),
            )  # fmt: skip
        for ns, (v4, len4, v6, len6, gw4, gw6) in hosts.items():
            commands = [
                "link set lo up",
                "link set eth0 up",
                f"addr add {v4}/{len4} dev eth0",
                f"addr add {v6}/{len6} dev eth0 nodad",
                f"route add default via {gw4}",
                f"route add default via {gw6}",
            ]
            if ns == NS_CP:
                commands += ["link set eth-host up", f"addr add {CP_HOST_V4}/30 dev eth-host"]
                if self.kubelet_nodes:
                    # Pods that call the apiserver (and the webhooks it calls) need a way back.
                    for i in range(1, self.nodes + 1):
                        commands += [
                            f"route add {pod_cidr_v4(i)} via {node_v4(i)}",
                            f"route add {pod_cidr_v6(i)} via {node_v6(i)}",
                        ]
            if ns in self.node_namespaces:
                commands += self._pod_network(self.node_namespaces.index(ns) + 1)
            _ip_batch(commands, ns, f"configuring {ns}")

    def repair_nodes(self) -> None:
        """Put every node's LAN interface, addresses and default routes back as `up` made them,
        and start again a pod agent that has exited.

        A test that pulls a node's link with `ip link set eth0 down` loses the node's routes (the
        kernel flushes routes through a device taken down): its default routes and its routes to
        the other nodes' Pods. Later tests must not inherit that: without the Pod routes, a
        connection that kube-proxy DNATs to a Pod on another node is answered "no route" (seen
        as IPv6 requests failing, sporadically, in every later module). Nor a dead pod agent:
        its node's Pods would never start or turn Ready, and every later test with backends
        there would time out.
        """
        for i in range(1, self.nodes + 1):
            _ip_batch(
                [
                    "link set eth0 up",
                    f"addr replace {node_v4(i)}/{LAN_V4.prefixlen} dev eth0",
                    f"addr replace {node_v6(i)}/{LAN_V6.prefixlen} dev eth0 nodad",
                    f"route replace default via {TOR_LAN_V4}",
                    f"route replace default via {TOR_LAN_V6}",
                    *self._pod_routes(i, verb="replace"),
                ],
                node_namespace(i),
                f"repairing {node_namespace(i)}",
            )
            self.exec(NS_TOR, "ip", "link", "set", f"p-node{i}", "up", check=True)
            if i not in self.kubelet_nodes and self.pod_agent_pid(i) is None:
                log(
                    f"the pod agent of {node_name(i)} has exited; starting it again (its log "
                    f"ended: {_last_line(self.pod_agent_log(node_name(i)))})"
                )
                self._start_pod_agent(i)

    def _pod_network(self, index: int) -> list[str]:
        """`ip` commands for node `index`: its Pod bridge, and routes to the other nodes' Pods."""
        commands = [
            f"link add {POD_BRIDGE} type bridge",
            f"addr add {pod_gateway_v4(index)}/{pod_cidr_v4(index).prefixlen} dev {POD_BRIDGE}",
            f"addr add {pod_gateway_v6(index)}/{pod_cidr_v6(index).prefixlen} dev {POD_BRIDGE}"
            " nodad",
            f"link set {POD_BRIDGE} up",
        ]
        return commands + self._pod_routes(index, verb="add")

    def _pod_routes(self, index: int, verb: str) -> list[str]:
        """`ip` commands for node `index`'s routes to the other nodes' Pods."""
        commands = []
        for other in range(1, self.nodes + 1):
            if other != index:
                commands += [
                    f"route {verb} {pod_cidr_v4(other)} via {node_v4(other)}",
                    f"route {verb} {pod_cidr_v6(other)} via {node_v6(other)}",
                ]
        return commands

    # node components -----------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        path = self.directory / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _node_dir(self, index: int) -> Path:
        path = self.directory / node_name(index)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def kube_proxy_config(self, index: int) -> dict[str, Any]:
        """kube-proxy's whole configuration: with `--config` it ignores every other flag but
        logging and --hostname-override, so nothing is left to flags."""
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.node_kubeconfig)},
            "hostnameOverride": node_name(index),
            "mode": self.proxy_mode,
            "clusterCIDR": f"{CLUSTER_CIDR_V4},{CLUSTER_CIDR_V6}",
            "healthzBindAddress": f"0.0.0.0:{KUBE_PROXY_HEALTHZ_PORT}",
            "metricsBindAddress": "127.0.0.1:10249",
            # NodePorts (and healthCheckNodePorts) on the node's own addresses only: no
            # 127.0.0.1 NodePorts, so kube-proxy never sets route_localnet.
            "nodePortAddresses": ["primary"],
            # Zero sizing: otherwise kube-proxy writes nf_conntrack_max and the machine-wide
            # nf_conntrack hashsize, which a lab must not touch.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"minSyncPeriod": "0s"},
            "nftables": {"minSyncPeriod": "0s"},
        }

    def kube_proxy_pid(self, index: int) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            pid = int((self._node_dir(index) / "kube-proxy.pid").read_text())
            if processes.alive(pid):
                return pid
        return None

    def start_kube_proxy(self, index: int) -> int:
        """Start (or restart after `stop_kube_proxy`) kube-proxy in node `index`."""
        if self.kube_proxy_pid(index) is not None:
            raise LabError(f"kube-proxy already runs in {node_namespace(index)}")
        config = self._node_dir(index) / "kube-proxy.yaml"
        config.write_text(json.dumps(self.kube_proxy_config(index), indent=2))
        with open(self.log_dir / f"kube-proxy-{node_name(index)}.log", "ab") as out:
            process = self.popen(
                node_namespace(index),
                str(local_cluster.binary("kube-proxy")),
                f"--config={config}",
                f"--hostname-override={node_name(index)}",
                "--v=2",
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        (self._node_dir(index) / "kube-proxy.pid").write_text(str(process.pid))
        return process.pid

    def stop_kube_proxy(self, index: int, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop node `index`'s kube-proxy; its rules stay in the kernel, as after a crash."""
        pid = self.kube_proxy_pid(index)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if _stop([pid]):
            raise LabError(f"kube-proxy in {node_namespace(index)} (pid {pid}) does not stop")

    def kube_proxy_healthz(self, indexes: Sequence[int] | None = None) -> dict[int, int | None]:
        """Each node's kube-proxy /healthz status code as the ToR sees it (None: no answer)."""
        indexes = list(indexes or range(1, self.nodes + 1))
        urls = [f"http://{node_v4(i)}:{KUBE_PROXY_HEALTHZ_PORT}/healthz" for i in indexes]
        codes = self.http_status(NS_TOR, urls)
        return dict(zip(indexes, codes, strict=True))

    def wait_kube_proxies(self, timeout: float = KUBE_PROXY_READY_TIMEOUT_S) -> None:
        """Until every node's kube-proxy says healthy (it has synced its rules once)."""
        deadline = time.monotonic() + timeout
        while True:
            codes = self.kube_proxy_healthz()
            if all(code == 200 for code in codes.values()):
                return
            for i in codes:
                if self.kube_proxy_pid(i) is None:
                    raise LabError(
                        f"kube-proxy in {node_namespace(i)} exited during start-up: "
                        f"{_last_line(self.log_dir / f'kube-proxy-{node_name(i)}.log')}"
                    )
            if time.monotonic() > deadline:
                bad = [i for i, code in codes.items() if code != 200]
                raise LabError(
                    f"kube-proxy in {', '.join(node_namespace(i) for i in bad)} not healthy "
                    f"after {timeout:.0f} s: "
                    f"{_last_line(self.log_dir / f'kube-proxy-{node_name(bad[0])}.log')}"
                )
            time.sleep(0.2)

    def pod_agent_log(self, node: str) -> Path:
        return self.log_dir / f"podagent-{node}.log"

    def pod_agent_pid(self, index: int) -> int | None:
        """The pid of node `index`'s pod agent while it runs."""
        with contextlib.suppress(OSError, ValueError):
            pid = int((self._node_dir(index) / "podagent.pid").read_text())
            # The pid file outlives the agent, and a pid is given again: check it is the agent.
            argv = processes.argv(pid) or []
            if processes.alive(pid) and any("hack.podagent" in a for a in argv):
                return pid
        return None

    def _start_pod_agent(self, index: int) -> None:
        # nsenter, not `ip netns exec`: that one also gives the process a mount namespace of
        # its own, and the Pods' network namespaces the agent mounts in /run/netns would then
        # be invisible to everyone else (tests signalling a Pod, `down` removing them).
        with open(self.pod_agent_log(node_name(index)), "ab") as out:
            process = subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{node_namespace(index)}",
                    "env",
                    f"PYTHONPATH={ROOT}",
                    sys.executable,
                    "-m",
                    "hack.podagent",
                    f"--node={node_name(index)}",
                    f"--kubeconfig={self.node_kubeconfig}",
                    f"--state={self._node_dir(index) / 'pods'}",
                    f"--pod-cidr={pod_cidr_v4(index)}",
                    f"--pod-cidr={pod_cidr_v6(index)}",
                    f"--host-ip={node_v4(index)}",
                    f"--host-ip={node_v6(index)}",
                ],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # nsenter and env exec what they run: this is the agent's own pid.
        (self._node_dir(index) / "podagent.pid").write_text(str(process.pid))

    def _start_kubelet_nodes(self, built: Sequence[Any], pause: str) -> None:
        """containerd + kubelet in each kubelet node (hack/kubelet_node.py), images imported."""
        import concurrent.futures

        kubelet_node.ensure_mountpoints(self.directory)
        kubelet_node.save_sysctls(self.directory)
        for i in self.kubelet_nodes:
            script = kubelet_node.prepare(
                self._node_dir(i),
                name=node_name(i),
                netns=node_namespace(i),
                node_ips=[str(node_v4(i)), str(node_v6(i))],
                subnets=[
                    (str(pod_cidr_v4(i)), str(pod_gateway_v4(i))),
                    (str(pod_cidr_v6(i)), str(pod_gateway_v6(i))),
                ],
                bridge=POD_BRIDGE,
                kubeconfig=self.node_kubeconfig,
                ca=self.cluster.directory / "ca.crt",
                pause=pause,
            )
            self._node_wrappers[i] = kubelet_node.start(
                self._node_dir(i), node_namespace(i), script
            )

        def load(i: int) -> None:
            kubelet_node.wait_containerd(self._node_dir(i), self._node_wrappers[i])
            kubelet_node.load_images(self._node_dir(i), built)

        with concurrent.futures.ThreadPoolExecutor(len(self.kubelet_nodes)) as pool:
            try:
                for future in [pool.submit(load, i) for i in self.kubelet_nodes]:
                    future.result()
            except kubelet_node.NodeError as e:
                raise LabError(f"kubelet node: {e}") from e

    def wait_kubelet_nodes(self, timeout: float = kubelet_node.READY_TIMEOUT_S) -> None:
        """Until every kubelet node's kubelet says Ready; then the machine-wide sysctls it
        changed at start are written back."""
        deadline = time.monotonic() + timeout
        names = {node_name(i): i for i in self.kubelet_nodes}
        while True:
            ready = set()
            for node in self.api_get("/api/v1/nodes")["items"]:
                conditions = node.get("status", {}).get("conditions") or []
                if node["metadata"]["name"] in names and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in conditions
                ):
                    ready.add(node["metadata"]["name"])
            if ready == set(names):
                break
            for i in names.values():
                wrapper = self._node_wrappers.get(i)
                if wrapper is not None and wrapper.poll() is not None:
                    raise LabError(
                        f"kubelet in {node_namespace(i)} exited: "
                        f"{_last_line(kubelet_node.kubelet_log(self._node_dir(i)))}"
                    )
            if time.monotonic() > deadline:
                bad = sorted(set(names) - ready)
                raise LabError(
                    f"kubelet nodes {', '.join(bad)} not Ready after {timeout:.0f} s: "
                    f"{_last_line(kubelet_node.kubelet_log(self._node_dir(names[bad[0]])))}"
                )
            time.sleep(0.2)
        changed = kubelet_node.restore_sysctls(self.directory)
        if changed:
            log(
                "kubelet changed machine-wide sysctls; restored "
                + ", ".join(f"{k}={v[1]}" for k, v in sorted(changed.items()))
            )

    def _start_frr(self) -> None:
        frr = self.frr_directory
        shutil.rmtree(frr, ignore_errors=True)
        frr.mkdir(mode=0o755)
        config = frr / "frr.conf"
        config.write_text(tor_config(FRR_TEMPLATE.read_text(), frr / "frr.log", self.nodes))
        shutil.chown(frr, "frr", "frr")
        shutil.chown(config, "frr", "frr")
        with contextlib.suppress(FileExistsError):
            (self.directory / "frr").symlink_to(frr)
        for daemon in FRR_DAEMONS:
            self._start_frr_daemon(daemon)

    def _start_frr_daemon(self, daemon: str) -> None:
        frr = self.frr_directory
        # zebra changes an IPv6 route by deleting it and adding the new one unless told that
        # the kernel replaces IPv6 routes in place (it has since 4.x): without this, every
        # change of an ECMP set leaves the ToR a moment with no IPv6 route at all, and a SYN
        # arriving then gets "no route" (seen as failed connections during rolling restarts).
        extra = ["--v6-rr-semantics"] if daemon == "zebra" else []
        # -d: daemonize (the pid lands in -i); -z/--vty_socket: private sockets, so the lab
        # never touches a system FRR; -P 0: no TCP vty.
        _run(
            self.argv(
                NS_TOR,
                str(FRR_BIN / daemon),
                "-d",
                "-f", str(frr / "frr.conf"),
                "-i", str(frr / f"{daemon}.pid"),
                "-z", str(frr / "zserv.api"),
                "--vty_socket", str(frr),
                "-P", "0",
                "-u", "frr",
                "-g", "frr",
                *extra,
            ),
            f"starting FRR {daemon}",
        )  # fmt: skip

    def restart_frr_daemon(self, daemon: str) -> None:
        """Stop one FRR daemon of the ToR (SIGTERM, as `systemctl restart frr` does) and start
        it again from the lab's configuration file (runtime vtysh changes are lost, as on a
        real router that did not save them); returns once vtysh answers again."""
        pid_file = self.frr_directory / f"{daemon}.pid"
        pid = int(pid_file.read_text().strip())
        processes.stop_pids([pid], group=False, timeout=STOP_TIMEOUT_S)
        self._start_frr_daemon(daemon)
        self._wait_frr()

    def _wait_frr(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            result = self.vtysh("show bgp summary", "show bfd peers", check=False)
            if result.returncode == 0:
                return
            last = ((result.stderr or result.stdout).strip().splitlines() or [""])[-1]
            time.sleep(0.05)
        raise LabError(f"FRR in {NS_TOR} does not answer vtysh: {last}")

    def _write_node_kubeconfig(self) -> None:
        config = json.loads(self.kubeconfig.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = APISERVER_FROM_NODES
        self.node_kubeconfig.write_text(json.dumps(config, indent=2))
        self.node_kubeconfig.chmod(0o600)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl against the lab's apiserver from the root namespace; raises LabError."""
        return _finish([self._kubectl_start(*args, input=input)])[0]

    def _kubectl_start(self, *args: str, input: str | None = None) -> _Pending:
        kubectl = str(local_cluster.binary("kubectl"))
        proc = subprocess.Popen(
            [kubectl, f"--kubeconfig={self.kubeconfig}", *args],
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return _Pending(proc, f"kubectl {' '.join(args[:2])}", input)

    def _prepare_cluster(self) -> None:
        """Our CRDs, the metallb-system namespace and one Ready Node object per lab node."""
        # Each CRD costs the apiserver 0.1-0.6 s (CEL compilation), so they go in parallel.
        crds = [
            self._kubectl_start("apply", "--server-side", "-f", str(path))
            for path in sorted(CRDS.glob("*.yaml"))
        ]
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "metallb-system"}},
            *(self._node_object(i) for i in range(1, self.nodes + 1)),
        ]
        self.kubectl(
            "apply",
            "--server-side",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )
        patches = [p for i in range(1, self.nodes + 1) for p in self._start_node_patches(i)]
        _finish([*crds, *patches])
        self._wait_crds_established()

    def _node_object(self, index: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name(index),
                "labels": {
                    "kubernetes.io/hostname": node_name(index),
                    "kubernetes.io/os": "linux",
                },
            },
            "spec": {
                "podCIDR": str(pod_cidr_v4(index)),
                "podCIDRs": [str(pod_cidr_v4(index)), str(pod_cidr_v6(index))],
            },
        }

    def _start_node_patches(self, index: int) -> list[_Pending]:
        """The Node as a node's agent would make it: no startup taint, its addresses, and
        (without a kubelet) Ready with capacity."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patches = []
        # The apiserver taints a new Node not-ready until a node lifecycle controller sees
        # its kubelet; there is none here, so the taint goes at once (a real kubelet does
        # not add it back when it registers the existing Node).
        patches.append(
            self._kubectl_start(
                "patch",
                "node",
                node_name(index),
                "--type=merge",
                "-p",
                json.dumps({"spec": {"taints": None}}),
            )
        )
        addresses = [
            {"type": "InternalIP", "address": str(node_v4(index))},
            {"type": "InternalIP", "address": str(node_v6(index))},
            {"type": "Hostname", "address": node_name(index)},
        ]
        status: dict[str, Any] = {"addresses": addresses}
        if index not in self.kubelet_nodes:
            # A kubelet reports capacity and conditions itself, and the same addresses;
            # they are set here too because kube-proxy exits when its node's IPs change.
            status |= {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "lab node (its Pods run under hack/podagent, no kubelet)",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                # What the scheduler fits Pods into.
                "capacity": NODE_CAPACITY,
                "allocatable": NODE_CAPACITY,
            }
        # A merge patch, not server-side apply: SSA keys node addresses by type, which
        # rejects the two InternalIPs of a dual-stack node.
        patches.append(
            self._kubectl_start(
                "patch",
                "node",
                node_name(index),
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": status}),
            )
        )
        return patches

    def restore_node(self, index: int) -> None:
        """Create node `index`'s Node object again (after a test deleted it), as `up` made it."""
        self.kubectl(
            "apply", "--server-side", "-f", "-", input=json.dumps(self._node_object(index))
        )
        _finish(self._start_node_patches(index))

    def api_get(self, path: str) -> Any:
        """GET from the apiserver as the lab's admin (no kubectl process, no discovery)."""
        d = self.cluster.directory
        context = ssl.create_default_context(cafile=str(d / "ca.crt"))
        context.load_cert_chain(d / "admin.crt", d / "admin.key")
        with urllib.request.urlopen(
            APISERVER_FROM_HOST + path, timeout=10, context=context
        ) as response:
            return json.load(response)

    def _wait_crds_established(self) -> None:
        # `kubectl wait` polls once a second; the condition is usually there within 0.1 s.
        want = {
            f"{doc['spec']['names']['plural']}.{doc['spec']['group']}"
            for doc in (_load_yaml(path) for path in sorted(CRDS.glob("*.yaml")))
        }
        deadline = time.monotonic() + READY_TIMEOUT_S
        while want:
            crds = self.api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            for crd in crds["items"]:
                conditions = crd.get("status", {}).get("conditions", [])
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    want.discard(crd["metadata"]["name"])
            if not want:
                return
            if time.monotonic() > deadline:
                raise LabError(f"CRDs not established: {', '.join(sorted(want))}")
            time.sleep(0.05)

    # down ----------------------------------------------------------------------------------------

    def down(self) -> bool:
        """Remove everything a lab made (any lab, not only this object's); False if none was."""
        did = False
        problems: list[str] = []
        # Kubelet nodes first: their containers live outside the lab's network namespaces.
        did, problems = kubelet_node.down(self.directory)
        for process in self._node_wrappers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)
        # The apiserver drains open watches before it exits: its clients in the node
        # namespaces (kube-proxy, pod agents, speakers) go first, so it stops at once.
        clients = [pid for ns in lab_namespaces() if ns != NS_CP for pid in namespace_pids(ns)]
        if clients:
            did = True
            _stop(clients)
        cluster_dir = self.directory / "cluster"
        if cluster_dir.exists():
            did = True
            try:
                self.cluster.down()
            except local_cluster.ClusterError as e:
                problems.append(str(e))
        namespaces = lab_namespaces()
        # Every process left in a lab namespace is the lab's: FRR, speakers, test helpers.
        pids = [pid for ns in namespaces for pid in namespace_pids(ns)]
        if pids:
            did = True
            survivors = _stop(pids)
            if survivors:
                problems.append(f"could not stop pids {', '.join(map(str, survivors))}")
        if namespaces:
            did = True
            # Deleting a namespace deletes its veths, and with them their peers elsewhere.
            result = subprocess.run(
                ["ip", "-force", "-batch", "-"],
                input="".join(f"netns del {ns}\n" for ns in namespaces),
                capture_output=True,
                text=True,
            )
            left = lab_namespaces()
            if result.returncode != 0 and left:
                problems.append(f"could not delete namespaces {', '.join(left)}")
        for link in _root_links():
            if link.startswith(PREFIX):
                did = True
                subprocess.run(["ip", "link", "del", link], capture_output=True)
        frr = self.frr_directory
        if frr.exists():
            did = True
            shutil.rmtree(frr, ignore_errors=True)
        if self.directory.exists():
            did = True
            self._remove_directory()
        if problems:
            raise LabError("; ".join(problems))
        return did

    def _remove_directory(self) -> None:
        # Only a directory the lab made (it has the marker) is removed whole; `--dir` might
        # point somewhere precious by mistake.
        d = self.directory
        if (d / MARKER).exists() or not any(d.iterdir()):
            shutil.rmtree(d, ignore_errors=True)
            return
        for name in ("cluster", "frr", "kubeconfig-nodes"):
            path = d / name
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path, ignore_errors=True)

    # context manager -----------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    def status(self) -> dict[str, list[int]]:
        """Lab namespaces and the pids running in each."""
        return {ns: namespace_pids(ns) for ns in lab_namespaces()}


@contextlib.contextmanager
def running(nodes: int = 3, directory: Path | None = None, **options: Any) -> Iterator[Lab]:
    """A lab in a fresh temporary directory for the duration of a block (`options`: more of
    Lab's fields)."""
    base = directory or Path(tempfile.mkdtemp(prefix="ironlb-labdir-"))
    lab = Lab(nodes=nodes, directory=base / "lab", **options)
    try:
        lab.up()
        yield lab
    finally:
        try:
            lab.down()
        finally:
            if directory is None:
                shutil.rmtree(base, ignore_errors=True)


# --- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's unset --dir must not overwrite one given before the subcommand.
    common.add_argument(
        "--dir", type=Path, default=argparse.SUPPRESS, help=f"lab state directory ({DEFAULT_DIR})"
    )
    parser = argparse.ArgumentParser(
        prog="hack/lab", description=__doc__.split("\n\n")[0], parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", parents=[common], help="create namespaces, FRR, control plane")
    up.add_argument("--nodes", type=int, default=3, help="number of node namespaces")
    up.add_argument(
        "--proxy-mode", choices=PROXY_MODES, default="nftables", help="kube-proxy's mode"
    )
    up.add_argument(
        "--kubelet-nodes",
        default="",
        help="comma-separated node indexes that run containerd + kubelet (e.g. 1,2)",
    )
    down = sub.add_parser("down", parents=[common], help="remove every ilb-* namespace, veth...")
    down.add_argument("--force", action="store_true", help="even while a test session uses it")
    sub.add_parser("env", parents=[common], help="print `export KUBECONFIG=...` for the host")
    sub.add_parser("status", parents=[common], help="list lab namespaces and their processes")
    sub.add_parser("vtysh", parents=[common], help="vtysh on the ToR: vtysh -c COMMAND ...")
    run = sub.add_parser("exec", parents=[common], help="run in a namespace: exec NS -- CMD...")
    run.add_argument("ns")
    run.add_argument("args", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else argv
    # vtysh's own options (-c, -d ...) pass through untouched.
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "vtysh":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    directory = getattr(args, "dir", DEFAULT_DIR)
    try:
        if args.command == "up":
            try:
                kubelets = tuple(int(i) for i in args.kubelet_nodes.split(",") if i.strip())
            except ValueError:
                raise LabError("--kubelet-nodes takes node indexes, e.g. 1,2") from None
            lab = Lab(
                nodes=args.nodes,
                directory=directory,
                proxy_mode=args.proxy_mode,
                kubelet_nodes=kubelets,
            )
            started = time.monotonic()
            with exclusive(timeout=0):
                lab.up()
            log(f"up in {time.monotonic() - started:.1f} s: {', '.join(lab.namespaces)}")
            log(f"apiserver {APISERVER_FROM_HOST} (nodes: {APISERVER_FROM_NODES})")
            log(f'eval "$(hack/lab env --dir {lab.directory})" to use it')
            return 0
        lab = Lab(directory=directory)
        if args.command == "down":
            holder = lock_holder()
            if holder is not None and not args.force:
                raise LabError(
                    f"a test session (pid {holder}) is using the lab; wait, or use --force"
                )
            log("removed the lab" if lab.down() else "nothing to do: no lab running")
        elif args.command == "env":
            if not lab.kubeconfig.exists():
                raise LabError(f"no lab in {lab.directory}: run `hack/lab up`")
            print(f"export KUBECONFIG={lab.kubeconfig}")
        elif args.command == "status":
            running_now = lab.status()
            if not running_now:
                print("not running")
                return 1
            for ns, pids in running_now.items():
                print(f"{ns}: {' '.join(map(str, pids)) or '-'}")
        elif args.command == "vtysh":
            vty = ["vtysh", "--vty_socket", str(lab.frr_directory), *extra]
            os.execvp("ip", lab.argv(NS_TOR, *vty))
        elif args.command == "exec":
            command = args.args[1:] if args.args[:1] == ["--"] else args.args
            if not command:
                raise LabError("usage: hack/lab exec NS -- CMD [ARG...]")
            if namespace(args.ns) not in namespaces():
                raise LabError(f"no namespace {namespace(args.ns)}: run `hack/lab up`")
            os.execvp("ip", lab.argv(args.ns, *command))
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
