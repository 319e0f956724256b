"""Shared fixtures: a real kube-apiserver + etcd for the integration and e2e tiers.

The control plane is started once per test session, lazily (unit tests never start it), from the
binaries that `hack/cluster install` cached; `IRONLB_KUBECONFIG` attaches to a running one instead.
Our CRDs are applied before the first test that asks for the cluster, and every test that asks for
a namespace gets a fresh one. A skipped test fails the run: a tier that cannot run must say so.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from hack import cluster as local_cluster
from hack import logtails

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT / "crds"
METALLB_NAMESPACE = "metallb-system"
NAMESPACE_EMPTY_TIMEOUT_S = 60.0

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and exitstatus == 0:
        reporter.write_line(f"FAILED: {skipped} test(s) skipped; a skipped test is not a pass")
        session.exitstatus = 1


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A lab test that fails carries the tails of the logs written while it ran (speakers,
    ExaBGP, FRR, pod agents, kube-proxy, kubelet, Pods): the reason is usually there."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed or call.when == "teardown":
        return
    funcargs = getattr(item, "funcargs", {})
    lab = funcargs.get("lab")
    if lab is None:
        return
    from hack import lab as network_lab

    roots = [lab.directory, network_lab.frr_directory(lab.directory)]
    if isinstance(funcargs.get("tmp_path"), Path):
        roots.append(funcargs["tmp_path"])
    since = item.stash.get(_STARTED, 0.0)
    for title, text in logtails.sections(roots, since):
        report.sections.append((title, text))


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Path]:
    """Path of a kubeconfig for a real control plane with our CRDs applied."""
    attached = os.environ.get("IRONLB_KUBECONFIG")
    if attached:
        kubeconfig = Path(attached)
        _prepare(kubeconfig)
        yield kubeconfig
        return
    missing = local_cluster.missing_binaries()
    if missing:
        pytest.fail(
            f"cannot start the control plane: {', '.join(missing)} missing; "
            "run hack/setup (or set KUBEBUILDER_ASSETS)",
            pytrace=False,
        )
    cluster = local_cluster.temporary_cluster()
    try:
        cluster.up()
    except local_cluster.ClusterError as e:
        pytest.fail(f"cannot start the control plane: {e}", pytrace=False)
    try:
        _prepare(cluster.kubeconfig)
        yield cluster.kubeconfig
    finally:
        cluster.down()


def _run_kubectl(
    kubeconfig: Path, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(local_cluster.binary("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


def _prepare(kubeconfig: Path) -> None:
    manifests = sorted(CRDS.glob("*.yaml"))
    if manifests:
        _run_kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
        _run_kubectl(
            kubeconfig,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            *[f"-f={m}" for m in manifests],
        )
    exists = _run_kubectl(kubeconfig, "get", "namespace", METALLB_NAMESPACE, check=False)
    if exists.returncode != 0:
        _run_kubectl(kubeconfig, "create", "namespace", METALLB_NAMESPACE)


@pytest.fixture(scope="session")
def kubeconfig(control_plane: Path) -> str:
    return str(control_plane)


@pytest.fixture(scope="session")
def kube_api(control_plane: Path) -> Iterator[kubernetes.client.ApiClient]:
    api = kubernetes.config.new_client_from_config(config_file=str(control_plane))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def kubectl(control_plane: Path) -> Kubectl:
    def run(
        *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return _run_kubectl(control_plane, *args, input=input, check=check)

    return run


@pytest.fixture
def test_namespace(
    request: pytest.FixtureRequest, kube_api: kubernetes.client.ApiClient
) -> Iterator[str]:
    """A fresh namespace named after the test; deleted afterwards."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]
    name = f"t-{digest}-{int(time.monotonic() * 1000) % 100000}"
    core = kubernetes.client.CoreV1Api(kube_api)
    core.create_namespace({"metadata": {"name": name, "labels": {"ironlb-test": "true"}}})
    try:
        yield name
    finally:
        # kube-controller-manager's namespace controller deletes what the namespace holds. Its
        # Services go first, and a later test must not see them still holding addresses, so
        # the fixture waits for those (not for the whole namespace: that takes seconds).
        try:
            core.delete_namespace(name)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise
        deadline = time.monotonic() + NAMESPACE_EMPTY_TIMEOUT_S
        while core.list_namespaced_service(name).items:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"namespace {name}: Services still there {NAMESPACE_EMPTY_TIMEOUT_S:.0f} s "
                    "after its deletion (is kube-controller-manager running?)"
                )
            time.sleep(0.05)


def api_object(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    """A tiny metallb.io object, for tests that need one."""
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "namespace": METALLB_NAMESPACE},
        "spec": spec,
    }
