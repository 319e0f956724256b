"""Restart safety and leader election: state comes back from Service status, a settled cluster
costs no write, and two replicas never both allocate."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import kubernetes
import pytest

from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


@pytest.fixture
def lease(test_namespace: str) -> str:
    return f"ironlb-{test_namespace}"


@pytest.fixture
def replicas(kubeconfig: str, lease: str) -> Iterator[list[Controller]]:
    """Controllers of one test, all stopped at the end; index 0 is started here and holds the
    Lease. Ready alone does not say so: a standby is ready too (`operator.ready`), and one told
    to stop before it acquired the Lease never created it (r22: a 404 reading it)."""
    procs = [Controller(kubeconfig, lease_name=lease, lease_duration=3)]
    procs[0].start().wait_ready()
    support.wait_for(
        "the first replica to hold the Lease",
        lambda: any("acquired the leader lease" in line for line in procs[0].log_lines()),
    )
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()
            p.discard_logs()


def versions(k8s: Cluster, namespace: str) -> dict[str, str]:
    items = k8s.core.list_namespaced_service(namespace).items
    return {s.metadata.name: s.metadata.resource_version for s in items}


def restart(proc: Controller) -> Controller:
    proc.stop()
    return proc.start().wait_ready()


def test_restart_of_a_settled_cluster_keeps_every_address_and_writes_nothing(
    k8s: Cluster, test_namespace: str, replicas: list[Controller]
) -> None:
    b = support.block()
    pool = k8s.pool(f"{test_namespace}-p", [support.v4_block(b), support.v6_block(b)])
    k8s.service(test_namespace, "shared-a", annotations={"metallb.io/allow-shared-ip": "k"})
    k8s.service(
        test_namespace,
        "shared-b",
        annotations={"metallb.io/allow-shared-ip": "k"},
        ports=[("TCP", 81)],
    )
    k8s.service(test_namespace, "dual", ipFamilyPolicy="RequireDualStack")
    for i in range(5):
        k8s.service(test_namespace, f"s{i}")
    names = ["shared-a", "shared-b", "dual", *(f"s{i}" for i in range(5))]
    before = {n: k8s.wait_ips(test_namespace, n, 2 if n == "dual" else 1) for n in names}
    settled = {"assignedIPv4": 7, "assignedIPv6": 1, "availableIPv4": 249, "availableIPv6": 255}
    support.wait_for("pool status", lambda: k8s.pool_counts(pool) == settled)
    # The configuration check (controller.config_reporting) also settles: its Valid condition.
    support.wait_for(
        "the pool's Valid condition",
        lambda: any(
            c.get("type") == "Valid"
            for c in (k8s.get_pool(pool).get("status") or {}).get("conditions") or []
        ),
    )
    pool_version = k8s.get_pool(pool)["metadata"]["resourceVersion"]
    rvs = versions(k8s, test_namespace)
    proc = restart(replicas[0])
    assert proc.writes(leases=False) == 0
    k8s.service(test_namespace, "probe", type="ClusterIP")
    support.stays("no writes", lambda: proc.writes(leases=False) == 0)
    assert {n: k8s.ips(test_namespace, n) for n in names} == before
    rvs["probe"] = versions(k8s, test_namespace)["probe"]
    assert versions(k8s, test_namespace) == rvs
    assert k8s.get_pool(pool)["metadata"]["resourceVersion"] == pool_version


def test_restart_with_a_pending_service_posts_no_new_event(
    k8s: Cluster, test_namespace: str, replicas: list[Controller]
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/32"])
    k8s.service(test_namespace, "holder")
    k8s.wait_ips(test_namespace, "holder")
    k8s.service(test_namespace, "waiting")
    k8s.wait_event(test_namespace, "waiting", "AllocationFailed")
    events = len(k8s.events(test_namespace, "waiting"))
    proc = restart(replicas[0])
    k8s.service(test_namespace, "probe", type="ClusterIP")
    support.stays("no writes", lambda: proc.writes(leases=False) == 0)
    assert len(k8s.events(test_namespace, "waiting")) == events


def test_held_addresses_are_reclaimed_before_new_services_are_allocated(
    k8s: Cluster, test_namespace: str, replicas: list[Controller]
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/31"])
    k8s.service(test_namespace, "zz-held")
    assert k8s.wait_ips(test_namespace, "zz-held") == [support.v4(b, 0)]
    replicas[0].stop()
    # Created while no controller runs, and sorted first: without holders-first it would get .0.
    k8s.service(test_namespace, "aa-new")
    replicas[0].start().wait_ready()
    assert k8s.wait_ips(test_namespace, "aa-new") == [support.v4(b, 1)]
    assert k8s.ips(test_namespace, "zz-held") == [support.v4(b, 0)]


def test_changes_made_while_down_are_caught_up_on_start(
    k8s: Cluster, test_namespace: str, replicas: list[Controller]
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/32"])
    k8s.service(test_namespace, "old")
    k8s.wait_ips(test_namespace, "old")
    replicas[0].kill()
    k8s.delete(test_namespace, "old")
    k8s.service(test_namespace, "new")
    replicas[0].start().wait_ready()
    assert k8s.wait_ips(test_namespace, "new") == [support.v4(b, 0)]


def test_standby_replica_writes_nothing_until_the_leader_dies(
    kubeconfig: str, k8s: Cluster, test_namespace: str, lease: str, replicas: list[Controller]
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    leader = replicas[0]
    standby = Controller(kubeconfig, lease_name=lease, lease_duration=3).start()
    replicas.append(standby)
    support.wait_for(
        "the standby to wait for the lease",
        lambda: any("waiting for the leader lease" in line for line in standby.log_lines()),
    )
    for i in range(3):
        k8s.service(test_namespace, f"s{i}")
    seen = {k8s.wait_ips(test_namespace, f"s{i}")[0] for i in range(3)}
    assert len(seen) == 3
    # A standby is ready (it serves the webhook, and a rollout's new Pod must become Ready while
    # the old one still leads) and writes nothing.
    assert standby.ready()
    assert standby.writes() == 0
    leader.kill()
    support.wait_for(
        "the standby to take the lease",
        lambda: any("acquired the leader lease" in line for line in standby.log_lines()),
        timeout=30,
    )
    standby.wait_ready(timeout=30)
    k8s.service(test_namespace, "after")
    (ip,) = k8s.wait_ips(test_namespace, "after")
    assert ip not in seen
    assert {k8s.ips(test_namespace, f"s{i}")[0] for i in range(3)} == seen


def test_a_replica_that_loses_the_lease_stops(
    k8s: Cluster, lease: str, replicas: list[Controller]
) -> None:
    proc = replicas[0]
    coordination = kubernetes.client.CoordinationV1Api(k8s.core.api_client)
    coordination.patch_namespaced_lease(
        lease, support.METALLB_NAMESPACE, {"spec": {"holderIdentity": "someone-else"}}
    )
    assert proc.proc is not None
    code = proc.proc.wait(30)
    assert code == 3
    assert any("lost the leader lease" in line for line in proc.log_lines())


def test_graceful_stop_releases_the_lease(
    k8s: Cluster, lease: str, replicas: list[Controller]
) -> None:
    proc = replicas[0]
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.proc.wait(30) == 0
    coordination = kubernetes.client.CoordinationV1Api(k8s.core.api_client)
    held = coordination.read_namespaced_lease(lease, support.METALLB_NAMESPACE)
    assert not held.spec.holder_identity
