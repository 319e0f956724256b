"""`hack/cluster` as a person uses it: up, env, down, and one-line errors on bad input."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import cluster as local_cluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLI = str(ROOT / "hack" / "cluster")


def ports() -> list[str]:
    """`up`'s port options, every port free right now; each one `up` listens on is given (etcd's
    peer port too: left to its default, the etcd port + 1, it was once a port in use)."""
    api, etcd, etcd_peer, kcm, scheduler = local_cluster.free_ports(5)
    return [
        f"--port={api}",
        f"--etcd-port={etcd}",
        f"--etcd-peer-port={etcd_peer}",
        f"--controller-manager-port={kcm}",
        f"--scheduler-port={scheduler}",
    ]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


def processes_using(directory: Path) -> list[str]:
    """Command lines of live control-plane processes that use the data directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        program = Path(argv[0].decode(errors="replace")).name
        cmdline = b" ".join(argv).decode(errors="replace")
        if state != "Z" and program in local_cluster.COMPONENTS and str(directory) in cmdline:
            found.append(cmdline)
    return found


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "cluster"
    try:
        yield directory
    finally:
        # Never leave a cluster behind, whatever the test did.
        local_cluster.Cluster(directory=directory).down()


def test_up_env_down_leaves_nothing_behind(data_dir: Path) -> None:
    options = ports()
    up = run("up", "--dir", str(data_dir), *options)
    assert up.returncode == 0, up.stderr
    running = {Path(line.split()[0]).name for line in processes_using(data_dir)}
    assert running == set(local_cluster.COMPONENTS), running

    env = run("env", "--dir", str(data_dir))
    assert f"export KUBECONFIG={data_dir / 'kubeconfig'}\n" in env.stdout
    version = subprocess.run(
        [
            str(local_cluster.binary("kubectl")),
            f"--kubeconfig={data_dir / 'kubeconfig'}",
            "get",
            "--raw",
            "/version",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert version.returncode == 0, version.stderr
    assert f'"gitVersion": "v{local_cluster.KUBERNETES_VERSION}"' in version.stdout

    again = run("up", "--dir", str(data_dir), *options)
    assert again.returncode != 0
    assert "already running" in again.stderr

    down = run("down", "--dir", str(data_dir))
    assert down.returncode == 0, down.stderr
    assert not data_dir.exists()
    assert processes_using(data_dir) == []
    # Right after `down`, the same ports are free again (their sockets in TIME_WAIT are no
    # obstacle for servers that set SO_REUSEADDR, so they must be none for `up` either).
    again = run("up", "--dir", str(data_dir), *options)
    assert again.returncode == 0, again.stderr
    assert run("down", "--dir", str(data_dir)).returncode == 0


def test_port_already_taken_is_one_line_error(data_dir: Path) -> None:
    options = ports()
    api = int(options[0].split("=")[1])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", api))
        squatter.listen()
        up = run("up", "--dir", str(data_dir), *options)
    assert up.returncode != 0
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {api}" in lines[0] and "in use" in lines[0]
    assert processes_using(data_dir) == []
    assert not data_dir.exists()


def test_missing_binary_is_one_line_error(data_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "assets"
    empty.mkdir()
    env = {"KUBEBUILDER_ASSETS": str(empty), "IRONLB_CACHE": str(tmp_path / "no-cache")}
    up = run("up", "--dir", str(data_dir), env=env)
    assert up.returncode != 0
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "kube-apiserver" in lines[0] and "install" in lines[0]
    assert processes_using(data_dir) == []


def test_stale_data_dir_is_one_line_error(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "etcd.pid").write_text("999999999")
    up = run("up", "--dir", str(data_dir), *ports())
    assert up.returncode != 0
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "stale data directory" in lines[0]
    assert processes_using(data_dir) == []


def test_failed_start_leaves_no_half_started_process(data_dir: Path, tmp_path: Path) -> None:
    # An apiserver that cannot start (it exits at once) after etcd came up: etcd must be stopped.
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in ("etcd", "kubectl"):
        (assets / name).symlink_to(local_cluster.binary(name))
    broken = assets / "kube-apiserver"
    broken.write_text("#!/bin/sh\necho 'simulated apiserver failure' >&2\nexit 3\n")
    broken.chmod(0o755)
    up = run("up", "--dir", str(data_dir), *ports(), env={"KUBEBUILDER_ASSETS": str(assets)})
    assert up.returncode != 0
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "simulated apiserver failure" in lines[0]
    assert processes_using(data_dir) == []
    assert not data_dir.exists()


@pytest.mark.parametrize("component", ["kube-controller-manager", "kube-scheduler"])
def test_a_controller_that_cannot_start_is_named_and_nothing_is_left(
    data_dir: Path, tmp_path: Path, component: str
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in local_cluster.BINARIES:
        if name != component:
            (assets / name).symlink_to(local_cluster.binary(name))
    broken = assets / component
    broken.write_text(f"#!/bin/sh\necho 'simulated {component} failure' >&2\nexit 3\n")
    broken.chmod(0o755)
    up = run("up", "--dir", str(data_dir), *ports(), env={"KUBEBUILDER_ASSETS": str(assets)})
    assert up.returncode != 0
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert component in lines[0] and f"simulated {component} failure" in lines[0]
    assert processes_using(data_dir) == []
    assert not data_dir.exists()


def test_down_without_cluster_is_harmless(data_dir: Path) -> None:
    down = run("down", "--dir", str(data_dir))
    assert down.returncode == 0
    assert "nothing to do" in down.stderr
