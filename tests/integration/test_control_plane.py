"""The control plane the harness starts is a real one: schemas, watches and RBAC all bite."""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest

pytestmark = pytest.mark.integration

GROUP = "probe.ironlb.test"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10}
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def widget_crd(kube_api: kubernetes.client.ApiClient) -> None:
    ext = kubernetes.client.ApiextensionsV1Api(kube_api)
    try:
        ext.create_custom_resource_definition(CRD)
    except kubernetes.client.ApiException as e:
        if e.status != 409:
            raise
    for _ in range(100):
        crd = ext.read_custom_resource_definition(CRD["metadata"]["name"])
        conditions = crd.status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.1)
    pytest.fail("the Widget CRD never became Established")


def widget(name: str, size: object) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }


def test_custom_resource_is_created_and_watched(
    kube_api: kubernetes.client.ApiClient, widget_crd: None, test_namespace: str
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    # Watching from the list's resourceVersion replays every change made after it, so the
    # test does not depend on when the watch connection is established.
    listed = custom.list_namespaced_custom_object(GROUP, "v1", test_namespace, "widgets")
    since = listed["metadata"]["resourceVersion"]
    custom.create_namespaced_custom_object(GROUP, "v1", test_namespace, "widgets", widget("w1", 3))
    got = custom.get_namespaced_custom_object(GROUP, "v1", test_namespace, "widgets", "w1")
    assert got["spec"] == {"size": 3}
    custom.delete_namespaced_custom_object(GROUP, "v1", test_namespace, "widgets", "w1")
    seen: list[tuple[str, str]] = []
    w = kubernetes.watch.Watch()
    for event in w.stream(
        custom.list_namespaced_custom_object,
        GROUP,
        "v1",
        test_namespace,
        "widgets",
        resource_version=since,
        timeout_seconds=20,
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "DELETED":
            w.stop()
    assert seen == [("ADDED", "w1"), ("DELETED", "w1")]


@pytest.mark.parametrize(
    ("size", "field"), [(0, "spec.size"), (11, "spec.size"), ("big", "spec.size")]
)
def test_invalid_custom_resource_gets_422(
    kube_api: kubernetes.client.ApiClient,
    widget_crd: None,
    test_namespace: str,
    size: object,
    field: str,
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with pytest.raises(kubernetes.client.ApiException) as caught:
        custom.create_namespaced_custom_object(
            GROUP, "v1", test_namespace, "widgets", widget("bad", size)
        )
    assert caught.value.status == 422
    assert field in str(caught.value.body)


def test_unprivileged_service_account_is_forbidden(
    kube_api: kubernetes.client.ApiClient, test_namespace: str
) -> None:
    config = kube_api.configuration
    impersonating = kubernetes.client.ApiClient(config)
    impersonating.set_default_header(
        "Impersonate-User", f"system:serviceaccount:{test_namespace}:nobody"
    )
    try:
        core = kubernetes.client.CoreV1Api(impersonating)
        with pytest.raises(kubernetes.client.ApiException) as caught:
            core.list_namespaced_secret(test_namespace)
        assert caught.value.status == 403
        assert "cannot list resource" in str(caught.value.body)
        # The same request as the admin succeeds, so the 403 is RBAC, not a broken request.
        kubernetes.client.CoreV1Api(kube_api).list_namespaced_secret(test_namespace)
    finally:
        impersonating.close()


def test_services_get_dual_stack_cluster_ips(
    kube_api: kubernetes.client.ApiClient, test_namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube_api)
    svc = core.create_namespaced_service(
        test_namespace,
        {
            "metadata": {"name": "dual"},
            "spec": {
                "type": "LoadBalancer",
                "ipFamilyPolicy": "RequireDualStack",
                "ports": [{"port": 80, "protocol": "TCP"}],
            },
        },
    )
    assert len(svc.spec.cluster_ips) == 2
    assert {":" in ip for ip in svc.spec.cluster_ips} == {True, False}
