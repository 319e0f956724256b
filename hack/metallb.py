"""MetalLB itself in the lab, in place of ironlb: the system we are compared with, on the same
nodes, kube-proxy, Pods and ToR.

    python -m hack.metallb build      # MetalLB's speaker and controller from Go modules (cached)
    python -m hack.metallb manifests  # the CRDs and RBAC it installs (YAML on stdout)

`build` makes `speaker` and `controller` of `go.universe.tf/metallb` at VERSION with one
`go build` into the cache beside the Kubernetes binaries; benches call `ensure_built()` on first
use (the test command does not build it). `install(lab)` swaps the lab's metallb.io CRDs for
MetalLB's own (same names, MetalLB's schema) and applies its RBAC; `uninstall(lab)` puts ours
back, so one lab can run each system in turn. `MetalLBDeployment` runs MetalLB's controller on
the host and one speaker per node namespace, each as its own ServiceAccount (a token from the
apiserver, as in a Pod), like `hack.deploy.Deployment` runs ours, with the same surface for
faults (`signal_speaker`, `stop_speaker`, `start_speaker`).

What differs from MetalLB in a cluster, and why:
* No Pods of MetalLB: its processes run in the node namespaces directly, like ours in the lab.
  Its memberlist finds the other speakers by listing Pods with its labels and reading their
  `status.podIP`; each speaker gets a stand-in Pod object with that label and its node's
  address (`speaker_stand_ins`), bound to no node and left to no scheduler, so that nothing
  runs it.
* Its webhook is off (`-webhook-mode disabled`), as ours is off in the lab: refusals are
  compared where the schema (CRDs, CEL) makes them, with the same weight on both sides.
* BGP in its native mode (`METALLB_BGP_TYPE=native`: no FRR of its own), the mode whose
  features ironlb matches.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from hack import cluster, processes
from hack import lab as network_lab

# The newest MetalLB whose dependencies the module proxy serves (v0.16.2 needs
# github.com/metallb/frr-k8s v0.0.27, which is not served; v0.0.21 is and does not compile).
VERSION = "v0.15.2"
MODULE = "go.universe.tf/metallb"
COMMANDS = ("speaker", "controller")
NAMESPACE = "metallb-system"
# MetalLB's chart and manifests label its speakers so; its memberlist lists Pods by these.
SPEAKER_LABELS = {"app": "metallb", "component": "speaker"}
MEMBERLIST_PORT = 7946
# Kinds of its released manifest that a lab install takes; the rest (Deployment, DaemonSet,
# webhook configuration and Service, the Namespace) are what the lab replaces or does not need.
INSTALLED_KINDS = (
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
SERVICE_ACCOUNTS = {"controller": "controller", "speaker": "speaker"}
UNSCHEDULED = "ironlb-lab-nobody"  # a schedulerName no scheduler answers to
TOKEN_SECONDS = 7200


class MetalLBError(Exception):
    """A failure a person can act on; its message is one line."""


def log(message: str) -> None:
    print(f"metallb: {message}", file=sys.stderr, flush=True)


def cache_dir(version: str = VERSION) -> Path:
    return cluster.CACHE / f"metallb-{version}"


def binary(name: str, version: str = VERSION) -> Path:
    return cache_dir(version) / "bin" / name


def built(version: str = VERSION) -> bool:
    return all(os.access(binary(n, version), os.X_OK) for n in COMMANDS)


def module_dir(version: str = VERSION) -> Path:
    """MetalLB's module source on disk (downloaded once into the Go module cache)."""
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if found.returncode != 0:
        raise MetalLBError(f"go mod download {MODULE}@{version} failed: {found.stderr.strip()}")
    return Path(json.loads(found.stdout)["Dir"])


def ensure_built(version: str = VERSION) -> Path:
    """The directory holding MetalLB's `speaker` and `controller`, built if missing."""
    if built(version):
        return binary(COMMANDS[0], version).parent
    if shutil.which("go") is None:
        raise MetalLBError("the Go toolchain is needed to build MetalLB; install Go")
    target = binary(COMMANDS[0], version).parent
    target.mkdir(parents=True, exist_ok=True)
    source = module_dir(version)
    started = time.monotonic()
    log(f"building MetalLB {version} ({', '.join(COMMANDS)}) from Go modules")
    log("a cold build takes about four minutes on 2 cores; later runs use the cache")
    with tempfile.TemporaryDirectory(prefix="ironlb-metallb-") as scratch:
        # Its own module as the main one, so that its go.mod decides every version; the module
        # cache is read-only, hence the copy.
        work = Path(scratch) / "metallb"
        shutil.copytree(source, work)
        for path in [work, *work.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        result = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(target) + os.sep]
            + [f"./{c}" for c in COMMANDS],
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
            timeout=3600,
        )
    if result.returncode != 0:
        raise MetalLBError(f"go build of MetalLB {version} failed: {result.stderr.strip()[-800:]}")
    log(f"built in {time.monotonic() - started:.0f} s into {target}")
    return target


