"""MetalLB itself in the lab, in place of ironlb: the system we claim to match and to beat, run
on the same nodes, kube-proxy, Pods and ToR, so that every comparison is measured, not assumed.

    python -m hack.metallb build               # speaker and controller from Go modules (cached)
    python -m hack.metallb render              # what `install` applies, as YAML
    python -m hack.metallb install [--dir LAB] # its CRDs (in place of ours), RBAC, ...
    python -m hack.metallb uninstall [--dir LAB]
    python -m hack.metallb run [--dir LAB]     # install + start; Ctrl-C stops and uninstalls
    python -m hack.metallb --mode native run    # its own BGP instead of FRR beside the speaker

Choices, and why:
* Built like the Kubernetes binaries (hack/cluster.py): a throw-away main module that requires
  `go.universe.tf/metallb` at VERSION, `go mod tidy`, then one `go build` of both commands into
  the cache, with the flags of MetalLB's own Dockerfiles (CGO off, nothing stripped). Benches
  build it on first use (`ensure_built`); `hack/setup` does not, so the test command's cold time
  stays as it is.
* Everything else comes from MetalLB's Helm chart in the downloaded module, rendered by `helm
  template` for the mode (`--mode`, `MODES`) with its webhook off: the CRDs (its `crds`
  subchart; the same objects as its `metallb-native.yaml`), the ServiceAccounts, RBAC and the
  ConfigMaps (excluded interfaces; in FRR mode FRR's startup files), applied as rendered; and the
  speaker DaemonSet and controller Deployment, never applied, read for how each process runs:
  its arguments, its environment (fieldRefs resolved for the node) and the files its Pod mounts.
  Nothing of MetalLB is copied into this repository.
* The lab applies our metallb.io CRDs; `install` replaces them with MetalLB's (same names, its
  schemas) and deletes ours that MetalLB lacks; `uninstall` puts ours back. So one lab can run
  each system in turn.
* Processes, like ours in the lab (hack/deploy.py): the controller in the control plane's
  namespace, one speaker per node namespace, each with a kubeconfig for its chart's
  ServiceAccount (a TokenRequest token, as hack/tools.chart_identities makes for ours); all are
  started with `lab.popen`, so `lab.down()` ends whatever a bench leaves behind.

What differs from MetalLB in a cluster, and why:
* Its BGPPeer CRD (v0.15.2) declares myASN and peerASN `format: int32` with a maximum of
  4294967295; kube-apiserver 1.37 refuses every BGPPeer against that schema, so MetalLB v0.15.2
  cannot be given a BGP peer on this Kubernetes at all. The lab widens such fields to int64
  (`widen_int32_bounds`) and changes nothing else.
* No Pods of MetalLB run. Its speaker reads its own Pod (owner of its status objects) and finds
  its memberlist peers by listing speaker Pods and dialling their `status.podIP`; so each node
  gets a stand-in Pod with the DaemonSet's labels and the node's address, bound to its node and
  left to a scheduler that does not exist; the node's pod agent leaves such Pods to whoever made
  them. `MetalLBDeployment` plays the kubelet's part for them: Ready once the speaker answers the
  chart's readiness probe (after its initial delay); `remove_release` deletes them as a
  `helm uninstall` does (deletion, SIGTERM, the Pod removed once its process has ended).
* A Pod's mounts are files under /etc in the speaker's private view of the filesystem: the
  memberlist key at /etc/ml_secret_key and the excluded interfaces at /etc/metallb (a path
  compiled into the speaker). `ip netns exec` already gives the speaker a mount namespace of its
  own; there /etc is overlaid with a tmpfs holding these files, and nothing outside it changes.
* FRR mode (`frr`, the 0.15 chart's default): each node's speaker gets the node's FRR beside it,
  as the chart's FRR, reloader and speaker containers share a Pod. Debian's FRR 8.4 daemons
  (`frr`; the chart's image has FRR 9.1) and `frr-reload.py` (`frr-pythontools`) run with the
  chart's daemons file, vtysh.conf and frr.conf (its frr-startup ConfigMap) and MetalLB's
  reloader script from its module, in the speaker's private mount namespace with the node's
  own directories over /etc/frr, /run/frr and /etc/frr_reloader (`ETC_OVERLAY`): never FRR's
  paths in the host's view. They are children of the speaker: one process tree per node
  (what a node pays), stopped with it (as deleting the Pod stops every container). Not run:
  the chart's frr-metrics sidecar (metrics only) and watchfrr (restarts a crashed daemon).
* Its webhook is off (the chart's `controller.webhookMode=disabled`), as ours is in the lab. The
  BGPPeer CRD still names its conversion webhook, as shipped, so only v1beta2 BGPPeers can be
  written while MetalLB runs here (every lab manifest uses v1beta2).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from hack import cluster, podagent, processes, tools
from hack import lab as network_lab

# The newest release whose dependencies the Go module proxy serves: v0.16.2 needs
# github.com/metallb/frr-k8s v0.0.27, which is not served (v0.0.21 is, and does not compile with
# it). Move up when it is.
VERSION = "v0.15.2"
MODULE = "go.universe.tf/metallb"
COMMANDS = ("speaker", "controller")  # MODULE/speaker and MODULE/controller, both package main
NAMESPACE = "metallb-system"
RELEASE = "metallb"  # the Helm release name: objects are named metallb-speaker, metallb:controller
CHART = Path("charts") / "metallb"  # inside the module
# The chart's templates `install` and the processes use; the rest (webhooks, monitoring) is off.
TEMPLATES = (
    "charts/crds/templates/crds.yaml",
    "templates/service-accounts.yaml",
    "templates/rbac.yaml",
    "templates/exclude-l2-config.yaml",
    "templates/speaker.yaml",
    "templates/controller.yaml",
)
# How MetalLB speaks BGP. `frr`: FRR beside the speaker, which renders frr.conf and has
# MetalLB's reloader apply it with frr-reload.py (the 0.15 chart's default, `speaker.frr.enabled`);
# `native`: the speaker's own Go BGP (`METALLB_BGP_TYPE=native`, no chart's default).
MODES = ("frr", "native")
DEFAULT_MODE = "frr"  # the pinned version's chart default
VALUES = (
    # `--webhook-mode=disabled`: the lab's apiserver reaches no Service (no kube-proxy beside
    # it) to call a webhook through, and ours is off in the lab too.
    "controller.webhookMode=disabled",
)
# FRR's daemons (Debian's `frr`) and frr-reload.py (`frr-pythontools`), as the chart's FRR
# image has them.
FRR_BIN = Path("/usr/lib/frr")
FRR_RELOAD = FRR_BIN / "frr-reload.py"
FRR_STARTUP = f"{RELEASE}-frr-startup"  # the chart's ConfigMap: daemons, vtysh.conf, frr.conf
# watchfrr always starts these, whatever the daemons file says (FRR 8's frrcommon.sh).
FRR_ALWAYS = ("zebra", "staticd")
RELOADER = Path("frr-tools") / "reloader" / "frr-reloader.sh"  # inside the module
# Applied as rendered, in this order (accounts before the bindings that name them).
APPLIED_KINDS = (
    "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
)  # fmt: skip
CLUSTER_SCOPED = ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")
# The key the controller writes into the memberlist Secret and the speaker reads from its mount
# (MLSecretKeyName in MetalLB's internal/k8s).
SECRET_KEY = "secretkey"
# kubectl's field manager for `apply --server-side`, the one the lab applies our CRDs with.
# `spec.versions` (schemas, CEL rules) is atomic and replaced whoever applies it; the other
# fields are not: under the same manager each apply also drops what the other system set and
# this one does not (MetalLB's BGPPeer conversion webhook when ours come back, which the
# apiserver would otherwise refuse beside our `strategy: None`).
CRD_MANAGER = "kubectl"
MANAGER = "ironlb-lab-metallb"
READY = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
# A schedulerName no scheduler answers to, and that the lab's pod agents leave alone.
UNSCHEDULED = podagent.RUN_BY_THEIR_MAKER
# The files of the speaker's Pod: overlaid on /etc inside its own mount namespace (see the module
# docstring). $1 is a directory with `files/` (what to add, relative to /etc) and `mnt/` (an
# empty mount point); $2 is this node's FRR directory (`frr_node_files`), or `-` in native mode;
# the rest is the command, exec'd so that it keeps the process's pid.
#
# In FRR mode the node's FRR runs in the same private view, as the chart's FRR and reloader
# containers do beside the speaker: the node's own directories over /etc/frr (the chart's
# frr-conf volume) and /run/frr (frr-sockets), and over /etc/frr_reloader (reloader, shared
# with the speaker, which writes frr.conf there and signals the reloader). The daemons start
# in the background without -d, so they stay children of the speaker (what a node pays is one
# process tree; stopping the speaker's group stops them, as deleting the Pod does), each with
# the options of the chart's daemons file (`daemons.list`: one `name options` per line).
ETC_OVERLAY = """set -e
d=$1
n=$2
shift 2
mount -t tmpfs -o size=1m,mode=0755 ironlb-metallb "$d/mnt"
mkdir "$d/mnt/upper" "$d/mnt/work"
cp -R "$d/files/." "$d/mnt/upper/"
mount -t overlay -o "lowerdir=/etc,upperdir=$d/mnt/upper,workdir=$d/mnt/work" ironlb-metallb /etc
if [ "$n" != - ]; then
  mkdir -p /etc/frr_reloader
  mount --bind "$n/reloader" /etc/frr_reloader
  mount --bind "$n/etc" /etc/frr
  [ -d /run/frr ] || mkdir -m 0755 /run/frr
  mount --bind "$n/run" /run/frr
  while read -r daemon options; do
    # shellcheck disable=SC2086 # the options are words, as the daemons file gives them
    "$n/bin/$daemon" $options &
  done < "$n/daemons.list"
  SHARED_VOLUME=/etc/frr_reloader bash "$n/frr-reloader.sh" >>"$n/reloader.log" 2>&1 &
