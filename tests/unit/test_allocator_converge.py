"""Convergence per Service (MetalLB's convergeBalancer) and the request parsing that feeds it.

Services are described the way Kubernetes shows them (cluster IPs, annotations, status ingress)
and go through `controller.requests` into `ServiceRequest`s, so the pure pipeline a kopf handler
will run is what is tested. The single-step table follows MetalLB's controller_test.go (fixture
C); the multi-step scenarios follow its TestControllerConfig, TestDeleteRecyclesIP,
TestControllerReassign and the e2e assignment tests, with a small in-memory "cluster" that applies
each Decision to the Service status and runs reprocess-all passes when asked to.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from controller import allocator, converging, requests
from ironlb import addresses, selectors, services
from ironlb import annotations as keys

R = allocator.Reason
SET, CLEAR, KEEP = converging.Status.SET, converging.Status.CLEAR, converging.Status.KEEP


def pool(name: str, *ranges: str, **kw: object) -> allocator.Pool:
    parsed = tuple(addresses.parse_range(r) for r in ranges)
    assert all(isinstance(r, addresses.AddressRange) for r in parsed)
    return allocator.Pool(name, parsed, **kw)  # type: ignore[arg-type]


def team(value: str) -> tuple[selectors.LabelSelector, ...]:
    return (selectors.LabelSelector((("team", value),)),)


def service(
    key: str = "default/test",
    *,
    type_: str = "LoadBalancer",
    cluster_ips: tuple[str, ...] = ("10.96.0.1",),
    ip_families: tuple[str, ...] = (),
    policy: str | None = None,
    annotations: Mapping[str, str] | None = None,
    lb_ip: str | None = None,
    ingress: tuple[Mapping[str, str], ...] | tuple[str, ...] = (),
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
    etp: str = "Cluster",
    ports: tuple[tuple[str, int], ...] = (("TCP", 80),),
) -> allocator.ServiceRequest:
    """A ServiceRequest built from Kubernetes-shaped fields with the `requests` helpers."""
    annotations = annotations or {}
    entries = [{"ip": e} if isinstance(e, str) else e for e in ingress]
    return allocator.ServiceRequest(
        key=key,
        namespace=key.partition("/")[0],
        labels=allocator.labels_of(labels),
        family=requests.cluster_family(cluster_ips),
        primary_family=requests.primary_family(ip_families),
        policy=requests.FamilyPolicy.parse(policy),
        requested=requests.requested_ips(annotations, lb_ip),
        requested_pool=requests.requested_pool(annotations),
        sharing_key=requests.sharing_key(annotations),
        backend_key=requests.backend_key(selector, etp),
        ports=ports,
        current_ips=services.ingress({"status": {"loadBalancer": {"ingress": entries}}}).ips,
        load_balancer=type_ == "LoadBalancer",
    )


def ips(text: str) -> tuple[addresses.IPAddress, ...]:
    return tuple(ipaddress.ip_address(t) for t in text.split(",")) if text else ()


NS1 = frozenset({"test-ns1"})
NS2 = frozenset({"test-ns2"})
FIXTURE_C = (
    pool("pool1", "1.2.3.0/31"),
    pool("pool2", "3.4.5.6/32", auto_assign=False),
    pool("pool3", "1000::/127"),
    pool("pool4", "2000::1/128", auto_assign=False),
    pool("pool5", "1.2.3.0/31", "1000::/127"),
    pool("pool6", "7.8.9.0/31", namespaces=NS1, priority=10),
    pool("pool7", "10.11.12.0/31", namespaces=NS1, priority=11),
    pool("pool8", "13.14.15.0/31", service_selectors=team("metallb"), priority=9),
    pool("pool9", "16.17.18.0/31", namespaces=NS2),
    pool("pool10", "19.20.21.0/31", service_selectors=team("metallb"), priority=8),
    pool("pool11", "22.23.24.0/31", namespaces=NS1, service_selectors=team("metallb"), priority=8),
    pool("pool12", "25.26.27.0/31", namespaces=NS1, service_selectors=team("metallb"), priority=5),
)

V4_CLUSTER = ("1.2.3.4",)
V6_CLUSTER = ("3000::1",)
DUAL_CLUSTER = ("1.2.3.4", "3000::1")
POOL = keys.ADDRESS_POOL.name
LB_IPS = keys.LOAD_BALANCER_IPS.name


@dataclass(frozen=True)
class Case:
    name: str
    service: allocator.ServiceRequest
    status: converging.Status
    ips: str = ""
    pool: str | None = None
    events: tuple[tuple[str, str], ...] = ()  # (type, reason) in order
    error: allocator.Reason | None = None


IP_ALLOCATED = ("Normal", "IPAllocated")
ALLOCATION_FAILED = ("Warning", "AllocationFailed")
CLEAR_ASSIGNMENT = ("Normal", "ClearAssignment")
ADDITIONAL_ASSIGN_FAILED = ("Normal", "AdditionalAssignFailed")

CASES = [
    Case("ClusterIP service is only cleared", service(type_="ClusterIP"), CLEAR),
    Case(
        "LoadBalancer gets the first address",
        service(cluster_ips=V4_CLUSTER),
        SET,
        "1.2.3.0",
        "pool1",
        (IP_ALLOCATED,),
    ),
    Case(
        "spec.loadBalancerIP",
        service(lb_ip="1.2.3.1"),
        SET,
        "1.2.3.1",
        "pool1",
        (IP_ALLOCATED,),
    ),
    Case(
        "loadBalancerIPs annotation",
        service(annotations={LB_IPS: "1.2.3.1"}),
        SET,
        "1.2.3.1",
        "pool1",
        (IP_ALLOCATED,),
    ),
    Case(
        "deprecated loadBalancerIPs annotation",
        service(annotations={keys.LOAD_BALANCER_IPS.legacy: "1.2.3.1"}),
        SET,
        "1.2.3.1",
        "pool1",
        (IP_ALLOCATED,),
    ),
    Case(
        "both annotation and spec.loadBalancerIP",
        service(annotations={LB_IPS: "1.2.3.1"}, lb_ip="1.2.3.1"),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.INVALID_REQUEST,
    ),
    Case(
        "unparsable spec.loadBalancerIP",
        service(lb_ip="please sir may I have an IP address thank you"),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.INVALID_REQUEST,
    ),
    Case(
        "unparsable annotation",
        service(annotations={LB_IPS: "please sir may I have an IP address thank you"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.INVALID_REQUEST,
    ),
    Case(
        "requested IP outside the requested pool",
        service(annotations={LB_IPS: "1.2.3.1", POOL: "pool2"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.WRONG_POOL,
    ),
    Case(
        "two requested IPs of one family",
        service(annotations={LB_IPS: "1.2.3.1,1.2.3.2"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.INVALID_REQUEST,
    ),
    Case(
        "requested IP in no pool, current one cleared",
        service(lb_ip="1.2.3.4", ingress=("1.2.3.1",)),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.NOT_IN_ANY_POOL,
    ),
    Case(
        "address-pool annotation",
        service(annotations={POOL: "pool1"}),
        SET,
        "1.2.3.0",
        "pool1",
        (IP_ALLOCATED,),
    ),
    Case(
        "deprecated address-pool annotation",
        service(annotations={keys.ADDRESS_POOL.legacy: "pool2"}),
        SET,
        "3.4.5.6",
        "pool2",
        (IP_ALLOCATED,),
    ),
    Case(
        "switching to another pool (autoAssign=false is fine when asked for)",
        service(annotations={POOL: "pool2"}, ingress=("1.2.3.0",)),
        SET,
        "3.4.5.6",
        "pool2",
        (IP_ALLOCATED,),
    ),
    Case(
        "unknown pool",
        service(annotations={POOL: "does-not-exist"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.UNKNOWN_POOL,
    ),
    Case(
        "current IP in no pool is replaced without a Warning",
        service(ingress=("2.3.4.5",)),
        SET,
        "1.2.3.0",
        "pool1",
        (CLEAR_ASSIGNMENT, IP_ALLOCATED),
    ),
    Case(
        "hostname-only ingress entries are ignored",
        service(ingress=({"hostname": "foo.bar.local"}, {"ip": "10.10.10.10"})),
        SET,
        "1.2.3.0",
        "pool1",
        (CLEAR_ASSIGNMENT, IP_ALLOCATED),
    ),
    Case(
        "NodePort with a status is cleared", service(type_="NodePort", ingress=("1.2.3.0",)), CLEAR
    ),
    Case(
        "explicit IP from an autoAssign=false pool",
        service(lb_ip="3.4.5.6"),
        SET,
        "3.4.5.6",
        "pool2",
        (IP_ALLOCATED,),
    ),
    Case(
        "explicit IP from an autoAssign=false pool, ETP Local",
        service(lb_ip="3.4.5.6", etp="Local", selector={"app": "x"}),
        SET,
        "3.4.5.6",
        "pool2",
        (IP_ALLOCATED,),
    ),
    Case(
        "no cluster IPs: nothing written, no Warning",
        service(cluster_ips=()),
        CLEAR,
        error=R.NO_CLUSTER_IPS,
    ),
    Case(
        "IPv4 request for an IPv6 service",
        service(cluster_ips=V6_CLUSTER, lb_ip="1.2.3.1"),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.FAMILY_MISMATCH,
    ),
    Case(
        "IPv6 request for an IPv4 service",
        service(annotations={LB_IPS: "1000::"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.FAMILY_MISMATCH,
    ),
    Case(
        "IPv6 status on an IPv4 service is replaced silently",
        service(ingress=("1000::",)),
        SET,
        "1.2.3.0",
        "pool1",
        (IP_ALLOCATED,),
    ),
    Case(
        "IPv4 status on an IPv6 service is replaced silently",
        service(cluster_ips=V6_CLUSTER, ingress=("1.2.3.0",)),
        SET,
        "1000::",
        "pool3",
        (IP_ALLOCATED,),
    ),
    Case(
        "RequireDualStack",
        service(cluster_ips=DUAL_CLUSTER, policy="RequireDualStack"),
        SET,
        "1.2.3.0,1000::",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "RequireDualStack from a named dual pool",
        service(cluster_ips=DUAL_CLUSTER, policy="RequireDualStack", annotations={POOL: "pool5"}),
        SET,
        "1.2.3.0,1000::",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "PreferDualStack with a dual pool available",
        service(cluster_ips=DUAL_CLUSTER, policy="PreferDualStack"),
        SET,
        "1.2.3.0,1000::",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "PreferDualStack single-stack service in a pinned namespace: priority 10 beats 11",
        service("test-ns1/test", policy="PreferDualStack"),
        SET,
        "7.8.9.0",
        "pool6",
        (IP_ALLOCATED,),
    ),
    Case(
        "PreferDualStack from an IPv4-only named pool",
        service(cluster_ips=DUAL_CLUSTER, policy="PreferDualStack", annotations={POOL: "pool1"}),
        SET,
        "1.2.3.0",
        "pool1",
        # The top-up MetalLB tries on its next pass, tried at once: the pool has no IPv6.
        (IP_ALLOCATED, ADDITIONAL_ASSIGN_FAILED),
    ),
    Case(
        "PreferDualStack IPv6-only service from an IPv6 pool",
        service(cluster_ips=V6_CLUSTER, policy="PreferDualStack", annotations={POOL: "pool3"}),
        SET,
        "1000::",
        "pool3",
        (IP_ALLOCATED,),
    ),
    Case(
        "PreferDualStack single-stack service from a dual pool gets one address",
        service(policy="PreferDualStack", annotations={POOL: "pool5"}),
        SET,
        "1.2.3.0",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "PreferDualStack holding one address is topped up from its pool",
        service(
            cluster_ips=DUAL_CLUSTER,
            policy="PreferDualStack",
            annotations={POOL: "pool5"},
            ingress=("1.2.3.1",),
        ),
        SET,
        "1.2.3.1,1000::",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "PreferDualStack holding its explicitly requested address is not topped up",
        service(
            cluster_ips=DUAL_CLUSTER,
            policy="PreferDualStack",
            annotations={LB_IPS: "1.2.3.0", POOL: "pool5"},
            ingress=("1.2.3.0",),
        ),
        SET,
        "1.2.3.0",
        "pool5",
    ),
    Case(
        "RequireDualStack with one cluster IP",
        service(policy="RequireDualStack", ingress=("1.2.3.0",)),
        CLEAR,
        events=(("Warning", "not enough clusterips"),),
        error=R.NOT_ENOUGH_CLUSTER_IPS,
    ),
    Case(
        "dual cluster IPs, one requested IPv4 address",
        service(cluster_ips=DUAL_CLUSTER, lb_ip="1.2.3.1"),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.FAMILY_MISMATCH,
    ),
    Case(
        "dual cluster IPs, annotation with one IPv4 address",
        service(cluster_ips=DUAL_CLUSTER, annotations={LB_IPS: "1.2.3.1"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.FAMILY_MISMATCH,
    ),
    Case(
        "RequireDualStack with a dual annotation",
        service(
            cluster_ips=DUAL_CLUSTER,
            policy="RequireDualStack",
            annotations={LB_IPS: "1.2.3.0, 1000::"},
        ),
        SET,
        "1.2.3.0,1000::",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "dual annotation on a single-stack service",
        service(annotations={LB_IPS: "1.2.3.0,1000::"}),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.FAMILY_MISMATCH,
    ),
    Case(
        "RequireDualStack holding only IPv6 is re-allocated, IPv4 listed first",
        service(
            cluster_ips=("3000::1", "5.6.7.8"),
            ip_families=("IPv6", "IPv4"),
            policy="RequireDualStack",
            ingress=({"hostname": "foo"}, {"ip": "1000::"}),
        ),
        SET,
        "1.2.3.0,1000::",
        "pool5",
        (IP_ALLOCATED,),
    ),
    Case(
        "namespace-pinned pool",
        service("test-ns1/test"),
        SET,
        "7.8.9.0",
        "pool6",
        (IP_ALLOCATED,),
    ),
    Case(
        "namespace-pinned pool without a priority",
        service("test-ns2/test"),
        SET,
        "16.17.18.0",
        "pool9",
        (IP_ALLOCATED,),
    ),
    Case(
        "selector-pinned pools by priority",
        service(labels={"team": "metallb"}),
        SET,
        "19.20.21.0",
        "pool10",
        (IP_ALLOCATED,),
    ),
    Case(
        "namespace and selector pinned, best priority",
        service("test-ns1/test", labels={"team": "metallb"}),
        SET,
        "25.26.27.0",
        "pool12",
        (IP_ALLOCATED,),
    ),
    Case(
        "three status IPs: Warning, then a fresh address",
        service(ingress=("1.2.3.0", "1.2.3.1", "1.2.3.2")),
        SET,
        "1.2.3.0",
        "pool1",
        (("Warning", "nolbIPsIPFamily"), IP_ALLOCATED),
    ),
    Case(
        "unknown cluster IP family with a status: Warning, status left alone",
        service(cluster_ips=("1.2.3.4", "1.2.3.5"), ingress=("1.2.3.0",)),
        KEEP,
        events=(("Warning", "noclusterIPsIPFamily"),),
        error=R.UNKNOWN_CLUSTER_FAMILY,
    ),
    Case(
        "unknown cluster IP family without a status",
        service(cluster_ips=("1.2.3.4", "1.2.3.5")),
        CLEAR,
        events=(ALLOCATION_FAILED,),
        error=R.UNKNOWN_CLUSTER_FAMILY,
    ),
    Case(
        "valid status and an unparsable request: Warning, status kept",
        service(ingress=("1.2.3.0",), lb_ip="garbage"),
        KEEP,
        events=(("Warning", "LoadBalancerFailed"),),
        error=R.INVALID_REQUEST,
    ),
    Case(
        "current address re-asserted as it is",
        service(ingress=("1.2.3.1",)),
        SET,
        "1.2.3.1",
        "pool1",
    ),
    Case(
        "current address matching the request is kept",
        service(ingress=("1.2.3.1",), annotations={LB_IPS: "1.2.3.1", POOL: "pool5"}),
        SET,
        "1.2.3.1",
        "pool5",
    ),
]


def check(
    decision: converging.Decision, case: Case, a: allocator.Allocator, key: str | None = None
) -> None:
    assert decision.status is case.status, decision
    assert decision.ips == ips(case.ips), decision
    if key is None:
        assert decision.pool == case.pool, decision
    else:  # overlapping pools: the pool already recorded for the key may be kept instead
        holders = {p.name for p in FIXTURE_C if all(p.contains(ip) for ip in decision.ips)}
        assert decision.pool == case.pool or decision.pool in holders, decision
    assert tuple((e.type, e.reason) for e in decision.events) == case.events, decision.events
    assert all(e.message for e in decision.events)
    if case.error is None:
        assert decision.ok, decision
    else:
        assert decision.error is not None and decision.error.reason is case.error, decision
    held = a.allocation(key or case.service.key)
    if case.status is SET:
        assert held == allocator.Allocation(decision.pool or "", ips(case.ips))
    elif case.status is CLEAR:
        assert held is None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_converge(case: Case) -> None:
    a = allocator.Allocator()
    a.set_pools(FIXTURE_C)
    check(converging.converge(a, case.service), case, a)


@pytest.mark.parametrize("seed", range(5))
def test_converge_table_in_any_order_on_one_allocator(seed: int) -> None:
    """MetalLB runs its table shuffled against one controller: what the allocator held for the
    key before must not change the outcome, only the Service as it is now (except which of two
    overlapping pools is recorded: the one already recorded is kept)."""
    a = allocator.Allocator()
    shuffled = list(FIXTURE_C)
    random.Random(seed).shuffle(shuffled)
    a.set_pools(shuffled)
    cases = list(CASES)
    random.Random(seed).shuffle(cases)
    for case in cases:
        svc = replace(case.service, key="shuffled/test")
        check(converging.converge(a, svc), case, a, svc.key)


def test_event_messages_read_like_metallbs() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "1.2.3.0/32")])
    first = converging.converge(a, service("default/one"))
    assert [e.message for e in first.events] == ['Assigned IP ["1.2.3.0"]']
    second = converging.converge(a, service("default/two"))
    assert second.events[0].message.startswith('Failed to allocate IP for "default/two": ')
    assert "no available IPs" in second.events[0].message
    moved = converging.converge(a, service("default/one", ingress=("9.9.9.9",)))
    assert moved.events[0].message.startswith(
        'current IP for "default/one" not allowed by config, will attempt for new IP assignment: '
    )


# --- multi-step scenarios -----------------------------------------------------------------------


@dataclass
class Cluster:
    """Services as stored by the API server, and the controller's allocator."""

    pools: list[allocator.Pool]
    services: dict[str, allocator.ServiceRequest] = field(default_factory=dict)
    alloc: allocator.Allocator = field(default_factory=allocator.Allocator)
    events: list[tuple[str, converging.Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.alloc.set_pools(self.pools)

    def write(self, svc: allocator.ServiceRequest, decision: converging.Decision) -> None:
        if decision.status is SET:
            svc = replace(svc, current_ips=decision.ips)
        elif decision.status is CLEAR:
            svc = replace(svc, current_ips=())
        self.services[svc.key] = svc
        self.events.extend((svc.key, e) for e in decision.events)

    def apply(self, svc: allocator.ServiceRequest) -> converging.Decision:
        """A Service was created or updated (status as the API server has it)."""
        if svc.key in self.services:
            svc = replace(svc, current_ips=self.services[svc.key].current_ips)
        decision = converging.converge(self.alloc, svc)
        self.write(svc, decision)
        if decision.reprocess_all:
            self.reprocess()
        return decision

    def delete(self, key: str) -> None:
        del self.services[key]
        if self.alloc.unassign(key):
            self.reprocess()

    def set_pools(self, pools: list[allocator.Pool]) -> allocator.PoolsChange:
        change = self.alloc.set_pools(pools)
        self.reprocess()
        return change

    def reprocess(self, passes: int = 3) -> None:
        for _ in range(passes):
            again = False
            for svc in converging.reprocess_order(self.services.values()):
                decision = converging.converge(self.alloc, svc)
                self.write(svc, decision)
                again = again or decision.reprocess_all
            if not again:
                return

    def restart(self) -> None:
        self.alloc = allocator.Allocator()
        self.alloc.set_pools(self.pools)
        self.reprocess()

    def status(self, key: str) -> str:
        return ",".join(str(ip) for ip in self.services[key].current_ips)


def test_no_pools_strip_every_service_and_pools_bring_them_back() -> None:
    c = Cluster([])
    decision = c.apply(service("default/a", ingress=("1.2.3.0",)))
    assert decision.status is CLEAR and decision.error is not None
    assert decision.error.reason is R.NO_POOLS and not decision.events
    c.set_pools([pool("p", "1.2.3.0/31")])
    assert c.status("default/a") == "1.2.3.0"
    change = c.set_pools([])
    assert change.evicted == (("default/a", "p"),)
    assert c.status("default/a") == ""


def test_deleting_a_service_recycles_its_address() -> None:
    c = Cluster([pool("p", "1.2.3.0/32")])
    c.apply(service("default/svc1"))
    second = c.apply(service("default/svc2"))
    assert c.status("default/svc1") == "1.2.3.0" and c.status("default/svc2") == ""
    assert second.error is not None and second.error.reason is R.POOL_EXHAUSTED
    assert (second.events[0].type, second.events[0].reason) == ALLOCATION_FAILED
    c.delete("default/svc1")
    assert c.status("default/svc2") == "1.2.3.0"


@pytest.mark.parametrize("how", ["type ClusterIP", "deleted"])
def test_freed_address_goes_to_a_pending_service(how: str) -> None:
    c = Cluster([pool("p", "192.168.10.100/32")])
    c.apply(service("default/a"))
    c.apply(service("default/b"))
    assert (c.status("default/a"), c.status("default/b")) == ("192.168.10.100", "")
    if how == "deleted":
        c.delete("default/a")
    else:
        decision = c.apply(service("default/a", type_="ClusterIP"))
        assert decision.status is CLEAR and decision.reprocess_all
        assert c.status("default/a") == ""
    assert c.status("default/b") == "192.168.10.100"


def test_reassign_only_when_the_pool_goes_away() -> None:
    c = Cluster([pool("default", "1.2.3.0/24", "1000::1/127")])
    c.apply(service("default/a"))
    assert c.status("default/a") == "1.2.3.0"
    c.set_pools([pool("default", "1.2.3.0/24", "1000::1/127"), pool("second", "4.5.6.0/24")])
    assert c.status("default/a") == "1.2.3.0"
    change = c.set_pools([pool("second", "4.5.6.0/24")])
    assert change.evicted == (("default/a", "default"),)
    assert c.status("default/a") == "4.5.6.0"
    assert ("default/a", "ClearAssignment") in [(k, e.reason) for k, e in c.events]


def test_addresses_survive_restarts_even_when_pending_services_sort_first() -> None:
    c = Cluster([pool("p", "192.168.10.100/32", "192.168.20.200/32")])
    for key in ("default/z-a", "default/z-b", "default/a-c", "default/a-d"):
        c.apply(service(key))
    before = {k: c.status(k) for k in c.services}
    assert before == {
        "default/z-a": "192.168.10.100",
        "default/z-b": "192.168.20.200",
        "default/a-c": "",
        "default/a-d": "",
    }
    for _ in range(5):
        c.restart()
        assert {k: c.status(k) for k in c.services} == before


def test_sharing_follows_external_traffic_policy_and_selectors() -> None:
    c = Cluster([pool("p", "192.168.10.0/32")])
    share = {keys.ALLOW_SHARED_IP.name: "share"}

    def svc(key: str, port: int, etp: str, selector: str) -> allocator.ServiceRequest:
        return service(
            key, annotations=share, ports=(("TCP", port),), etp=etp, selector={"app": selector}
        )

    c.apply(svc("default/first", 80, "Cluster", "x"))
    c.apply(svc("default/second", 81, "Cluster", "x"))
    assert c.status("default/first") == c.status("default/second") == "192.168.10.0"
    c.apply(svc("default/second", 81, "Local", "x"))
    assert (c.status("default/first"), c.status("default/second")) == ("192.168.10.0", "")
    c.apply(svc("default/first", 80, "Local", "x"))  # key changes -> reprocess -> second joins
    assert c.status("default/first") == c.status("default/second") == "192.168.10.0"
    c.apply(svc("default/first", 80, "Local", "bar"))
    assert (c.status("default/first"), c.status("default/second")) == ("", "192.168.10.0")
    c.apply(svc("default/second", 81, "Local", "bar"))
    assert c.status("default/first") == c.status("default/second") == "192.168.10.0"


def test_pinned_pool_deleted_then_all_pools_deleted() -> None:
    c = Cluster(
        [
            pool("pool1", "192.168.5.0/32", priority=20, namespaces=frozenset({"test"})),
            pool("pool2", "192.168.10.0/32"),
        ]
    )
    c.apply(service("test/svc"))
    assert c.status("test/svc") == "192.168.5.0"
    assert c.services["test/svc"].current_ips == ips("192.168.5.0")
    c.set_pools([pool("pool2", "192.168.10.0/32")])
    assert c.status("test/svc") == "192.168.10.0"
    decision = converging.converge(c.alloc, c.services["test/svc"])
    assert decision.pool == "pool2"
    c.set_pools([])
    assert c.status("test/svc") == ""


def test_prefer_dual_stack_takes_a_dual_pool_or_the_primary_family() -> None:
    v4, v6 = pool("v4", "192.168.10.0/24"), pool("v6", "fc00::/120")
    dual = pool("dual", "192.168.20.0/24", "fc01::/120")
    prefer = {"cluster_ips": DUAL_CLUSTER, "policy": "PreferDualStack"}
    c = Cluster([v4, v6, dual])
    c.apply(service("default/a", **prefer))  # type: ignore[arg-type]
    assert c.status("default/a") == "192.168.20.0,fc01::"
    c = Cluster([v4, v6])
    c.apply(service("default/a", **prefer))  # type: ignore[arg-type]
    assert c.status("default/a") == "192.168.10.0"
    c.apply(service("default/b", **prefer, ip_families=("IPv6", "IPv4")))  # type: ignore[arg-type]
    assert c.status("default/b") == "fc00::"


def test_prefer_dual_stack_grows_in_place_and_does_not_jump() -> None:
    prefer = {"cluster_ips": DUAL_CLUSTER, "policy": "PreferDualStack"}
    c = Cluster([pool("single", "192.168.10.0/24")])
    c.apply(service("default/a", **prefer))  # type: ignore[arg-type]
    assert c.status("default/a") == "192.168.10.0"
    again = c.apply(service("default/a", **prefer))  # type: ignore[arg-type]
    assert again.status is SET and again.ips == ips("192.168.10.0")
    assert [(e.type, e.reason) for e in again.events] == [("Normal", "AdditionalAssignFailed")]
    # A new dual-stack pool does not lure it away.
    c.set_pools([pool("single", "192.168.10.0/24"), pool("dual", "192.168.30.0/24", "fc02::/120")])
    assert c.status("default/a") == "192.168.10.0"
    # Extending its own pool to dual-stack adds the IPv6 address and keeps the IPv4 one.
    c.set_pools([pool("single", "192.168.10.0/24", "fc00::/120"), pool("dual", "192.168.30.0/24")])
    assert c.status("default/a") == "192.168.10.0,fc00::"
    topped = [e for k, e in c.events if e.reason == "IPAllocated" and "additional" in e.message]
    assert topped


def test_single_stack_prefer_service_is_not_topped_up() -> None:
    """MetalLB would add an IPv6 address here and strip it on the next pass; we do neither."""
    c = Cluster([pool("dual", "192.168.10.0/24", "fc00::/120")])
    c.apply(service("default/a", policy="PreferDualStack"))
    for _ in range(3):
        decision = c.apply(service("default/a", policy="PreferDualStack"))
        assert decision.ips == ips("192.168.10.0") and not decision.events


def test_reprocess_when_the_sharing_key_changes_or_room_is_freed() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "10.0.0.0/30")])
    first = converging.converge(a, service("default/a"))
    assert first.ok and not first.reprocess_all
    keyed = service(
        "default/a", ingress=("10.0.0.0",), annotations={keys.ALLOW_SHARED_IP.name: "k"}
    )
    assert converging.converge(a, keyed).reprocess_all
    assert not converging.converge(a, keyed).reprocess_all
    gone = converging.converge(a, replace(keyed, load_balancer=False))
    assert gone.status is CLEAR and gone.reprocess_all
    # Losing an address that no pool holds any more frees no room: no reprocess.
    converging.converge(a, service("default/b"))
    a.set_pools([pool("p", "10.0.0.2/31")])
    lost = converging.converge(a, service("default/b", ingress=("10.0.0.0",)))
    assert lost.status is SET and lost.ips == ips("10.0.0.2") and not lost.reprocess_all


