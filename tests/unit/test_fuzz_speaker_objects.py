"""Fuzzing the speaker's object store: watch events -> `Store` (slimmed) -> snapshot -> plans.

Every Service, EndpointSlice, Node, metallb.io object and status object the speaker watches goes
through `Store.put` (which slims it to the fields a pass reads) and then `snapshot.build`, once
per pass. The agent's loop survives only API errors, so anything these raise on would stop the
speaker's passes for good. The contract: any object is stored or left out, a bad metallb.io
object becomes a Problem (logged, and reported in the ConfigurationState status), and the plans
for layer 2 and BGP are computed from whatever is left. Inputs: random JSON in place of each
kind, and mutations of a valid cluster (a pool, both advertisements, a peer, a Service with
its EndpointSlice, two Nodes). A valid cluster round-trips: its Service is planned.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ironlb import annotations, model
from ironlb.problems import Problem
from speaker import desired, snapshot
from tests.unit import fuzzing

AREA = "speaker objects"
NS = "metallb-system"
ME = model.NodeName("n1")


def meta(name: str, namespace: str | None = NS, **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "labels": labels, "resourceVersion": "7"}
    if namespace is not None:
        out["namespace"] = namespace
    return out


CLUSTER: list[tuple[str, dict[str, Any]]] = [
    (
        model.IP_ADDRESS_POOL,
        {
            "kind": model.IP_ADDRESS_POOL,
            "metadata": meta("v4"),
            "spec": {"addresses": ["10.0.0.0/28"]},
        },
    ),
    (
        model.L2_ADVERTISEMENT,
        {
            "kind": model.L2_ADVERTISEMENT,
            "metadata": meta("l2"),
            "spec": {"ipAddressPools": ["v4"]},
        },
    ),
    (
        model.BGP_ADVERTISEMENT,
        {
            "kind": model.BGP_ADVERTISEMENT,
            "metadata": meta("bgp"),
            "spec": {"ipAddressPools": ["v4"], "communities": ["65000:1"], "localPref": 100},
        },
    ),
    (
        model.BGP_PEER,
        {
            "kind": model.BGP_PEER,
            "metadata": meta("tor"),
            "spec": {
                "myASN": 64512,
                "peerASN": 64513,
                "peerAddress": "10.0.1.1",
                "holdTime": "90s",
            },
        },
    ),
    (
        "Service",
        {
            "kind": "Service",
            "metadata": {
                **meta("web", "default", app="web"),
                "annotations": {"metallb.io/allow-shared-ip": "k"},
            },
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
        },
    ),
    (
        "EndpointSlice",
        {
            "kind": "EndpointSlice",
            "metadata": meta("web-1", "default", **{annotations.ENDPOINT_SLICE_SERVICE: "web"}),
            "endpoints": [
                {"addresses": ["10.1.0.5"], "nodeName": "n1", "conditions": {"ready": True}},
                {"addresses": ["10.1.0.6"], "nodeName": "n2", "conditions": {"serving": False}},
            ],
        },
    ),
    *(
        (
            "Node",
            {
                "kind": "Node",
                "metadata": meta(name, None, zone="a"),
                "status": {
                    "conditions": [
                        {"type": "Ready", "status": "True"},
                        {"type": "NetworkUnavailable", "status": "False"},
                    ]
                },
            },
        )
        for name in ("n1", "n2")
    ),
    (
        model.SERVICE_L2_STATUS,
        {
            "kind": model.SERVICE_L2_STATUS,
            "metadata": meta("l2-1", **{annotations.STATUS_NODE: "n1"}),
            "status": {},
        },
    ),
]
KINDS = sorted({kind for kind, _ in CLUSTER} | {model.SECRET, model.BFD_PROFILE, model.COMMUNITY})


def run(events: list[tuple[str, str | None, dict[str, Any]]], alive: frozenset[str] | None) -> None:
    store = snapshot.Store(status_node=ME)
    for kind, event_type, obj in events:
        fuzzing.feed(AREA, store.put, kind, event_type, obj)
    snap, problems = fuzzing.feed(
        AREA, lambda: snapshot.build(store, namespace=NS, alive=alive, last_good=None)
    )
    assert all(isinstance(p, Problem) for p in problems)
    desired.l2_plan(snap, ME)
    desired.bgp_plan(snap, ME)
    # A second pass over the same store (the memoised path) agrees with the first.
    again, _ = snapshot.build(store, namespace=NS, alive=alive, last_good=None)
    assert again == snap


alive_sets = st.one_of(st.none(), st.sampled_from([frozenset(), frozenset({"n1", "n2"})]))
event_types = st.sampled_from([None, "ADDED", "MODIFIED", "DELETED"])


@fuzzing.fuzz_settings(200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(KINDS),
            event_types,
            st.dictionaries(
                st.sampled_from(["metadata", "spec", "status", "endpoints", "kind"]),
                fuzzing.json_values(),
                max_size=4,
            ),
        ),
        max_size=6,
    ),
    alive_sets,
)
def test_random_objects(
    events: list[tuple[str, str | None, dict[str, Any]]], alive: frozenset[str] | None
) -> None:
    run([(kind, None, obj) for kind, obj in CLUSTER] + events, alive)


@fuzzing.fuzz_settings(250)
@given(st.data(), alive_sets)
def test_mutated_cluster(data: st.DataObject, alive: frozenset[str] | None) -> None:
    events: list[tuple[str, str | None, dict[str, Any]]] = [(k, None, o) for k, o in CLUSTER]
    for _ in range(data.draw(st.integers(1, 3))):
        kind, obj = data.draw(st.sampled_from(CLUSTER))
        events.append((kind, data.draw(event_types), fuzzing.mutate_json(obj, data.draw)))
    run(events, alive)


def test_valid_cluster_round_trips() -> None:
    store = snapshot.Store(status_node=ME)
    for kind, obj in CLUSTER:
        store.put(kind, None, copy.deepcopy(obj))
    snap, problems = snapshot.build(store, namespace=NS, alive=None)
    assert problems == []
    assert [s.key for s in snap.services] == ["default/web"]
    assert snap.alive == {"n1", "n2"}
    # Exactly one of the two nodes announces the address in layer 2.
    owners = [n for n in ("n1", "n2") if desired.l2_plan(snap, model.NodeName(n)).mine]
    assert len(owners) == 1
    assert [str(e.address) for e in desired.l2_plan(snap, model.NodeName(owners[0])).mine] == [
        "10.0.0.1"
    ]


def test_node_conditions_that_are_no_list_of_objects_read_as_not_ready() -> None:
    for conditions in (
        ["Ready"],
        "Ready",
        {"type": "Ready"},
        7,
        [None, {"type": "Ready", "status": "True"}],
    ):
        store = snapshot.Store()
        store.put("Node", None, {"metadata": {"name": "n1"}, "status": {"conditions": conditions}})
        snap, _ = snapshot.build(store, namespace=NS, alive=None)
        assert snap.alive == (
            frozenset({"n1"})
            if isinstance(conditions, list) and None in conditions
            else frozenset()
        )
