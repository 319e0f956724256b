"""The controller against a real apiserver: what an allocation writes, and what it must not.

One controller process serves the whole module; each test has its own namespace and pools.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from hack import pki
from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def controller(kubeconfig: str, request: pytest.FixtureRequest) -> Iterator[Controller]:
    yield from support.module_controller(kubeconfig, request)


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


def test_service_gets_the_lowest_address_status_annotation_and_event(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "web")
    assert k8s.wait_ips(test_namespace, "web") == [support.v4(b, 0)]
    assert k8s.pool_of(test_namespace, "web") == f"{test_namespace}-p"
    event = k8s.wait_event(test_namespace, "web", "IPAllocated", support.v4(b, 0))
    assert event["type"] == "Normal"
    assert event["source"]["component"] == "metallb-controller"
    assert event["reportingComponent"] == "metallb-controller"
    assert event["involvedObject"]["uid"] == k8s.get(test_namespace, "web")["metadata"]["uid"]


def test_no_kopf_bookkeeping_and_no_finalizers_on_services(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "a")
    k8s.wait_ips(test_namespace, "a")
    # Give kopf changes to react to: an update, a label, a type change and back.
    k8s.patch(test_namespace, "a", {"metadata": {"labels": {"x": "y"}}})
    k8s.patch(test_namespace, "a", {"spec": {"type": "ClusterIP"}})
    support.wait_for("status cleared", lambda: k8s.ips(test_namespace, "a") == [])
    k8s.patch(
        test_namespace,
        "a",
        {"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": False}},
    )
    k8s.wait_ips(test_namespace, "a")
    meta = k8s.get(test_namespace, "a")["metadata"]
    assert not meta.get("finalizers")
    kopf_keys = [k for k in meta.get("annotations", {}) if "kopf" in k]
    assert kopf_keys == []
    assert set(meta.get("annotations", {})) == {support.POOL_ANNOTATION}
    pool = k8s.get_pool(f"{test_namespace}-p")["metadata"]
    assert not pool.get("finalizers")
    assert not [k for k in pool.get("annotations", {}) if "kopf" in k]


def test_status_is_written_through_the_status_subresource(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "s")
    k8s.wait_ips(test_namespace, "s")
    fields = k8s.get(test_namespace, "s")["metadata"]["managedFields"]
    ours = [f for f in fields if f["manager"] == "ironlb-controller"]
    assert ours, fields
    # Status and annotation travel together through services/status; the Service itself is
    # never updated by the controller.
    assert all(f.get("subresource") == "status" for f in ours)
    written = json.dumps([f["fieldsV1"] for f in ours])
    assert "f:loadBalancer" in written
    assert support.POOL_ANNOTATION in written


def test_clusterip_service_is_never_touched(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "internal", type="ClusterIP")
    k8s.service(test_namespace, "probe")
    k8s.wait_ips(test_namespace, "probe")  # the controller has caught up past "internal"
    svc = k8s.get(test_namespace, "internal")
    assert svc.get("status", {}).get("loadBalancer", {}) == {}
    assert support.POOL_ANNOTATION not in (svc["metadata"].get("annotations") or {})
    assert k8s.events(test_namespace, "internal") == []


def test_type_change_away_from_loadbalancer_frees_the_address_for_a_pending_service(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 7)}/32"])
    k8s.service(test_namespace, "first")
    assert k8s.wait_ips(test_namespace, "first") == [support.v4(b, 7)]
    k8s.service(test_namespace, "second")
    k8s.wait_event(test_namespace, "second", "AllocationFailed", "no available IPs")
    k8s.patch(test_namespace, "first", {"spec": {"type": "ClusterIP"}})
    assert k8s.wait_ips(test_namespace, "second") == [support.v4(b, 7)]
    assert k8s.ips(test_namespace, "first") == []
    assert k8s.pool_of(test_namespace, "first") is None


def test_deleting_a_service_frees_its_address_for_a_pending_one(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 9)}/32"])
    k8s.service(test_namespace, "first")
    k8s.wait_ips(test_namespace, "first")
    k8s.service(test_namespace, "second")
    k8s.wait_event(test_namespace, "second", "AllocationFailed", "every candidate pool is full")
    assert k8s.ips(test_namespace, "second") == []
    k8s.delete(test_namespace, "first")
    assert k8s.wait_ips(test_namespace, "second") == [support.v4(b, 9)]


def test_manual_status_edit_is_put_back(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "s")
    (ip,) = k8s.wait_ips(test_namespace, "s")
    k8s.patch_status(test_namespace, "s", {"status": {"loadBalancer": {"ingress": None}}})
    assert k8s.wait_ips(test_namespace, "s") == [ip]


def test_status_address_outside_every_pool_is_replaced(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "s")
    k8s.wait_ips(test_namespace, "s")
    k8s.patch_status(
        test_namespace, "s", {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.77"}]}}}
    )
    support.wait_for(
        "a pool address again", lambda: k8s.ips(test_namespace, "s") == [support.v4(b, 0)]
    )
    k8s.wait_event(test_namespace, "s", "ClearAssignment", "not allowed by config")


def test_pool_status_counts_and_manual_edits_are_reverted(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/30", f"{support.v6(b, 0)}/126"])
    k8s.service(test_namespace, "dual", ipFamilyPolicy="RequireDualStack")
    k8s.wait_ips(test_namespace, "dual", 2)
    want = {"assignedIPv4": 1, "assignedIPv6": 1, "availableIPv4": 3, "availableIPv6": 3}
    support.wait_for("pool status", lambda: k8s.pool_counts(name) == want)
    k8s.custom.patch_namespaced_custom_object_status(
        "metallb.io",
        "v1beta1",
        support.METALLB_NAMESPACE,
        "ipaddresspools",
        name,
        {
            "status": {
                "assignedIPv4": 99,
                "assignedIPv6": 99,
                "availableIPv4": 0,
                "availableIPv6": 0,
            }
        },
    )
    support.wait_for("pool status restored", lambda: k8s.pool_counts(name) == want)
    k8s.delete(test_namespace, "dual")
    free = {"assignedIPv4": 0, "assignedIPv6": 0, "availableIPv4": 4, "availableIPv6": 4}
    support.wait_for("pool status after delete", lambda: k8s.pool_counts(name) == free)


def test_metrics_per_pool_and_allocation_latency(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/29"])
    before = controller.metrics().get("ironlb_controller_allocation_latency_seconds_count", 0.0)
    k8s.service(test_namespace, "a")
    k8s.service(test_namespace, "b")
    k8s.wait_ips(test_namespace, "a")
    k8s.wait_ips(test_namespace, "b")
    label = f'{{pool="{name}"}}'

    def gauges() -> bool:
        m = controller.metrics()
        return (
            m.get(f"metallb_allocator_addresses_total{label}") == 8
            and m.get(f"metallb_allocator_addresses_in_use_total{label}") == 2
            and m.get(f"metallb_allocator_ipv4_addresses_in_use_total{label}") == 2
        )

    support.wait_for("per-pool gauges", gauges)
    after = controller.metrics()["ironlb_controller_allocation_latency_seconds_count"]
    assert after - before == 2
    k8s.cleanup()
    support.wait_for(
        "gauges of a deleted pool to disappear",
        lambda: f"metallb_allocator_addresses_total{label}" not in controller.metrics(),
    )


def test_logs_are_json_lines(controller: Controller, k8s: Cluster, test_namespace: str) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/32"])
    k8s.service(test_namespace, "a")
    k8s.service(test_namespace, "b")  # fails: one more log line with fields
    k8s.wait_event(test_namespace, "b", "AllocationFailed")
    lines = controller.log_lines()
    assert lines
    parsed = [json.loads(line) for line in lines]
    assert all({"ts", "level", "msg"} <= set(p) for p in parsed)
    assert any(p.get("service") == f"{test_namespace}/b" for p in parsed)


def test_events_are_not_repeated_for_an_unchanged_pending_service(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/32"])
    k8s.service(test_namespace, "holder")
    k8s.wait_ips(test_namespace, "holder")
    k8s.service(test_namespace, "waiting")
    k8s.wait_event(test_namespace, "waiting", "AllocationFailed")
    # Unrelated changes make the controller decide "waiting" again, and again it fails.
    for i in range(3):
        k8s.patch(test_namespace, "waiting", {"metadata": {"labels": {"round": str(i)}}})
        k8s.service(test_namespace, f"other{i}", type="ClusterIP")
    k8s.service(test_namespace, "probe", type="ClusterIP")
    support.stays(
        "a single AllocationFailed event",
        lambda: k8s.reasons(test_namespace, "waiting").count("AllocationFailed") == 1,
    )


def test_an_untrusted_apiserver_certificate_is_said_clearly_and_waited_out(
    kubeconfig: str, tmp_path: Path
) -> None:
    """A server certificate from another CA: the controller neither exits nor becomes ready;
    its log names the certificate, once, not at every retry."""
    config = json.loads(Path(kubeconfig).read_text())
    other, _, _ = pki.make_ca("not-the-cluster-ca")
    pki.write(tmp_path / "other-ca.crt", other.cert_pem)
    config["clusters"][0]["cluster"]["certificate-authority"] = str(tmp_path / "other-ca.crt")
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    controller = Controller(str(tmp_path / "kubeconfig"), lease_name="untrusted").start()
    try:
        support.wait_for("the failure logged", lambda: "CertificateInvalid" in controller.tail())
        support.stays(
            "alive and not ready",
            lambda: controller.alive() and not controller.ready(),
            duration=5.0,
        )
        said = [line for line in controller.log_lines() if "CertificateInvalid" in line]
        assert len(said) == 1 and "certificate verify failed" in said[0], said
    finally:
        controller.stop()
        controller.discard_logs()