def test_reprocess_order_puts_assigned_services_first() -> None:
    order = converging.reprocess_order(
        [
            service("default/a"),
            service("default/b", ingress=("1.2.3.4",)),
            service("default/c", ingress=("1.2.3.5", "1000::1")),
            service("default/d", ingress=("1.2.3.6",)),
        ]
    )
    assert [s.key for s in order] == ["default/c", "default/b", "default/d", "default/a"]


# --- request parsing ----------------------------------------------------------------------------

REQUESTS = [
    ({}, None, "", None),
    ({LB_IPS: "1.2.3.4"}, None, "1.2.3.4", None),
    ({LB_IPS: " 1.2.3.4 , 1000::1 "}, None, "1.2.3.4,1000::1", None),
    ({LB_IPS: "1000::1,1.2.3.4"}, None, "1000::1,1.2.3.4", None),  # order kept
    ({LB_IPS: "1.2.3.4", keys.LOAD_BALANCER_IPS.legacy: "5.6.7.8"}, None, "1.2.3.4", None),
    ({keys.LOAD_BALANCER_IPS.legacy: "5.6.7.8"}, None, "5.6.7.8", None),
    ({LB_IPS: ""}, "1.2.3.4", "1.2.3.4", None),  # an empty annotation counts as absent
    ({}, "1.2.3.4", "1.2.3.4", None),
    ({}, "::ffff:1.2.3.4", "1.2.3.4", None),  # Go's ParseIP makes it IPv4
    ({LB_IPS: "1.2.3.4"}, "1.2.3.4", "", "service can not have both"),
    ({LB_IPS: "1.2.3.4,nope"}, None, "", 'invalid metallb.io/loadBalancerIPs: "1.2.3.4,nope"'),
    ({LB_IPS: "1.2.3.4,"}, None, "", "invalid metallb.io/loadBalancerIPs"),
    ({LB_IPS: "1.2.3.4,1.2.3.5"}, None, "", "same address family"),
    ({LB_IPS: "1.2.3.4,1000::1,1.2.3.5"}, None, "", "invalid ips length 3"),
    ({}, "fe80::1%eth0", "", 'invalid spec.loadBalancerIP "fe80::1%eth0"'),
    ({}, "01.2.3.4", "", "invalid spec.loadBalancerIP"),
]


