"""`metallb.io/allow-shared-ip` and dual-stack, against a real apiserver."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes
import pytest

from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration

SHARE = "metallb.io/allow-shared-ip"
LEGACY_SHARE = "metallb.universe.tf/allow-shared-ip"
IPS = "metallb.io/loadBalancerIPs"


@pytest.fixture(scope="module")
def controller(kubeconfig: str, request: pytest.FixtureRequest) -> Iterator[Controller]:
    yield from support.module_controller(kubeconfig, request)


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


@pytest.fixture
def one_address(k8s: Cluster, test_namespace: str) -> str:
    b = support.block()
    k8s.pool(f"{test_namespace}-one", [f"{support.v4(b, 1)}/32"])
    return support.v4(b, 1)


# --- sharing -------------------------------------------------------------------------------------


def test_same_key_different_ports_share_one_address(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "http", annotations={SHARE: "k"}, ports=[("TCP", 80)])
    k8s.service(test_namespace, "dns", annotations={SHARE: "k"}, ports=[("UDP", 53)])
    assert k8s.wait_ips(test_namespace, "http") == [one_address]
    assert k8s.wait_ips(test_namespace, "dns") == [one_address]


def test_legacy_sharing_annotation(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "a", annotations={LEGACY_SHARE: "k"}, ports=[("TCP", 80)])
    k8s.service(test_namespace, "b", annotations={LEGACY_SHARE: "k"}, ports=[("TCP", 81)])
    assert k8s.wait_ips(test_namespace, "a") == [one_address]
    assert k8s.wait_ips(test_namespace, "b") == [one_address]


def test_same_key_colliding_ports_are_refused(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "first", annotations={SHARE: "k"}, ports=[("TCP", 80)])
    k8s.wait_ips(test_namespace, "first")
    k8s.service(
        test_namespace,
        "second",
        annotations={SHARE: "k", IPS: one_address},
        ports=[("TCP", 443), ("TCP", 80)],
    )
    event = k8s.wait_event(test_namespace, "second", "AllocationFailed", "port TCP/80")
    assert f"{test_namespace}/first" in event["message"]
    assert k8s.ips(test_namespace, "second") == []


def test_same_port_different_protocol_may_share(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "tcp", annotations={SHARE: "k"}, ports=[("TCP", 53)])
    k8s.service(test_namespace, "udp", annotations={SHARE: "k"}, ports=[("UDP", 53)])
    assert k8s.wait_ips(test_namespace, "tcp") == [one_address]
    assert k8s.wait_ips(test_namespace, "udp") == [one_address]


def test_different_keys_do_not_share(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "a", annotations={SHARE: "one"}, ports=[("TCP", 80)])
    k8s.wait_ips(test_namespace, "a")
    k8s.service(
        test_namespace, "b", annotations={SHARE: "two", IPS: one_address}, ports=[("TCP", 81)]
    )
    k8s.wait_event(test_namespace, "b", "AllocationFailed", "does not match existing sharing key")
    assert k8s.ips(test_namespace, "b") == []


def test_a_service_without_a_key_cannot_take_a_shared_address(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "a", annotations={SHARE: "k"}, ports=[("TCP", 80)])
    k8s.wait_ips(test_namespace, "a")
    k8s.service(test_namespace, "b", annotations={IPS: one_address}, ports=[("TCP", 81)])
    k8s.wait_event(test_namespace, "b", "AllocationFailed", "new service does not allow sharing")
    assert k8s.ips(test_namespace, "b") == []


def test_local_traffic_policy_shares_only_with_the_same_pods(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    local = {"externalTrafficPolicy": "Local", "selector": {"app": "x"}}
    k8s.service(test_namespace, "a", annotations={SHARE: "k"}, ports=[("TCP", 80)], **local)
    k8s.service(test_namespace, "b", annotations={SHARE: "k"}, ports=[("TCP", 81)], **local)
    assert k8s.wait_ips(test_namespace, "a") == [one_address]
    assert k8s.wait_ips(test_namespace, "b") == [one_address]
    k8s.service(
        test_namespace,
        "c",
        annotations={SHARE: "k", IPS: one_address},
        ports=[("TCP", 82)],
        externalTrafficPolicy="Local",
        selector={"app": "other"},
    )
    k8s.wait_event(test_namespace, "c", "AllocationFailed", "backend key")
    k8s.service(
        test_namespace,
        "d",
        annotations={SHARE: "k", IPS: one_address},
        ports=[("TCP", 83)],
        selector={"app": "x"},
    )  # Cluster policy next to Local ones: refused too
    k8s.wait_event(test_namespace, "d", "AllocationFailed", "backend key")


def test_switching_one_sharer_to_local_takes_its_address_away(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    for name, port in (("a", 80), ("b", 81)):
        k8s.service(
            test_namespace,
            name,
            annotations={SHARE: "k"},
            ports=[("TCP", port)],
            selector={"app": "x"},
        )
        k8s.wait_ips(test_namespace, name)
    k8s.patch(test_namespace, "b", {"spec": {"externalTrafficPolicy": "Local"}})
    support.wait_for("b to lose the address", lambda: k8s.ips(test_namespace, "b") == [])
    assert k8s.ips(test_namespace, "a") == [one_address]
    k8s.patch(test_namespace, "a", {"spec": {"externalTrafficPolicy": "Local"}})
    assert k8s.wait_ips(test_namespace, "b") == [one_address]
    assert k8s.ips(test_namespace, "a") == [one_address]


def test_automatic_allocation_reuses_a_compatible_shared_address(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "a", annotations={SHARE: "k"}, ports=[("TCP", 80)])
    k8s.service(test_namespace, "plain")
    assert k8s.wait_ips(test_namespace, "a") == [support.v4(b, 0)]
    assert k8s.wait_ips(test_namespace, "plain") == [support.v4(b, 1)]
    k8s.service(test_namespace, "b", annotations={SHARE: "k"}, ports=[("TCP", 81)])
    assert k8s.wait_ips(test_namespace, "b") == [support.v4(b, 0)]
    k8s.service(test_namespace, "c", annotations={SHARE: "k"}, ports=[("TCP", 80)])
    assert k8s.wait_ips(test_namespace, "c") == [support.v4(b, 2)]  # port 80 taken on .0


def test_shared_address_is_freed_only_when_its_last_user_goes(
    controller: Controller, k8s: Cluster, test_namespace: str, one_address: str
) -> None:
    k8s.service(test_namespace, "a", annotations={SHARE: "k"}, ports=[("TCP", 80)])
    k8s.service(test_namespace, "b", annotations={SHARE: "k"}, ports=[("TCP", 81)])
    k8s.wait_ips(test_namespace, "a")
    k8s.wait_ips(test_namespace, "b")
    k8s.service(test_namespace, "waiting")
    k8s.wait_event(test_namespace, "waiting", "AllocationFailed")
    k8s.delete(test_namespace, "a")
    k8s.service(test_namespace, "probe", type="ClusterIP")
    support.stays("waiting still waits", lambda: k8s.ips(test_namespace, "waiting") == [])
    k8s.delete(test_namespace, "b")
    assert k8s.wait_ips(test_namespace, "waiting") == [one_address]


# --- dual-stack ----------------------------------------------------------------------------------


def test_require_dual_stack_gets_one_address_of_each_family(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-d", [support.v4_block(b), support.v6_block(b)])
    k8s.service(test_namespace, "s", ipFamilyPolicy="RequireDualStack")
    assert k8s.wait_ips(test_namespace, "s", 2) == [support.v4(b, 0), support.v6(b, 0)]


def test_require_dual_stack_with_a_single_family_pool_gets_nothing(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-v4", [support.v4_block(b)])
    k8s.service(test_namespace, "s", ipFamilyPolicy="RequireDualStack")
    event = k8s.wait_event(test_namespace, "s", "AllocationFailed", "IPv4 and IPv6")
    assert "no address pool" in event["message"]
    assert k8s.ips(test_namespace, "s") == []


def test_prefer_dual_stack_with_a_single_family_pool_gets_what_it_can(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-v4", [support.v4_block(b)])
    k8s.service(test_namespace, "s", ipFamilyPolicy="PreferDualStack")
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 0)]


def test_prefer_dual_stack_gains_the_other_family_when_its_pool_grows_one(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "s", ipFamilyPolicy="PreferDualStack")
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 0)]
    k8s.patch_pool(name, {"addresses": [support.v4_block(b), support.v6_block(b)]})
    assert k8s.wait_ips(test_namespace, "s", 2) == [support.v4(b, 0), support.v6(b, 0)]


def test_prefer_dual_stack_with_a_dual_pool_gets_both(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-d", [support.v4_block(b), support.v6_block(b)])
    k8s.service(test_namespace, "s", ipFamilyPolicy="PreferDualStack")
    assert k8s.wait_ips(test_namespace, "s", 2) == [support.v4(b, 0), support.v6(b, 0)]


def test_ipv6_single_stack_service_gets_an_ipv6_address(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-d", [support.v4_block(b), support.v6_block(b)])
    k8s.service(test_namespace, "s", ipFamilies=["IPv6"], ipFamilyPolicy="SingleStack")
    assert k8s.wait_ips(test_namespace, "s") == [support.v6(b, 0)]


def test_ipv6_service_with_only_ipv4_pools_is_refused_with_the_family(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-v4", [support.v4_block(b)])
    k8s.service(test_namespace, "s", ipFamilies=["IPv6"], ipFamilyPolicy="SingleStack")
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "has IPv6 addresses")
    assert k8s.ips(test_namespace, "s") == []


def test_ipv6_first_prefer_dual_stack_falls_back_to_its_primary_family(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    v4_only, v6_only = support.block(), support.block()
    k8s.pool(f"{test_namespace}-a4", [support.v4_block(v4_only)])
    k8s.pool(f"{test_namespace}-b6", [support.v6_block(v6_only)])
    k8s.service(test_namespace, "s", ipFamilies=["IPv6", "IPv4"], ipFamilyPolicy="PreferDualStack")
    assert k8s.wait_ips(test_namespace, "s") == [support.v6(v6_only, 0)]
