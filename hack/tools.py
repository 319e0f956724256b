"""Developer tools that no Debian or PyPI package provides at the version we need: helm.
Also: run the components as the chart's ServiceAccounts outside a cluster (`chart_identities`).

helm is built from its Go module with `go install` (the Go module proxy is the one source every
machine reaches) and cached beside the control-plane binaries, outside the repository; the
version is stamped in, so `helm version` tells the truth and a cached binary of another version
is rebuilt. `hack/setup` calls `install`; tests call `helm()` and fail with the command to run
when it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hack import cluster

HELM_VERSION = "v3.21.4"
HELM_MODULE = "helm.sh/helm/v3"
# The Kubernetes version helm assumes without a cluster (`helm template`, `helm lint`): helm's
# Makefile stamps the minor of the client-go it is built with (v0.36 for helm v3.21.4); without
# the stamp it would claim 1.20 and refuse charts that require a newer Kubernetes.
HELM_KUBE_VERSION = ("1", "36")
TOOLS = cluster.CACHE / "tools"


def log(message: str) -> None:
    print(f"tools: {message}", file=sys.stderr, flush=True)


class ToolError(Exception):
    """A tool is missing or could not be built; the message says what to do."""


def helm() -> Path:
    """The cached helm binary of HELM_VERSION."""
    path = TOOLS / "helm"
    if not os.access(path, os.X_OK):
        raise ToolError(f"helm is not installed in {TOOLS}: run hack/setup (or hack/helm install)")
    return path


def _ldflags(version: str) -> str:
    major, minor = HELM_KUBE_VERSION
    stamps = [f"-X {HELM_MODULE}/internal/version.version={version}"]
    for package in ("pkg/lint/rules", "pkg/chartutil"):
        stamps += [
            f"-X {HELM_MODULE}/{package}.k8sVersionMajor={major}",
            f"-X {HELM_MODULE}/{package}.k8sVersionMinor={minor}",
        ]
    return " ".join(["-s", "-w", *stamps])


def installed_helm_version(path: Path) -> str | None:
    try:
        result = subprocess.run(
            [str(path), "version", "--template", "{{.Version}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def install_helm(version: str = HELM_VERSION) -> Path:
    """`go install helm.sh/helm/v3/cmd/helm@<version>` into the cache, unless it is there."""
    path, stamp = TOOLS / "helm", TOOLS / "helm.ldflags"
    flags = _ldflags(version)
    stamped = stamp.read_text() if stamp.exists() else ""
    if installed_helm_version(path) == version and stamped == flags:
        return path
    go = shutil.which("go") or next(
        (g for g in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.access(g, os.X_OK)), None
    )
    if go is None:
        raise ToolError("the Go toolchain is needed to build helm; install Go first")
    TOOLS.mkdir(parents=True, exist_ok=True)
    log(f"building helm {version} from Go modules (a few minutes the first time)")
    env = dict(os.environ, GOBIN=str(TOOLS), CGO_ENABLED="0")
    result = subprocess.run(
        [
            go,
            "install",
            "-trimpath",
            f"-ldflags={flags}",
            f"{HELM_MODULE}/cmd/helm@{version}",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise ToolError(f"go install helm {version} failed: {tail[0]}")
    found = installed_helm_version(path)
    if found != version:
        raise ToolError(f"built helm reports version {found!r}, expected {version}")
    stamp.write_text(flags)
    return path


CHART = Path(__file__).resolve().parent.parent / "charts" / "ironlb"
COMPONENTS = ("controller", "speaker")


def _kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        [str(cluster.binary("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise ToolError(f"kubectl {' '.join(args[:2])} failed: {result.stderr.strip()}")
    return result.stdout


def chart_identities(
    admin_kubeconfig: Path,
    directory: Path,
    *,
    namespace: str = "metallb-system",
    release: str = "ironlb",
    install_rbac: bool = True,
    token_seconds: int = 7200,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Kubeconfigs that authenticate as the chart's ServiceAccounts, one per component.

    With `install_rbac`, the chart's ServiceAccounts, roles and bindings (nothing else) are
    applied first. Each kubeconfig is the admin's with its user replaced by a token that the
    apiserver issues for the ServiceAccount (TokenRequest), so a process using it is refused
    exactly what a Pod of the chart would be refused. Its server is the admin's; rewrite it for
    processes that reach the apiserver by another address. `values`: the chart's values that
    change its RBAC (`speaker.takeOverFrom`), as a values file would give them."""
    if install_rbac:
        directory.mkdir(parents=True, exist_ok=True)
        values_file = directory / "values.json"
        values_file.write_text(json.dumps(dict(values or {})))
        rendered = subprocess.run(
            [
                str(helm()),
                "template",
                release,
                str(CHART),
                "--namespace",
                namespace,
                "--show-only",
                "templates/serviceaccounts.yaml",
                "--show-only",
                "templates/rbac.yaml",
                "--values",
                str(values_file),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if rendered.returncode != 0:
            raise ToolError(f"helm template failed: {rendered.stderr.strip()}")
        _kubectl(admin_kubeconfig, "apply", "-f", "-", input=rendered.stdout)
    config = _yaml_or_json(admin_kubeconfig)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for component in COMPONENTS:
        token = _kubectl(
            admin_kubeconfig,
            "create",
            "token",
            f"{release}-{component}",
            "--namespace",
            namespace,
            f"--duration={token_seconds}s",
        ).strip()
        for user in config.get("users") or []:
            user["user"] = {"token": token}
        path = directory / f"kubeconfig-{component}"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        paths[component] = path
    return paths


def _yaml_or_json(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise ToolError(f"{path} is not a kubeconfig")
    return loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/helm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help=f"build helm {HELM_VERSION} into {TOOLS} (cached)")
    sub.add_parser("path", help="print the cached helm's path")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            log(f"helm: {install_helm()}")
        else:
            print(helm())
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