@pytest.mark.parametrize(("annotations", "spec", "expect", "error"), REQUESTS)
def test_requested_ips(
    annotations: dict[str, str], spec: str | None, expect: str, error: str | None
) -> None:
    got = requests.requested_ips(annotations, spec)
    assert got.ips == ips(expect)
    if error is None:
        assert got.error is None
        assert (got.family is None) == (not expect)
    else:
        assert got.error is not None and error in got.error
        assert got.family is None


def test_annotation_precedence_and_keys() -> None:
    new, old = keys.ALLOW_SHARED_IP.name, keys.ALLOW_SHARED_IP.legacy
    assert requests.sharing_key({}) is None
    assert requests.sharing_key({new: ""}) == ""
    assert requests.sharing_key({old: "b"}) == "b"
    assert requests.sharing_key({new: "", old: "b"}) == ""  # present wins, even empty
    assert requests.requested_pool({}) is None
    assert requests.requested_pool({POOL: ""}) is None
    assert requests.requested_pool({keys.ADDRESS_POOL.legacy: "old", POOL: "new"}) == "new"
    assert requests.backend_key({"b": "2", "a": "1"}, "Local") == "a=1,b=2"
    assert requests.backend_key({"b": "2", "a": "1"}, "Cluster") == ""
    assert requests.backend_key(None, "Local") == ""


def test_cluster_family_and_policy() -> None:
    F = requests.ServiceFamily
    assert requests.cluster_family([]) is None
    assert requests.cluster_family([], "") is None
    assert requests.cluster_family([], "10.0.0.1") is F.IPV4
    assert requests.cluster_family(["fd00::1"]) is F.IPV6
    assert requests.cluster_family(["fd00::1", "10.0.0.1"]) is F.DUAL
    assert requests.cluster_family(["10.0.0.2", "10.0.0.1"]) is F.UNKNOWN
    assert requests.cluster_family(["None"]) is F.UNKNOWN
    assert requests.primary_family(["IPv6", "IPv4"]) == 6
    assert requests.primary_family([]) == 4
    assert requests.FamilyPolicy.parse(None) is requests.FamilyPolicy.SINGLE_STACK
    assert (
        requests.FamilyPolicy.parse("RequireDualStack") is requests.FamilyPolicy.REQUIRE_DUAL_STACK
    )