fi
exec "$@"
"""


class MetalLBError(Exception):
    """A failure a person can act on; its message is one line."""


def log(message: str) -> None:
    print(f"metallb: {message}", file=sys.stderr, flush=True)


# --- building -------------------------------------------------------------------------------------


def bin_dir(version: str = VERSION) -> Path:
    return cluster.CACHE / f"metallb-{version}"


def built(version: str = VERSION) -> bool:
    return all(os.access(bin_dir(version) / c, os.X_OK) for c in COMMANDS)


def module_info(version: str = VERSION) -> dict[str, Any]:
    """`go mod download -json` of MetalLB: its source directory (`Dir`) and go.mod (`GoMod`) in
    the module cache, downloaded if missing (cheap: the source alone, no dependencies)."""
    if shutil.which("go") is None:
        raise MetalLBError("the Go toolchain is needed to fetch MetalLB's module; install Go")
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        cwd=tempfile.gettempdir(),  # outside any module: the answer must not depend on where
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        info: dict[str, Any] = json.loads(result.stdout)
    except json.JSONDecodeError:
        info = {}
    if result.returncode != 0 or "Dir" not in info:
        why = info.get("Error") or result.stderr.strip() or "(no output)"
        raise MetalLBError(f"go mod download {MODULE}@{version} failed: {why}")
    return info


def module_dir(version: str = VERSION) -> Path:
    return Path(module_info(version)["Dir"])


def go_directive(go_mod: str) -> str:
    """The `go` line of a go.mod ("1.24.0")."""
    found = re.search(r"^go\s+(\S+)\s*$", go_mod, re.MULTILINE)
    if found is None:
        raise MetalLBError("MetalLB's go.mod has no go directive")
    return found.group(1)


def main_module(version: str, go_version: str) -> dict[str, str]:
    """The throw-away main module that builds MetalLB's commands: it requires MetalLB alone, so
    every dependency is at the version MetalLB's own go.mod selects (it has no replace lines)."""
    imports = "".join(f'\t_ "{MODULE}/{c}"\n' for c in sorted(COMMANDS))
    return {
        "go.mod": (
            f"module ironlb.local/metallbbuild\n\ngo {go_version}\n\nrequire {MODULE} {version}\n"
        ),
        # Only for `go mod tidy` (which reads every build tag) to record what the commands
        # import; never compiled.
        "tools.go": f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n",
    }


