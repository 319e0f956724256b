"""speaker.snapshot.Store: what it keeps, what it remembers, and which events cost a pass."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import annotations as keys
from ironlb import model, services
from speaker import snapshot
from tests.unit.test_speaker_snapshot import NS, endpoint, endpoint_slice, node, pool, service


def build(store: snapshot.Store) -> Any:
    snap, problems = snapshot.build(store, namespace=NS, alive=frozenset({"n1", "n2"}))
    return snap, problems


def bulky(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server sends it: bookkeeping a speaker never reads."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["resourceVersion"] = "17"
    meta["uid"] = "u-1"
    meta["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    meta.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = (
        "x" * 4000
    )
    out.setdefault("spec", {})["ports"] = [{"port": 80, "protocol": "TCP"}]
    return out


def test_slim_keeps_what_is_read_and_drops_the_rest() -> None:
    full = bulky(service(local=True, annotations={"metallb.io/allow-shared-ip": "k"}))
    slim = snapshot.slim("Service", full)
    assert slim["metadata"]["annotations"] == {"metallb.io/allow-shared-ip": "k"}
    assert "managedFields" not in slim["metadata"]
    assert slim["metadata"]["uid"] == "u-1" and slim["metadata"]["resourceVersion"] == "17"
    assert slim["spec"] == {"type": "LoadBalancer", "externalTrafficPolicy": "Local"}
    assert slim["status"] == full["status"]
    assert len(repr(slim)) * 10 < len(repr(full))


def test_a_slim_store_builds_the_same_snapshot_as_full_objects() -> None:
    objects = [
        (
            "Service",
            service(local=True, annotations={"metallb.universe.tf/allow-shared-ip": "k"}),
        ),
        ("EndpointSlice", endpoint_slice("web", endpoint("n1"), endpoint("n2", ready=False))),
        ("Node", node("n1")),
        ("Node", node("n2", network_unavailable=True)),
        ("IPAddressPool", pool()),
    ]
    plain, full = snapshot.Store(), snapshot.Store()
    for kind, obj in objects:
        plain.put(kind, None, obj)
        full.put(kind, None, bulky(obj))
    assert build(plain) == build(full)
    snap, _ = build(full)
    assert snap.services[0].shares and snap.services[0].local
    assert [e.node for e in snap.services[0].endpoints] == ["n1", "n2"]


def test_bookkeeping_changes_cost_no_pass() -> None:
    store = snapshot.Store()
    svc = bulky(service())
    assert store.put("Service", None, svc)
    assert not store.put(
        "Service", "MODIFIED", {**svc, "metadata": {**svc["metadata"], "resourceVersion": "18"}}
    )
    moved = copy.deepcopy(svc)
    moved["status"]["loadBalancer"]["ingress"] = [{"ip": "10.250.0.201"}]
    assert store.put("Service", "MODIFIED", moved)
    assert not store.put("Service", "DELETED", service(name="never-seen"))
    assert store.put("Service", "DELETED", moved)


def test_node_heartbeats_cost_no_pass_but_readiness_does() -> None:
    store = snapshot.Store()
    n1 = node("n1")
    assert store.put("Node", None, n1)
    beat = copy.deepcopy(n1)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-02T10:00:00Z"
    assert not store.put("Node", "MODIFIED", beat)
    assert store.put("Node", "MODIFIED", node("n1", ready=False))
    assert store.put(
        "Node", "MODIFIED", {**node("n1"), "metadata": {"name": "n1", "labels": {"a": "b"}}}
    )


def test_endpoint_changes_that_move_no_node_cost_no_pass() -> None:
    store = snapshot.Store()
    store.put("Service", None, service())
    first = endpoint_slice("web", endpoint("n1"))
    assert store.put("EndpointSlice", None, first)
    other_pod = copy.deepcopy(first)
    other_pod["endpoints"][0]["addresses"] = ["10.0.0.99"]
    other_pod["endpoints"][0]["targetRef"] = {"kind": "Pod", "name": "web-2"}
    assert not store.put("EndpointSlice", "MODIFIED", other_pod)
    assert store.put(
        "EndpointSlice", "MODIFIED", endpoint_slice("web", endpoint("n1", ready=False))
    )
    snap, _ = build(store)
    assert snap.services[0].endpoints[0].ready is False


def test_a_slice_moving_between_services_updates_both_views() -> None:
    store = snapshot.Store()
    store.put("Service", None, service("a", ips=("10.250.0.200",)))
    store.put("Service", None, service("b", ips=("10.250.0.201",)))
    piece = endpoint_slice("a", endpoint("n1"))
    store.put("EndpointSlice", None, piece)
    snap, _ = build(store)
    assert [len(s.endpoints) for s in snap.services] == [1, 0]
    piece = {
        **piece,
        "metadata": {**piece["metadata"], "labels": {keys.ENDPOINT_SLICE_SERVICE: "b"}},
    }
    assert store.put("EndpointSlice", "MODIFIED", piece)
    snap, _ = build(store)
    assert [len(s.endpoints) for s in snap.services] == [0, 1]
    assert store.put("EndpointSlice", "DELETED", piece)
    snap, _ = build(store)
    assert [len(s.endpoints) for s in snap.services] == [0, 0]


def status_object(node_name: str, name: str, peers: list[str]) -> dict[str, Any]:
    return {
        "kind": model.SERVICE_BGP_STATUS,
        "metadata": {"name": name, "namespace": NS, "labels": {keys.STATUS_NODE: node_name}},
        "status": {"node": node_name, "peers": peers},
    }


def test_only_our_own_status_objects_concern_a_pass() -> None:
    store = snapshot.Store(status_node="n1")
    assert not store.put(model.SERVICE_BGP_STATUS, None, status_object("n2", "theirs", ["tor"]))
    assert not store.put(
        model.SERVICE_BGP_STATUS, "MODIFIED", status_object("n2", "theirs", ["tor", "b"])
    )
    assert store.put(model.SERVICE_BGP_STATUS, None, status_object("n1", "ours", ["tor"]))
    assert not store.put(model.SERVICE_BGP_STATUS, "MODIFIED", status_object("n1", "ours", ["tor"]))
    # Someone else rewrote or deleted ours: the next pass must put it right.
    assert store.put(model.SERVICE_BGP_STATUS, "MODIFIED", status_object("n1", "ours", []))
    assert store.put(model.SERVICE_BGP_STATUS, "DELETED", status_object("n1", "ours", []))
    assert list(store.config[model.SERVICE_BGP_STATUS]) == [f"{NS}/theirs"]


def test_configuration_is_parsed_again_only_when_it_changed() -> None:
    store = snapshot.Store()
    first = pool("lan", ["10.250.0.200/29"])
    assert store.put("IPAddressPool", None, first)
    snap1, _ = build(store)
    reported = {**first, "status": {"conditions": [{"type": "Valid", "status": "True"}]}}
    assert not store.put("IPAddressPool", "MODIFIED", reported)
    snap2, _ = build(store)
    assert snap2.config is snap1.config
    assert store.put("IPAddressPool", "MODIFIED", pool("lan", ["10.250.0.208/29"]))
    snap3, _ = build(store)
    assert [str(r) for r in snap3.config.pools[0].addresses] != [
        str(r) for r in snap1.config.pools[0].addresses
    ]
    assert store.set_secrets({f"{NS}/s": {"metadata": {"name": "s"}}})
    assert not store.set_secrets({f"{NS}/s": {"metadata": {"name": "s"}}})
    snap4, _ = build(store)
    assert snap4.config.secret_names != snap3.config.secret_names


def test_a_relist_removes_what_was_deleted_meanwhile() -> None:
    store = snapshot.Store()
    store.put("Service", None, service("a"))
    store.put("Service", None, service("b", ips=("10.250.0.201",)))
    assert not store.replace("Service", [service("a"), service("b", ips=("10.250.0.201",))])
    assert store.replace("Service", [service("b", ips=("10.250.0.201",))])
    snap, _ = build(store)
    assert [s.name for s in snap.services] == ["b"]


# --- the remembered views never differ from a store filled from scratch -------------------------

NAMES = ("a", "b", "c")
NODES = ("n1", "n2", "n3")

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("Service"),
            st.sampled_from(NAMES),
            st.sampled_from(("10.250.0.200", "10.250.0.201", "bad")),
            st.booleans(),
        ),
        st.tuples(
            st.just("EndpointSlice"),
            st.sampled_from(("s1", "s2", "s3")),
            st.sampled_from(NAMES),
            st.lists(st.tuples(st.sampled_from(NODES), st.booleans()), max_size=3),
        ),
        st.tuples(st.just("delete-service"), st.sampled_from(NAMES)),
        st.tuples(st.just("delete-slice"), st.sampled_from(("s1", "s2", "s3"))),
        st.tuples(
            st.just("Node"),
            st.sampled_from(NODES),
            st.sampled_from(("", "a", "b")),
            st.booleans(),
            st.booleans(),
        ),
        st.tuples(st.just("delete-node"), st.sampled_from(NODES)),
    ),
    max_size=25,
)


def _object(op: tuple[Any, ...]) -> tuple[str, str | None, dict[str, Any]]:
    if op[0] == "Service":
        _, name, ip, local = op
        return "Service", None, service(name, ips=(ip,), local=local)
    if op[0] == "EndpointSlice":
        _, slice_name, owner, eps = op
        obj = endpoint_slice(owner, *(endpoint(n, ready=r) for n, r in eps))
        obj["metadata"]["name"] = slice_name
        return "EndpointSlice", None, obj
    if op[0] == "delete-service":
        return "Service", "DELETED", service(op[1])
    if op[0] == "Node":
        _, name, zone, unavailable, cordoned = op
        obj = node(name, network_unavailable=unavailable)
        obj["metadata"]["labels"]["zone"] = zone
        obj["spec"] = {"unschedulable": cordoned}
        return "Node", None, obj
    if op[0] == "delete-node":
        return "Node", "DELETED", node(op[1])
    obj = endpoint_slice("a")
    obj["metadata"]["name"] = op[1]
    return "EndpointSlice", "DELETED", obj


@settings(max_examples=300)
@given(operations)
def test_remembered_views_match_a_fresh_store(ops: list[tuple[Any, ...]]) -> None:
    live, cordoning = snapshot.Store(), snapshot.Store()
    latest: dict[tuple[str, str], dict[str, Any] | None] = {}
    for op in ops:
        kind, event, obj = _object(op)
        live.put(kind, event, obj)
        cordoning.put(kind, event, copy.deepcopy(obj))
        latest[(kind, services.key(obj))] = None if event == "DELETED" else obj
        # Interleave passes so that views are remembered between events.
        build(live)
        cordon_drains(cordoning)
    fresh = snapshot.Store()
    for (kind, _), kept in sorted(latest.items()):
        if kept is not None:
            fresh.put(kind, None, kept)
    assert build(live) == build(fresh)
    assert cordon_drains(cordoning) == cordon_drains(fresh)


def cordon_drains(store: snapshot.Store) -> Any:
    return snapshot.build(store, namespace=NS, alive=None, drain_on_cordon=True)


def test_passes_get_one_tuple_of_services_and_one_mapping_of_nodes_while_nothing_changes() -> None:
    """What `desired.Memo` knows unchanged inputs by: the same objects from pass to pass, new
    ones only for what changed."""
    store = snapshot.Store()
    for obj in (service("a", ips=("10.250.0.200",)), service("b", ips=("10.250.0.201",))):
        store.put("Service", None, obj)
    for name in NODES:
        store.put("Node", None, node(name))
    first, _ = build(store)
    again, _ = build(store)
    assert again.services is first.services and again.nodes is first.nodes
    store.put("Node", None, node("n1"))  # the same Node again: nothing a pass reads changed
    store.put("Service", None, service("b", ips=("10.250.0.202",)))
    changed, _ = build(store)
    assert changed.nodes is first.nodes
    assert changed.services is not first.services
    assert changed.services[0] is first.services[0] and changed.services[1] != first.services[1]
    store.put("Node", None, node("n2", network_unavailable=True))
    moved, _ = build(store)
    assert moved.nodes is not first.nodes and moved.nodes["n2"].network_unavailable
    # Only the Nodes whose objects were replaced are read again.
    assert moved.nodes["n3"] is first.nodes["n3"] and moved.services is changed.services
