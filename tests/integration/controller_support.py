"""Helpers for the controller's integration tests: the process, pools, Services, bounded waits.

The controller runs as a real subprocess (`python -m controller`), so a test can SIGKILL it and
what survives is only what the apiserver holds. Each test gets its own namespace and its own
pools; pool address blocks come from a counter (pools are cluster-wide in metallb-system and
must never overlap, or the whole configuration turns invalid).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest

from hack import cluster as local_cluster

ROOT = Path(__file__).resolve().parents[2]
METALLB_NAMESPACE = "metallb-system"
POOL_ANNOTATION = "metallb.io/ip-allocated-from-pool"
WAIT_S = 30.0

T = TypeVar("T")
_blocks = itertools.count(1)


def block() -> int:
    """A fresh index for this test process: 100.64.<i>.0/24 and fd64::<i>:0/112 are its own."""
    i = next(_blocks)
    assert i < 4096, "ran out of test address blocks"
    return i


def v4_block(i: int, last: int = 255) -> str:
    return f"100.{64 + i // 256}.{i % 256}.0-100.{64 + i // 256}.{i % 256}.{last}"


def v4(i: int, host: int) -> str:
    return f"100.{64 + i // 256}.{i % 256}.{host}"


def v6(i: int, host: int) -> str:
    return f"fd64::{i:x}:{host:x}"


def v6_block(i: int, size: int = 256) -> str:
    return f"{v6(i, 0)}-{v6(i, size - 1)}"


def wait_for(what: str, probe: Callable[[], T], *, timeout: float = WAIT_S) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f} s waiting for {what}; last={last!r}"
            )
        time.sleep(0.1)


def stays(what: str, probe: Callable[[], bool], *, duration: float = 2.0) -> None:
    """`probe` holds for the whole of `duration` (used to show that nothing happens)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        time.sleep(0.1)


# --- the controller process ----------------------------------------------------------------------


class Controller:
    """`python -m controller` as a child process with its own metrics port and log file."""

    def __init__(
        self,
        kubeconfig: str,
        *,
        lease_name: str,
        lease_duration: int = 2,
        extra: tuple[str, ...] = (),
        log_dir: Path | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.lease_name = lease_name
        self.lease_duration = lease_duration
        self.extra = extra
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="ironlb-controller-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0
        self.log_path = self.log_dir / "controller-0.log"

    def start(self) -> Controller:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        (self.port,) = local_cluster.free_ports(1)
        self.starts += 1
        self.log_path = self.log_dir / f"controller-{self.starts}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controller",
                    f"--kubeconfig={self.kubeconfig}",
                    f"--metrics-port={self.port}",
                    f"--lease-name={self.lease_name}",
                    f"--lease-duration={self.lease_duration}",
                    *self.extra,
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def ready(self) -> bool:
        return self._get("/readyz")[0] == 200

    def wait_ready(self, timeout: float = 60.0) -> Controller:
        def probe() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"controller exited ({self.proc.returncode}):\n{self.tail()}")
            return self.ready()

        wait_for("the controller to be ready", probe, timeout=timeout)
        return self

    def metrics(self) -> dict[str, float]:
        """Every sample as `name{labels}` -> value (labels as printed)."""
        status, text = self._get("/metrics")
        assert status == 200, f"metrics not served ({status})"
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def writes(self, *, leases: bool = True) -> int:
        """Write requests sent so far (optionally without the Lease's renewals)."""
        total = 0.0
        for name, value in self.metrics().items():
            if name.startswith("ironlb_controller_api_writes_total") and (
                leases or 'resource="leases"' not in name
            ):
                total += value
        return int(total)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def discard_logs(self) -> None:
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_lines()[-n:])


def module_controller(
    kubeconfig: str, request: pytest.FixtureRequest, *extra: str
) -> Iterator[Controller]:
    """Body of a module-scoped fixture: one controller process for the whole test module."""
    lease = "ironlb-test-" + request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")[:40]
    proc = Controller(kubeconfig, lease_name=lease, extra=extra).start().wait_ready()
    try:
        yield proc
    finally:
        proc.stop()
        proc.discard_logs()


# --- objects ------------------------------------------------------------------------------------