def _go(argv: Sequence[str], cwd: Path, what: str) -> None:
    # CGO off, as MetalLB's Dockerfiles build its release images.
    env = {**os.environ, "CGO_ENABLED": "0"}
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["(no output)"]
        raise MetalLBError(f"{what} failed: {lines[-1]}")


def ensure_built(version: str = VERSION) -> Path:
    """The directory holding MetalLB's `speaker` and `controller`, built if missing."""
    target = bin_dir(version)
    if built(version):
        return target
    info = module_info(version)
    go_version = go_directive(Path(info["GoMod"]).read_text())
    started = time.monotonic()
    log(f"building MetalLB {version} ({' and '.join(COMMANDS)}) from Go modules")
    log("a cold build takes minutes on 2 cores; later runs use the cache")
    cluster.CACHE.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed into place, so a build that fails or is interrupted
    # never leaves a half-filled directory that `built()` could take for a whole one.
    staging = Path(tempfile.mkdtemp(prefix=f".metallb-{version}-", dir=cluster.CACHE))
    try:
        with tempfile.TemporaryDirectory(prefix="ironlb-metallb-") as scratch:
            src = Path(scratch)
            for name, text in main_module(version, go_version).items():
                (src / name).write_text(text)
            _go(["go", "mod", "tidy"], src, "go mod tidy")
            packages = [f"{MODULE}/{c}" for c in COMMANDS]
            log(f"go build -o {target}/ {' '.join(packages)}")
            # One `go build` for both: what they share (client-go, controller-runtime, ...)
            # compiles once.
            _go(["go", "build", "-o", str(staging) + os.sep, *packages], src, "go build")
        staging.chmod(0o755)  # mkdtemp makes it 0700; the cache's other directories are 0755
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"built in {time.monotonic() - started:.0f} s into {target}")
    return target


# --- the chart ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    """MetalLB's chart rendered for this lab, split by what each part is used for."""

    crds: tuple[dict[str, Any], ...]
    applied: tuple[dict[str, Any], ...]  # ServiceAccounts, RBAC, ConfigMaps: applied as rendered
    speaker: dict[str, Any]  # the DaemonSet: read for how a speaker runs, never applied
    controller: dict[str, Any]  # the Deployment: likewise

    def config_map(self, name: str) -> dict[str, Any]:
        for o in self.applied:
            if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name:
                return o
        raise MetalLBError(f"the chart rendered no ConfigMap {name}")

    @property
    def mode(self) -> str:
        """`frr` when the chart runs FRR beside the speaker, else `native`."""
        env = {e["name"]: e.get("value") for e in container(self.speaker).get("env", [])}
        return "frr" if env.get("METALLB_BGP_TYPE") == "frr" else "native"

    @property
    def memberlist_secret(self) -> str:
        """The Secret the controller is told to create and the speakers mount."""
        env = {e["name"]: e.get("value") for e in container(self.controller).get("env", [])}
        name = env.get("METALLB_ML_SECRET_NAME")
        if not isinstance(name, str) or not name:
            raise MetalLBError("the controller's Deployment names no memberlist Secret")
        return name


INT32_MAX = 2**31 - 1


def widen_int32_bounds(schema: Any, path: str = "") -> list[str]:
    """Integer properties declared `format: int32` with a `maximum` beyond int32, made int64, in
    place; returns their paths. MetalLB v0.15.2's BGPPeer CRD declares myASN and peerASN so
    (maximum 4294967295), and kube-apiserver 1.37 refuses every object of such a schema ("Maximum
    boundary value must be of type integer with format int32"), so without this no BGPPeer can
    be written while MetalLB runs here. Nothing else of the schema changes."""
    changed: list[str] = []
    if isinstance(schema, dict):
        if (
            schema.get("type") == "integer"
            and schema.get("format") == "int32"
            and isinstance(schema.get("maximum"), int)
            and schema["maximum"] > INT32_MAX
        ):
            schema["format"] = "int64"
            changed.append(path or ".")
        for key, value in schema.items():
            changed += widen_int32_bounds(value, f"{path}.{key}" if path else key)
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            changed += widen_int32_bounds(value, f"{path}[{i}]")
    return changed


