"""ironlb in the lab: the controller where the tests run, one speaker per node namespace.

Every process is started through `lab.popen`, so `lab.down()` stops whatever a test or bench
left behind. Speakers find each other through the node LAN addresses (seeds) and encrypt their
membership traffic with a key generated per lab. Logs go to `<lab>/logs/<name>.log`.

A kube-proxy stand-in (`Backends`) makes Services reachable end to end: in each node namespace
an nftables DNAT rule sends `VIP:port` to a local echo server that answers with the address it
saw the client connect from, so a test can tell whether the client's source address was kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hack import lab as network_lab
from hack import tools

ROOT = Path(__file__).resolve().parent.parent
ECHO_PORT = 8080
MEMBERSHIP_PORT = 7946


@dataclass
class Deployment:
    lab: network_lab.Lab
    membership_profile: str = "default"
    lease_duration: int = 3
    # Run as the Helm chart's ServiceAccounts (its RBAC applied to the lab's cluster), so every
    # test and bench in the lab also proves that least privilege is enough; False = admin.
    as_chart_accounts: bool = True
    controller: subprocess.Popen[Any] | None = None
    speakers: dict[int, subprocess.Popen[Any]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _kubeconfigs: dict[str, Path] | None = None

    def kubeconfig(self, component: str) -> Path:
        """The kubeconfig a component uses: the chart's ServiceAccount, or the lab's admin."""
        if not self.as_chart_accounts:
            return self.lab.kubeconfig if component == "controller" else self.lab.node_kubeconfig
        if self._kubeconfigs is None:
            paths = tools.chart_identities(self.lab.kubeconfig, self.lab.directory / "accounts")
            speaker = json.loads(paths["speaker"].read_text())
            # Speakers live in node namespaces and reach the apiserver over the LAN.
            for cluster in speaker.get("clusters") or []:
                cluster["cluster"]["server"] = network_lab.APISERVER_FROM_NODES
            paths["speaker"].write_text(json.dumps(speaker, indent=2))
            self._kubeconfigs = paths
        return self._kubeconfigs[component]

    @property
    def log_dir(self) -> Path:
        path = self.lab.directory / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def key_dir(self) -> Path:
        path = self.lab.directory / "memberlist"
        if not path.exists():
            path.mkdir(parents=True)
            (path / "secretkey").write_text(secrets.token_urlsafe(24) + "\n")
            (path / "secretkey").chmod(0o600)
        return path

    def _log(self, name: str) -> IO[bytes]:
        out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(out)
        return out

    def start_controller(self) -> subprocess.Popen[Any]:
        argv = [
            sys.executable,
            "-m",
            "controller",
            "--kubeconfig",
            str(self.kubeconfig("controller")),
            "--metrics-port",
            "0",
            "--lease-duration",
            str(self.lease_duration),
        ]
        out = self._log("controller")
        self.controller = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        return self.controller

    def speaker_argv(self, index: int) -> list[str]:
        me = self.lab.node_v4(index)
        seeds = [
            f"{self.lab.node_v4(i)}:{MEMBERSHIP_PORT}"
            for i in range(1, self.lab.nodes + 1)
            if i != index
        ]
        argv = [
            sys.executable,
            "-m",
            "speaker",
            "--node-name",
            self.lab.node_names[index - 1],
            "--kubeconfig",
            str(self.kubeconfig("speaker")),
            "--ml-bind-addr",
            str(me),
            "--ml-bind-port",
            str(MEMBERSHIP_PORT),
            "--ml-seeds",
            ",".join(seeds),
            "--ml-secret-key-path",
            str(self.key_dir),
        ]
        return [*argv, "--ml-profile", self.membership_profile]

    def start_speaker(self, index: int) -> subprocess.Popen[Any]:
        out = self._log(f"speaker-{self.lab.node_names[index - 1]}")
        process = self.lab.popen(
            network_lab.node_namespace(index),
            "env",
            f"PYTHONPATH={ROOT}",
            *self.speaker_argv(index),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        self.speakers[index] = process
        return process

    def signal_speaker(self, index: int, sig: signal.Signals) -> None:
        process = self.speakers.get(index)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, sig)

    def stop_speaker(self, index: int, sig: signal.Signals = signal.SIGTERM) -> None:
        process = self.speakers.pop(index, None)
        if process is None:
            return
        _stop(process, sig)

    def stop_controller(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.controller is not None:
            _stop(self.controller, sig)
            self.controller = None

    def stop(self) -> None:
        for index in list(self.speakers):
            self.stop_speaker(index)
        self.stop_controller()
        for out in self._logs:
            out.close()
        self._logs.clear()

    def logs(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _stop(process: subprocess.Popen[Any], sig: signal.Signals, timeout: float = 10.0) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@contextlib.contextmanager
def deployed(
    lab: network_lab.Lab, *, speakers: Iterable[int] | None = None, **options: Any
) -> Iterator[Deployment]:
    deployment = Deployment(lab, **options)
    try:
        deployment.start_controller()
        for index in speakers if speakers is not None else range(1, lab.nodes + 1):
            deployment.start_speaker(index)
        yield deployment
    finally:
        deployment.stop()


# --- faults ------------------------------------------------------------------------------------


def cut_link(lab: network_lab.Lab, index: int) -> None:
    """Pull a node's cable: its switch port goes down, so the node sees its carrier drop and
    nobody is told anything; the node keeps its addresses and routes, as a real one would."""
    lab.exec("tor", "ip", "link", "set", f"p-node{index}", "down", check=True)


def restore_link(lab: network_lab.Lab, index: int) -> None:
    """Plug it back in."""
    lab.exec("tor", "ip", "link", "set", f"p-node{index}", "up", check=True)


# --- the kube-proxy stand-in ---------------------------------------------------------------------

ECHO_SERVER = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
name = sys.argv[3]
while True:
    c, peer = s.accept()
    with c:
        c.sendall(f"{name} {peer[0]}\\n".encode())
"""