class Cluster:
    """Thin wrappers over the official client, for readable tests; remembers what to clean up."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.pools: list[str] = []
        self.services: list[tuple[str, str]] = []

    # pools

    def pool(self, name: str, addresses: list[str], **spec: Any) -> str:
        body = {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": name, "namespace": METALLB_NAMESPACE},
            "spec": {"addresses": addresses, **spec},
        }
        self.custom.create_namespaced_custom_object(
            "metallb.io", "v1beta1", METALLB_NAMESPACE, "ipaddresspools", body
        )
        self.pools.append(name)
        return name

    def get_pool(self, name: str) -> dict[str, Any]:
        pool: dict[str, Any] = self.custom.get_namespaced_custom_object(
            "metallb.io", "v1beta1", METALLB_NAMESPACE, "ipaddresspools", name
        )
        return pool

    def pool_counts(self, name: str) -> dict[str, int]:
        """The address counters of a pool's status (other status fields left out)."""
        status = self.get_pool(name).get("status") or {}
        keys = ("assignedIPv4", "assignedIPv6", "availableIPv4", "availableIPv6")
        return {k: status[k] for k in keys if k in status}

    def patch_pool(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            "metallb.io", "v1beta1", METALLB_NAMESPACE, "ipaddresspools", name, {"spec": spec}
        )

    def delete_pool(self, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                "metallb.io", "v1beta1", METALLB_NAMESPACE, "ipaddresspools", name
            )
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise

    # services

    def service(
        self,
        namespace: str,
        name: str,
        *,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        ports: list[tuple[str, int]] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        body = {
            "metadata": {
                "name": name,
                "annotations": annotations or {},
                "labels": labels or {},
            },
            "spec": {
                "type": "LoadBalancer",
                # A nodePort each would exhaust the node-port range long before a big pool.
                "allocateLoadBalancerNodePorts": False,
                "ports": [
                    {"name": f"p{i}", "protocol": proto, "port": port}
                    for i, (proto, port) in enumerate(ports or [("TCP", 80)])
                ],
                **spec,
            },
        }
        if body["spec"]["type"] != "LoadBalancer":
            del body["spec"]["allocateLoadBalancerNodePorts"]
        created = self.core.create_namespaced_service(namespace, body)
        self.services.append((namespace, name))
        return dict(created.to_dict())

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The Service as raw JSON (camelCase keys), as the controller sees it."""
        raw = self.core.read_namespaced_service(name, namespace, _preload_content=False)
        obj: dict[str, Any] = json.loads(raw.data)
        return obj

    def patch(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.core.patch_namespaced_service(name, namespace, body)

    def patch_status(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.core.patch_namespaced_service_status(name, namespace, body)

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_service(name, namespace)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise

    def ips(self, namespace: str, name: str) -> list[str]:
        status = self.get(namespace, name).get("status") or {}
        return [
            e["ip"] for e in (status.get("loadBalancer") or {}).get("ingress") or [] if "ip" in e
        ]

    def pool_of(self, namespace: str, name: str) -> str | None:
        meta = self.get(namespace, name)["metadata"]
        value = (meta.get("annotations") or {}).get(POOL_ANNOTATION)
        return None if value is None else str(value)

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        raw = self.core.list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind=Service",
            _preload_content=False,
        )
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        return sorted(items, key=lambda e: (e.get("lastTimestamp") or "", e["metadata"]["name"]))

    def reasons(self, namespace: str, name: str) -> list[str]:
        return [e["reason"] for e in self.events(namespace, name)]

    def event_with(
        self, namespace: str, name: str, reason: str, text: str = ""
    ) -> dict[str, Any] | None:
        for e in self.events(namespace, name):
            if e["reason"] == reason and text in e.get("message", ""):
                return e
        return None

    def wait_ips(
        self, namespace: str, name: str, count: int = 1, timeout: float = WAIT_S
    ) -> list[str]:
        return wait_for(
            f"{namespace}/{name} to get {count} address(es)",
            lambda: ips if len(ips := self.ips(namespace, name)) == count else None,
            timeout=timeout,
        )

    def wait_event(
        self, namespace: str, name: str, reason: str, text: str = "", timeout: float = WAIT_S
    ) -> dict[str, Any]:
        return wait_for(
            f"a {reason} event on {namespace}/{name} containing {text!r}",
            lambda: self.event_with(namespace, name, reason, text),
            timeout=timeout,
        )

    def cleanup(self) -> None:
        for namespace, name in reversed(self.services):
            self.delete(namespace, name)
        for name in reversed(self.pools):
            self.delete_pool(name)
        self.services.clear()
        self.pools.clear()


def per_test_cluster(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    """Body of a per-test fixture: Services are deleted before pools, so nothing is left
    holding an address."""
    cluster = Cluster(kube_api)
    try:
        yield cluster
    finally:
        cluster.cleanup()
