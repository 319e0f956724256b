"""ironlb in the lab: the controller where the tests run, one speaker per node namespace.

Every process is started through `lab.popen`, so `lab.down()` stops whatever a test or bench
left behind. Speakers find each other through the node LAN addresses (seeds) and encrypt their
membership traffic with a key generated per lab. Logs go to `<lab>/logs/<name>.log`.

Services are reachable end to end through the lab's own data plane: real kube-proxy in every
node and Pods made with `hack/objects.set_backends`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from hack import lab as network_lab
from hack import processes, tools

ROOT = Path(__file__).resolve().parent.parent
MEMBERSHIP_PORT = 7946


class Speakers(Protocol):
    """The speakers of a system running in the lab, as benches drive them: ironlb's
    `Deployment` here, or MetalLB's (`hack.metallb.MetalLBDeployment`), so that one scenario
    runs against either. SIGKILL through `signal_speaker` is a crash; `stop_speaker` reaps."""

    speakers: dict[int, subprocess.Popen[Any]]

    def start_speaker(self, index: int) -> subprocess.Popen[Any]: ...

    def signal_speaker(self, index: int, sig: signal.Signals) -> None: ...

    def stop_speaker(self, index: int, sig: signal.Signals = signal.SIGTERM) -> None: ...


@dataclass
class Deployment:
    lab: network_lab.Lab
    membership_profile: str = "default"
    lease_duration: int = 3
    # Run as the Helm chart's ServiceAccounts (its RBAC applied to the lab's cluster), so every
    # test and bench in the lab also proves that least privilege is enough; False = admin.
    as_chart_accounts: bool = True
    speaker_flags: tuple[str, ...] = ()  # more flags for every speaker (`--drain-on-cordon`)
    # The chart values those flags come from where they change its RBAC (`speaker.takeOverFrom`).
    chart_values: dict[str, Any] = field(default_factory=dict)
    membership_port: int = MEMBERSHIP_PORT
    controller: subprocess.Popen[Any] | None = None
    speakers: dict[int, subprocess.Popen[Any]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _kubeconfigs: dict[str, Path] | None = None

    def kubeconfig(self, component: str) -> Path:
        """The kubeconfig a component uses: the chart's ServiceAccount, or the lab's admin."""
        if not self.as_chart_accounts:
            return self.lab.kubeconfig if component == "controller" else self.lab.node_kubeconfig
        if self._kubeconfigs is None:
            paths = tools.chart_identities(
                self.lab.kubeconfig, self.lab.directory / "accounts", values=self.chart_values
            )
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
            f"{self.lab.node_v4(i)}:{self.membership_port}"
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
            str(self.membership_port),
            "--ml-seeds",
            ",".join(seeds),
            "--ml-secret-key-path",
            str(self.key_dir),
        ]
        return [*argv, "--ml-profile", self.membership_profile, *self.speaker_flags]

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
        processes.stop(process, sig)

    def stop_controller(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.controller is not None:
            processes.stop(self.controller, sig)
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


def leftovers(lab: network_lab.Lab) -> list[int]:
    """ironlb controllers and speakers of this lab that are still running: started for the lab
    (an argument names a file in its directory) by a run that is gone, such as a demo that was
    killed. No Deployment stops them, and they hold the ports a new speaker binds."""
    inside = str(lab.directory) + os.sep
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = processes.argv(int(entry.name))
        if argv is None:
            continue
        if argv[1:3] in (["-m", "controller"], ["-m", "speaker"]) and any(
            a.startswith(inside) for a in argv
        ):
            found.append(int(entry.name))
    return found


def stop_leftovers(lab: network_lab.Lab) -> list[int]:
    """Stop what `leftovers` finds (each leads a process group: ExaBGP goes with its speaker);
    returns the pids it stopped."""
    found = leftovers(lab)
    if found:
        print(
            f"deploy: stopping ironlb processes left running in the lab: {found}",
            file=sys.stderr,
        )
        leaders = [p for p in found if _leads_group(p)]
        processes.stop_pids(leaders, group=True)
        processes.stop_pids([p for p in found if p not in leaders])
    return found


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


@contextlib.contextmanager
def deployed(
    lab: network_lab.Lab, *, speakers: Iterable[int] | None = None, **options: Any
) -> Iterator[Deployment]:
    # A speaker left by an earlier run holds the node's ports: the new one could not bind them,
    # and every test of the module would fail for a reason that is not its own.
    stop_leftovers(lab)
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
