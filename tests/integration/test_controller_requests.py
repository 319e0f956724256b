"""What a Service asks for: explicit addresses, pools, their legacy spellings, and refusals."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes
import pytest

from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration

IPS = "metallb.io/loadBalancerIPs"
LEGACY_IPS = "metallb.universe.tf/loadBalancerIPs"
POOL = "metallb.io/address-pool"
LEGACY_POOL = "metallb.universe.tf/address-pool"


@pytest.fixture(scope="module")
def controller(kubeconfig: str, request: pytest.FixtureRequest) -> Iterator[Controller]:
    yield from support.module_controller(kubeconfig, request)


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


@pytest.fixture
def pool(k8s: Cluster, test_namespace: str) -> tuple[str, int]:
    """One ordinary pool of 256 IPv4 addresses; (name, block)."""
    b = support.block()
    return k8s.pool(f"{test_namespace}-p", [support.v4_block(b)]), b


def test_annotation_requests_a_specific_address(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    k8s.service(test_namespace, "s", annotations={IPS: support.v4(b, 42)})
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 42)]


def test_legacy_annotation_works_and_is_warned_about(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    k8s.service(test_namespace, "s", annotations={LEGACY_IPS: support.v4(b, 43)})
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 43)]
    event = k8s.wait_event(test_namespace, "s", "deprecatedAnnotation", LEGACY_IPS)
    assert event["type"] == "Warning"


def test_new_annotation_wins_over_the_legacy_one(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    notes = {IPS: support.v4(b, 50), LEGACY_IPS: support.v4(b, 51)}
    k8s.service(test_namespace, "s", annotations=notes)
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 50)]


def test_spec_load_balancer_ip_is_honoured(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    k8s.service(test_namespace, "s", loadBalancerIP=support.v4(b, 44))
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 44)]


def test_annotation_and_spec_together_are_refused(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    k8s.service(
        test_namespace,
        "s",
        annotations={IPS: support.v4(b, 1)},
        loadBalancerIP=support.v4(b, 2),
    )
    event = k8s.wait_event(test_namespace, "s", "AllocationFailed", "can not have both")
    assert event["type"] == "Warning"
    assert k8s.ips(test_namespace, "s") == []


def test_unparsable_requested_address_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    k8s.service(test_namespace, "s", annotations={IPS: "please sir may I have an IP"})
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "invalid")
    assert k8s.ips(test_namespace, "s") == []


def test_requested_address_outside_every_pool_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    k8s.service(test_namespace, "s", annotations={IPS: "198.51.100.7"})
    event = k8s.wait_event(test_namespace, "s", "AllocationFailed", "not allowed in config")
    assert "198.51.100.7" in event["message"]
    assert k8s.ips(test_namespace, "s") == []


def test_requested_address_in_a_pool_the_namespace_may_not_use_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(
        f"{test_namespace}-other",
        [support.v4_block(b)],
        serviceAllocation={"namespaces": ["somewhere-else"]},
    )
    k8s.service(test_namespace, "s", annotations={IPS: support.v4(b, 5)})
    k8s.wait_event(test_namespace, "s", "AllocationFailed", f"pool {name} not compatible")
    assert k8s.ips(test_namespace, "s") == []


def test_requested_address_in_a_pool_restricted_to_other_labels_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(
        f"{test_namespace}-team",
        [support.v4_block(b)],
        serviceAllocation={"serviceSelectors": [{"matchLabels": {"team": "blue"}}]},
    )
    k8s.service(test_namespace, "red", labels={"team": "red"}, annotations={IPS: support.v4(b, 5)})
    k8s.service(
        test_namespace, "blue", labels={"team": "blue"}, annotations={IPS: support.v4(b, 6)}
    )
    assert k8s.wait_ips(test_namespace, "blue") == [support.v4(b, 6)]
    k8s.wait_event(test_namespace, "red", "AllocationFailed", f"pool {name} not compatible")
    assert k8s.ips(test_namespace, "red") == []


def test_address_pool_annotation_picks_the_pool_even_without_auto_assign(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    b = support.block()
    manual = k8s.pool(f"{test_namespace}-manual", [support.v4_block(b)], autoAssign=False)
    k8s.service(test_namespace, "s", annotations={POOL: manual})
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 0)]
    assert k8s.pool_of(test_namespace, "s") == manual


def test_legacy_address_pool_annotation(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    b = support.block()
    other = k8s.pool(f"{test_namespace}-legacy", [support.v4_block(b)])
    k8s.service(test_namespace, "s", annotations={LEGACY_POOL: other})
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 0)]
    k8s.wait_event(test_namespace, "s", "deprecatedAnnotation", LEGACY_POOL)


def test_unknown_pool_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    k8s.service(test_namespace, "s", annotations={POOL: "no-such-pool"})
    k8s.wait_event(test_namespace, "s", "AllocationFailed", 'unknown pool "no-such-pool"')
    assert k8s.ips(test_namespace, "s") == []


def test_requested_address_must_be_in_the_requested_pool(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    other_block = support.block()
    other = k8s.pool(f"{test_namespace}-q", [support.v4_block(other_block)])
    k8s.service(test_namespace, "s", annotations={IPS: support.v4(b, 9), POOL: other})
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "not compatible with requested")
    assert k8s.ips(test_namespace, "s") == []


def test_changing_the_requested_address_moves_the_service(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    k8s.service(test_namespace, "s", annotations={IPS: support.v4(b, 10)})
    k8s.wait_ips(test_namespace, "s")
    k8s.patch(test_namespace, "s", {"metadata": {"annotations": {IPS: support.v4(b, 11)}}})
    support.wait_for("the new address", lambda: k8s.ips(test_namespace, "s") == [support.v4(b, 11)])
    # The old address is free again.
    k8s.service(test_namespace, "t", annotations={IPS: support.v4(b, 10)})
    assert k8s.wait_ips(test_namespace, "t") == [support.v4(b, 10)]


def test_changing_the_requested_pool_moves_the_service(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    first, b = pool
    other_block = support.block()
    other = k8s.pool(f"{test_namespace}-q", [support.v4_block(other_block)])
    k8s.service(test_namespace, "s", annotations={POOL: first})
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 0)]
    k8s.patch(test_namespace, "s", {"metadata": {"annotations": {POOL: other}}})
    support.wait_for(
        "the other pool", lambda: k8s.ips(test_namespace, "s") == [support.v4(other_block, 0)]
    )
    assert k8s.pool_of(test_namespace, "s") == other


def test_taken_address_is_refused_clearly(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    k8s.service(test_namespace, "first", annotations={IPS: support.v4(b, 20)})
    k8s.wait_ips(test_namespace, "first")
    k8s.service(test_namespace, "second", annotations={IPS: support.v4(b, 20)})
    event = k8s.wait_event(test_namespace, "second", "AllocationFailed", "already in use")
    assert f"{test_namespace}/first" in event["message"]
    assert k8s.ips(test_namespace, "second") == []


def test_two_services_racing_for_one_address_one_wins_then_the_other(
    controller: Controller, k8s: Cluster, test_namespace: str, pool: tuple[str, int]
) -> None:
    _, b = pool
    wanted = support.v4(b, 30)
    for name in ("racer-a", "racer-b", "racer-c"):
        k8s.service(test_namespace, name, annotations={IPS: wanted})

    def settled() -> list[str] | None:
        holders = [n for n in ("racer-a", "racer-b", "racer-c") if k8s.ips(test_namespace, n)]
        failed = [
            n
            for n in ("racer-a", "racer-b", "racer-c")
            if k8s.event_with(test_namespace, n, "AllocationFailed", "already in use")
        ]
        return holders if len(holders) == 1 and len(failed) == 2 else None

    (winner,) = support.wait_for("one winner and two refusals", settled)
    assert k8s.ips(test_namespace, winner) == [wanted]
    k8s.delete(test_namespace, winner)
    losers = [n for n in ("racer-a", "racer-b", "racer-c") if n != winner]
    support.wait_for(
        "one of the others to take it",
        lambda: sorted(len(k8s.ips(test_namespace, n)) for n in losers) == [0, 1],
    )


def test_dual_stack_request_by_annotation(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-d", [support.v4_block(b), support.v6_block(b)])
    k8s.service(
        test_namespace,
        "s",
        annotations={IPS: f"{support.v4(b, 3)},{support.v6(b, 3)}"},
        ipFamilyPolicy="RequireDualStack",
    )
    assert k8s.wait_ips(test_namespace, "s", 2) == [support.v4(b, 3), support.v6(b, 3)]


def test_dual_stack_request_on_a_single_stack_service_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-d", [support.v4_block(b), support.v6_block(b)])
    k8s.service(test_namespace, "s", annotations={IPS: f"{support.v4(b, 3)},{support.v6(b, 3)}"})
    k8s.wait_event(test_namespace, "s", "AllocationFailed")
    assert k8s.ips(test_namespace, "s") == []


def test_requested_address_of_the_wrong_family_is_refused(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-d", [support.v4_block(b), support.v6_block(b)])
    k8s.service(test_namespace, "s", annotations={IPS: support.v6(b, 3)})
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "does not match the ipFamily")
    assert k8s.ips(test_namespace, "s") == []
