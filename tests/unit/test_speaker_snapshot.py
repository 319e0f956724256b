"""speaker.snapshot and speaker.status: API objects in, plans' inputs and status diffs out."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import annotations as keys
from ironlb import model, taking_over
from speaker import desired, snapshot, status

NS = "metallb-system"


def service(
    name: str = "web",
    *,
    ips: tuple[str, ...] = ("10.250.0.200",),
    kind: str = "LoadBalancer",
    lb_class: str | None = None,
    local: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind}
    if lb_class:
        spec["loadBalancerClass"] = lb_class
    if local:
        spec["externalTrafficPolicy"] = "Local"
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "app", "annotations": annotations or {}},
        "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}},
    }


def endpoint_slice(service_name: str, *endpoints: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service_name}-abc",
            "namespace": "app",
            "labels": {keys.ENDPOINT_SLICE_SERVICE: service_name},
        },
        "endpoints": list(endpoints),
    }


def endpoint(node: str, ready: bool | None = True, serving: bool | None = None) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if ready is not None:
        conditions["ready"] = ready
    if serving is not None:
        conditions["serving"] = serving
    return {"addresses": ["10.0.0.1"], "nodeName": node, "conditions": conditions}


def node(name: str, *, ready: bool = True, network_unavailable: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if network_unavailable:
        conditions.append({"type": "NetworkUnavailable", "status": "True"})
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": conditions},
    }


def pool(name: str = "lan", addresses: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"addresses": addresses or ["10.250.0.200-10.250.0.250"]},
    }


def l2ad(name: str = "l2") -> dict[str, Any]:
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "L2Advertisement",
        "metadata": {"name": name, "namespace": NS},
        "spec": {},
    }


def store_with(*objects: dict[str, Any]) -> snapshot.Store:
    store = snapshot.Store()
    for obj in objects:
        store.put(obj["kind"], None, obj)
    return store


def test_builds_services_endpoints_and_nodes() -> None:
    store = store_with(
        service(local=True, annotations={"metallb.universe.tf/allow-shared-ip": "k"}),
        endpoint_slice("web", endpoint("n1"), endpoint("n2", ready=False, serving=True)),
        node("n1"),
        node("n2", network_unavailable=True),
        pool(),
        l2ad(),
    )
    snap, problems = snapshot.build(store, namespace=NS, alive=None)
    assert problems == []
    (svc,) = snap.services
    assert svc.key == "app/web"
    assert svc.ips == (ipaddress.ip_address("10.250.0.200"),)
    assert svc.local and svc.shares
    assert desired.endpoint_nodes(svc) == {"n1"}
    assert snap.nodes["n2"].network_unavailable
    assert snap.alive == {"n1", "n2"}
    assert [p.name for p in snap.config.pools] == ["lan"]


def test_unset_ready_means_ready_and_serving_follows_ready() -> None:
    eps = snapshot.endpoints([endpoint_slice("web", endpoint("n1", ready=None))])
    assert eps == (desired.Endpoint(model.NodeName("n1"), ready=True, serving=True),)


def test_node_ready_is_the_fallback_liveness() -> None:
    store = store_with(node("n1"), node("n2", ready=False))
    snap, _ = snapshot.build(store, namespace=NS, alive=None)
    assert snap.alive == {"n1"}
    snap, _ = snapshot.build(store, namespace=NS, alive=frozenset({"n2"}))
    assert snap.alive == {"n2"}


def test_only_our_load_balancers() -> None:
    store = store_with(
        service("plain"),
        service("other-class", lb_class="example.com/lb"),
        service("ours", lb_class="ironlb"),
        service("cluster-ip", kind="ClusterIP"),
    )
    snap, _ = snapshot.build(store, namespace=NS, alive=frozenset())
    assert [s.name for s in snap.services] == ["plain"]
    snap, _ = snapshot.build(store, namespace=NS, alive=frozenset(), lb_class="ironlb")
    assert [s.name for s in snap.services] == ["ours"]


def test_unparseable_ingress_drops_the_service() -> None:
    store = store_with(service("bad", ips=("not-an-ip",)), service("good"))
    snap, _ = snapshot.build(store, namespace=NS, alive=frozenset())
    assert [s.name for s in snap.services] == ["good"]


def test_objects_outside_our_namespace_are_ignored() -> None:
    foreign = pool("elsewhere")
    foreign["metadata"]["namespace"] = "default"
    store = store_with(pool(), foreign)
    snap, _ = snapshot.build(store, namespace=NS, alive=frozenset())
    assert [p.name for p in snap.config.pools] == ["lan"]


def test_an_invalid_pool_does_not_take_the_valid_ones_down() -> None:
    store = store_with(pool("good"), pool("bad", ["not a range"]))
    snap, problems = snapshot.build(store, namespace=NS, alive=frozenset())
    assert [p.name for p in snap.config.pools] == ["good"]
    assert any(p.name == "bad" for p in problems)


def test_deleted_objects_leave_the_store() -> None:
    store = store_with(service())
    store.put("Service", "DELETED", service())
    assert store.services == {}


@settings(max_examples=200)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=20,
    )
)
def test_any_object_shape_never_raises(junk: Any) -> None:
    for kind in ("Service", "EndpointSlice", "Node", "IPAddressPool", "L2Advertisement"):
        store = snapshot.Store()
        obj = {
            "kind": kind,
            "metadata": {"name": "x", "namespace": NS},
            "spec": junk,
            "status": junk,
            "endpoints": junk,
        }
        if isinstance(junk, dict):
            obj = {**junk, "metadata": {"name": "x", "namespace": NS}}
        store.put(kind, None, obj)
        try:
            snapshot.build(store, namespace=NS, alive=None)
        except (AttributeError, TypeError) as e:  # pragma: no cover - the assertion below explains
            raise AssertionError(f"{kind} with {junk!r} raised {e!r}") from e


# --- status ------------------------------------------------------------------------------------


def plan(*entries: tuple[str, tuple[str, ...], tuple[str, ...]]) -> desired.L2Plan:
    return desired.L2Plan(
        tuple(desired.L2Address(ipaddress.ip_address(a), ifs, svcs) for a, ifs, svcs in entries),
        {},
        {},
    )


def test_l2_status_lists_interfaces_only_when_restricted() -> None:
    wanted = status.wanted_l2(
        "n1",
        plan(("10.250.0.200", (), ("app/a",)), ("10.250.0.201", ("eth1",), ("app/b",))),
    )
    by_service = {w.service_name: w.status for w in wanted}
    assert by_service["a"]["interfaces"] == []
    assert by_service["b"]["interfaces"] == [{"name": "eth1"}]
    assert all(w.status["node"] == "n1" for w in wanted)


def test_status_diff_creates_updates_and_deletes_only_our_objects() -> None:
    wanted = status.wanted_l2(
        "n1", plan(("10.250.0.200", (), ("app/a",)), ("10.250.0.201", (), ("app/b",)))
    )
    a, b = wanted
    ours_stale = {
        "kind": model.SERVICE_L2_STATUS,
        "metadata": {"name": b.name, "labels": {keys.STATUS_NODE: "n1"}},
        "status": {**b.status, "node": "old"},
    }
    ours_gone = {
        "kind": model.SERVICE_L2_STATUS,
        "metadata": {"name": "l2-gone", "labels": {keys.STATUS_NODE: "n1"}},
    }
    theirs = {
        "kind": model.SERVICE_L2_STATUS,
        "metadata": {"name": "l2-theirs", "labels": {keys.STATUS_NODE: "n2"}},
    }
    changes = status.diff(model.SERVICE_L2_STATUS, "n1", wanted, [ours_stale, ours_gone, theirs])
    assert [w.name for w in changes.create] == [a.name]
    assert [w.name for w in changes.update] == [b.name]
    assert changes.delete == ("l2-gone",)


def l2_status(name: str, node_name: str, service: str) -> dict[str, Any]:
    """A ServiceL2Status as the API holds it: named `name`, labelled for node and Service."""
    return {
        "kind": model.SERVICE_L2_STATUS,
        "metadata": {
            "name": name,
            "labels": {
                keys.STATUS_NODE: node_name,
                keys.STATUS_SERVICE_NAMESPACE: "app",
                keys.STATUS_SERVICE_NAME: service,
            },
        },
    }


def test_layer2_owner_evicts_other_nodes_objects_for_its_services_only() -> None:
    (a,) = status.wanted_l2("n1", plan(("10.250.0.200", (), ("app/a",))))

    existing = [l2_status("l2-dead-owner", "n2", "a"), l2_status("l2-other-service", "n3", "b")]
    elected = {("app", "a"): frozenset({"n1"})}
    evicting = status.diff(model.SERVICE_L2_STATUS, "n1", [a], existing, announcers=elected)
    assert evicting.delete == ("l2-dead-owner",)
    assert [w.name for w in evicting.create] == [a.name]
    # BGP: every node announces, nobody evicts; nor does a node that owns nothing.
    assert status.diff(model.SERVICE_L2_STATUS, "n1", [a], existing).delete == ()
    assert status.diff(model.SERVICE_L2_STATUS, "n1", [], existing, announcers=elected).delete == ()
    # A Service whose addresses went to two nodes: each keeps its object, neither deletes the
    # other's (they would take turns for ever).
    both = {("app", "a"): frozenset({"n1", "n2"})}
    assert status.diff(model.SERVICE_L2_STATUS, "n1", [a], existing, announcers=both).delete == ()


def test_settled_status_needs_no_change() -> None:
    wanted = status.wanted_bgp("n1", {"app/a": (model.PeerName("tor"),)})
    existing = [{**status.body(w, "n1", NS), "status": dict(w.status)} for w in wanted]
    changes = status.diff(model.SERVICE_BGP_STATUS, "n1", wanted, existing)
    assert changes == status.Changes((), (), ())


POD = status.Owner("speaker-abcde", "uid-1")


@pytest.mark.parametrize(
    ("owner", "references"),
    [
        (None, None),  # no Pod known: no owner, as before
        (POD, [{"apiVersion": "v1", "kind": "Pod", "name": "speaker-abcde", "uid": "uid-1"}]),
    ],
)
def test_a_created_object_names_the_pod_as_its_owner(
    owner: status.Owner | None, references: list[dict[str, str]] | None
) -> None:
    (w,) = status.wanted_bgp("n1", {"app/a": (model.PeerName("tor"),)})
    assert status.diff(model.SERVICE_BGP_STATUS, "n1", [w], [], owner=owner).create == (w,)
    metadata = status.body(w, "n1", NS, owner)["metadata"]
    assert metadata.get("ownerReferences") == references


def owned_by(*uids: str) -> list[dict[str, str]]:
    return [{"apiVersion": "v1", "kind": "Pod", "name": f"speaker-{u}", "uid": u} for u in uids]


@pytest.mark.parametrize(
    ("references", "owner", "adopted"),
    [
        (None, POD, True),  # made before the Pod was known
        ([], POD, True),
        (owned_by("uid-0"), POD, True),  # made by an earlier Pod
        (owned_by("uid-1"), POD, False),
        # Ours among others (someone added one): ours is there, nothing to fight over.
        (owned_by("uid-0", "uid-1"), POD, False),
        (None, None, False),  # no Pod known: ownership is left as it is
        (owned_by("uid-0"), None, False),
    ],
)
def test_existing_objects_are_adopted_unless_the_pod_owns_them(
    references: list[dict[str, str]] | None, owner: status.Owner | None, adopted: bool
) -> None:
    (w,) = status.wanted_bgp("n1", {"app/a": (model.PeerName("tor"),)})
    existing = {**status.body(w, "n1", NS), "status": dict(w.status)}
    if references is not None:
        existing["metadata"]["ownerReferences"] = references
    changes = status.diff(model.SERVICE_BGP_STATUS, "n1", [w], [existing], owner=owner)
    assert changes == status.Changes((), (), (), (w.name,) if adopted else ())


def test_only_our_wanted_objects_are_adopted() -> None:
    """Another node's object and one of ours nobody wants are never adopted (the first is not
    ours, the second is deleted); an object both stale and unowned is updated and adopted."""
    a, b = status.wanted_l2(
        "n1", plan(("10.250.0.200", (), ("app/a",)), ("10.250.0.201", (), ("app/b",)))
    )
    stale = {**status.body(b, "n1", NS), "status": {**b.status, "node": "old"}}
    gone = status.body(status.Wanted(model.SERVICE_L2_STATUS, "l2-gone", "app", "c", {}), "n1", NS)
    theirs = status.body(a, "n2", NS)
    changes = status.diff(model.SERVICE_L2_STATUS, "n1", [a, b], [stale, gone, theirs], owner=POD)
    assert [w.name for w in changes.create] == [a.name]
    assert [w.name for w in changes.update] == [b.name]
    assert changes.delete == ("l2-gone",)
    assert changes.adopt == (b.name,)


def test_the_store_keeps_the_owner_and_an_owner_change_is_a_status_change() -> None:
    (w,) = status.wanted_bgp("n1", {"app/a": (model.PeerName("tor"),)})
    store = snapshot.Store(status_node="n1")
    unowned = {**status.body(w, "n1", NS), "status": dict(w.status)}
    store.put(model.SERVICE_BGP_STATUS, None, unowned)
    owned = {**status.body(w, "n1", NS, POD), "status": dict(w.status)}
    assert store.put(model.SERVICE_BGP_STATUS, "MODIFIED", owned)
    kept = store.config[model.SERVICE_BGP_STATUS][f"{NS}/{w.name}"]
    assert POD.owns(kept)
    assert not store.put(model.SERVICE_BGP_STATUS, "MODIFIED", owned)  # the same again


def test_names_are_stable_and_distinct_per_node() -> None:
    assert status.object_name(model.SERVICE_L2_STATUS, "n1", "app/a") == status.object_name(
        model.SERVICE_L2_STATUS, "n1", "app/a"
    )
    assert status.object_name(model.SERVICE_L2_STATUS, "n1", "app/a") != status.object_name(
        model.SERVICE_L2_STATUS, "n2", "app/a"
    )


def test_a_conflict_keeps_the_last_good_configuration() -> None:
    store = store_with(pool("first", ["10.250.0.200/29"]))
    good, problems = snapshot.build(store, namespace=NS, alive=frozenset())
    assert problems == []
    store.put("IPAddressPool", None, pool("second", ["10.250.0.204/30"]))
    snap, problems = snapshot.build(store, namespace=NS, alive=frozenset(), last_good=good.config)
    assert snap.config is good.config
    assert problems, "the overlap must be reported"
    # Before any valid configuration was seen, the conflicting objects are left out.
    snap, _ = snapshot.build(store, namespace=NS, alive=frozenset())
    assert snap.config.pools == ()


def test_passes_get_one_configuration_object_while_nothing_changes() -> None:
    """As the agent does, each pass hands back the configuration the last gave it: while no
    metallb.io object changes, it is the same object (no parse, and what is remembered per
    configuration stays); a change gives a new one; with a conflict, the last good one."""
    store = store_with(pool("first", ["10.250.0.200/29"]))
    last_good = None
    seen = []
    for _ in range(3):
        snap, _ = snapshot.build(store, namespace=NS, alive=frozenset(), last_good=last_good)
        seen.append(snap.config)
        last_good = snap.config
        store.put("Service", None, service(f"web{len(seen)}"))  # not configuration
    assert seen[0] is seen[1] is seen[2]
    assert not store.config_conflicts()  # the same object, and not stale
    store.put("IPAddressPool", None, pool("second", ["10.250.0.216/29"]))
    changed, _ = snapshot.build(store, namespace=NS, alive=frozenset(), last_good=last_good)
    assert changed.config is not last_good and len(changed.config.pools) == 2
    store.put("IPAddressPool", None, pool("third", ["10.250.0.218/31"]))  # overlaps "second"
    for _ in range(2):
        kept, problems = snapshot.build(
            store, namespace=NS, alive=frozenset(), last_good=changed.config
        )
        assert kept.config is changed.config and problems
        assert store.config_conflicts()


# --- data path: what a node's object says about draining, and where kube-proxy answers ----------


def draining_node(name: str, **fields: Any) -> dict[str, Any]:
    obj = node(name)
    obj["metadata"] = {**obj["metadata"], **fields.pop("metadata", {})}
    obj["spec"] = fields.pop("spec", {})
    obj["status"] = {
        **obj["status"],
        "addresses": [
            {"type": "Hostname", "address": name},
            {"type": "InternalIP", "address": "fd00::5"},
            {"type": "InternalIP", "address": "10.0.0.5"},
        ],
    }
    return obj


def built_nodes(*objects: dict[str, Any], cordon: bool = False) -> dict[str, desired.Node]:
    snap, _ = snapshot.build(
        store_with(*objects), namespace="metallb-system", alive=None, drain_on_cordon=cordon
    )
    return dict(snap.nodes)


def test_drain_from_the_node_object_survives_the_slimmed_store() -> None:
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
    nodes = built_nodes(
        draining_node("gone", metadata={"deletionTimestamp": "2026-12-03T00:00:00Z"}),
        draining_node("tainted", spec={"taints": [taint, {"key": "other"}]}),
        draining_node("cordoned", spec={"unschedulable": True}),
        draining_node("fine", spec={"taints": [{"key": "other", "effect": "NoSchedule"}]}),
    )
    assert nodes["gone"].drain is not None and nodes["gone"].drain.reason == "nodeDeleting"
    assert nodes["tainted"].drain is not None
    assert nodes["tainted"].drain.reason == "nodeToBeDeleted"
    assert nodes["cordoned"].drain is None  # cordon drains only when configured
    assert nodes["fine"].drain is None
    cordoned = built_nodes(draining_node("cordoned", spec={"unschedulable": True}), cordon=True)
    assert cordoned["cordoned"].drain is not None
    assert cordoned["cordoned"].drain.reason == "nodeCordoned"


def test_a_node_event_that_only_adds_a_taint_is_a_change() -> None:
    store = store_with(draining_node("n1"))
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}
    assert store.put("Node", "MODIFIED", draining_node("n1", spec={"taints": [taint]}))


def test_internal_ips_and_node_lookup_by_name() -> None:
    store = store_with(draining_node("n1"))
    assert snapshot.internal_ips(store.node("n1")) == ["fd00::5", "10.0.0.5"]
    assert store.node("n2") is None
    assert snapshot.internal_ips(None) == []
    # The node's view carries them too: a dual-stack BGP session's next hop falls back on them.
    assert built_nodes(draining_node("n1"))["n1"].internal_ips == ("fd00::5", "10.0.0.5")


def test_health_check_node_port_reaches_the_view() -> None:
    obj = service(local=True)
    obj["spec"]["healthCheckNodePort"] = 31000
    bad = service("bad", local=True)
    bad["spec"]["healthCheckNodePort"] = "31000"
    store = store_with(obj, bad)
    good_view = store.view("app/web")
    bad_view = store.view("app/bad")
    assert good_view is not None and good_view.health_check_node_port == 31000
    assert bad_view is not None and bad_view.health_check_node_port is None


def test_standing_by_removes_only_the_objects_we_named() -> None:
    """A node standing by for MetalLB's speaker (`ironlb.taking_over`) removes the status
    objects it wrote and leaves MetalLB's, which carry the same labels."""

    ours = status.object_name(model.SERVICE_L2_STATUS, "n1", "app/a")
    others = status.object_name(model.SERVICE_L2_STATUS, "n2", "app/a")
    existing = [
        l2_status(ours, "n1", "a"),
        l2_status("l2-metallb-x7k2", "n1", "a"),  # MetalLB's speaker on this node: generateName
        l2_status(others, "n2", "a"),
        # Our name, but not for the Service it is labelled with: not one we wrote.
        l2_status(ours, "n1", "b"),
    ]
    standing_by = status.diff(model.SERVICE_L2_STATUS, "n1", [], existing, only_ours=True)
    assert standing_by == status.Changes((), (), (ours,))
    # Serving, the same node removes every object of its own node that it does not want.
    serving = status.diff(model.SERVICE_L2_STATUS, "n1", [], existing)
    assert serving.delete == tuple(sorted({ours, "l2-metallb-x7k2"}))


