"""The differential conformance harness (hack/conformance.py) and its corpus
(hack/conformance_cases.py), without a cluster: normalising what a user sees, classifying
refusals, comparing with and without deliberate differences, settling with a fake clock, running
a case against fakes, and every case's manifests checked for shape and addresses."""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from hack import conformance, conformance_cases
from hack import lab as network_lab
from ironlb import model, parsing, validation

NS = "cf-test"
SYSTEM = conformance.METALLB_NAMESPACE


# --- builders for listed objects ----------------------------------------------------------------


def svc(
    name: str,
    *,
    uid: str,
    ips: Sequence[str] = (),
    annotations: Mapping[str, str] | None = None,
    namespace: str = NS,
    hostname: str | None = None,
) -> dict[str, Any]:
    entries: list[dict[str, str]] = [{"ip": ip} for ip in ips]
    if hostname:
        entries.append({"hostname": hostname})
    return {
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "annotations": dict(annotations or {}),
        },
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": entries}},
    }


def event(uid: str, reason: str, namespace: str = NS) -> dict[str, Any]:
    return {
        "kind": "Event",
        "metadata": {"namespace": namespace},
        "involvedObject": {"uid": uid},
        "reason": reason,
    }


def pool_item(name: str, uid: str, **status: int) -> dict[str, Any]:
    return {
        "kind": "IPAddressPool",
        "metadata": {"name": name, "namespace": SYSTEM, "uid": uid},
        "status": status,
    }


def l2_status(service: str, node: str, interfaces: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "kind": "ServiceL2Status",
        "metadata": {"name": f"l2-{node}", "namespace": SYSTEM},
        "status": {
            "node": node,
            "serviceName": service,
            "serviceNamespace": NS,
            "interfaces": [{"name": i} for i in interfaces],
        },
    }


def bgp_status(service: str, node: str, peers: Sequence[str]) -> dict[str, Any]:
    return {
        "kind": "ServiceBGPStatus",
        "metadata": {"name": f"bgp-{node}", "namespace": SYSTEM},
        "status": {"node": node, "serviceName": service, "serviceNamespace": NS, "peers": peers},
    }


def endpoint_slice(service: str, nodes: Sequence[str], ready: bool = True) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {"namespace": NS, "labels": {"kubernetes.io/service-name": service}},
        "endpoints": [{"nodeName": n, "conditions": {"ready": ready}} for n in nodes],
    }


def observation(**fields: Any) -> conformance.Observation:
    return conformance.Observation(**fields)


# --- normalising ----------------------------------------------------------------------------------


def test_ingress_is_canonical_and_sorted_v4_first_hostnames_ignored() -> None:
    item = svc(
        "web",
        uid="u",
        ips=["fd00:250:0:0::200", "10.250.0.210", "10.250.0.9"],
        hostname="lb.example",
    )
    assert conformance.ingress(item) == ("10.250.0.9", "10.250.0.210", "fd00:250::200")


