"""kwok: fake Nodes and Pods at scale, for benches that need a large cluster but not its load.

kwok plays the kubelets of Nodes that exist only as API objects: it marks them Ready, renews
their leases, and walks their Pods through the stages a kubelet would (Running and Ready with a
Pod IP, deletion confirmed). It is built from its Go module with `go install`, like helm, into
the cache beside the Kubernetes binaries, on first use only: the test suite does not need it, so
`hack/setup` does not build it. The stage definitions are copied from the same module, so the
binary and its stages always come from one version.

kwok manages only Nodes carrying `ANNOTATION` (its annotation selector): the lab's own Nodes,
which run real kube-proxies and speakers, are never taken over. Fake Nodes are also labelled
`LABEL` and tainted, so nothing lands on them by accident; Pods meant for them tolerate the taint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from hack import cluster

KWOK_VERSION = "v0.8.0"
KWOK_MODULE = "sigs.k8s.io/kwok"
HOME = cluster.CACHE / "tools" / f"kwok-{KWOK_VERSION}"
# Node: Ready at once and leases renewed; Pod: Ready with an IP, deletion confirmed. Paths in the
# module's kustomize/stage tree.
STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
ANNOTATION = ("kwok.x-k8s.io/node", "fake")
LABEL = ("type", "kwok")
TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
# Pod IPs of fake Pods: outside every network the lab routes (docs/lab.md).
POD_CIDR = "10.245.0.0/16"
BUILD_TIMEOUT_S = 900.0


class KwokError(Exception):
    """kwok is missing, could not be built, or did not start; the message says what."""


def log(message: str) -> None:
    print(f"kwok: {message}", file=sys.stderr, flush=True)


# --- building ------------------------------------------------------------------------------------


def binary() -> Path:
    return HOME / "kwok"


def stage_files() -> list[Path]:
    return [HOME / "stages" / Path(s).name for s in STAGES]


def installed() -> bool:
    return os.access(binary(), os.X_OK) and all(p.exists() for p in stage_files())


def install(version: str = KWOK_VERSION) -> Path:
    """Build kwok and copy its stages into the cache, unless they are there; returns the binary."""
    if installed():
        return binary()
    go = shutil.which("go")
    if go is None:
        raise KwokError("the Go toolchain is needed to build kwok; install Go first")
    HOME.mkdir(parents=True, exist_ok=True)
    log(
        f"building kwok {version} from Go modules into {HOME} "
        "(once per machine: about two minutes on 2 cores)"
    )
    started = time.monotonic()
    env = dict(os.environ, GOBIN=str(HOME), CGO_ENABLED="0")
    flags = f"-s -w -X {KWOK_MODULE}/pkg/consts.Version={version}"
    try:
        built = subprocess.run(
            [go, "install", "-trimpath", f"-ldflags={flags}", f"{KWOK_MODULE}/cmd/kwok@{version}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        source = subprocess.run(
            [go, "mod", "download", "-json", f"{KWOK_MODULE}@{version}"],
            cwd=HOME,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        raise KwokError(f"building kwok {version} took over {BUILD_TIMEOUT_S:.0f} s") from e
    if built.returncode != 0:
        tail = (built.stderr or built.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise KwokError(f"go install kwok {version} failed: {tail[0]}")
    if source.returncode != 0:
        raise KwokError(f"go mod download {KWOK_MODULE}@{version} failed: {source.stderr.strip()}")
    tree = Path(json.loads(source.stdout)["Dir"]) / "kustomize" / "stage"
    (HOME / "stages").mkdir(exist_ok=True)
    for stage, target in zip(STAGES, stage_files(), strict=True):
        shutil.copyfile(tree / stage, target)
    log(f"built in {time.monotonic() - started:.0f} s")
    return binary()


def load_stages() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in stage_files()]


# --- what kwok is given (pure) -------------------------------------------------------------------


def configuration(
    stages: Sequence[Mapping[str, Any]], *, parallelism: int = 16, cidr: str = POD_CIDR
) -> list[dict[str, Any]]:
    """kwok's `--config` documents: a KwokConfiguration and the Stages.

    The four parallelism options are set explicitly: left out, the file's zero values win over
    kwok's defaults and it exits ("node leases parallelism must be greater than 0")."""
    if parallelism < 1:
        raise ValueError("parallelism must be at least 1")
    kinds = [s.get("kind") for s in stages]
    if not stages or any(k != "Stage" for k in kinds):
        raise ValueError(f"expected Stage documents, got {kinds}")
    key, value = ANNOTATION
    options = {
        "cidr": cidr,
        "manageAllNodes": False,
        "manageNodesWithAnnotationSelector": f"{key}={value}",
        "nodeLeaseDurationSeconds": 40,
        "nodeLeaseParallelism": parallelism,
        "nodePlayStageParallelism": parallelism,
        "podPlayStageParallelism": parallelism,
        "podsOnNodeSyncParallelism": parallelism,
    }
    return [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": options,
        },
        *(dict(s) for s in stages),
    ]


def render(documents: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all([dict(d) for d in documents], sort_keys=False)


def node_name(index: int) -> str:
    return f"kwok-node-{index:05d}"


def node(index: int) -> dict[str, Any]:
    """A fake Node for kwok to manage (1-based `index`); kwok fills in its status."""
    key, value = ANNOTATION
    label_key, label_value = LABEL
    name = node_name(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {key: value},
            "labels": {
                label_key: label_value,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/role": "agent",
            },
        },
        "spec": {"taints": [dict(TAINT)]},
    }


def pod(namespace: str, name: str, app: str, node: str) -> dict[str, Any]:
    """A Pod of `app` bound to the fake Node `node` (no scheduler in the way)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "tolerations": [dict(TOLERATION)],
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": "app",
                    "image": "ironlb.local/fake:latest",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                }
            ],
        },
    }


# --- running -------------------------------------------------------------------------------------


def write_config(directory: Path, parallelism: int = 16) -> Path:
    path = directory / "kwok.yaml"
    path.write_text(render(configuration(load_stages(), parallelism=parallelism)))
    return path


def argv(kubeconfig: Path, config: Path) -> list[str]:
    return [
        str(binary()),
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        "--v=WARN",
    ]
