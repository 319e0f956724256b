"""The scale bench's pure parts: kwok's configuration and fake objects, the Service plan and what
the speakers should announce for it, and the count of a client's requests in an audit log."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml

from bench import scale
from hack import kwok

STAGE = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "x"}}


def test_kwok_configuration_sets_every_parallelism_and_only_its_own_nodes() -> None:
    documents = kwok.configuration([STAGE], parallelism=8)
    config = documents[0]
    assert config["kind"] == "KwokConfiguration"
    options = config["options"]
    # Left out, they are zero and kwok refuses to start.
    for key in (
        "nodeLeaseParallelism",
        "nodePlayStageParallelism",
        "podPlayStageParallelism",
        "podsOnNodeSyncParallelism",
    ):
        assert options[key] == 8
    assert options["manageAllNodes"] is False
    assert options["manageNodesWithAnnotationSelector"] == "kwok.x-k8s.io/node=fake"
    assert documents[1:] == [STAGE]
    # One YAML stream, the configuration first.
    assert list(yaml.safe_load_all(kwok.render(documents))) == documents


@pytest.mark.parametrize(
    "stages, parallelism",
    [([], 4), ([{"kind": "KwokConfiguration"}], 4), ([STAGE], 0)],
)
def test_kwok_configuration_refuses_what_kwok_would(
    stages: list[dict[str, Any]], parallelism: int
) -> None:
    with pytest.raises(ValueError):
        kwok.configuration(stages, parallelism=parallelism)


def test_fake_nodes_carry_the_selector_and_a_taint_their_pods_tolerate() -> None:
    node = kwok.node(7)
    assert node["metadata"]["name"] == "kwok-node-00007"
    key, value = kwok.ANNOTATION
    assert node["metadata"]["annotations"] == {key: value}
    assert node["spec"]["taints"] == [kwok.TAINT]
    pod = kwok.pod("ns", "p", "app", node["metadata"]["name"])
    assert pod["spec"]["nodeName"] == "kwok-node-00007"
    toleration = pod["spec"]["tolerations"][0]
    assert toleration["key"] == kwok.TAINT["key"]
    assert toleration["effect"] == kwok.TAINT["effect"]


def test_the_lab_nodes_do_not_match_kwoks_selector() -> None:
    from hack import lab

    # The lab's Nodes have no annotations at all (hack/lab.py _prepare_cluster); the selector
    # is an annotation only fake Nodes carry.
    key, _ = kwok.ANNOTATION
    assert key.startswith("kwok.x-k8s.io/")
    assert not lab.node_name(1).startswith("kwok-")


def test_plan_mixes_modes_and_policies() -> None:
    planned = scale.plan(40)
    assert len({p.name for p in planned}) == 40
    assert Counter(p.mode for p in planned) == {"l2": 20, "bgp": 20}
    local = [p for p in planned if p.local]
    assert len(local) == 8
    lab_backed = [p for p in local if p.lab_backed]
    assert len(lab_backed) == 2
    assert all(p.local for p in planned if p.lab_backed)
    # Both modes have Local Services that are announced.
    assert {p.mode for p in lab_backed} == {"l2", "bgp"}


def test_expected_announcements() -> None:
    planned = scale.plan(40)
    want = scale.expected(planned, lab_nodes=3)
    # Cluster: announced; Local on fake Nodes only: not; Local on the lab's Pods: announced.
    for p in planned:
        announced = not p.local or p.lab_backed
        assert (p.name in want.l2_services or p.name in want.bgp_services) == announced
    assert want.l2_statuses == len(want.l2_services)
    assert want.bgp_statuses == 3 * len(want.bgp_services)
    assert len(want.l2_services) + len(want.bgp_services) == 32 + 2


def test_service_objects() -> None:
    l2, bgp = scale.plan(2)
    body = scale.service(bgp)
    assert body["metadata"]["annotations"] == {"metallb.io/address-pool": scale.BGP_POOL}
    assert scale.service(l2)["metadata"]["annotations"] == {
        "metallb.io/address-pool": scale.L2_POOL
    }
    assert body["spec"]["allocateLoadBalancerNodePorts"] is False
    assert body["spec"]["selector"] == {"app": bgp.app}


def test_services_share_pod_groups_in_turn() -> None:
    planned = scale.plan(40, groups=4)
    groups = {p.app for p in planned if not p.lab_backed}
    assert groups == {scale.group(i, 4) for i in range(4)}
    # One group each by default.
    alone = scale.plan(40)
    assert len({p.app for p in alone if not p.lab_backed}) == 40 - 2


def event(
    audit_id: str,
    stage: str = "ResponseComplete",
    verb: str = "get",
    user: str = scale.SPEAKER_USER,
    source: str = "10.250.0.11",
    received: str = "2026-12-03T10:00:01.500000Z",
) -> str:
    return json.dumps(
        {
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": audit_id,
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "sourceIPs": [source],
            "objectRef": {"resource": "services", "subresource": "status"},
            "requestReceivedTimestamp": received,
            "stageTimestamp": received,
        }
    )


def test_parse_time() -> None:
    assert scale.parse_time("1970-01-01T00:00:01.250000Z") == 1.25


def test_count_requests_one_per_audit_id_by_source_and_verb() -> None:
    start = scale.parse_time("2026-12-03T10:00:00Z")
    lines = [
        # A watch logs two stages; it is one request.
        event("w1", stage="ResponseStarted", verb="watch"),
        event("w1", stage="ResponseComplete", verb="watch"),
        event("a", verb="create"),
        event("b", verb="patch", source="10.250.0.12"),
        event("c", user="system:serviceaccount:metallb-system:ironlb-controller"),
        event("d", received="2026-12-03T10:00:10.000000Z"),  # after the window
        event("e", received="2026-12-03T09:59:59.999999Z"),  # before it
        "not json",
        json.dumps({"kind": "Something"}),
    ]
    counts = scale.count_requests(lines, scale.SPEAKER_USER, start, start + 10)
    assert counts == {
        "10.250.0.11": Counter({"watch services/status": 1, "create services/status": 1}),
        "10.250.0.12": Counter({"patch services/status": 1}),
    }
    rates = scale.per_second(counts, ["10.250.0.11", "10.250.0.12", "10.250.0.13"], 2.0)
    assert rates["by_speaker"] == {"10.250.0.11": 1.0, "10.250.0.12": 0.5, "10.250.0.13": 0.0}
    assert rates["mean"] == 0.5
    assert rates["max"] == 1.0
    assert rates["verbs"] == {
        "create services/status": 1,
        "patch services/status": 1,
        "watch services/status": 1,
    }


def test_pass_totals_and_the_mean_pass_on_the_busiest_node() -> None:
    metrics = (
        "# TYPE ironlb_speaker_pass_seconds histogram\n"
        'ironlb_speaker_pass_seconds_bucket{le="0.1"} 3.0\n'
        "ironlb_speaker_pass_seconds_count 4.0\n"
        "ironlb_speaker_pass_seconds_sum 1.5\n"
    )
    assert scale.pass_totals(metrics) == (1.5, 4.0)
    assert scale.pass_totals(None) is None and scale.pass_totals("x 1\n") is None
    cpu = metrics.replace("pass_seconds", "pass_cpu_seconds").replace("1.5", "0.25")
    assert scale.pass_totals(metrics + cpu, scale.PASS_CPU_METRIC) == (0.25, 4.0)
    assert scale.pass_totals(metrics + cpu) == (1.5, 4.0)
    before = {1: (1.0, 10.0), 2: (2.0, 10.0), 3: None}
    after = {1: (1.5, 15.0), 2: (3.0, 12.0), 3: (9.0, 20.0)}
    assert scale.mean_pass_s(before, after) == 0.5  # node 2: 1.0 s over 2 passes
    assert scale.mean_pass_s(before, before) is None  # no pass ran meanwhile


def test_the_floor_writes_what_the_speakers_write() -> None:
    items = scale.floor_objects(2, 1, ["node1", "node2", "node3"])
    kinds = [obj["kind"] for _, obj, _ in items]
    assert kinds == ["ServiceL2Status"] * 2 + ["ServiceBGPStatus"] * 3  # a BGP one per node
    names = [obj["metadata"]["name"] for _, obj, _ in items]
    assert len(set(names)) == len(names)
    plural, obj, status = items[-1]
    assert plural == "servicebgpstatuses" and obj["metadata"]["namespace"] == scale.FLOOR_NS
    assert status["node"] == obj["metadata"]["labels"]["metallb.io/node"] == "node3"


def test_failover_vips_give_one_cluster_l2_address_per_owner_in_node_order() -> None:
    from speaker import election

    nodes = ["node1", "node2", "node3"]
    planned = scale.plan(200)
    ingress = {p.name: f"10.246.0.{i + 1}" for i, p in enumerate(planned)}
    vips = scale.failover_vips(planned, ingress, nodes)
    assert [election.owner(v, nodes) for v in vips] == nodes
    by_address = {ingress[p.name]: p for p in planned}
    for vip in vips:
        p = by_address[vip]
        assert p.mode == "l2" and not p.local
        # The first in name order that this owner owns.
        earlier = [
            q
            for q in planned
            if q.name < p.name
            and q.mode == "l2"
            and not q.local
            and election.owner(ingress[q.name], nodes) == election.owner(vip, nodes)
        ]
        assert earlier == []


def test_failover_vips_leave_out_what_has_no_address_or_is_not_a_cluster_l2_service() -> None:
    nodes = ["node1", "node2"]
    planned = [
        scale.Planned("a", "bgp", False, "g1"),
        scale.Planned("b", "l2", True, "g1"),
        scale.Planned("c", "l2", False, "g1"),
    ]
    assert scale.failover_vips(planned, {"a": "10.0.0.1", "b": "10.0.0.2"}, nodes) == []
    (only,) = scale.failover_vips(planned, {"c": "10.0.0.3"}, nodes)
    assert only == "10.0.0.3"


def test_ingress_of_reads_the_first_address_and_skips_services_without_one() -> None:
    def svc(name: str, ingress: list[dict[str, str]] | None) -> dict[str, Any]:
        status = {} if ingress is None else {"loadBalancer": {"ingress": ingress}}
        return {"metadata": {"name": name}, "status": status}

    items = {
        "a": svc("a", [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]),
        "b": svc("b", None),
        "c": svc("c", [{"hostname": "x"}]),
        "d": svc("d", []),
    }
    assert scale.ingress_of(items) == {"a": "10.0.0.1"}