def test_only_annotations_the_controller_writes_are_kept() -> None:
    item = svc(
        "web",
        uid="u",
        annotations={
            "metallb.io/ip-allocated-from-pool": "pool-a",
            "metallb.io/address-pool": "pool-a",
            "metallb.universe.tf/allow-shared-ip": "k",
            "metallb.io/loadBalancerIPs": "10.250.0.200",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
    )
    assert conformance.written_annotations(item) == (
        ("metallb.io/ip-allocated-from-pool", "pool-a"),
    )


def listed() -> list[dict[str, Any]]:
    return [
        svc("web", uid="s1", ips=["10.250.0.200"]),
        svc("elsewhere", uid="s9", namespace="other"),
        event("s1", "IPAllocated"),
        event("s1", "nodeAssigned"),
        event("s1", "nodeAssigned"),
        event("old-uid", "AllocationFailed"),  # a deleted namesake's Event
        event("s9", "IPAllocated", namespace="other"),
        pool_item("pool-a", "p1", assignedIPv4=1, availableIPv4=3),
        event("p1", "InvalidConfiguration", namespace=SYSTEM),
        endpoint_slice("web", ["node2"]),
        endpoint_slice("web", ["node3"], ready=False),
        l2_status("web", "node2", ["eth0"]),
        bgp_status("web", "node1", ["tor-b", "tor-a"]),
        bgp_status("web", "node3", ["tor-a"]),
        l2_status("gone", "node1"),
    ]


def test_normalise_keeps_what_a_user_sees() -> None:
    seen = conformance.normalise(listed(), [], [NS])
    assert set(seen.services) == {f"{NS}/web", f"{NS}/gone"}
    web = seen.services[f"{NS}/web"]
    assert web.ingress == ("10.250.0.200",)
    assert web.events == frozenset({"IPAllocated", "nodeAssigned"})
    assert web.endpoints == ("node2",)
    assert web.l2 == (("node2", ("eth0",)),)
    assert web.bgp == (("node1", ("tor-a", "tor-b")), ("node3", ("tor-a",)))
    gone = seen.services[f"{NS}/gone"]
    assert not gone.exists and gone.l2 == (("node1", ()),)
    pool = seen.objects["IPAddressPool/pool-a"]
    assert dict(pool.status) == {
        "assignedIPv4": 1,
        "assignedIPv6": None,
        "availableIPv4": 3,
        "availableIPv6": None,
    }
    assert pool.events == frozenset({"InvalidConfiguration"})
    assert seen.configuration == {}


def test_status_object_without_status_yet_is_placed_by_its_labels() -> None:
    item = {
        "kind": "ServiceL2Status",
        "metadata": {
            "namespace": SYSTEM,
            "labels": {
                "metallb.io/node": "node1",
                "metallb.io/service-name": "web",
                "metallb.io/service-namespace": NS,
            },
        },
    }
    seen = conformance.normalise([svc("web", uid="s1"), item], None, [NS])
    assert seen.services[f"{NS}/web"].l2 == (("node1", ()),)
    assert seen.configuration is None


def test_flatten_names_every_field_by_path() -> None:
    seen = conformance.normalise(
        listed(),
        [{"metadata": {"name": "controller", "namespace": SYSTEM}, "status": {"result": "Valid"}}],
        [NS],
    )
    flat = conformance.flatten(seen)
    base = f"service/{NS}/web"
    assert flat[f"{base}/ingress"] == ("10.250.0.200",)
    assert flat[f"{base}/event/nodeAssigned"] is True
    assert flat[f"{base}/l2"] == ("node2",)
    assert flat[f"{base}/l2/node2/interfaces"] == ("eth0",)
    assert flat[f"{base}/bgp"] == ("node1", "node3")
    assert flat[f"{base}/bgp/node1/peers"] == ("tor-a", "tor-b")
    assert flat["IPAddressPool/pool-a/status/availableIPv4"] == 3
    assert flat["IPAddressPool/pool-a/event/InvalidConfiguration"] is True
    assert flat["ConfigurationState/controller/result"] == "Valid"
    assert flat["settled"] is True
    assert f"service/{NS}/gone/ingress" not in flat  # known only from a status object
    not_served = conformance.flatten(conformance.normalise(listed(), None, [NS]))
    assert not_served["ConfigurationState"] == conformance.NOT_SERVED


class FakeKubectl:
    """A getter answering from canned lists; ConfigurationStates may be unserved."""

    def __init__(self, items: list[dict[str, Any]], serves_states: bool = True) -> None:
        self.items = items
        self.serves_states = serves_states
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, args: Sequence[str]) -> Any:
        self.calls.append(tuple(args))
        assert args[0] == "get" and tuple(args[-2:]) == ("-o", "json")
        namespace = args[args.index("-n") + 1]
        if args[1] == "configurationstates":
            if not self.serves_states:
                raise conformance.NotServed("the server doesn't have a resource type")
            return {"items": []}
        return {"items": [i for i in self.items if i["metadata"].get("namespace") == namespace]}


