"""Helpers for the chart and RBAC tests: helm, kubectl and a control plane of their own.

These tests install the chart for real, and the chart registers a ValidatingWebhookConfiguration
that sends every metallb.io write to a Service no process backs here. On the session's shared
control plane that would break every other test that writes a pool, so each chart module starts
its own (a few seconds) and stops it at the end. Nothing in them writes a metallb.io
configuration object while the chart's webhook is registered: the apiserver would try to dial the
webhook Service's cluster IP, an address that is not on this machine.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import cluster as local_cluster
from hack import tools

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ironlb"
CRDS = ROOT / "crds"
NAMESPACE = "metallb-system"
# The release is named after the chart, so every object is `ironlb-<component>`.
RELEASE = "ironlb"
TIMEOUT_S = 120


def helm_binary() -> Path:
    try:
        return tools.helm()
    except tools.ToolError as e:
        pytest.fail(str(e), pytrace=False)


@contextlib.contextmanager
def helm_home() -> Iterator[dict[str, str]]:
    """An environment whose helm config, cache and data live in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="ironlb-helm-") as home:
        yield dict(
            os.environ,
            HELM_CACHE_HOME=f"{home}/cache",
            HELM_CONFIG_HOME=f"{home}/config",
            HELM_DATA_HOME=f"{home}/data",
        )


def run(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[:3])} ... failed ({result.returncode}):\n"
            f"{result.stderr.strip()}\n{result.stdout.strip()[-2000:]}"
        )
    return result


class Tools:
    """helm and kubectl against one kubeconfig (or none, for the offline commands)."""

    def __init__(self, kubeconfig: Path | None, env: dict[str, str]) -> None:
        self.kubeconfig = kubeconfig
        self.env = env
        self._helm = str(helm_binary())
        self._kubectl = str(local_cluster.binary("kubectl"))

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        config = [f"--kubeconfig={self.kubeconfig}"] if self.kubeconfig else []
        return run([self._helm, *config, *args], env=self.env, check=check)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        config = kubeconfig or self.kubeconfig
        assert config is not None, "kubectl needs a cluster"
        return run([self._kubectl, f"--kubeconfig={config}", *args], input=input, check=check)

    def render(self, *args: str) -> list[dict[str, Any]]:
        """`helm template` of the chart as the list of objects it renders."""
        out = self.helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    def get_json(self, *args: str, kubeconfig: Path | None = None) -> dict[str, Any]:
        out = self.kubectl("get", "-o", "json", *args, kubeconfig=kubeconfig)
        obj: dict[str, Any] = json.loads(out.stdout)
        return obj


@contextlib.contextmanager
def own_control_plane() -> Iterator[Path]:
    """A kube-apiserver + etcd of this module's own, without CRDs; its kubeconfig."""
    missing = local_cluster.missing_binaries()
    if missing:
        pytest.fail(
            f"cannot start the control plane: {', '.join(missing)} missing; run hack/setup",
            pytrace=False,
        )
    cluster = local_cluster.temporary_cluster()
    try:
        cluster.up()
    except local_cluster.ClusterError as e:
        pytest.fail(f"cannot start the control plane: {e}", pytrace=False)
    try:
        yield cluster.kubeconfig
    finally:
        cluster.down()


def secret_data(t: Tools, name: str, namespace: str = NAMESPACE) -> dict[str, bytes]:
    secret = t.get_json("secret", name, "-n", namespace)
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def object_ref(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, name, namespace or "") of a rendered or listed object."""
    meta = obj["metadata"]
    return (obj["kind"], meta["name"], meta.get("namespace", ""))


def kubectl_ref(ref: tuple[str, str, str]) -> list[str]:
    """kubectl arguments naming one object, its API group spelt out (kinds like Role repeat)."""
    kind, name, namespace = ref
    groups = {
        "ClusterRole": "clusterroles.rbac.authorization.k8s.io",
        "ClusterRoleBinding": "clusterrolebindings.rbac.authorization.k8s.io",
        "Role": "roles.rbac.authorization.k8s.io",
        "RoleBinding": "rolebindings.rbac.authorization.k8s.io",
        "ValidatingWebhookConfiguration": (
            "validatingwebhookconfigurations.admissionregistration.k8s.io"
        ),
        "PodDisruptionBudget": "poddisruptionbudgets.policy",
        "Deployment": "deployments.apps",
        "DaemonSet": "daemonsets.apps",
        "CustomResourceDefinition": "customresourcedefinitions.apiextensions.k8s.io",
    }
    args = [f"{groups.get(kind, kind.lower())}/{name}"]
    if namespace:
        args += ["-n", namespace]
    return args
