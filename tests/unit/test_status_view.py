"""`ironlb status`'s pure part: API objects and speaker metrics -> view -> text and JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ironlb_cli import __main__ as cli
from ironlb_cli import render, schema
from ironlb_cli import status_view as sv

MS = "metallb-system"


def pool(name: str, *addresses: str, status: dict[str, int] | None = None, **spec: Any) -> Any:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": MS},
        "spec": {"addresses": list(addresses), **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def l2ad(name: str, *pools: str) -> Any:
    return {"metadata": {"name": name, "namespace": MS}, "spec": {"ipAddressPools": list(pools)}}


def bgpad(name: str, *pools: str) -> Any:
    return {"metadata": {"name": name, "namespace": MS}, "spec": {"ipAddressPools": list(pools)}}


def peer(name: str, address: str, **spec: Any) -> Any:
    return {
        "metadata": {"name": name, "namespace": MS},
        "spec": {"myASN": 64512, "peerASN": 64500, "peerAddress": address, **spec},
    }


def node(index: int, ready: str = "True", **labels: str) -> Any:
    return {
        "metadata": {"name": f"node{index}", "labels": labels},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.0.{10 + index}"},
                {"type": "InternalIP", "address": f"fd00::{10 + index}"},
            ],
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def svc(
    name: str,
    *ips: str,
    pool: str | None = None,
    policy: str | None = None,
    kind: str = "LoadBalancer",
    lb_class: str | None = None,
) -> Any:
    spec: dict[str, Any] = {"type": kind}
    if policy:
        spec["externalTrafficPolicy"] = policy
    if lb_class:
        spec["loadBalancerClass"] = lb_class
    meta: dict[str, Any] = {"name": name, "namespace": "app"}
    if pool:
        meta["annotations"] = {"metallb.io/ip-allocated-from-pool": pool}
    obj: dict[str, Any] = {"metadata": meta, "spec": spec}
    if ips:
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}}
    return obj


def l2status(service: str, node_name: str, *interfaces: str) -> Any:
    return {
        "metadata": {"name": f"l2-{service}-{node_name}", "namespace": MS},
        "status": {
            "node": node_name,
            "serviceName": service,
            "serviceNamespace": "app",
            "interfaces": [{"name": i} for i in interfaces],
        },
    }


def bgpstatus(service: str, node_name: str, *peers: str) -> Any:
    return {
        "metadata": {"name": f"bgp-{service}-{node_name}", "namespace": MS},
        "status": {
            "node": node_name,
            "serviceName": service,
            "serviceNamespace": "app",
            "peers": list(peers),
        },
    }


def warning(service: str, reason: str, message: str, when: str) -> Any:
    return {
        "type": "Warning",
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
        "involvedObject": {"kind": "Service", "namespace": "app", "name": service},
    }


def metrics(
    *,
    sessions: dict[str, int] | None = None,
    bfd: dict[str, int] | None = None,
    prefixes: dict[str, int] | None = None,
    members: dict[str, int] | None = None,
    announced: list[tuple[str, str]] = (),  # type: ignore[assignment]
    stale: int | None = 0,
) -> str:
    lines = []
    for label, up in (sessions or {}).items():
        lines.append(f'metallb_bgp_session_up{{peer="{label}"}} {up}')
    for label, up in (bfd or {}).items():
        lines.append(f'metallb_bfd_session_up{{peer="{label}"}} {up}')
    for label, n in (prefixes or {}).items():
        lines.append(f'metallb_bgp_announced_prefixes_total{{peer="{label}"}} {n}')
    for state, n in (members or {}).items():
        lines.append(f'ironlb_memberlist_members{{state="{state}"}} {n}')
    for service, node_name in announced:
        lines.append(
            f'metallb_speaker_announced{{ip="10.1.0.1",node="{node_name}",'
            f'protocol="layer2",service="{service}"}} 1.0'
        )
    if stale is not None:
        lines.append(f"metallb_k8s_client_config_stale_bool {stale}")
    return "\n".join(lines) + "\n"


def view(**fields: Any) -> sv.View:
    return sv.build(sv.Inputs(**fields))


def conforms(v: sv.View) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(json.dumps(render.to_json(v)))
    assert schema.check(document) == []
    return document


# --- pools --------------------------------------------------------------------------------------


def test_pool_usage_per_family_comes_from_the_controllers_counters() -> None:
    v = view(
        config={
            "IPAddressPool": [
                pool(
                    "lab",
                    "10.1.0.0/28",
                    "fd00:1::/124",
                    status={
                        "assignedIPv4": 4,
                        "availableIPv4": 12,
                        "assignedIPv6": 0,
                        "availableIPv6": 16,
                    },
                )
            ],
            "L2Advertisement": [l2ad("everywhere")],
        },
    )
    (p,) = v.pools
    assert [(f.family, f.assigned, f.total) for f in p.families] == [
        ("IPv4", 4, 16),
        ("IPv6", 0, 16),
    ]
    assert p.families[0].fraction == 0.25
    assert p.l2_advertisements == ("everywhere",)
    text = render.text(v)
    assert "[#####---------------]  4/16 25%" in text
    assert "[--------------------]  0/16 0%" in text
    assert conforms(v)["pools"][0]["families"][0]["usage"] == 0.25


def test_a_pool_without_status_shows_unknown_usage_and_no_advertisement() -> None:
    v = view(config={"IPAddressPool": [pool("fresh", "10.2.0.0/24", autoAssign=False)]})
    (p,) = v.pools
    assert p.families == (sv.FamilyUsage("IPv4", None, None),)
    assert not p.auto_assign
    text = render.text(v)
    assert "[????????????????????]  ?/?" in text
    assert "not advertised" in text
    assert "(no auto-assign)" in text
    assert conforms(v)["pools"][0]["families"][0]["total"] is None


def test_pools_count_the_services_allocated_from_them() -> None:
    v = view(
        config={"IPAddressPool": [pool("a", "10.1.0.0/24"), pool("b", "10.2.0.0/24")]},
        services=[svc("x", "10.1.0.1", pool="a"), svc("y", "10.1.0.2", pool="a")],
    )
    assert {p.name: p.services for p in v.pools} == {"a": 2, "b": 0}


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (0.0, "[----]"),
        (0.01, "[#---]"),  # any use shows
        (0.5, "[##--]"),
        (0.99, "[###-]"),  # not full until full
        (1.0, "[####]"),
        (None, "[????]"),
    ],
)
def test_usage_bar(fraction: float | None, expected: str) -> None:
    assert render.bar(fraction, width=4) == expected


def test_huge_pool_sizes_are_shown_as_powers_of_ten() -> None:
    assert render.count(999_999) == "999999"
    assert render.count(2**63 - 1) == "9.2e18"
    assert render.count(None) == "?"


# --- services -----------------------------------------------------------------------------------


def test_services_show_address_pool_policy_and_who_announces() -> None:
    v = view(
        config={"IPAddressPool": [pool("lab", "10.1.0.0/24")]},
        services=[
            svc("web", "10.1.0.1", "fd00:1::1", pool="lab", policy="Local"),
            svc("api", "10.1.0.2", pool="lab"),
            svc("internal", kind="ClusterIP"),
        ],
        l2_statuses=[l2status("web", "node2"), l2status("web", "node3", "eth1")],
        bgp_statuses=[bgpstatus("api", "node1", "tor-b", "tor-a")],
    )
    web = next(s for s in v.services if s.name == "web")
    api = next(s for s in v.services if s.name == "api")
    assert [s.name for s in v.services] == ["api", "web"]  # sorted; ClusterIP left out
    assert web.addresses == ("10.1.0.1", "fd00:1::1")
    assert (web.pool, web.traffic_policy, web.state, web.modes) == (
        "lab",
        "Local",
        "announced",
        ("layer2",),
    )
    assert [(a.node, a.interfaces) for a in web.announcements] == [
        ("node2", ()),
        ("node3", ("eth1",)),
    ]
    assert api.traffic_policy == "Cluster"
    assert api.announcements == (sv.Announcement("bgp", "node1", peers=("tor-a", "tor-b")),)
    text = render.text(v)
    assert "node2; node3 (eth1)" in text
    assert "node1 -> tor-a,tor-b" in text
    document = conforms(v)
    assert document["services"][0]["announcements"][0]["peers"] == ["tor-a", "tor-b"]


def test_a_pending_service_shows_its_latest_warning_event() -> None:
    v = view(
        services=[svc("stuck")],
        events=[
            warning("stuck", "AllocationFailed", "old news", "2025-01-01T10:00:00Z"),
            warning("stuck", "AllocationFailed", "no available IPs", "2025-01-01T10:05:00Z"),
            warning("other", "AllocationFailed", "not this one", "2025-01-01T11:00:00Z"),
            {**warning("stuck", "X", "normal events are not reasons", "2026"), "type": "Normal"},
        ],
    )
    (s,) = v.services
    assert s.state == "pending"
    assert s.reason == "AllocationFailed: no available IPs"
    text = render.text(v)
    assert "<pending>" in text
    assert "app/stuck (pending): AllocationFailed: no available IPs" in text


def test_a_pending_service_without_events_points_at_the_pools_or_the_controller() -> None:
    (s,) = view(services=[svc("stuck")]).services
    assert s.reason == "no valid IPAddressPool in the MetalLB namespace"
    pools = {"IPAddressPool": [pool("lab", "10.1.0.0/24")]}
    (s,) = view(config=pools, services=[svc("stuck")]).services
    assert s.reason is not None and "controller" in s.reason


@pytest.mark.parametrize(
    ("config", "policy", "expected"),
    [
        ({"IPAddressPool": [pool("lab", "10.1.0.0/24")]}, None, "has no L2Advertisement"),
        (
            {"IPAddressPool": [pool("lab", "10.1.0.0/24")], "BGPAdvertisement": [bgpad("b")]},
            "Local",
            "externalTrafficPolicy: Local",
        ),
        (
            {"IPAddressPool": [pool("lab", "10.1.0.0/24")], "L2Advertisement": [l2ad("l", "lab")]},
            None,
            "no ready endpoint, or no eligible node",
        ),
    ],
)
def test_why_an_assigned_service_is_not_announced(
    config: dict[str, Any], policy: str | None, expected: str
) -> None:
    (s,) = view(
        config=config, services=[svc("web", "10.1.0.1", pool="lab", policy=policy)]
    ).services
    assert s.state == "not-announced"
    assert s.reason is not None and expected in s.reason


def test_only_services_of_our_load_balancer_class_are_shown() -> None:
    services = [svc("ours"), svc("theirs", lb_class="example.com/other")]
    assert [s.name for s in view(services=services).services] == ["ours"]
    picked = view(services=services, lb_class="example.com/other").services
    assert [s.name for s in picked] == ["theirs"]


# --- sessions and nodes -------------------------------------------------------------------------


def test_sessions_are_expected_per_peer_and_selected_node_and_read_from_metrics() -> None:
    v = view(
        config={
            "BGPPeer": [
                peer("tor", "10.0.0.1"),
                peer(
                    "tor6",
                    "fd00::1",
                    bfdProfile="fast",
                    nodeSelectors=[{"matchLabels": {"rack": "a"}}],
                ),
            ],
            "BFDProfile": [{"metadata": {"name": "fast", "namespace": MS}, "spec": {}}],
        },
        nodes=[node(1, rack="a"), node(2, rack="b"), node(3, rack="a")],
        scrapes=[
            sv.Scrape(
                "http://10.0.0.11:7473/metrics",
                text=metrics(
                    sessions={"10.0.0.1:179": 1, "[fd00::1]:179": 0},
                    bfd={"fd00::1": 0},
                    prefixes={"10.0.0.1:179": 3},
                ),
            ),
            sv.Scrape("http://10.0.0.12:7473/metrics", text=metrics(sessions={})),
        ],
    )
    rows = {(s.peer, s.node): (s.address, s.bgp, s.bfd, s.prefixes) for s in v.sessions}
    assert rows == {
        ("tor", "node1"): ("10.0.0.1:179", "up", None, 3),
        ("tor", "node2"): ("10.0.0.1:179", "absent", None, None),  # scraped: no such session
        ("tor", "node3"): ("10.0.0.1:179", "unknown", None, None),  # not scraped
        ("tor6", "node1"): ("[fd00::1]:179", "down", "down", None),
        ("tor6", "node3"): ("[fd00::1]:179", "unknown", "unknown", None),
    }
    conforms(v)


def test_membership_view_per_node_with_scrape_errors_and_unscraped_nodes() -> None:
    v = view(
        nodes=[node(1), node(2, ready="False"), node(3)],
        scrapes=[
            sv.Scrape(
                "http://10.0.0.11:7473/metrics",
                text=metrics(members={"alive": 2, "suspect": 1, "dead": 0}, stale=1),
            ),
            sv.Scrape("http://[fd00::12]:7473/metrics", error="connection refused"),
        ],
    )
    by_name = {n.name: n for n in v.nodes}
    assert by_name["node1"].members == {"alive": 2, "suspect": 1, "dead": 0}
    assert by_name["node1"].config_stale is True
    assert (by_name["node2"].ready, by_name["node2"].speaker) == ("False", "error")
    assert by_name["node2"].error == "connection refused"
    assert (by_name["node3"].speaker, by_name["node3"].members) == ("not-scraped", None)
    text = render.text(v)
    assert "2 alive, 1 suspect" in text
    assert "STALE" in text
    assert "error: connection refused" in text
    document = conforms(v)
    assert [s["ok"] for s in document["scrapes"]] == [True, False]


def test_a_scrape_is_matched_to_its_node_by_name_address_or_announcements() -> None:
    nodes = [node(1), node(2), node(3)]
    v = view(
        nodes=nodes,
        scrapes=[
            sv.Scrape("http://speaker-a:7473/metrics", node="node1", text=metrics()),
            sv.Scrape("http://10.0.0.12:7473/metrics", text=metrics()),
            sv.Scrape("http://speaker-c/metrics", text=metrics(announced=[("app/w", "node3")])),
            sv.Scrape("http://nobody.example/metrics", text=metrics()),
            sv.Scrape("http://10.0.0.12:9999/metrics", text=metrics()),
        ],
    )
    assert [n.speaker for n in v.nodes] == ["scraped", "scraped", "scraped"]
    assert [s.node for s in v.scrapes] == ["node1", "node2", "node3", None, "node2"]
    assert (
        "http://nobody.example/metrics: cannot tell which node this speaker runs on;"
        " give it as NODE=URL"
    ) in v.problems
    assert "http://10.0.0.12:9999/metrics: node node2 was already scraped; ignored" in v.problems


def test_unreadable_metrics_are_an_error_not_a_crash() -> None:
    with pytest.raises(ValueError):
        sv.read_metrics('metallb_bgp_session_up{peer="x" 1\n')
    v = view(nodes=[node(1)], scrapes=[sv.Scrape("http://10.0.0.11/metrics", text="a{b\n")])
    (n,) = v.nodes
    assert n.speaker == "error" and n.error is not None
    assert conforms(v)["scrapes"][0]["ok"] is False


def test_without_scrapes_sessions_and_membership_are_unknown_and_the_text_says_how() -> None:
    v = view(config={"BGPPeer": [peer("tor", "10.0.0.1")]}, nodes=[node(1)])
    assert [s.bgp for s in v.sessions] == ["unknown"]
    assert v.nodes[0].members is None
    assert "--speaker-metrics" in render.text(v)


# --- configuration problems ---------------------------------------------------------------------


def test_configuration_problems_are_listed() -> None:
    v = view(
        config={"IPAddressPool": [pool("a", "10.1.0.0/24"), pool("b", "10.1.0.128/25")]},
    )
    assert any("overlap" in p for p in v.problems)
    assert "PROBLEMS" in render.text(v)


def test_a_password_secret_is_judged_only_when_secret_names_were_read() -> None:
    config = {"BGPPeer": [peer("tor", "10.0.0.1", passwordSecret={"name": "bgp-pass"})]}
    assert not any("bgp-pass" in p for p in view(config=config).problems)
    judged = view(config=config, secret_names=frozenset()).problems
    assert any("bgp-pass" in p for p in judged)
    assert not view(config=config, secret_names=frozenset({"bgp-pass"})).problems


def test_fields_not_honoured_are_listed_with_the_problems() -> None:
    config = {"BGPPeer": [peer("tor", "10.0.0.1", vrf="red")]}
    (line,) = view(config=config).problems
    assert line.startswith("BGPPeer/tor: spec.vrf: not honoured: ")
    assert line in render.text(view(config=config))


# --- the JSON document and its schema -----------------------------------------------------------


def test_the_schema_checker_finds_what_is_wrong() -> None:
    good = render.to_json(view())
    assert schema.check(good) == []
    assert schema.check({**good, "extra": 1}) == ["$: unexpected 'extra'"]
    missing = {k: v for k, v in good.items() if k != "pools"}
    assert schema.check(missing) == ["$: missing 'pools'"]
    assert schema.check({**good, "schemaVersion": 2}) == ["$.schemaVersion: 2 is not one of [1]"]
    bad_node = {
        "name": "n",
        "ready": "Maybe",
        "speaker": "scraped",
        "error": None,
        "members": {"alive": -1},
        "announced": True,
        "configStale": None,
    }
    assert schema.check({**good, "nodes": [bad_node]}) == [
        "$.nodes[0].ready: 'Maybe' is not one of ['True', 'False', 'Unknown']",
        "$.nodes[0].members.alive: -1 is below 0",
        "$.nodes[0].announced: bool is not integer/null",
    ]


json_leaf = st.none() | st.booleans() | st.integers(-5, 2**64) | st.floats() | st.text(max_size=8)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
# Objects close enough to real ones that the interesting code paths run, with any field broken.
shaped = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.sampled_from(["a", "node1", ""]) | json_any},
            optional={"namespace": st.sampled_from(["app", MS]), "annotations": json_any},
        ),
        "spec": json_any
        | st.fixed_dictionaries(
            {"type": st.sampled_from(["LoadBalancer", "ClusterIP"]) | json_any},
            optional={"addresses": json_any, "myASN": json_any, "peerAddress": json_any},
        ),
        "status": json_any,
    }
)
objects = st.lists(shaped | json_any, max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pools=objects,
    peers=objects,
    services=objects,
    nodes=objects,
    l2=objects,
    events=objects,
    text=st.text(max_size=60) | st.sampled_from([metrics(sessions={"10.0.0.1:179": 1})]),
)
def test_any_objects_give_a_view_that_conforms_and_renders(
    pools: list[Any],
    peers: list[Any],
    services: list[Any],
    nodes: list[Any],
    l2: list[Any],
    events: list[Any],
    text: str,
) -> None:
    v = view(
        config={"IPAddressPool": pools, "BGPPeer": peers},
        services=services,
        nodes=nodes,
        l2_statuses=l2,
        events=events,
        scrapes=[sv.Scrape("http://10.0.0.11/metrics", text=text)],
    )
    conforms(v)
    assert isinstance(render.text(v), str)


# --- the command line's own parsing -------------------------------------------------------------


def test_speaker_metrics_targets() -> None:
    assert cli.parse_targets("node1=http://10.0.0.11:7473/metrics, 10.0.0.12:7473,,") == [
        ("node1", "http://10.0.0.11:7473/metrics"),
        (None, "http://10.0.0.12:7473/metrics"),
    ]
    assert cli.parse_targets("http://[fd00::1]:7473/x?a=b") == [
        (None, "http://[fd00::1]:7473/x?a=b")
    ]


def test_an_announcement_from_a_node_whose_speaker_is_unreachable_is_marked() -> None:
    v = view(
        nodes=[node(1), node(2)],
        services=[svc("web", "10.1.0.1")],
        l2_statuses=[l2status("web", "node1"), l2status("web", "node2")],
        scrapes=[
            sv.Scrape("http://10.0.0.11/metrics", error="connection refused"),
            sv.Scrape("http://10.0.0.12/metrics", text=metrics()),
        ],
    )
    text = render.text(v)
    assert "node1 (speaker unreachable); node2" in text
    assert "node2 (speaker unreachable)" not in text