def test_observe_reads_each_namespace_once_and_tolerates_an_unserved_kind() -> None:
    kubectl = FakeKubectl(listed(), serves_states=False)
    seen = conformance.observe(kubectl, [NS])
    assert len(kubectl.calls) == 3
    assert kubectl.calls[0][1] == conformance.SERVICE_NAMESPACE_KINDS
    assert seen.configuration is None
    assert seen.services[f"{NS}/web"].ingress == ("10.250.0.200",)
    assert conformance.observe(FakeKubectl(listed()), [NS]).configuration == {}


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (
            'kubectl apply failed: The IPAddressPool "bad" is invalid: spec.addresses[0]: Invalid '
            'value: "10.250.0.300/32": must be a CIDR',
            conformance.SCHEMA,
        ),
        (
            'kubectl apply failed: Error from server (BadRequest): error when creating "STDIN": '
            'strict decoding error: unknown field "spec.serviceSelectors"',
            conformance.SCHEMA,
        ),
        (  # MetalLB's wording
            'kubectl apply failed: Error from server (Forbidden): error when creating "STDIN": '
            'admission webhook "ipaddresspoolvalidationwebhook.metallb.io" denied the request: '
            'CIDR "10.250.0.204/30" in pool "overlapping" overlaps with already defined CIDR',
            conformance.WEBHOOK_OVERLAP,
        ),
        (  # ironlb's wording
            'kubectl apply failed: Error from server (Forbidden): error when creating "STDIN": '
            'admission webhook "ipaddresspools.ironlb" denied the request: IPAddressPool/b: '
            "spec.addresses[0]: 10.250.0.204/30 overlaps with 10.250.0.200/29 in IPAddressPool 'a'",
            conformance.WEBHOOK_OVERLAP,
        ),
        (
            'kubectl apply failed: Error from server (Forbidden): error when creating "STDIN": '
            'admission webhook "x.metallb.io" denied the request: resource must be created in '
            "metallb-system namespace",
            conformance.WEBHOOK_OTHER,
        ),
        (
            "kubectl apply failed: Error from server (InternalError): Internal error occurred: "
            'failed calling webhook "ipaddresspoolvalidationwebhook.metallb.io": '
            "connection refused",
            None,
        ),
        ("kubectl apply failed: Unable to connect to the server: timed out", None),
        ("kubectl apply failed: something else entirely", None),
    ],
)
def test_refusals_are_classed_and_failures_to_judge_are_not(text: str, refusal: str | None) -> None:
    assert conformance.refusal_class(text) == refusal


# --- comparing ----------------------------------------------------------------------------------


def base(**services: conformance.ServiceView) -> conformance.Observation:
    return observation(
        services={f"{NS}/{k}": v for k, v in services.items()},
        configuration={},
        case="some-case",
    )


def test_equal_observations_have_no_difference() -> None:
    view = conformance.ServiceView(type="LoadBalancer", ingress=("10.250.0.200",))
    assert conformance.compare(base(web=view), base(web=view)) == []


def test_a_different_address_is_an_unexplained_difference() -> None:
    ours = base(web=conformance.ServiceView(ingress=("10.250.0.200",)))
    theirs = base(web=conformance.ServiceView(ingress=("10.250.0.201",)))
    [diff] = conformance.compare(ours, theirs)
    assert (diff.case, diff.step, diff.path) == ("some-case", 0, f"service/{NS}/web/ingress")
    assert (diff.ironlb, diff.metallb) == (("10.250.0.200",), ("10.250.0.201",))
    assert not diff.explained
    assert "ironlb ('10.250.0.200',), MetalLB ('10.250.0.201',)" in diff.line()


def test_deliberate_differences_are_explained_by_their_row() -> None:
    ours = observation(
        configuration={"controller": "Valid"},
        refused={"IPAddressPool/metallb-system/bad": conformance.SCHEMA},
        case="malformed-objects",
    )
    theirs = observation(
        configuration=None,
        refused={"IPAddressPool/metallb-system/bad": conformance.WEBHOOK_OTHER},
        case="malformed-objects",
    )
    diffs = {d.path: d for d in conformance.compare(ours, theirs)}
    assert diffs["ConfigurationState"].explained_by == "configuration-state-v0.15.2"
    assert diffs["ConfigurationState/controller/result"].explained_by == (
        "configuration-state-v0.15.2"
    )
    assert diffs["refused/IPAddressPool/metallb-system/bad"].explained_by == (
        "schema-before-webhook"
    )
    assert conformance.summary(1, list(diffs.values())) == {
        "conformance_cases": 1,
        "conformance_differences": 3,
        "conformance_unexplained": 0,
    }


def test_a_row_explains_only_its_values_and_its_cases() -> None:
    # Accepted by ironlb, refused by MetalLB: not the schema-before-webhook row's values.
    ours = observation(case="malformed-objects")
    theirs = observation(
        refused={"IPAddressPool/metallb-system/bad": conformance.WEBHOOK_OTHER},
        case="malformed-objects",
    )
    [diff] = conformance.compare(ours, theirs)
    assert not diff.explained
    # The pool tie-break row covers its own case only.
    a = conformance.ServiceView(ingress=("10.250.0.200",))
    b = conformance.ServiceView(ingress=("10.250.0.210",))
    tie = conformance.compare(
        dataclasses.replace(base(web=a), case="two-unrestricted-pools"),
        dataclasses.replace(base(web=b), case="two-unrestricted-pools"),
    )
    assert [d.explained_by for d in tie] == ["pool-tie-break"]
    assert not conformance.compare(base(web=a), base(web=b))[0].explained


