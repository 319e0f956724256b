"""Pools: autoAssign, avoidBuggyIPs, serviceAllocation, exhaustion, and pools changing under
Services that use them."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes
import pytest

from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def controller(kubeconfig: str, request: pytest.FixtureRequest) -> Iterator[Controller]:
    yield from support.module_controller(kubeconfig, request)


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


def label_namespace(k8s: Cluster, name: str, labels: dict[str, str | None]) -> None:
    k8s.core.patch_namespace(name, {"metadata": {"labels": labels}})


def test_auto_assign_false_pool_is_never_chosen_automatically(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    manual, auto = support.block(), support.block()
    k8s.pool(f"{test_namespace}-manual", [support.v4_block(manual)], autoAssign=False)
    k8s.pool(f"{test_namespace}-auto", [f"{support.v4(auto, 0)}/32"])
    k8s.service(test_namespace, "a")
    assert k8s.wait_ips(test_namespace, "a") == [support.v4(auto, 0)]
    k8s.service(test_namespace, "b")
    k8s.wait_event(test_namespace, "b", "AllocationFailed", "full")
    assert k8s.ips(test_namespace, "b") == []


def test_avoid_buggy_ips_skips_dot_zero_and_dot_255(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    low, high = support.v4(b, 254), support.v4(b + 1, 1)
    support.block()  # b + 1 is ours too
    k8s.pool(f"{test_namespace}-p", [f"{low}-{high}"], avoidBuggyIPs=True)
    names = ("a", "b", "c")
    for name in names:
        k8s.service(test_namespace, name)

    def two_addressed() -> dict[str, list[str]] | None:
        held = {n: ips for n in names if (ips := k8s.ips(test_namespace, n))}
        return held if len(held) == 2 else None

    held = support.wait_for("two of three Services addressed", two_addressed)
    assert sorted(ip for ips in held.values() for ip in ips) == sorted([low, high])
    (pending,) = set(names) - set(held)
    k8s.wait_event(test_namespace, pending, "AllocationFailed", "full")


def test_avoid_buggy_ips_refuses_an_explicit_dot_zero(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-p", [support.v4_block(b)], avoidBuggyIPs=True)
    k8s.service(test_namespace, "s", annotations={"metallb.io/loadBalancerIPs": support.v4(b, 0)})
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "avoids addresses ending in .0")
    k8s.service(test_namespace, "auto")
    assert k8s.wait_ips(test_namespace, "auto") == [support.v4(b, 1)]


def test_pool_pinned_to_namespaces_serves_only_them(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    pinned, general = support.block(), support.block()
    k8s.pool(
        f"{test_namespace}-pinned",
        [support.v4_block(pinned)],
        serviceAllocation={"namespaces": [test_namespace]},
    )
    k8s.pool(f"{test_namespace}-general", [support.v4_block(general)])
    other = f"{test_namespace}-o"
    k8s.core.create_namespace({"metadata": {"name": other}})
    try:
        k8s.service(test_namespace, "mine")
        k8s.service(other, "theirs")
        assert k8s.wait_ips(test_namespace, "mine") == [support.v4(pinned, 0)]
        assert k8s.wait_ips(other, "theirs") == [support.v4(general, 0)]
    finally:
        k8s.delete(other, "theirs")
        k8s.core.delete_namespace(other)


def test_namespace_selector_follows_namespace_labels(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    pinned, general = support.block(), support.block()
    k8s.pool(
        f"{test_namespace}-pinned",
        [support.v4_block(pinned)],
        serviceAllocation={"namespaceSelectors": [{"matchLabels": {"lb-tier": "gold"}}]},
    )
    k8s.pool(f"{test_namespace}-general", [support.v4_block(general)])
    k8s.service(test_namespace, "before")
    assert k8s.wait_ips(test_namespace, "before") == [support.v4(general, 0)]
    label_namespace(k8s, test_namespace, {"lb-tier": "gold"})
    k8s.service(test_namespace, "after")
    assert k8s.wait_ips(test_namespace, "after") == [support.v4(pinned, 0)]
    # Losing the label makes the pinned address illegal for it: it moves, and says so.
    label_namespace(k8s, test_namespace, {"lb-tier": None})
    support.wait_for(
        "the Service to leave the pinned pool",
        lambda: (ips := k8s.ips(test_namespace, "after")) and ips != [support.v4(pinned, 0)],
    )
    k8s.wait_event(test_namespace, "after", "ClearAssignment", "not compatible")


def test_service_selector_pins_labelled_services(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    pinned, general = support.block(), support.block()
    k8s.pool(
        f"{test_namespace}-team",
        [support.v4_block(pinned)],
        serviceAllocation={"serviceSelectors": [{"matchLabels": {"team": "metallb"}}]},
    )
    k8s.pool(f"{test_namespace}-general", [support.v4_block(general)])
    k8s.service(test_namespace, "labelled", labels={"team": "metallb"})
    k8s.service(test_namespace, "plain")
    assert k8s.wait_ips(test_namespace, "labelled") == [support.v4(pinned, 0)]
    assert k8s.wait_ips(test_namespace, "plain") == [support.v4(general, 0)]


def test_priority_orders_pinned_pools(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    ten, five, none = support.block(), support.block(), support.block()
    sa = {"namespaces": [test_namespace]}
    k8s.pool(
        f"{test_namespace}-ten", [support.v4_block(ten)], serviceAllocation={**sa, "priority": 10}
    )
    k8s.pool(
        f"{test_namespace}-five",
        [f"{support.v4(five, 0)}/32"],
        serviceAllocation={**sa, "priority": 5},
    )
    k8s.pool(f"{test_namespace}-none", [support.v4_block(none)], serviceAllocation=sa)
    k8s.service(test_namespace, "a")
    assert k8s.wait_ips(test_namespace, "a") == [support.v4(five, 0)]
    k8s.service(test_namespace, "b")  # priority 5 is full: 10 next, unset priority last
    assert k8s.wait_ips(test_namespace, "b") == [support.v4(ten, 0)]


def test_full_pinned_pool_falls_back_to_unrestricted_pools(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    pinned, general = support.block(), support.block()
    k8s.pool(
        f"{test_namespace}-pinned",
        [f"{support.v4(pinned, 0)}/32"],
        serviceAllocation={"namespaces": [test_namespace]},
    )
    k8s.pool(f"{test_namespace}-general", [support.v4_block(general)])
    k8s.service(test_namespace, "a")
    k8s.service(test_namespace, "b")
    got = sorted([k8s.wait_ips(test_namespace, "a")[0], k8s.wait_ips(test_namespace, "b")[0]])
    assert got == sorted([support.v4(pinned, 0), support.v4(general, 0)])


def test_no_pool_admits_the_service(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(
        f"{test_namespace}-elsewhere",
        [support.v4_block(b)],
        serviceAllocation={"namespaces": ["not-this-one"]},
    )
    k8s.service(test_namespace, "s")
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "no auto-assign address pool admits")
    assert k8s.ips(test_namespace, "s") == []


def test_exhausted_pool_then_enlarged_serves_the_pending_service(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(f"{test_namespace}-p", [f"{support.v4(b, 0)}/31"])
    for n in ("a", "b", "c"):
        k8s.service(test_namespace, n)
    k8s.wait_ips(test_namespace, "a")
    k8s.wait_ips(test_namespace, "b")
    event = k8s.wait_event(test_namespace, "c", "AllocationFailed", "every candidate pool is full")
    assert name in event["message"]
    k8s.patch_pool(name, {"addresses": [f"{support.v4(b, 0)}/30"]})
    assert k8s.wait_ips(test_namespace, "c") == [support.v4(b, 2)]
    # Enlarging moved nobody.
    assert sorted(k8s.ips(test_namespace, "a") + k8s.ips(test_namespace, "b")) == [
        support.v4(b, 0),
        support.v4(b, 1),
    ]


def test_pool_deleted_while_in_use_moves_services_to_another_pool(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    first, second = support.block(), support.block()
    doomed = k8s.pool(
        f"{test_namespace}-doomed",
        [support.v4_block(first)],
        serviceAllocation={"namespaces": [test_namespace], "priority": 1},
    )
    k8s.pool(f"{test_namespace}-spare", [support.v4_block(second)])
    k8s.service(test_namespace, "s")
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(first, 0)]
    k8s.delete_pool(doomed)
    support.wait_for(
        "the spare pool's address", lambda: k8s.ips(test_namespace, "s") == [support.v4(second, 0)]
    )
    k8s.wait_event(test_namespace, "s", "ClearAssignment", "not allowed by config")
    assert k8s.pool_of(test_namespace, "s") == f"{test_namespace}-spare"


def test_pool_deleted_with_nowhere_to_go_clears_the_service(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    only = k8s.pool(f"{test_namespace}-only", [support.v4_block(b)])
    k8s.service(test_namespace, "s")
    k8s.wait_ips(test_namespace, "s")
    k8s.delete_pool(only)
    support.wait_for("status cleared", lambda: k8s.ips(test_namespace, "s") == [])
    support.wait_for("annotation removed", lambda: k8s.pool_of(test_namespace, "s") is None)


def test_pool_shrunk_away_from_an_address_reallocates_inside_it(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "s", annotations={"metallb.io/loadBalancerIPs": support.v4(b, 200)})
    k8s.service(test_namespace, "t")
    k8s.wait_ips(test_namespace, "s")
    assert k8s.wait_ips(test_namespace, "t") == [support.v4(b, 0)]
    k8s.patch_pool(name, {"addresses": [f"{support.v4(b, 0)}/25"]})
    # "s" asked for an address that is gone: refused; "t" stays where it was.
    k8s.wait_event(test_namespace, "s", "AllocationFailed", "not allowed in config")
    support.wait_for("s cleared", lambda: k8s.ips(test_namespace, "s") == [])
    assert k8s.ips(test_namespace, "t") == [support.v4(b, 0)]


def test_invalid_pool_configuration_keeps_the_last_good_one(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    k8s.pool(f"{test_namespace}-good", [support.v4_block(b)])
    k8s.service(test_namespace, "s")
    (ip,) = k8s.wait_ips(test_namespace, "s")
    k8s.pool(f"{test_namespace}-overlap", [f"{support.v4(b, 0)}/28"])
    support.wait_for(
        "the stale flag", lambda: controller.metrics()["metallb_k8s_client_config_stale_bool"] == 1
    )
    k8s.service(test_namespace, "t")
    assert k8s.wait_ips(test_namespace, "t") == [support.v4(b, 1)]  # the old config still serves
    assert k8s.ips(test_namespace, "s") == [ip]
    k8s.delete_pool(f"{test_namespace}-overlap")
    support.wait_for(
        "the stale flag to clear",
        lambda: controller.metrics()["metallb_k8s_client_config_stale_bool"] == 0,
    )


def test_pool_changed_under_a_service_reallocates_it_and_says_so(
    controller: Controller, k8s: Cluster, test_namespace: str
) -> None:
    b = support.block()
    name = k8s.pool(f"{test_namespace}-p", [support.v4_block(b)])
    k8s.service(test_namespace, "s")
    assert k8s.wait_ips(test_namespace, "s") == [support.v4(b, 0)]
    k8s.patch_pool(name, {"addresses": [f"{support.v4(b, 128)}/25"]})
    support.wait_for(
        "the address inside the new range",
        lambda: k8s.ips(test_namespace, "s") == [support.v4(b, 128)],
    )
    event = k8s.wait_event(test_namespace, "s", "ClearAssignment", support.v4(b, 0))
    assert "not allowed by config" in event["message"]
    k8s.wait_event(test_namespace, "s", "IPAllocated", support.v4(b, 128))
    assert k8s.pool_of(test_namespace, "s") == name