def split(documents: Iterable[dict[str, Any] | None]) -> Chart:
    """The rendered documents, sorted by use; anything unexpected means the chart changed."""
    crds, applied, workloads = [], [], {}
    for d in documents:
        if not d:
            continue
        kind, meta = d.get("kind"), d.get("metadata") or {}
        if kind not in CLUSTER_SCOPED and meta.get("namespace") not in (None, NAMESPACE):
            raise MetalLBError(f"{kind} {meta.get('name')} is in {meta.get('namespace')}")
        if kind == "CustomResourceDefinition":
            for version in (d.get("spec") or {}).get("versions") or []:
                for where in widen_int32_bounds(version.get("schema")):
                    log(f"{meta.get('name')} {version.get('name')}: {where} made int64 (lab fix)")
            crds.append(d)
        elif kind in APPLIED_KINDS:
            applied.append(d)
        elif kind in ("DaemonSet", "Deployment"):
            workloads[meta.get("name")] = d
        else:
            raise MetalLBError(f"the chart rendered a {kind} ({meta.get('name')}): not expected")
    try:
        speaker = workloads.pop(f"{RELEASE}-speaker")
        controller = workloads.pop(f"{RELEASE}-controller")
    except KeyError as e:
        raise MetalLBError(f"the chart rendered no {e.args[0]}") from None
    if workloads:
        raise MetalLBError(f"the chart rendered more workloads: {', '.join(map(str, workloads))}")
    order = {kind: i for i, kind in enumerate(APPLIED_KINDS)}
    applied.sort(key=lambda o: order[o["kind"]])
    return Chart(tuple(crds), tuple(applied), speaker, controller)


def values(mode: str) -> tuple[str, ...]:
    """The chart's values for a mode: FRR beside the speaker or not (then, in both processes,
    no METALLB_BGP_TYPE=frr: MetalLB's own BGP)."""
    if mode not in MODES:
        raise MetalLBError(f"MetalLB mode {mode!r}: one of {', '.join(MODES)}")
    return (f"speaker.frr.enabled={'true' if mode == 'frr' else 'false'}", *VALUES)


def render(version: str = VERSION, mode: str = DEFAULT_MODE) -> Chart:
    """`helm template` of MetalLB's chart from its module, with the mode's values."""
    try:
        helm = tools.helm()
    except tools.ToolError as e:
        raise MetalLBError(str(e)) from None
    argv = [str(helm), "template", RELEASE, str(module_dir(version) / CHART)]
    argv += ["--namespace", NAMESPACE]
    for value in values(mode):
        argv += ["--set", value]
    for template in TEMPLATES:
        argv += ["--show-only", template]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise MetalLBError(f"helm template of MetalLB's chart failed: {result.stderr.strip()}")
    return split(yaml.safe_load_all(result.stdout))


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def container(workload: dict[str, Any]) -> dict[str, Any]:
    """The workload's container named after its component (the speaker's is `speaker`)."""
    name = workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
    for c in pod_spec(workload)["containers"]:
        if c["name"] == name:
            return dict(c)
    raise MetalLBError(f"{workload['metadata']['name']} has no container {name}")