def test_a_custom_table_is_honoured() -> None:
    table = {
        "mine": conformance.Deliberate(
            paths=("service/*/event/nodeAssigned",), reason="because", metallb=(None,)
        )
    }
    ours = base(web=conformance.ServiceView(events=frozenset({"nodeAssigned"})))
    theirs = base(web=conformance.ServiceView())
    assert [d.explained_by for d in conformance.compare(ours, theirs, table)] == ["mine"]
    assert [d.explained_by for d in conformance.compare(ours, theirs, {})] == [None]


def test_unsettled_is_a_difference() -> None:
    ours = base()
    theirs = dataclasses.replace(base(), settled=False)
    [diff] = conformance.compare(ours, theirs)
    assert (diff.path, diff.ironlb, diff.metallb) == ("settled", True, False)


def test_observations_of_different_steps_are_not_compared() -> None:
    with pytest.raises(ValueError):
        conformance.compare(base(), dataclasses.replace(base(), step=1))
    one = conformance.CaseRun("some-case", (base(),))
    two = conformance.CaseRun("some-case", (base(), base()))
    with pytest.raises(ValueError):
        conformance.compare_runs(one, two)


def run_of(case: str, *ingress: str) -> conformance.CaseRun:
    """A one-step run of `case`, its Service `web` at `ingress`."""
    view = conformance.ServiceView(type="LoadBalancer", ingress=ingress)
    return conformance.CaseRun(
        case, (observation(case=case, step=0, services={f"{NS}/web": view}),)
    )


def test_all_runs_are_compared_case_by_case_in_ironlbs_order() -> None:
    ours = [run_of("a", "10.0.0.1"), run_of("b", "10.0.0.1")]
    theirs = [run_of("b", "10.0.0.2"), run_of("a", "10.0.0.3")]
    differences = conformance.compare_all(ours, theirs)
    assert [(d.case, d.metallb) for d in differences] == [
        ("a", ("10.0.0.3",)),
        ("b", ("10.0.0.2",)),
    ]
    assert not any(d.explained for d in differences)
    assert conformance.compare_all(ours, ours) == []


def test_a_case_only_one_system_ran_is_not_compared() -> None:
    ours = [run_of("a", "10.0.0.1"), run_of("b", "10.0.0.1")]
    assert conformance.compare_all(ours, []) == []  # MetalLB ran nothing yet
    [difference] = conformance.compare_all(ours, [run_of("a", "10.0.0.2")])
    assert difference.case == "a"
    assert conformance.compare_all([run_of("a", "10.0.0.1")], [run_of("c", "10.0.0.2")]) == []


def test_all_runs_are_compared_with_the_table_given() -> None:
    table = {"any-web": conformance.Deliberate(paths=("service/*",), reason="because")}
    [difference] = conformance.compare_all(
        [run_of("a", "10.0.0.1")], [run_of("a", "10.0.0.2")], table
    )
    assert difference.explained_by == "any-web"


def test_every_deliberate_row_renders_into_the_doc_table() -> None:
    text = conformance.render_deliberate()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(conformance.DELIBERATE)
    for name, entry in conformance.DELIBERATE.items():
        assert f"| `{name}` |" in text
        assert entry.reason in text
    assert "| `configuration-state-v0.15.2` | both | all |" in text
    assert "| `native-bgp-limits` | native | `bgp-beyond-native` |" in text


def test_a_row_explains_only_in_the_metallb_modes_it_names() -> None:
    """MetalLB's FRR mode accepts what its native mode refuses (IPv6 BGP pools, large
    communities): the native-only row must not explain a difference seen against FRR mode."""
    assert "native-bgp-limits" in conformance.deliberate_for("native")
    assert "native-bgp-limits" not in conformance.deliberate_for("frr")
    assert "pool-tie-break" in conformance.deliberate_for("frr")


def test_case_restricted_rows_name_cases_of_the_corpus() -> None:
    names = [c.name for c in conformance_cases.CASES]
    for name, entry in conformance.DELIBERATE.items():
        for pattern in entry.cases:
            assert fnmatch.filter(names, pattern), f"{name}: no case matches {pattern}"