def test_the_store_keeps_what_taking_over_reads_of_a_pod() -> None:
    store = snapshot.Store()
    pod = {
        "kind": "Pod",
        "metadata": {
            "name": "metallb-speaker-x",
            "namespace": NS,
            "resourceVersion": "1",
            "labels": {"app.kubernetes.io/name": "metallb"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "speaker"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.250.0.11",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "t0"},
                {"type": "PodScheduled", "status": "True"},
            ],
        },
    }
    assert store.put(snapshot.PREDECESSOR, "ADDED", pod)
    kept = store.predecessors[f"{NS}/metallb-speaker-x"]
    assert kept["status"]["phase"] == "Running"
    assert "spec" not in kept and "labels" not in kept["metadata"]
    assert taking_over.Predecessor.of(kept) == taking_over.Predecessor.of(pod)
    # A heartbeat-like change of what the rule does not read is no change.
    touched = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"}}
    assert not store.put(snapshot.PREDECESSOR, "MODIFIED", touched)
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-12-06T00:00:00Z"}}
    assert store.put(snapshot.PREDECESSOR, "MODIFIED", deleting)
    assert taking_over.Predecessor.of(store.predecessors[f"{NS}/metallb-speaker-x"]).deleting
    assert store.put(snapshot.PREDECESSOR, "DELETED", deleting)
    assert store.predecessors == {}
    assert store.config == {}  # not configuration: no pass rebuilds the config for it