# --- manifests -----------------------------------------------------------------------------------


def released_manifest(version: str = VERSION) -> Path:
    """MetalLB's own all-in-one manifest for native BGP, as its module ships it."""
    return module_dir(version) / "config" / "manifests" / "metallb-native.yaml"


def select(documents: Iterable[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The objects a lab install applies: the CRDs, then the ServiceAccounts and RBAC in
    MetalLB's namespace (in that order, so the bindings find their subjects' roles)."""
    order = {kind: i for i, kind in enumerate(INSTALLED_KINDS)}
    chosen = [d for d in documents if d and d.get("kind") in order]
    for d in chosen:
        namespace = (d.get("metadata") or {}).get("namespace")
        if namespace not in (None, NAMESPACE):
            raise MetalLBError(f"{d['kind']} {d['metadata'].get('name')} in {namespace}")
    return sorted(chosen, key=lambda d: order[d["kind"]])


def manifests(version: str = VERSION) -> list[dict[str, Any]]:
    with released_manifest(version).open() as f:
        return select(yaml.safe_load_all(f))


def crds(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "CustomResourceDefinition"]


def speaker_stand_ins(lab: network_lab.Lab) -> list[dict[str, Any]]:
    """One Pod object per node that MetalLB's memberlist finds its peers by: its labels, the
    node's address as podIP; no node and no scheduler, so that nothing tries to run it."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"metallb-speaker-{name}",
                "namespace": NAMESPACE,
                "labels": dict(SPEAKER_LABELS),
            },
            "spec": {
                "schedulerName": UNSCHEDULED,
                "containers": [{"name": "speaker", "image": "metallb-speaker-not-run"}],
            },
        }
        for name in lab.node_names
    ]


def stand_in_status(lab: network_lab.Lab, index: int) -> dict[str, Any]:
    address = str(lab.node_v4(index))
    return {"status": {"podIP": address, "podIPs": [{"ip": address}]}}


def _apply(lab: network_lab.Lab, objects: Sequence[dict[str, Any]]) -> None:
    lab.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=ironlb-lab-metallb",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def install(lab: network_lab.Lab, version: str = VERSION) -> None:
    """MetalLB's CRDs (in place of ours) and RBAC, and its speakers' stand-in Pods."""
    objects = manifests(version)
    _apply(lab, objects)
    names = [c["metadata"]["name"] for c in crds(objects)]
    lab.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", *names)
    _apply(lab, speaker_stand_ins(lab))
    for index, name in enumerate(lab.node_names, start=1):
        lab.kubectl(
            "patch",
            "pod",
            f"metallb-speaker-{name}",
            "-n",
            NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(stand_in_status(lab, index)),
        )


def uninstall(lab: network_lab.Lab) -> None:
    """Our CRDs back in place of MetalLB's; its stand-ins gone (its RBAC may stay: unused)."""
    lab.kubectl(
        "delete", "pod", "-n", NAMESPACE, "-l", "app=metallb,component=speaker",
        "--ignore-not-found", "--wait=false",
    )  # fmt: skip
    lab.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=ironlb-lab",
        "-f", str(network_lab.ROOT / "crds"),
    )  # fmt: skip


def identities(lab: network_lab.Lab, directory: Path) -> dict[str, Path]:
    """Kubeconfigs that authenticate as MetalLB's ServiceAccounts (tokens from the apiserver),
    the speaker's pointing where the node namespaces reach the apiserver."""
    config = yaml.safe_load(lab.kubeconfig.read_text())
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for component, account in SERVICE_ACCOUNTS.items():
        token = lab.kubectl(
            "create", "token", account, "-n", NAMESPACE, f"--duration={TOKEN_SECONDS}s"
        ).strip()
        mine = json.loads(json.dumps(config))
        for user in mine.get("users") or []:
            user["user"] = {"token": token}
        if component == "speaker":
            for entry in mine.get("clusters") or []:
                entry["cluster"]["server"] = network_lab.APISERVER_FROM_NODES
        path = directory / f"kubeconfig-metallb-{component}"
        path.write_text(json.dumps(mine, indent=2))
        path.chmod(0o600)
        paths[component] = path
    return paths