# --- settling -----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def reader(values: Sequence[int], clock: Clock) -> Any:
    """Reads returning an observation per value (the last one repeats)."""
    sequence: Iterator[int] = iter(values)
    last = [values[0]]

    def read() -> conformance.Observation:
        last[0] = next(sequence, last[0])
        return base(web=conformance.ServiceView(ingress=(f"10.250.0.{200 + last[0]}",)))

    return read


def ingress_of(seen: conformance.Observation) -> tuple[str, ...]:
    return seen.services[f"{NS}/web"].ingress


def test_settled_after_three_equal_reads_a_second_apart() -> None:
    clock = Clock()
    seen = conformance.settle(
        reader([0, 1, 1, 1, 1], clock), 60, sleep=clock.sleep, clock=clock.monotonic
    )
    assert seen.settled and ingress_of(seen) == ("10.250.0.201",)
    assert clock.sleeps == [1.0, 1.0, 1.0]  # 4 reads: one change, then three equal


def test_never_settling_is_bounded_and_says_so() -> None:
    clock = Clock()
    values = list(range(40))
    seen = conformance.settle(reader(values, clock), 5, sleep=clock.sleep, clock=clock.monotonic)
    assert not seen.settled
    assert clock.now == pytest.approx(5.0)


def test_not_ready_reads_do_not_count() -> None:
    clock = Clock()

    def ready(seen: conformance.Observation) -> bool:
        return clock.now >= 3

    seen = conformance.settle(
        reader([0], clock), 60, ready=ready, sleep=clock.sleep, clock=clock.monotonic
    )
    assert seen.settled
    assert clock.now == pytest.approx(5.0)  # ready from t=3, then two more equal reads


def pool_reader(written_at: float, clock: Clock) -> Any:
    """Reads of one IPAddressPool whose counters are written from `written_at` on."""

    def read() -> conformance.Observation:
        counters = (1, 0, 3, 0) if clock.now >= written_at else (None,) * 4
        status = tuple(zip(conformance.POOL_STATUS_FIELDS, counters, strict=True))
        return conformance.Observation(
            objects={"IPAddressPool/p": conformance.ObjectView(status=status)}
        )

    return read


def test_equal_reads_of_unwritten_counters_wait_for_them() -> None:
    """r22: MetalLB's controller, just started, had not written a pool's counters for three
    reads a second apart; that counted as settled and differed from ironlb's."""
    clock = Clock()
    seen = conformance.settle(
        pool_reader(6.0, clock),
        60,
        complete=conformance.counters_written,
        sleep=clock.sleep,
        clock=clock.monotonic,
    )
    assert seen.settled and conformance.counters_written(seen)
    assert clock.now == pytest.approx(6.0)


def test_counters_never_written_settle_after_the_grace() -> None:
    clock = Clock()
    seen = conformance.settle(
        pool_reader(1000.0, clock),
        60,
        complete=conformance.counters_written,
        grace=10.0,
        sleep=clock.sleep,
        clock=clock.monotonic,
    )
    assert seen.settled and not conformance.counters_written(seen)
    assert clock.now == pytest.approx(12.0)  # settled at 2 s, then the 10 s grace


def test_endpoints_ready_wants_the_declared_nodes() -> None:
    ready = conformance.endpoints_ready({f"{NS}/web": ("node1",)})
    assert not ready(base())
    assert not ready(base(web=conformance.ServiceView(endpoints=())))
    assert ready(base(web=conformance.ServiceView(endpoints=("node1",))))


# --- running a case -----------------------------------------------------------------------------


class FakeCluster:
    """Applies by remembering, refuses what it is told to, observes from a canned function."""

    def __init__(self, refuse: Mapping[str, str] | None = None) -> None:
        self.refuse = dict(refuse or {})
        self.applied: list[str] = []
        self.deleted: list[list[str]] = []

    def apply(self, manifest: conformance.Manifest) -> None:
        key = conformance.ref(manifest)
        if key in self.refuse:
            raise conformance.Refused(self.refuse[key], "denied")
        self.applied.append(key)

    def delete(self, manifests: Sequence[conformance.Manifest]) -> None:
        self.deleted.append([conformance.ref(m) for m in manifests])


