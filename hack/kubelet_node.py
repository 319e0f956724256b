"""Real kubelet nodes in the lab: containerd + CNI + kubelet inside a node's network namespace.

`hack/lab up --kubelet-nodes 1,2` makes those nodes run a real kubelet with containerd instead of
`hack/podagent`, so the project's images and Helm chart run as users run them. Per node:

- one wrapper process, `setsid unshare --mount --propagation slave nsenter --net=<node netns>
  node-up.sh` (not `ip netns exec`, which remounts /sys and hides the cgroup hierarchies), so
  containerd, the kubelet and every container mount live in a mount namespace of the node's own,
  gone when its last process ends;
- in that namespace, tmpfs or bind mounts from `DIR/nodeK/` over the host paths containerd, CNI
  and the kubelet use whatever their configuration says (`/run/containerd`, `/var/lib/cni`,
  `/var/lib/kubelet`, `/var/log/pods`, `/var/log/containers`, `/etc/cni/net.d`): two nodes on one
  machine do not collide, and the host's own paths stay untouched;
- a cgroup `/ilb-nodeK` in every cgroup v1 hierarchy (the kubelet's `cgroupRoot`; the wrapper
  enters it first, so containerd, its shims and every container live below it);
- containerd 1.6 with the CRI plugin, sandbox image `ironlb.local/pause`, CNI `bridge` on the
  node's `cbr0` with `host-local` addresses from the node's podCIDRs (both families);
- the kubelet (`failCgroupV1: false`: 1.37 refuses cgroup v1 otherwise; cgroupfs driver), which
  registers the Node itself with both LAN addresses as InternalIPs. Images come from OCI archives
  (`hack/images.py`) imported before the kubelet starts.

The kubelet writes machine-wide sysctls when it starts (SYSCTLS): their values are saved in the
lab directory before the first kubelet starts, written back once every kubelet runs, and again by
`down`. `down` (idempotent, needs no state but the lab directory) stops the kubelets, kills every
process in the `/ilb-node*` cgroups (containers, shims, containerd), removes those cgroups,
restores the sysctls and removes the mount points it had to create on the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from hack import cluster as local_cluster
from hack import images, processes

# What the kubelet writes at start (pkg/kubelet/cm: setupKernelTunables), all machine-wide.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
# Host paths used regardless of configuration; each node mounts its own over them.
TMPFS_PATHS = ("/run/containerd",)
BIND_PATHS = {
    "/var/lib/cni": "cni",
    "/var/lib/kubelet": "kubelet",
    "/var/log/pods": "pod-logs",
    "/var/log/containers": "container-logs",
    "/etc/cni/net.d": "cni-conf",
}
CGROUP_PREFIX = "ilb-node"
SYSCTL_FILE = "kubelet-sysctls.json"
MOUNTPOINT_FILE = "kubelet-mountpoints.json"
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 10.0


class NodeError(Exception):
    """A failure a person can act on; its message is one line."""


def log(message: str) -> None:
    print(f"lab: {message}", flush=True, file=__import__("sys").stderr)


# --- machine-wide state ---------------------------------------------------------------------------


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls() -> dict[str, str]:
    return {name: _sysctl_path(name).read_text().strip() for name in SYSCTLS}


def save_sysctls(directory: Path) -> None:
    """Remember the machine's values once, before any kubelet of this lab starts."""
    path = directory / SYSCTL_FILE
    if not path.exists():
        path.write_text(json.dumps(read_sysctls(), indent=2) + "\n")


def restore_sysctls(directory: Path) -> dict[str, tuple[str, str]]:
    """Write the saved values back; returns what had changed (name: (found, restored))."""
    path = directory / SYSCTL_FILE
    if not path.exists():
        return {}
    saved: dict[str, str] = json.loads(path.read_text())
    changed = {}
    for name, value in saved.items():
        found = _sysctl_path(name).read_text().strip()
        if found != value:
            _sysctl_path(name).write_text(value + "\n")
            changed[name] = (found, value)
    return changed


