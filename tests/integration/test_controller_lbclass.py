"""`--lb-class`: the controller handles exactly the Services of its class. This module's
controller also serves the admission webhook (`--webhook-port`)."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator

import kubernetes
import pytest

from hack import cluster as local_cluster
from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration

CLASS = "example.com/ironlb"
(WEBHOOK_PORT,) = local_cluster.free_ports(1)


@pytest.fixture(scope="module")
def controller(kubeconfig: str, request: pytest.FixtureRequest) -> Iterator[Controller]:
    yield from support.module_controller(
        kubeconfig, request, f"--lb-class={CLASS}", f"--webhook-port={WEBHOOK_PORT}"
    )


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


def untouched(k8s: Cluster, namespace: str, name: str) -> bool:
    svc = k8s.get(namespace, name)
    return (
        (svc.get("status") or {}).get("loadBalancer", {}) == {}
        and support.POOL_ANNOTATION not in (svc["metadata"].get("annotations") or {})
        and k8s.events(namespace, name) == []
    )


def test_service_of_our_class_gets_an_address(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "ours", loadBalancerClass=CLASS)
    assert k8s.wait_ips(test_namespace, "ours") == [support.v4(b, 0)]


def test_services_without_or_with_another_class_are_left_alone(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "classless")
    k8s.service(test_namespace, "foreign", loadBalancerClass="example.com/other")
    k8s.service(test_namespace, "ours", loadBalancerClass=CLASS)
    k8s.wait_ips(test_namespace, "ours")  # caught up past the other two
    support.stays("the others untouched", lambda: untouched(k8s, test_namespace, "classless"))
    assert untouched(k8s, test_namespace, "foreign")


def test_foreign_status_is_not_cleared(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    """Another implementation's Service keeps the status it wrote, even an address of ours."""
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "foreign", loadBalancerClass="example.com/other")
    k8s.patch_status(
        test_namespace,
        "foreign",
        {"status": {"loadBalancer": {"ingress": [{"ip": support.v4(b, 0)}]}}},
    )
    k8s.service(test_namespace, "ours", loadBalancerClass=CLASS)
    k8s.wait_ips(test_namespace, "ours")
    support.stays(
        "the foreign status", lambda: k8s.ips(test_namespace, "foreign") == [support.v4(b, 0)]
    )


def test_webhook_port_serves_the_admission_webhook(controller: Controller) -> None:
    """The webhook's own behaviour is tested elsewhere; here: the flag serves it, over TLS."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # its CA is generated in the process
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "metallb.io", "version": "v1beta1", "kind": "IPAddressPool"},
            "operation": "CREATE",
            "namespace": "not-metallb-system",
            "name": "p",
            "object": {
                "apiVersion": "metallb.io/v1beta1",
                "kind": "IPAddressPool",
                "metadata": {"name": "p", "namespace": "not-metallb-system"},
                "spec": {"addresses": ["100.127.0.0/24"]},
            },
        },
    }
    request = urllib.request.Request(
        f"https://127.0.0.1:{WEBHOOK_PORT}/validate-metallb-io-v1beta1-ipaddresspool",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["response"]["uid"] == "u1"
    assert answer["response"]["allowed"] is False  # metallb.io objects live in one namespace