def test_run_case_records_refusals_observes_each_step_and_cleans_up() -> None:
    case = conformance_cases.exhausted_pool_recycles()
    ns = case.namespaces[0]
    cluster = FakeCluster(refuse={f"Service/{ns}/b": conformance.WEBHOOK_OTHER})
    clock = Clock()
    asked: list[Sequence[str]] = []

    def observe(namespaces: Sequence[str]) -> conformance.Observation:
        asked.append(namespaces)
        return conformance.Observation(
            services={
                f"{ns}/{n}": conformance.ServiceView()
                for n in ("a", "b")
                if f"Service/{ns}/{n}" in cluster.applied
            }
        )

    run = conformance.run_case(
        case,
        cluster.apply,
        observe,
        30,
        delete=cluster.delete,
        sleep=clock.sleep,
        clock=clock.monotonic,
    )
    assert run.case == case.name and len(run.observations) == len(case.steps)
    assert [o.step for o in run.observations] == [0, 1, 2, 3]
    assert all(o.case == case.name and o.settled for o in run.observations)
    assert run.observations[2].refused == {f"Service/{ns}/b": conformance.WEBHOOK_OTHER}
    assert run.observations[3].refused == {}
    assert set(asked) == {(ns,)}
    # The step's own deletion, then the teardown: the pool before its namespace; b was refused.
    assert cluster.deleted == [
        [f"Service/{ns}/a"],
        [f"IPAddressPool/{SYSTEM}/one", f"Namespace//{ns}"],
    ]


def test_run_case_cleans_up_when_observing_fails() -> None:
    case = conformance_cases.auto_lowest_free()
    cluster = FakeCluster()

    def observe(namespaces: Sequence[str]) -> conformance.Observation:
        raise RuntimeError("apiserver gone")

    with pytest.raises(RuntimeError):
        conformance.run_case(case, cluster.apply, observe, 30, delete=cluster.delete)
    assert cluster.deleted == [
        [f"IPAddressPool/{SYSTEM}/pool-a", f"Namespace//{case.namespaces[0]}"]
    ]


def test_teardown_order_frees_addresses_before_pools_and_namespaces_last() -> None:
    case = conformance_cases.bgp_announce()
    everything = conformance.live_manifests(case, len(case.steps) - 1).values()
    kinds = [m["kind"] for m in conformance.teardown_order(everything)]
    assert kinds.index("Service") < kinds.index("IPAddressPool")
    assert kinds.index("BGPAdvertisement") < kinds.index("IPAddressPool")
    assert kinds[-1] == "Namespace"


def test_expected_endpoints_follow_the_case_pods() -> None:
    case = conformance_cases.l2_announce()
    ns = case.namespaces[0]

    def expected(case: conformance.Case, step: int) -> dict[str, tuple[str, ...]]:
        return conformance.expected_endpoints(conformance.live_manifests(case, step).values())

    assert expected(case, 0) == {}
    assert expected(case, 1) == {
        f"{ns}/cluster": ("node1",),
        f"{ns}/local": ("node2",),
        f"{ns}/unadvertised": ("node1",),
    }
    recycled = conformance_cases.exhausted_pool_recycles()
    assert set(expected(recycled, 3)) == {f"{recycled.namespaces[0]}/b"}  # a was deleted in step 3


# --- the corpus ---------------------------------------------------------------------------------

CASES = conformance_cases.CASES
KNOWN = {
    ("v1", "Namespace"),
    ("v1", "Service"),
    ("v1", "Pod"),
    ("metallb.io/v1beta1", "IPAddressPool"),
    ("metallb.io/v1beta1", "L2Advertisement"),
    ("metallb.io/v1beta1", "BGPAdvertisement"),
    ("metallb.io/v1beta1", "Community"),
    ("metallb.io/v1beta2", "BGPPeer"),
}
# The spec fields MetalLB v0.15.2 serves (api/v1beta1, api/v1beta2 of that module): a field it
# lacks would be refused by a strict apply there and the case would compare CRDs, not behaviour.
METALLB_FIELDS = {
    "IPAddressPool": {"addresses", "autoAssign", "avoidBuggyIPs", "serviceAllocation"},
    "L2Advertisement": {"ipAddressPools", "ipAddressPoolSelectors", "nodeSelectors", "interfaces"},
    "BGPAdvertisement": {
        "aggregationLength",
        "aggregationLengthV6",
        "localPref",
        "communities",
        "ipAddressPools",
        "ipAddressPoolSelectors",
        "nodeSelectors",
        "peers",
    },
    "BGPPeer": {"myASN", "peerASN", "peerAddress", "peerPort", "holdTime", "nodeSelectors"},
    "Community": {"communities"},
}
SERVICE_ALLOCATION_FIELDS = {"priority", "namespaces", "namespaceSelectors", "serviceSelectors"}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def lab_networks() -> list[Network]:
    out: list[Network] = []
    for first, last in (network_lab.L2_POOL_V4, network_lab.L2_POOL_V6):
        out += ipaddress.summarize_address_range(first, last)
    return [*out, network_lab.BGP_POOL_V4, network_lab.BGP_POOL_V6]