def resolve_env(c: dict[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """A container's environment as its Pod would get it, `fields` answering its fieldRefs."""
    env = {}
    for entry in c.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = str(entry["value"])
            continue
        path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if not isinstance(path, str) or path not in fields:
            raise MetalLBError(f"{name}: the lab cannot give {entry.get('valueFrom')}")
        env[name] = fields[path]
    return env


def surplus_crds(ours: Iterable[str], theirs: Iterable[str]) -> list[str]:
    """Our CRDs that MetalLB does not have (configurationstates): a MetalLB cluster has none."""
    return sorted(set(ours) - set(theirs))


def our_crds() -> list[str]:
    names = []
    for path in sorted(network_lab.CRDS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        names.append(doc["metadata"]["name"])
    return names


def new_memberlist_key() -> str:
    """A key shaped like the one MetalLB's controller makes: 128 random bits, base64 unpadded."""
    return base64.b64encode(secrets.token_bytes(16)).decode().rstrip("=")


# --- stand-in Pods, files and command lines (pure) ------------------------------------------------


def pod_name(node: str) -> str:
    return f"{RELEASE}-speaker-{node}"


def pod_fields(lab: network_lab.Lab, index: int) -> dict[str, str]:
    """What a speaker Pod on node `index` would read through fieldRefs (hostNetwork: the Pod's
    address is its node's)."""
    node, address = lab.node_names[index - 1], str(lab.node_v4(index))
    return {
        "spec.nodeName": node,
        "metadata.name": pod_name(node),
        "metadata.namespace": NAMESPACE,
        "status.hostIP": address,
        "status.podIP": address,
    }


def stand_in(
    chart: Chart, lab: network_lab.Lab, index: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stand-in speaker Pod of node `index`, and the status to give it."""
    template = chart.speaker["spec"]["template"]
    spec = pod_spec(chart.speaker)
    speaker = container(chart.speaker)
    fields = pod_fields(lab, index)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": fields["metadata.name"],
            "namespace": NAMESPACE,
            "labels": dict(template["metadata"]["labels"]),
        },
        "spec": {
            # Bound to its node, as the DaemonSet's Pod is (ironlb's --take-over-from watches it
            # there), and left alone by the node's pod agent; a real kubelet would try to run
            # it, so on such a node it is bound to none. Nobody schedules it.
            **({} if index in lab.kubelet_nodes else {"nodeName": fields["spec.nodeName"]}),
            "schedulerName": UNSCHEDULED,
            "serviceAccountName": spec["serviceAccountName"],
            "hostNetwork": bool(spec.get("hostNetwork")),
            "containers": [{"name": speaker["name"], "image": speaker["image"]}],
        },
    }
    address = fields["status.podIP"]
    status = {
        "status": {
            # Not Ready until its speaker answers the chart's readiness probe
            # (`MetalLBDeployment`'s prober, as a kubelet's).
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "podIP": address,
            "podIPs": [{"ip": address}],
            "hostIP": fields["status.hostIP"],
            "hostIPs": [{"ip": fields["status.hostIP"]}],
        }
    }
    return pod, status


def speaker_files(chart: Chart, memberlist_key: str) -> dict[str, str]:
    """The files the speaker's Pod mounts, by path relative to /etc."""
    spec = pod_spec(chart.speaker)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files = {}
    for mount in container(chart.speaker).get("volumeMounts", []):
        path, volume = mount["mountPath"], volumes.get(mount["name"], {})
        if not path.startswith("/etc/") or "subPath" in mount:
            raise MetalLBError(f"the speaker mounts {mount['name']} at {path}: not under /etc")
        relative = path.removeprefix("/etc/").strip("/")
        if "configMap" in volume:
            data = chart.config_map(volume["configMap"]["name"]).get("data") or {}
        elif "secret" in volume and volume["secret"]["secretName"] == chart.memberlist_secret:
            data = {SECRET_KEY: memberlist_key}
        elif "emptyDir" in volume and relative == "frr_reloader" and chart.mode == "frr":
            continue  # shared with the node's FRR: bound from its directory (ETC_OVERLAY)
        else:
            raise MetalLBError(f"the speaker mounts {mount['name']}, which the lab cannot give")
        for key, text in data.items():
            files[f"{relative}/{key}"] = text
    return files


def speaker_command(
    chart: Chart,
    lab: network_lab.Lab,
    index: int,
    *,
    binary: Path,
    kubeconfig: Path,
    etc: Path,
    frr: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of node `index`'s speaker, to run in its namespace; in FRR mode
    with the node's FRR (`frr`, a directory `frr_node_files` filled)."""
    if any(c in str(etc) for c in ",:"):
        raise MetalLBError(f"{etc}: overlayfs options cannot name a path with ',' or ':'")
    if (frr is not None) != (chart.mode == "frr"):
        raise MetalLBError(f"a {chart.mode} speaker {'needs' if frr is None else 'takes no'} FRR")
    c = container(chart.speaker)
    argv = [
        "sh", "-c", ETC_OVERLAY, "sh", str(etc), str(frr) if frr is not None else "-",
        str(binary),
        *c.get("args", []),
        # Outside a Pod there is no in-cluster configuration and no ServiceAccount namespace
        # file for it to fall back on.
        f"--kubeconfig={kubeconfig}",
        f"--namespace={NAMESPACE}",
        # Also in METALLB_NODE_NAME; on the command line so that `ps` tells the speakers apart.
        f"--node-name={lab.node_names[index - 1]}",
    ]  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),  # for sh, mount, cp
        **resolve_env(c, pod_fields(lab, index)),
        # The chart's, in FRR mode (`frr`); in native mode, MetalLB's own BGP speaker (also
        # its default when unset).
        "METALLB_BGP_TYPE": chart.mode,
    }
    return argv, env


def frr_daemons(chart: Chart) -> list[tuple[str, str]]:
    """(daemon, options) as the chart's daemons file starts them: zebra and staticd always,
    then every daemon set to `yes`, each with its `<name>_options`."""
    text = (chart.config_map(FRR_STARTUP).get("data") or {}).get("daemons", "")
    settings: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            settings[name] = value.strip().strip('"').strip()
    enabled = list(FRR_ALWAYS)
    enabled += [n for n, v in settings.items() if v == "yes" and n not in enabled and "_" not in n]
    return [(d, " ".join(settings.get(f"{d}_options", "").split())) for d in enabled]


def frr_node_files(chart: Chart, version: str = VERSION) -> dict[str, str]:
    """A node's FRR directory, by relative path: `etc/` (the chart's frr-startup files),
    `daemons.list` (`frr_daemons`), `frr-reloader.sh` (MetalLB's, from its module); the
    caller adds the empty `run/` and `reloader/` and `bin` (a link to FRR_BIN)."""
    data = chart.config_map(FRR_STARTUP).get("data") or {}
    files = {f"etc/{name}": text for name, text in data.items()}
    files["daemons.list"] = "".join(f"{d} {o}\n" for d, o in frr_daemons(chart))
    files["frr-reloader.sh"] = (module_dir(version) / RELOADER).read_text()
    return files


def controller_command(
    chart: Chart, *, binary: Path, kubeconfig: Path
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the controller (the chart's, plus where the apiserver is)."""
    c = container(chart.controller)
    argv = [
        str(binary),
        *c.get("args", []),
        f"--kubeconfig={kubeconfig}",
        f"--namespace={NAMESPACE}",
    ]
    # METALLB_ML_SECRET_NAME from the chart: the controller creates that Secret when it is
    # missing, owned by its Deployment, which does not exist here; `install` creates it first,
    # so the controller finds it and leaves it alone.
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        **resolve_env(c, {}),
        "METALLB_BGP_TYPE": chart.mode,  # which configuration it validates
    }
    return argv, env


# --- installing into a lab ------------------------------------------------------------------------


def _apply(lab: network_lab.Lab, objects: Sequence[dict[str, Any]], manager: str) -> None:
    lab.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={manager}",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def memberlist_key(lab: network_lab.Lab, chart: Chart) -> str:
    """The speakers' memberlist key from its Secret, which is created if missing."""
    name = chart.memberlist_secret
    found = lab.kubectl("get", "secret", name, "-n", NAMESPACE, "--ignore-not-found", "-o", "json")
    if found.strip():
        data = json.loads(found).get("data") or {}
        if SECRET_KEY not in data:
            raise MetalLBError(f"Secret {NAMESPACE}/{name} has no key {SECRET_KEY}")
        return base64.b64decode(data[SECRET_KEY]).decode()
    key = new_memberlist_key()
    lab.kubectl(
        "create", "secret", "generic", name, "-n", NAMESPACE, f"--from-literal={SECRET_KEY}={key}"
    )
    return key


def install(lab: network_lab.Lab, version: str = VERSION, chart: Chart | None = None) -> Chart:
    """MetalLB's CRDs in place of ours, its accounts, RBAC and ConfigMap, the memberlist Secret
    and the speakers' stand-in Pods. Ironlb must not be running."""
    chart = chart or render(version)
    names = [c["metadata"]["name"] for c in chart.crds]
    _apply(lab, chart.crds, CRD_MANAGER)
    surplus = surplus_crds(our_crds(), names)
    if surplus:
        lab.kubectl("delete", "crd", *surplus, "--ignore-not-found")
    lab.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names)
    )
    _apply(lab, chart.applied, MANAGER)
    memberlist_key(lab, chart)
    pods = [stand_in(chart, lab, i) for i in range(1, lab.nodes + 1)]
    _apply(lab, [pod for pod, _ in pods], MANAGER)
    for pod, status in pods:
        lab.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--subresource=status",
            "--type=merge", "-p", json.dumps(status),
        )  # fmt: skip
    log(f"installed MetalLB {version}'s CRDs and RBAC; {len(pods)} stand-in speaker Pods")
    return chart


def uninstall(lab: network_lab.Lab, version: str = VERSION, chart: Chart | None = None) -> None:
    """Undo `install` (also a partial one): MetalLB's objects go (its status objects with the
    stand-ins that own them), our CRDs come back in place of its."""
    chart = chart or render(version)
    pods = [pod_name(n) for n in lab.node_names]
    # Bound to nodes whose agents leave them alone: nobody would confirm a graceful deletion.
    lab.kubectl(
        "delete", "pod", *pods, "-n", NAMESPACE, "--ignore-not-found", "--wait=false",
        "--grace-period=0", "--force",
    )  # fmt: skip
    lab.kubectl("delete", "secret", chart.memberlist_secret, "-n", NAMESPACE, "--ignore-not-found")
    lab.kubectl(
        "delete", "--ignore-not-found", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(chart.applied)}),
    )  # fmt: skip
    lab.kubectl(
        "apply", "--server-side", "--force-conflicts", f"--field-manager={CRD_MANAGER}",
        "-f", str(network_lab.CRDS),
    )  # fmt: skip
    names = our_crds()
    lab.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names)
    )
    log("uninstalled MetalLB; our CRDs are back")