# --- running it ----------------------------------------------------------------------------------


def controller_argv(bin_dir: Path) -> list[str]:
    return [
        str(bin_dir / "controller"),
        f"-namespace={NAMESPACE}",
        # Ours is off in the lab too; MetalLB's would also need its certificate rotation.
        "-webhook-mode=disabled",
        "-disable-cert-rotation",
        # Metrics on a port of its own on the host (7472 is MetalLB's default, free there).
        "-port=7472",
        "-log-level=info",
    ]


def speaker_argv(bin_dir: Path, lab: network_lab.Lab, index: int) -> list[str]:
    return [
        str(bin_dir / "speaker"),
        f"-node-name={lab.node_names[index - 1]}",
        f"-namespace={NAMESPACE}",
        f"-host={lab.node_v4(index)}",
        "-port=7472",
        "-log-level=info",
    ]


def speaker_env(
    lab: network_lab.Lab, index: int, kubeconfig: Path, key_dir: Path
) -> dict[str, str]:
    """What MetalLB's DaemonSet gives a speaker through its environment."""
    return {
        "KUBECONFIG": str(kubeconfig),
        "METALLB_NODE_NAME": lab.node_names[index - 1],
        "METALLB_HOST": str(lab.node_v4(index)),
        "METALLB_ML_BIND_ADDR": str(lab.node_v4(index)),
        "METALLB_ML_BIND_PORT": str(MEMBERLIST_PORT),
        "METALLB_ML_LABELS": ",".join(f"{k}={v}" for k, v in SPEAKER_LABELS.items()),
        "METALLB_ML_SECRET_KEY_PATH": str(key_dir),
        "METALLB_POD_NAME": f"metallb-speaker-{lab.node_names[index - 1]}",
        "METALLB_BGP_TYPE": "native",
    }


@dataclass
class MetalLBDeployment:
    lab: network_lab.Lab
    version: str = VERSION
    controller: subprocess.Popen[Any] | None = None
    speakers: dict[int, subprocess.Popen[Any]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _kubeconfigs: dict[str, Path] | None = None

    @property
    def bin_dir(self) -> Path:
        return binary(COMMANDS[0], self.version).parent

    @property
    def key_dir(self) -> Path:
        path = self.lab.directory / "metallb-memberlist"
        if not path.exists():
            path.mkdir(parents=True)
            (path / "secretkey").write_text(secrets.token_urlsafe(24))
            (path / "secretkey").chmod(0o600)
        return path

    def kubeconfig(self, component: str) -> Path:
        if self._kubeconfigs is None:
            self._kubeconfigs = identities(self.lab, self.lab.directory / "metallb-accounts")
        return self._kubeconfigs[component]

    def _log(self, name: str) -> IO[bytes]:
        out = open(self.lab.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(out)
        return out

    def start_controller(self) -> subprocess.Popen[Any]:
        self.controller = subprocess.Popen(
            controller_argv(self.bin_dir),
            stdin=subprocess.DEVNULL,
            stdout=self._log("metallb-controller"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig("controller"))},
        )
        return self.controller

    def start_speaker(self, index: int) -> subprocess.Popen[Any]:
        env = speaker_env(self.lab, index, self.kubeconfig("speaker"), self.key_dir)
        process = self.lab.popen(
            network_lab.node_namespace(index),
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            *speaker_argv(self.bin_dir, self.lab, index),
            stdout=self._log(f"metallb-speaker-{self.lab.node_names[index - 1]}"),
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
        if process is not None:
            processes.stop(process, sig)

    def stop(self) -> None:
        for index in list(self.speakers):
            self.stop_speaker(index)
        if self.controller is not None:
            processes.stop(self.controller, signal.SIGTERM)
            self.controller = None
        for out in self._logs:
            out.close()
        self._logs.clear()


@contextlib.contextmanager
def deployed(lab: network_lab.Lab, *, version: str = VERSION) -> Iterator[MetalLBDeployment]:
    """MetalLB installed and running in the lab; afterwards stopped and our CRDs back."""
    ensure_built(version)
    install(lab, version)
    deployment = MetalLBDeployment(lab, version)
    try:
        deployment.start_controller()
        for index in range(1, lab.nodes + 1):
            deployment.start_speaker(index)
        yield deployment
    finally:
        deployment.stop()
        uninstall(lab)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "manifests"])
    parser.add_argument("--version", default=VERSION)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(ensure_built(args.version))
        else:
            print(yaml.safe_dump_all(manifests(args.version), sort_keys=False))
    except MetalLBError as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
