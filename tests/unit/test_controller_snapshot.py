"""controller.snapshot: Service/pool dicts -> allocator inputs, and the smallest patch."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from controller import allocator, converging, requests, snapshot


def svc(
    name: str = "s",
    namespace: str = "ns",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    rv: str = "10",
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    base = {"type": "LoadBalancer", "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80}]}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": {**base, **spec},
        "status": status or {},
    }


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def pool(name: str, *addresses: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": name, "namespace": "metallb-system"},
        "spec": {"addresses": list(addresses), **spec},
    }


# --- Services ------------------------------------------------------------------------------------


def test_view_reads_what_the_allocator_needs() -> None:
    view = snapshot.service_view(
        svc(
            annotations={
                "metallb.io/loadBalancerIPs": "1.2.3.4",
                "metallb.io/address-pool": "p",
                "metallb.io/allow-shared-ip": "k",
                "metallb.io/ip-allocated-from-pool": "p",
            },
            labels={"team": "a"},
            ports=[{"port": 80, "protocol": "UDP"}, {"port": 443}],
            externalTrafficPolicy="Local",
            selector={"app": "x", "tier": "web"},
            status={"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "VIP"}]}},
        )
    )
    r = view.request
    assert r.key == "ns/s" and r.namespace == "ns"
    assert r.family is requests.ServiceFamily.IPV4
    assert r.requested.ips == (ip("1.2.3.4"),)
    assert r.requested_pool == "p"
    assert r.sharing_key == "k"
    assert r.backend_key == "app=x,tier=web"
    assert r.ports == (("UDP", 80), ("TCP", 443))
    assert r.labels == (("team", "a"),)
    assert r.current_ips == (ip("1.2.3.4"),)
    assert view.ingress == (("1.2.3.4", None),)
    assert view.allocated_pool == "p"
    assert view.uid == "uid-s"


def test_view_of_a_dual_stack_service_and_hostname_ingress() -> None:
    view = snapshot.service_view(
        svc(
            clusterIPs=["fd00::1", "10.96.0.1"],
            ipFamilies=["IPv6", "IPv4"],
            ipFamilyPolicy="RequireDualStack",
            status={"loadBalancer": {"ingress": [{"hostname": "x.example"}, {"ip": "fd00::5"}]}},
        )
    )
    assert view.request.family is requests.ServiceFamily.DUAL
    assert view.request.primary_family == 6
    assert view.request.policy is requests.FamilyPolicy.REQUIRE_DUAL_STACK
    assert view.request.current_ips == (ip("fd00::5"),)
    assert view.ingress == ((None, "x.example"), ("fd00::5", None))


def test_view_without_cluster_ips_and_of_other_types() -> None:
    assert snapshot.service_view(svc(clusterIPs=[])).request.family is None
    assert snapshot.service_view(svc(clusterIPs=["None"], clusterIP="None")).request.family is None
    assert not snapshot.service_view(svc(type="ClusterIP")).load_balancer


def test_views_differ_only_in_what_the_controller_reads() -> None:
    a = snapshot.service_view(svc(rv="1"))
    assert snapshot.service_view(svc(rv="2")) == a  # a newer version, nothing new to decide
    assert snapshot.service_view(svc(rv="2", labels={"x": "y"})) != a
    assert snapshot.service_view(svc(rv="2", annotations={"other/thing": "1"})) == a


def test_deprecated_annotations_are_listed() -> None:
    view = snapshot.service_view(
        svc(annotations={"metallb.universe.tf/address-pool": "p", "metallb.io/x": "1"})
    )
    assert view.deprecated == ("metallb.universe.tf/address-pool",)
    (event,) = snapshot.deprecation_events(view)
    assert event.reason == "deprecatedAnnotation" and event.type == "Warning"
    assert "metallb.universe.tf/address-pool" in event.message


def test_class_filter() -> None:
    plain = snapshot.service_view(svc())
    classy = snapshot.service_view(svc(loadBalancerClass="x.io/lb"))
    assert snapshot.handled(plain, "") and not snapshot.handled(classy, "")
    assert snapshot.handled(classy, "x.io/lb") and not snapshot.handled(plain, "x.io/lb")


def test_relevant_means_ours_and_loadbalancer_or_carrying_our_status() -> None:
    assert snapshot.relevant(snapshot.service_view(svc()), "")
    assert not snapshot.relevant(snapshot.service_view(svc(type="ClusterIP")), "")
    stale = svc(type="ClusterIP", status={"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}})
    assert snapshot.relevant(snapshot.service_view(stale), "")


def test_newer_compares_etcd_revisions_and_falls_back_to_inequality() -> None:
    assert snapshot.newer("11", "10")
    assert not snapshot.newer("10", "10")
    assert not snapshot.newer("9", "10")
    assert snapshot.newer("5", "")
    assert snapshot.newer("abc", "abd")
    assert not snapshot.newer("abc", "abc")


# --- desired state and patches -------------------------------------------------------------------


def test_status_patch_is_none_when_applied_ignoring_ip_mode() -> None:
    view = snapshot.service_view(
        svc(
            annotations={"metallb.io/ip-allocated-from-pool": "p"},
            status={"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "VIP"}]}},
        )
    )
    want = snapshot.Desired((ip("1.2.3.4"),), "p")
    assert snapshot.applied(view, want)
    assert snapshot.status_patch(view, want) is None


POOL = "metallb.io/ip-allocated-from-pool"
ADDRESS = {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}
ADDRESS_FROM_P = snapshot.Desired((ip("1.2.3.4"),), "p")

# (what the Service says: annotations, status; what is wanted; whether it shows it)
APPLIED = [
    pytest.param({POOL: "p"}, ADDRESS, ADDRESS_FROM_P, True, id="address-and-pool"),
    pytest.param(
        {POOL: "p"},
        {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "Proxy"}]}},
        ADDRESS_FROM_P,
        True,
        id="ip-mode-ignored",
    ),
    pytest.param({}, ADDRESS, ADDRESS_FROM_P, False, id="address-without-pool"),
    pytest.param(
        {POOL: "p"}, {"loadBalancer": {}}, ADDRESS_FROM_P, False, id="pool-without-address"
    ),
    pytest.param({POOL: "q"}, ADDRESS, ADDRESS_FROM_P, False, id="other-pool"),
    pytest.param(
        {POOL: "p"},
        {"loadBalancer": {"ingress": [{"ip": "1.2.3.5"}]}},
        ADDRESS_FROM_P,
        False,
        id="other-address",
    ),
    pytest.param(
        {POOL: "p"},
        {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"ip": "fd00::1"}]}},
        ADDRESS_FROM_P,
        False,
        id="one-address-too-many",
    ),
    pytest.param({}, {}, snapshot.CLEARED, True, id="cleared"),
    pytest.param({POOL: "p"}, {}, snapshot.CLEARED, False, id="cleared-but-pool-left"),
    pytest.param({}, ADDRESS, snapshot.CLEARED, False, id="cleared-but-address-left"),
]


@pytest.mark.parametrize(("annotations", "status", "want", "expected"), APPLIED)
def test_applied_means_ingress_and_pool_both_as_wanted(
    annotations: dict[str, str], status: dict[str, Any], want: snapshot.Desired, expected: bool
) -> None:
    view = snapshot.service_view(svc(annotations=annotations, status=status))
    assert snapshot.applied(view, want) is expected


def test_status_patch_sets_ingress_and_annotation_together() -> None:
    view = snapshot.service_view(svc())
    want = snapshot.Desired((ip("1.2.3.4"), ip("fd00::1")), "p")
    assert snapshot.status_patch(view, want) == {
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"ip": "fd00::1"}]}},
        "metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": "p"}},
    }


def test_status_patch_only_touches_what_differs() -> None:
    view = snapshot.service_view(
        svc(
            annotations={"metallb.io/ip-allocated-from-pool": "old"},
            status={"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
        )
    )
    assert snapshot.status_patch(view, snapshot.Desired((ip("1.2.3.4"),), "new")) == {
        "metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": "new"}}
    }


def test_an_address_is_written_with_its_pool_even_when_the_view_has_the_annotation() -> None:
    # The apiserver clears status.loadBalancer on a type change and keeps the annotation; a view
    # that still shows the annotation must not leave it out of the write that puts the address
    # back (another write in flight may be removing it).
    view = snapshot.service_view(svc(annotations={"metallb.io/ip-allocated-from-pool": "p"}))
    assert snapshot.status_patch(view, snapshot.Desired((ip("1.2.3.4"),), "p")) == {
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
        "metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": "p"}},
    }


def test_clearing_nulls_the_ingress_and_removes_the_annotation() -> None:
    view = snapshot.service_view(
        svc(
            annotations={"metallb.io/ip-allocated-from-pool": "p"},
            status={"loadBalancer": {"ingress": [{"hostname": "h"}, {"ip": "1.2.3.4"}]}},
        )
    )
    assert snapshot.status_patch(view, snapshot.CLEARED) == {
        "status": {"loadBalancer": {"ingress": None}},
        "metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": None}},
    }
    assert snapshot.status_patch(snapshot.service_view(svc()), snapshot.CLEARED) is None


def test_desired_of_each_decision_status() -> None:
    a = ip("1.2.3.4")
    assert snapshot.desired_of(converging.Decision(converging.Status.SET, (a,), "p")) == (
        snapshot.Desired((a,), "p")
    )
    assert snapshot.desired_of(converging.Decision(converging.Status.CLEAR)) == snapshot.CLEARED
    assert snapshot.desired_of(converging.Decision(converging.Status.KEEP)) is None


# --- pools ---------------------------------------------------------------------------------------


def test_pools_parse_into_allocator_pools() -> None:
    result = snapshot.pools(
        [
            pool("b", "10.0.0.0/24", autoAssign=False, avoidBuggyIPs=True),
            pool("a", "10.1.0.0/24", "fd00::/120"),
        ],
        {},
    )
    assert result.pools is not None
    a, b = result.pools
    assert (a.name, a.auto_assign, a.restricted) == ("a", True, False)
    assert a.has_family(4) and a.has_family(6)
    assert (b.name, b.auto_assign, b.avoid_buggy_ips) == ("b", False, True)


def test_service_allocation_resolves_namespaces_and_selectors() -> None:
    raw = pool(
        "p",
        "10.0.0.0/24",
        serviceAllocation={
            "priority": 3,
            "namespaces": ["listed"],
            "namespaceSelectors": [{"matchLabels": {"tier": "gold"}}],
            "serviceSelectors": [{"matchLabels": {"team": "x"}}],
        },
    )
    labels = {"listed": {}, "gold": {"tier": "gold"}, "plain": {"tier": "tin"}}
    result = snapshot.pools([raw], labels)
    assert result.pools is not None
    (p,) = result.pools
    assert p.namespaces == frozenset({"listed", "gold"})
    assert p.priority == 3 and p.restricted
    assert p.admits("gold", {"team": "x"}) and not p.admits("gold", {})
    assert not p.admits("plain", {"team": "x"})
    assert result.uses_namespace_labels


def test_namespaces_without_selectors_admit_no_other_namespace() -> None:
    """Regression: an empty namespaceSelectors list must not select every namespace."""
    raw = pool("p", "10.0.0.0/24", serviceAllocation={"namespaces": ["only"]})
    result = snapshot.pools([raw], {"only": {}, "other": {"a": "b"}})
    assert result.pools is not None
    (p,) = result.pools
    assert p.namespaces == frozenset({"only"})
    assert not p.admits("other", {})
    assert not result.uses_namespace_labels


def test_priority_only_service_allocation_is_pinned_but_admits_everyone() -> None:
    result = snapshot.pools([pool("p", "10.0.0.0/24", serviceAllocation={"priority": 1})], {})
    assert result.pools is not None
    (p,) = result.pools
    assert p.namespaces is None and p.restricted and p.admits("any", {})


def test_overlapping_pools_refuse_the_whole_set() -> None:
    result = snapshot.pools([pool("a", "10.0.0.0/24"), pool("b", "10.0.0.128/25")], {})
    assert result.pools is None
    assert {p.name for p in result.problems} == {"a", "b"}


def test_unparsable_pool_refuses_the_whole_set() -> None:
    result = snapshot.pools([pool("a", "10.0.0.0/24"), pool("b", "not-a-cidr")], {})
    assert result.pools is None


def test_pool_status_patch() -> None:
    counters = allocator.PoolCounters(1, 0, 3, 4, 4, 4)
    want = {"assignedIPv4": 1, "assignedIPv6": 0, "availableIPv4": 3, "availableIPv6": 4}
    assert snapshot.pool_status_patch({"status": {}}, counters) == {"status": want}
    assert snapshot.pool_status_patch({"status": want}, counters) is None
    assert snapshot.pool_status_patch({"status": {**want, "assignedIPv4": 7}}, counters) == {
        "status": want
    }


# --- Events --------------------------------------------------------------------------------------


def test_event_body_names_the_service_and_the_reporter() -> None:
    view = snapshot.service_view(svc(rv="42"))
    body = snapshot.event_body(
        view,
        converging.Event("Warning", "AllocationFailed", "no"),
        now="2026-01-01T00:00:00Z",
        name_suffix="abc",
        instance="pod-1",
    )
    assert body["metadata"] == {"name": "s.abc", "namespace": "ns"}
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Service",
        "namespace": "ns",
        "name": "s",
        "uid": "uid-s",
        "resourceVersion": "42",
    }
    assert (body["type"], body["reason"], body["message"]) == ("Warning", "AllocationFailed", "no")
    assert body["source"] == {"component": "metallb-controller"}
    assert body["reportingComponent"] == "metallb-controller"
    assert body["reportingInstance"] == "pod-1"