@dataclass
class Backends:
    """An echo server per node and DNAT rules for the VIPs, like kube-proxy would install."""

    lab: network_lab.Lab
    servers: list[subprocess.Popen[Any]] = field(default_factory=list)

    def start(self) -> None:
        for i in range(1, self.lab.nodes + 1):
            ns = network_lab.node_namespace(i)
            for address in (self.lab.node_v4(i), self.lab.node_v6(i)):
                self.servers.append(
                    self.lab.popen(
                        ns,
                        sys.executable,
                        "-c",
                        ECHO_SERVER,
                        str(address),
                        str(ECHO_PORT),
                        self.lab.node_names[i - 1],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            rules = (
                "add table inet ironlb-proxy\n"
                "add chain inet ironlb-proxy prerouting "
                "{ type nat hook prerouting priority dstnat; }\n"
            )
            self.lab.exec(ns, "nft", "-f", "-", input=rules, check=True)

    def expose(self, vip: str, port: int) -> None:
        """DNAT vip:port to each node's own echo server."""
        for i in range(1, self.lab.nodes + 1):
            family = "ip6" if ":" in vip else "ip"
            target = self.lab.node_v6(i) if ":" in vip else self.lab.node_v4(i)
            to = f"[{target}]:{ECHO_PORT}" if ":" in vip else f"{target}:{ECHO_PORT}"
            self.lab.exec(
                network_lab.node_namespace(i),
                "nft",
                "add",
                "rule",
                "inet",
                "ironlb-proxy",
                "prerouting",
                family,
                "daddr",
                vip,
                "tcp",
                "dport",
                str(port),
                "dnat",
                family,
                "to",
                to,
                check=True,
            )

    def stop(self) -> None:
        for server in self.servers:
            _stop(server, signal.SIGTERM, timeout=3)
        self.servers.clear()
        for i in range(1, self.lab.nodes + 1):
            self.lab.exec(network_lab.node_namespace(i), "nft", "flush", "ruleset")


def wait_until(what: str, check: Any, timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll `check()` until it returns something truthy; bounded in time."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