# --- running it -----------------------------------------------------------------------------------


@dataclass
class MetalLBDeployment:
    """MetalLB's processes in an installed lab, driven like `hack.deploy.Deployment` (the same
    method names, so a bench can take either): `start_speaker(i)`, `signal_speaker(i, SIGKILL)`
    for a crash, `stop_speaker(i, SIGTERM)` for a graceful stop, `stop()`."""

    lab: network_lab.Lab
    version: str = VERSION
    mode: str = DEFAULT_MODE
    controller: subprocess.Popen[Any] | None = None
    speakers: dict[int, subprocess.Popen[Any]] = field(default_factory=dict)
    _chart: Chart | None = None
    _kubeconfigs: dict[str, Path] | None = None
    _etc_written: bool = False
    _logs: list[IO[bytes]] = field(default_factory=list)
    # The readiness prober of each running speaker (set: stop probing).
    _probers: dict[int, threading.Event] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return self.lab.directory / "metallb"

    @property
    def chart(self) -> Chart:
        if self._chart is None:
            self._chart = render(self.version, self.mode)
        return self._chart

    def kubeconfig(self, component: str) -> Path:
        """A kubeconfig as the chart's ServiceAccount of `component` (`speaker`, `controller`)."""
        if self._kubeconfigs is None:
            for component, workload in (
                ("speaker", self.chart.speaker),
                ("controller", self.chart.controller),
            ):
                # chart_identities makes tokens for `<release>-<component>`.
                account = pod_spec(workload)["serviceAccountName"]
                if account != f"{RELEASE}-{component}":
                    raise MetalLBError(f"MetalLB's {component} runs as {account}, not expected")
            try:
                paths = tools.chart_identities(
                    self.lab.kubeconfig,
                    self.directory / "accounts",
                    namespace=NAMESPACE,
                    release=RELEASE,
                    install_rbac=False,  # `install` applied MetalLB's
                )
            except tools.ToolError as e:
                raise MetalLBError(str(e)) from None
            speaker = json.loads(paths["speaker"].read_text())
            # Speakers live in node namespaces and reach the apiserver over the LAN.
            for entry in speaker.get("clusters") or []:
                entry["cluster"]["server"] = network_lab.APISERVER_FROM_NODES
            paths["speaker"].write_text(json.dumps(speaker, indent=2))
            self._kubeconfigs = paths
        return self._kubeconfigs[component]

    @property
    def etc(self) -> Path:
        """The speakers' /etc additions (`files/`) and their private mount point (`mnt/`),
        written once per deployment (the memberlist key is the installed Secret's)."""
        etc = self.directory / "etc"
        if self._etc_written:
            return etc
        shutil.rmtree(etc, ignore_errors=True)
        (etc / "mnt").mkdir(parents=True)
        key = memberlist_key(self.lab, self.chart)
        for relative, text in speaker_files(self.chart, key).items():
            path = etc / "files" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o600)
        self._etc_written = True
        return etc

    def _log(self, name: str) -> IO[bytes]:
        out = open(self.lab.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(out)
        return out

    def start(self, speakers: Iterable[int] | None = None) -> None:
        """The controller, then a speaker on every node (or on `speakers`)."""
        ensure_built(self.version)
        self.start_controller()
        for index in speakers if speakers is not None else range(1, self.lab.nodes + 1):
            self.start_speaker(index)

    def start_controller(self) -> subprocess.Popen[Any]:
        argv, env = controller_command(
            self.chart,
            binary=bin_dir(self.version) / "controller",
            kubeconfig=self.kubeconfig("controller"),
        )
        # In the control plane's namespace, where a cluster runs it on a control-plane node; it
        # reaches the apiserver at the admin kubeconfig's address, which is that namespace's own.
        self.controller = self.lab.popen(
            network_lab.NS_CP,
            *argv,
            env=env,
            stdout=self._log(f"{RELEASE}-controller"),
            stderr=subprocess.STDOUT,
        )
        return self.controller

    def frr_directory(self, index: int) -> Path:
        return self.directory / "frr" / f"node{index}"

    def _fresh_frr(self, index: int) -> Path:
        """Node `index`'s FRR directory, as a new Pod's emptyDirs are: the chart's startup files,
        nothing else; owned by FRR's user, as the chart's init container leaves them."""
        frr = self.frr_directory(index)
        shutil.rmtree(frr, ignore_errors=True)
        for relative, text in frr_node_files(self.chart, self.version).items():
            path = frr / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        for empty in ("run", "reloader"):
            (frr / empty).mkdir(parents=True, exist_ok=True)
        (frr / "bin").symlink_to(FRR_BIN)
        for path in [frr, *frr.rglob("*")]:
            if not path.is_symlink():
                shutil.chown(path, "frr", "frr")
        return frr

    def start_speaker(self, index: int) -> subprocess.Popen[Any]:
        frr = self._fresh_frr(index) if self.chart.mode == "frr" else None
        argv, env = speaker_command(
            self.chart,
            self.lab,
            index,
            binary=bin_dir(self.version) / "speaker",
            kubeconfig=self.kubeconfig("speaker"),
            etc=self.etc,
            frr=frr,
        )
        process = self.lab.popen(
            network_lab.node_namespace(index),
            *argv,
            env=env,
            stdout=self._log(pod_name(self.lab.node_names[index - 1])),
            stderr=subprocess.STDOUT,
        )
        self.speakers[index] = process
        self._probe_readiness(index)
        return process

    def _probe_readiness(self, index: int) -> None:
        """The kubelet's part: the stand-in Pod turns Ready once the speaker answers the
        chart's readiness probe (an HTTP GET from outside the node, as a kubelet's comes from
        the host), probed after its initial delay and then every period."""
        self._stop_probing(index)
        probe = container(self.chart.speaker).get("readinessProbe") or {}
        get = probe.get("httpGet") or {}
        ports = {
            p.get("name"): p.get("containerPort")
            for p in container(self.chart.speaker).get("ports", [])
        }
        port = ports.get(get.get("port"), get.get("port"))
        url = f"http://{self.lab.node_v4(index)}:{port}{get.get('path', '/')}"
        delay, period = (
            float(probe.get("initialDelaySeconds", 0)),
            float(probe.get("periodSeconds", 10)),
        )
        pod = pod_name(self.lab.node_names[index - 1])
        stop = self._probers[index] = threading.Event()

        def run() -> None:
            waited = stop.wait(delay)
            while not waited:
                with contextlib.suppress(network_lab.LabError, subprocess.SubprocessError):
                    if self.lab.http_status(network_lab.NS_TOR, [url])[0] == 200:
                        self.lab.kubectl(
                            "patch", "pod", pod, "-n", NAMESPACE, "--subresource=status",
                            "--type=strategic", "-p", json.dumps(READY),
                        )  # fmt: skip
                        return
                waited = stop.wait(period)

        threading.Thread(target=run, name=f"readiness-{pod}", daemon=True).start()

    def _stop_probing(self, index: int) -> None:
        stop = self._probers.pop(index, None)
        if stop is not None:
            stop.set()

    def signal_speaker(self, index: int, sig: signal.Signals) -> None:
        """A fault: the signal alone (SIGKILL is a crash); `stop_speaker` reaps it."""
        process = self.speakers.get(index)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, sig)

    def stop_speaker(self, index: int, sig: signal.Signals = signal.SIGTERM) -> None:
        """`sig` (SIGTERM: MetalLB leaves memberlist on its way out), SIGKILL after a while."""
        self._stop_probing(index)
        process = self.speakers.pop(index, None)
        if process is not None:
            processes.stop(process, sig)

    def stop_controller(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.controller is not None:
            processes.stop(self.controller, sig)
            self.controller = None

    def remove_release(self) -> None:
        """What `helm uninstall` does to the running release, as the kubelets carry it out:
        every speaker Pod marked for deletion at once, every process then SIGTERMed (SIGKILLed
        after the Pod's grace period), and once all have ended `uninstall`, which removes the
        Pods (the kubelets' confirmation) and MetalLB's objects, and puts our CRDs back."""
        pods = [pod_name(self.lab.node_names[i - 1]) for i in self.speakers]
        if pods:
            self.lab.kubectl("delete", "pod", *pods, "-n", NAMESPACE, "--wait=false")
        for index in list(self._probers):
            self._stop_probing(index)
        grace = float(pod_spec(self.chart.speaker).get("terminationGracePeriodSeconds") or 0)
        running = [p for p in (*self.speakers.values(), self.controller) if p is not None]
        # A kubelet gives at least 2 s (its minimum grace period) before SIGKILL.
        processes.stop_pids([p.pid for p in running], group=True, timeout=max(grace, 2.0))
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(processes.KILL_TIMEOUT_S)
        self.speakers.clear()
        self.controller = None
        uninstall(self.lab, self.version, self.chart)

    def stop(self) -> None:
        for index in list(self._probers):
            self._stop_probing(index)
        for index in list(self.speakers):
            self.stop_speaker(index)
        self.stop_controller()
        for out in self._logs:
            out.close()
        self._logs.clear()

    def logs(self, name: str) -> str:
        """A process's log: `metallb-controller`, `metallb-speaker-node1`, ..."""
        path = self.lab.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextlib.contextmanager
def deployed(
    lab: network_lab.Lab,
    *,
    version: str = VERSION,
    speakers: Iterable[int] | None = None,
    mode: str = DEFAULT_MODE,
) -> Iterator[MetalLBDeployment]:
    """MetalLB built, installed and running in the lab; afterwards stopped and our CRDs back."""
    ensure_built(version)
    # Before the lab is touched: what fails here leaves it as it was.
    chart = render(version, mode)
    if mode == "frr" and not FRR_RELOAD.exists():
        raise MetalLBError(f"{FRR_RELOAD} is missing: install Debian's frr-pythontools")
    deployment = MetalLBDeployment(lab, version, mode, _chart=chart)
    try:
        install(lab, version, chart)
        deployment.start(speakers)
        yield deployment
    finally:
        try:
            deployment.stop()
        finally:
            uninstall(lab, version, chart)


# --- command line ---------------------------------------------------------------------------------


def _lab(directory: Path) -> network_lab.Lab:
    marker = directory / network_lab.MARKER
    if not marker.exists():
        raise MetalLBError(f"no lab in {directory}: run `hack/lab up` first")
    return network_lab.Lab(nodes=int(json.loads(marker.read_text())["nodes"]), directory=directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.metallb", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--version", default=VERSION, help=f"MetalLB's version ({VERSION})")
    parser.add_argument(
        "--dir", type=Path, default=network_lab.DEFAULT_DIR, help="the lab's state directory"
    )
    parser.add_argument(
        "--mode", choices=MODES, default=DEFAULT_MODE, help=f"how it speaks BGP ({DEFAULT_MODE})"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build speaker and controller into the cache; print where")
    sub.add_parser("render", help="print the chart's objects that `install` applies")
    sub.add_parser("install", help="MetalLB's CRDs (in place of ours), RBAC, stand-in Pods")
    sub.add_parser("uninstall", help="remove what `install` added; our CRDs back")
    sub.add_parser("run", help="install and start MetalLB in the lab until Ctrl-C")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(ensure_built(args.version))
        elif args.command == "render":
            chart = render(args.version, args.mode)
            print(yaml.safe_dump_all([*chart.crds, *chart.applied], sort_keys=False), end="")
        elif args.command == "install":
            install(_lab(args.dir), args.version, render(args.version, args.mode))
        elif args.command == "uninstall":
            uninstall(_lab(args.dir), args.version, render(args.version, args.mode))
        else:
            lab = _lab(args.dir)
            # SIGTERM (a `timeout`, a CI job cancelled) stops it like Ctrl-C: processes stopped,
            # our CRDs put back; without this, only `hack/lab down` cleaned up after a SIGTERM.
            signal.signal(signal.SIGTERM, processes.interrupt)
            with deployed(lab, version=args.version, mode=args.mode):
                log(f"running; logs in {lab.log_dir}/{RELEASE}-*.log; Ctrl-C stops it")
                while True:
                    time.sleep(3600)
    except (MetalLBError, network_lab.LabError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