def inside_lab(entry: str) -> bool | None:
    """Whether a pool entry, address or range lies inside the lab's pools; None if it does not
    parse (a deliberately malformed entry)."""
    try:
        if "-" in entry:
            start, end = (ipaddress.ip_address(p.strip()) for p in entry.split("-", 1))
            ends = [start, end]
        elif "/" in entry:
            network = ipaddress.ip_network(entry, strict=False)
            ends = [network.network_address, network.broadcast_address]
        else:
            ends = [ipaddress.ip_address(entry.strip())]
    except ValueError:
        return None
    return all(any(e in net for net in lab_networks()) for e in ends)


def manifests(case: conformance.Case) -> list[conformance.Manifest]:
    return [m for step in case.steps for m in (*step.apply, *step.delete)]


def addresses_of(manifest: conformance.Manifest) -> list[str]:
    spec = manifest.get("spec") or {}
    if manifest["kind"] == "IPAddressPool":
        return list(spec["addresses"])
    if manifest["kind"] == "Service":
        annotations = manifest["metadata"].get("annotations") or {}
        out = [a for a in str(annotations.get("metallb.io/loadBalancerIPs", "")).split(",") if a]
        return [*out, *([spec["loadBalancerIP"]] if "loadBalancerIP" in spec else [])]
    return []


def test_the_corpus_has_25_to_40_uniquely_named_cases_and_a_quick_set() -> None:
    names = [c.name for c in CASES]
    assert 25 <= len(names) <= 40
    assert len(set(names)) == len(names)
    assert 4 <= len(conformance_cases.QUICK) <= 10
    for case in CASES:
        assert case.about and "\n" not in case.about
        assert case.steps and all(s.apply or s.delete for s in case.steps)
        assert conformance_cases.by_name(case.name) is case