def cgroup_mounts() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers and the unified one)."""
    found: list[Path] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            before, _, after = line.partition(" - ")
            fstype = after.split()[0] if after else ""
            if fstype in ("cgroup", "cgroup2"):
                mountpoint = Path(before.split()[4])
                if mountpoint not in found:
                    found.append(mountpoint)
    return found


def node_cgroups(name: str | None = None) -> list[Path]:
    """Existing `/ilb-node*` cgroups (or `/name`) in every hierarchy."""
    out = []
    for mount in cgroup_mounts():
        if name is not None:
            if (mount / name).is_dir():
                out.append(mount / name)
        else:
            with contextlib.suppress(OSError):
                out += sorted(p for p in mount.iterdir() if p.name.startswith(CGROUP_PREFIX))
    return out


def _tree_pids(root: Path) -> set[int]:
    pids: set[int] = set()
    for procs in root.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in procs.read_text().split())
    return pids


def make_cgroup(name: str) -> None:
    for mount in cgroup_mounts():
        path = mount / name
        path.mkdir(exist_ok=True)
        # cpuset: a new cgroup starts with no CPUs and no memory nodes.
        for key in ("cpuset.cpus", "cpuset.mems"):
            parent = mount / key
            if parent.exists() and not (path / key).read_text().strip():
                (path / key).write_text(parent.read_text())


def remove_cgroups(timeout: float = STOP_TIMEOUT_S) -> list[str]:
    """Kill every process in the `/ilb-node*` cgroups and remove them; problems found."""
    roots = node_cgroups()
    deadline = time.monotonic() + timeout
    while True:
        pids = set().union(*(_tree_pids(r) for r in roots)) if roots else set()
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return [f"processes survive in the node cgroups: {sorted(pids)[:10]}"]
        time.sleep(0.1)
    problems = []
    for root in roots:
        # Deepest first; the kernel may need a moment after the last process is gone.
        for path in sorted((p for p in [root, *root.rglob("*")] if p.is_dir()), reverse=True):
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        problems.append(f"cannot remove cgroup {path}: {e.strerror}")
                        break
                    time.sleep(0.05)
    return problems


# --- one node -------------------------------------------------------------------------------------


def state_dir(node_dir: Path) -> Path:
    return node_dir / "kubelet-node"


def socket_path(node_dir: Path) -> Path:
    return state_dir(node_dir) / "containerd" / "containerd.sock"


def containerd_config(state: Path, pause: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{state}/containerd/root"
state = "{state}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{state}/containerd/containerd.sock"

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/containerd/opt"

[{cri}]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
  max_conf_num = 1
"""


def cni_config(bridge: str, subnets: Sequence[tuple[str, str]]) -> dict[str, object]:
    """The node's Pod network: veths on its bridge, addresses from its podCIDRs."""
    return {
        "cniVersion": "0.4.0",
        "name": "ilb-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": s, "gateway": g}] for s, g in subnets],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                },
            }
        ],
    }


def kubelet_config(name: str, address: str, state: Path, ca: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # Kubernetes 1.37 refuses cgroup v1 hosts unless told; this machine is v1 (hybrid).
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_PREFIX}{name.removeprefix('node')}",
        "containerRuntimeEndpoint": f"unix://{state}/containerd/containerd.sock",
        "address": address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        # The apiserver (logs, exec) reaches the kubelet without a client certificate.
        "authentication": {
            "x509": {"clientCAFile": str(ca)},
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "resolvConf": str(state / "resolv.conf"),
        "clusterDomain": "cluster.local",
        # A shared development machine: never evict, never collect images (they cannot be
        # pulled back: there is no registry).
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "maxPods": 110,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "protectKernelDefaults": False,
    }


WRAPPER = """#!/bin/sh
# One lab node's containerd and kubelet, in a mount namespace of their own (see kubelet_node.py).
set -eu
state="$1"
for cg in {cgroups}; do echo $$ > "$cg/cgroup.procs"; done
mount -t tmpfs -o mode=0711 tmpfs /run/containerd
{binds}
containerd --config "$state/containerd.toml" >> "$state/containerd.log" 2>&1 &
# The lab imports the images, then lets the kubelet start (bounded: 10 minutes).
i=0
while [ ! -e "$state/go" ]; do
  i=$((i + 1)); [ "$i" -lt 6000 ] || exit 1
  sleep 0.1
done
exec {kubelet} --config="$state/kubelet.yaml" --kubeconfig="{kubeconfig}" \\
  --hostname-override={name} --node-ip={node_ips} --v=1 >> "$state/kubelet.log" 2>&1
"""


def prepare(
    node_dir: Path,
    name: str,
    netns: str,
    node_ips: Sequence[str],
    subnets: Sequence[tuple[str, str]],
    bridge: str,
    kubeconfig: Path,
    ca: Path,
    pause: str,
) -> Path:
    """Write a node's configuration; returns the wrapper script."""
    state = state_dir(node_dir)
    state.mkdir(parents=True, exist_ok=True)
    for sub in BIND_PATHS.values():
        (state / sub).mkdir(exist_ok=True)
    (state / "containerd").mkdir(exist_ok=True)
    (state / "containerd.toml").write_text(containerd_config(state, pause))
    (state / "cni-conf" / "10-ilb-pods.conflist").write_text(
        json.dumps(cni_config(bridge, subnets), indent=2)
    )
    (state / "resolv.conf").write_text("options ndots:1\n")
    (state / "kubelet.yaml").write_text(
        json.dumps(kubelet_config(name, node_ips[0], state, ca), indent=2)
    )
    cgroup = f"{CGROUP_PREFIX}{name.removeprefix('node')}"
    make_cgroup(cgroup)
    binds = "\n".join(f'mount --bind "$state/{sub}" {host}' for host, sub in BIND_PATHS.items())
    script = state / "node-up.sh"
    script.write_text(
        WRAPPER.format(
            cgroups=" ".join(str(p) for p in node_cgroups(cgroup)),
            binds=binds,
            kubelet=local_cluster.binary("kubelet"),
            kubeconfig=kubeconfig,
            name=name,
            node_ips=",".join(node_ips),
        )
    )
    script.chmod(0o755)
    del netns
    return script


def ensure_mountpoints(directory: Path) -> None:
    """Create the host paths the nodes mount over, remembering those the lab created."""
    record = directory / MOUNTPOINT_FILE
    created: list[str] = json.loads(record.read_text()) if record.exists() else []
    for path in [*TMPFS_PATHS, *BIND_PATHS]:
        if not Path(path).exists():
            Path(path).mkdir(parents=True)
            created.append(path)
    record.write_text(json.dumps(created) + "\n")


def remove_mountpoints(directory: Path) -> None:
    record = directory / MOUNTPOINT_FILE
    if not record.exists():
        return
    for path in reversed(json.loads(record.read_text())):
        with contextlib.suppress(OSError):
            Path(path).rmdir()  # only if still empty
    record.unlink()


def start(node_dir: Path, netns: str, script: Path) -> subprocess.Popen[bytes]:
    state = state_dir(node_dir)
    with open(state / "wrapper.log", "ab") as out:
        process = subprocess.Popen(
            [
                # start_new_session is the `setsid` (the setsid command would fork and exit).
                "unshare", "--mount", "--propagation", "slave",
                "nsenter", f"--net=/run/netns/{netns}",
                str(script), str(state),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    (state / "wrapper.pid").write_text(str(process.pid))
    return process


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        for line in reversed(path.read_text(errors="replace").splitlines()):
            if line.strip():
                return line.strip()[:300]
    return "(no log)"


def wait_containerd(node_dir: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    state = state_dir(node_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NodeError(
                f"node wrapper exited ({process.returncode}): {_last_line(state / 'wrapper.log')}"
            )
        result = subprocess.run(
            ["ctr", "--address", str(socket_path(node_dir)), "version"],
            capture_output=True,
            timeout=10,
        )
        if result.returncode == 0:
            return
        time.sleep(0.1)
    raise NodeError(f"containerd not answering: {_last_line(state / 'containerd.log')}")


def load_images(node_dir: Path, built: Sequence[images.Image]) -> None:
    """Import the images, then let the wrapper start the kubelet."""
    try:
        images.import_into(socket_path(node_dir), built)
    except images.ImageError as e:
        raise NodeError(str(e)) from e
    (state_dir(node_dir) / "go").touch()


def kubelet_log(node_dir: Path) -> Path:
    return state_dir(node_dir) / "kubelet.log"


def stop_kubelets(directory: Path) -> None:
    """SIGTERM every node wrapper/kubelet of the lab in `directory` (the rest goes by cgroup)."""
    pids = []
    for pidfile in directory.glob("node*/kubelet-node/wrapper.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pidfile.read_text()))
    # What survives the grace period is killed with its cgroup in `remove_cgroups`.
    processes.stop_pids(pids, timeout=5.0)


def down(directory: Path) -> tuple[bool, list[str]]:
    """Remove every kubelet node of any lab (processes, cgroups); restore what the kubelets
    changed and remove the mount points the lab created. Returns (did something, problems)."""
    did = bool(node_cgroups()) or (directory / SYSCTL_FILE).exists()
    problems: list[str] = []
    if directory.exists():
        stop_kubelets(directory)
    problems += remove_cgroups()
    if directory.exists():
        try:
            changed = restore_sysctls(directory)
            if changed:
                log(
                    "restored "
                    + ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in sorted(changed.items()))
                )
        except OSError as e:
            problems.append(f"cannot restore sysctls: {e}")
        remove_mountpoints(directory)
    return did, problems