def test_each_case_owns_its_namespaces() -> None:
    seen: dict[str, str] = {}
    for case in CASES:
        assert case.namespaces, case.name
        for ns in case.namespaces:
            assert len(ns) <= 63 and ns.startswith(conformance_cases.NAMESPACE_PREFIX)
            assert seen.setdefault(ns, case.name) == case.name, f"{ns} in two cases"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_manifests_are_well_formed(case: conformance.Case) -> None:
    for step_index, step in enumerate(case.steps):
        created = {
            m["metadata"]["name"]
            for earlier in case.steps[: step_index + 1]
            for m in earlier.apply
            if m["kind"] == "Namespace"
        }
        for m in (*step.apply, *step.delete):
            assert (m["apiVersion"], m["kind"]) in KNOWN, m
            meta = m["metadata"]
            assert meta["name"]
            if m["kind"] == "Namespace":
                continue
            assert meta["namespace"], m
            if m["kind"] in METALLB_FIELDS:
                assert set(m["spec"]) <= METALLB_FIELDS[m["kind"]], m
                allocation = m["spec"].get("serviceAllocation") or {}
                assert set(allocation) <= SERVICE_ALLOCATION_FIELDS
                if meta["namespace"] != SYSTEM:
                    assert case.invalid, f"{case.name}: {m['kind']} outside {SYSTEM}"
                    assert meta["namespace"] in created
            else:
                assert meta["namespace"] in created, f"{case.name}: {meta['namespace']} not made"
            if m["kind"] == "Pod":
                node = m["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                assert node in {network_lab.node_name(i) for i in (1, 2, 3)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_addresses_stay_inside_the_lab_pools(case: conformance.Case) -> None:
    """Every address a case names is in the lab's pools. A pool entry that is no address at all
    belongs to a case of refused objects; a requested address that is none is a request the
    controller turns down (a Warning), so any case may hold one."""
    for m in manifests(case):
        for entry in addresses_of(m):
            inside = inside_lab(entry)
            if inside is None:
                assert case.invalid or m["kind"] == "Service", f"{case.name}: {entry!r}"
            else:
                assert inside, f"{case.name}: {entry} is outside the lab's pools"
        if m["kind"] == "BGPPeer":
            assert m["spec"]["peerAddress"] in (
                str(network_lab.TOR_LAN_V4),
                str(network_lab.TOR_LAN_V6),
            )
            assert m["spec"]["peerASN"] == network_lab.TOR_ASN


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_valid_cases_are_valid_configurations_and_invalid_ones_are_not(
    case: conformance.Case,
) -> None:
    """Judged by ironlb's own parser and cross-object checks, step by step: a valid case tests
    behaviour, not validation; an invalid one holds something to refuse."""
    faults = 0
    for index in range(len(case.steps)):
        live = conformance.live_manifests(case, index).values()
        by_kind: dict[str, list[Any]] = {kind: [] for kind in model.CONFIG_KINDS}
        for m in live:
            if m["kind"] in by_kind:
                if m["metadata"]["namespace"] != SYSTEM:
                    faults += 1
                    continue
                by_kind[m["kind"]].append(m)
        config, problems = parsing.parse_config(by_kind)
        problems += validation.validate(config)
        if not case.invalid:
            assert problems == [], f"{case.name} step {index}: {[str(p) for p in problems]}"
        faults += len(problems)
    if case.invalid:
        assert faults, f"{case.name} is marked invalid but nothing in it is"


# --- the lab's shell, against a fake kubectl ------------------------------------------------------


class FakeLab:
    """`kubectl` answering from a script of outputs or LabErrors."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[tuple[str, ...], str | None]] = []

    def kubectl(self, *args: str, input: str | None = None) -> str:
        self.calls.append((args, input))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def as_lab(fake: FakeLab) -> network_lab.Lab:
    return cast(network_lab.Lab, fake)


def test_lab_getter_parses_json_and_tells_an_unserved_kind() -> None:
    fake = FakeLab(
        '{"items": []}',
        network_lab.LabError(
            "kubectl get failed: error: the server doesn't have a resource type "
            '"configurationstates"'
        ),
        network_lab.LabError("kubectl get failed: Unable to connect to the server"),
    )
    get = conformance.lab_getter(as_lab(fake))
    assert get(["get", "services", "-n", NS, "-o", "json"]) == {"items": []}
    with pytest.raises(conformance.NotServed):
        get(["get", "configurationstates", "-o", "json"])
    with pytest.raises(network_lab.LabError):
        get(["get", "services", "-o", "json"])


def test_lab_applier_classes_refusals_retries_a_missing_serviceaccount_and_raises_the_rest() -> (
    None
):
    clock = Clock()
    pod = conformance_cases.backends(NS, "web", 1)[0]
    fake = FakeLab(
        network_lab.LabError(
            'kubectl apply failed: pods "web-node1" is forbidden: error looking '
            'up service account cf-test/default: serviceaccount "default" not found'
        ),
        "pod/web-node1 created",
        network_lab.LabError(
            'kubectl apply failed: The IPAddressPool "bad" is invalid: spec.addresses[0]: '
            "Invalid value"
        ),
        network_lab.LabError("kubectl apply failed: Unable to connect to the server"),
    )
    apply = conformance.lab_applier(as_lab(fake), sleep=clock.sleep, clock=clock.monotonic)
    apply(pod)
    assert clock.sleeps == [0.1] and len(fake.calls) == 2
    with pytest.raises(conformance.Refused) as refused:
        apply(conformance_cases.pool("bad", "10.250.0.300/32"))
    assert refused.value.refusal == conformance.SCHEMA
    with pytest.raises(network_lab.LabError):
        apply(conformance_cases.pool("good", conformance_cases.l2v4_range(0, 1)))


def test_lab_deleter_names_only_what_to_delete_and_waits() -> None:
    fake = FakeLab("deleted")
    case = conformance_cases.auto_lowest_free()
    conformance.lab_deleter(as_lab(fake))(list(case.steps[0].apply))
    conformance.lab_deleter(as_lab(fake))([])
    [(args, body)] = fake.calls
    assert args[:3] == ("delete", "-f", "-") and "--ignore-not-found" in args
    assert "--wait=true" in args
    items = json.loads(body or "")["items"]
    assert [i["kind"] for i in items] == ["Namespace", "IPAddressPool"]
    assert items[1] == {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "pool-a", "namespace": SYSTEM},
    }


def test_the_doc_lists_the_deliberate_differences_as_the_table_renders_them() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "compared-with-metallb.md").read_text()
    assert conformance.render_deliberate() in doc
