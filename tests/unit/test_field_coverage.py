"""Every field of every metallb.io CRD is either honoured, with a test that shows it, or reported
as not honoured by `ironlb.honouring` (the list behind the webhook's warnings, the `Valid`
condition and the speakers' `Honoured` condition). Nothing is accepted in silence.

`FIELDS` below is the one table. The walk reads each CRD under crds/, every served version
(BGPPeer's v1beta2 and v1beta1), and every property path under `spec` (`[]` marks a list's
items); a path missing from the table fails, and so does a table row no CRD has. A row is
* honoured: the tests named (`file::function`, or `file::function[case id]`) must exist;
* reported: an object of that kind with the row's example set (on top of a minimal valid
  object, plus any other objects it needs) must parse without a problem and get a finding for
  exactly that field; a row can be both when some values are honoured and others are not
  (`routerID`: IPv4 honoured, IPv6 reported).
Every finding the examples produce must be for a reported row, and docs/configuration.md must
say "**not honoured**" in its ironlb column for exactly the reported top-level fields.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from ironlb import honouring, model, parsing

ROOT = Path(__file__).resolve().parents[2]
NS = "metallb-system"


@dataclass(frozen=True)
class Example:
    """What to set (a key with None is removed from the minimal object) and what else exists."""

    spec: Mapping[str, Any]
    others: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Field:
    honoured: tuple[str, ...] = ()  # tests showing it
    reported: Example | None = None  # an object setting it, which must get a finding
    note: str = field(default="", compare=False)


def honoured(*tests: str, note: str = "") -> Field:
    return Field(honoured=tests, note=note)


def reported(
    spec: Mapping[str, Any], *others: Mapping[str, Any], also: tuple[str, ...] = ()
) -> Field:
    return Field(honoured=also, reported=Example(spec, others))


UNIT = "tests/unit"
SELECTOR_TESTS = (
    f"{UNIT}/test_selectors.py::test_selector_matching",
    f"{UNIT}/test_selectors.py::test_a_list_of_selectors_is_ored_and_empty_selects_all",
)
PEER_FIELDS = (
    f"{UNIT}/test_bgp_intent.py::test_every_honoured_peer_field_reaches_the_session_and_exabgp"
)
PEER_DYNAMIC = (
    f"{UNIT}/test_bgp_intent.py::"
    "test_dynamic_asn_multihop_and_the_password_secret_by_name_in_our_namespace"
)
POOL_CHOICE = f"{UNIT}/test_allocator.py::test_pool_choice"
ROUTES = f"{UNIT}/test_bgp_routes.py::test_desired"
DESIRED = f"{UNIT}/test_desired.py"
POOL_SELECTION = f"{DESIRED}::test_advertisements_select_pools_by_name_or_by_label"
BFD_PROFILE = {"kind": model.BFD_PROFILE, "metadata": {"name": "fast"}, "spec": {}}


def selector(path: str, *tests: str) -> dict[str, Field]:
    """A list of label selectors: the list as its consumer's tests show, its parts as
    ironlb.selectors matches them."""
    parts = (
        "",
        ".matchLabels",
        ".matchExpressions",
        ".matchExpressions[].key",
        ".matchExpressions[].operator",
        ".matchExpressions[].values",
    )
    rows = {path: honoured(*tests, *SELECTOR_TESTS)}
    item = path if path.endswith("preference") else f"{path}[]"
    rows.update({f"{item}{part}": honoured(*SELECTOR_TESTS, *tests) for part in parts[1:]})
    return rows


FIELDS: dict[str, dict[str, Field]] = {
    model.IP_ADDRESS_POOL: {
        "spec.addresses": honoured(
            f"{UNIT}/test_parsing.py::test_pool_defaults_and_address_forms",
            f"{POOL_CHOICE}[ranges in spec order, not address order]",
        ),
        "spec.autoAssign": honoured(
            f"{UNIT}/test_controller_snapshot.py::test_pools_parse_into_allocator_pools",
            f"{POOL_CHOICE}[a pinned pool with autoAssign=false is skipped]",
        ),
        "spec.avoidBuggyIPs": honoured(
            f"{UNIT}/test_controller_snapshot.py::test_pools_parse_into_allocator_pools",
            f"{UNIT}/test_allocator.py::test_buggy_addresses_are_skipped_across_a_24_boundary",
            f"{DESIRED}::test_avoid_buggy_ips_address_is_not_in_pool",
        ),
        "spec.serviceAllocation": honoured(
            f"{UNIT}/test_controller_snapshot.py::"
            "test_priority_only_service_allocation_is_pinned_but_admits_everyone",
        ),
        "spec.serviceAllocation.priority": honoured(
            f"{UNIT}/test_controller_snapshot.py::"
            "test_service_allocation_resolves_namespaces_and_selectors",
            f"{POOL_CHOICE}[lower positive priority first]",
        ),
        "spec.serviceAllocation.namespaces": honoured(
            f"{UNIT}/test_controller_snapshot.py::"
            "test_namespaces_without_selectors_admit_no_other_namespace",
        ),
        **selector(
            "spec.serviceAllocation.namespaceSelectors",
            f"{UNIT}/test_controller_snapshot.py::"
            "test_service_allocation_resolves_namespaces_and_selectors",
        ),
        **selector(
            "spec.serviceAllocation.serviceSelectors",
            f"{UNIT}/test_controller_snapshot.py::"
            "test_service_allocation_resolves_namespaces_and_selectors",
            f"{POOL_CHOICE}[a selector-pinned pool wins for labelled services]",
        ),
    },
    model.L2_ADVERTISEMENT: {
        "spec.ipAddressPools": honoured(POOL_SELECTION),
        **selector("spec.ipAddressPoolSelectors", POOL_SELECTION),
        **selector("spec.nodeSelectors", f"{DESIRED}::test_advertisement_node_selector"),
        "spec.interfaces": honoured(f"{DESIRED}::test_interfaces_union_and_all"),
        **selector("spec.serviceSelectors", f"{DESIRED}::test_service_selectors"),
        "spec.preferredNodeSelectors": honoured(
            f"{DESIRED}::test_preferred_node_selectors_weights_sum",
            f"{UNIT}/test_parsing.py::test_l2_advertisement_fields",
        ),
        "spec.preferredNodeSelectors[].weight": honoured(
            f"{DESIRED}::test_preferred_node_selectors_weights_sum",
            f"{UNIT}/test_election.py::test_preference_scores_sum_over_ads_and_need_node_selection",
        ),
        **selector(
            "spec.preferredNodeSelectors[].preference",
            f"{DESIRED}::test_preferred_node_selectors_weights_sum",
            f"{UNIT}/test_parsing.py::test_l2_advertisement_fields",
        ),
    },
    model.BGP_ADVERTISEMENT: {
        "spec.aggregationLength": honoured(f"{ROUTES}[65-aggregation-32-and-24-both]"),
        "spec.aggregationLengthV6": honoured(f"{ROUTES}[v6-aggregation-length]"),
        "spec.localPref": honoured(f"{ROUTES}[66-communities-everywhere-localpref-only-ibgp]"),
        "spec.communities": reported(
            {"communities": [f"65000:{i}" for i in range(64)]},
            also=(
                f"{ROUTES}[66-communities-everywhere-localpref-only-ibgp]",
                f"{UNIT}/test_parsing.py::test_config_resolves_community_aliases",
                f"{UNIT}/test_bgp_routes.py::test_sixty_three_communities_is_the_limit",
            ),
        ),
        "spec.ipAddressPools": honoured(POOL_SELECTION),
        **selector("spec.ipAddressPoolSelectors", POOL_SELECTION),
        **selector("spec.nodeSelectors", f"{DESIRED}::test_bgp_node_selector_and_exclusions"),
        "spec.peers": honoured(
            f"{ROUTES}[62-peers-list-limits-sessions]",
            f"{UNIT}/test_bgp_intent.py::test_announcements_per_address_and_reach_per_service",
        ),
        **selector("spec.serviceSelectors", f"{DESIRED}::test_bgp_service_selectors"),
    },
    model.BGP_PEER: {
        "spec.myASN": honoured(PEER_FIELDS),
        "spec.peerASN": honoured(PEER_FIELDS),
        "spec.dynamicASN": honoured(PEER_DYNAMIC),
        "spec.localASN": honoured(
            f"{UNIT}/test_bgp_intent.py::test_local_asn_is_the_asn_the_session_presents",
            f"{UNIT}/test_bgp_rendering.py::test_golden[ebgp-local-asn]",
            f"{UNIT}/test_bgp_rendering.py::test_the_as_path_sent_is_the_sessions_asn_alone",
            "tests/e2e/test_bgp_fields.py::test_local_asn_is_the_remote_as_the_tor_sees",
        ),
        "spec.peerAddress": honoured(PEER_FIELDS),
        "spec.interface": reported(
            {"peerAddress": None, "peerASN": None, "dynamicASN": "internal", "interface": "eth1"}
        ),
        "spec.sourceAddress": reported({"sourceAddress": "fd00::2"}, also=(PEER_FIELDS,)),
        "spec.peerPort": honoured(PEER_FIELDS),
        "spec.holdTime": honoured(
            PEER_FIELDS,
            f"{UNIT}/test_bgp_intent.py::test_a_lone_hold_time_is_honoured_with_its_keepalive",
        ),
        "spec.keepaliveTime": reported(
            {"holdTime": "90s", "keepaliveTime": "10s"}, also=(PEER_FIELDS,)
        ),
        "spec.connectTime": reported({"connectTime": "5s"}),
        "spec.routerID": reported({"routerID": "fd00::7"}, also=(PEER_FIELDS,)),
        **selector(
            "spec.nodeSelectors",
            f"{UNIT}/test_bgp_intent.py::test_only_peers_selecting_this_node_become_sessions",
        ),
        "spec.password": reported({"password": "x" * 81}, also=(PEER_FIELDS,)),
        "spec.passwordSecret": honoured(
            PEER_DYNAMIC, f"{UNIT}/test_bgp_intent.py::test_password_comes_from_the_secret"
        ),
        "spec.passwordSecret.name": honoured(PEER_DYNAMIC),
        "spec.passwordSecret.namespace": honoured(
            PEER_DYNAMIC, note="ignored, as MetalLB ignores it: the Secret is in our namespace"
        ),
        "spec.bfdProfile": reported(
            {"bfdProfile": "fast", "ebgpMultiHop": True},
            BFD_PROFILE,
            also=(
                PEER_FIELDS,
                f"{UNIT}/test_bgp_speaking.py::test_bfd_down_tears_bgp_down_but_admin_down_does_not",
            ),
        ),
        "spec.enableGracefulRestart": honoured(
            PEER_FIELDS,
            f"{UNIT}/test_bgp_speaking.py::"
            "test_graceful_restart_peers_keep_routes_when_the_speaker_restarts",
        ),
        "spec.ebgpMultiHop": honoured(PEER_DYNAMIC),
        "spec.vrf": reported({"vrf": "red"}),
        "spec.disableMP": honoured(
            PEER_FIELDS,
            f"{UNIT}/test_webhook.py::test_peer_disable_mp_warns",
            note="deprecated, no effect in MetalLB either",
        ),
        "spec.dualStackAddressFamily": honoured(
            f"{UNIT}/test_bgp_intent.py::"
            "test_dual_stack_sessions_carry_the_other_family_with_the_nodes_address",
            f"{UNIT}/test_bgp_next_hops.py::test_choose",
            f"{UNIT}/test_bgp_rendering.py::test_the_other_family_goes_out_with_its_own_next_hop",
            f"{UNIT}/test_bgp_rendering.py::test_golden[dual-stack-over-ipv6]",
            "tests/e2e/test_bgp_fields.py::test_dual_stack_peer_carries_the_other_family",
        ),
    },
    model.BFD_PROFILE: {
        "spec.receiveInterval": honoured(
            PEER_FIELDS,
            f"{UNIT}/test_bgp_bfd_machine.py::test_detection_uses_the_slower_of_our_rx_and_their_tx",
        ),
        "spec.transmitInterval": honoured(
            PEER_FIELDS,
            f"{UNIT}/test_bgp_bfd_machine.py::test_slower_transmit_waits_for_final",
        ),
        "spec.detectMultiplier": honoured(
            PEER_FIELDS,
            f"{UNIT}/test_bgp_bfd_machine.py::test_silence_brings_it_down_after_detection_time",
        ),
        "spec.echoInterval": reported({"echoInterval": 50}),
        "spec.echoMode": reported({"echoMode": True}),
        "spec.passiveMode": honoured(
            PEER_FIELDS, f"{UNIT}/test_bgp_bfd_machine.py::test_passive_waits_for_the_remote"
        ),
        "spec.minimumTtl": reported({"minimumTtl": 10}),
    },
    model.COMMUNITY: {
        "spec.communities": honoured(
            f"{UNIT}/test_parsing.py::test_config_resolves_community_aliases"
        ),
        "spec.communities[].name": honoured(
            f"{UNIT}/test_parsing.py::test_community_aliases",
            f"{UNIT}/test_parsing.py::test_config_resolves_community_aliases",
        ),
        "spec.communities[].value": honoured(
            f"{UNIT}/test_parsing.py::test_community_aliases",
            f"{UNIT}/test_bgp_intent.py::test_announcements_per_address_and_reach_per_service",
        ),
    },
}

MINIMAL: dict[str, dict[str, Any]] = {
    model.IP_ADDRESS_POOL: {"addresses": ["10.0.0.0/24"]},
    model.L2_ADVERTISEMENT: {},
    model.BGP_ADVERTISEMENT: {},
    model.BGP_PEER: {"myASN": 64512, "peerASN": 64500, "peerAddress": "10.0.0.1"},
    model.BFD_PROFILE: {},
    model.COMMUNITY: {"communities": [{"name": "gold", "value": "65000:1"}]},
}


# --- the walk ------------------------------------------------------------------------------------


def _paths(schema: Mapping[str, Any], path: str) -> Iterator[str]:
    for name, sub in (schema.get("properties") or {}).items():
        yield f"{path}.{name}"
        yield from _paths(sub, f"{path}.{name}")
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from _paths(items, f"{path}[]")
    more = schema.get("additionalProperties")
    if isinstance(more, Mapping) and more.get("properties"):
        yield from _paths(more, f"{path}{{}}")


def crd_paths() -> dict[tuple[str, str], list[str]]:
    """(kind, version) -> every property path under spec, for every CRD under crds/."""
    out: dict[tuple[str, str], list[str]] = {}
    for file in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(file.read_text())
        assert crd["spec"]["group"] == model.GROUP
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served"):
                continue
            root = version["schema"]["openAPIV3Schema"]["properties"]
            out[(kind, version["name"])] = (
                list(_paths(root["spec"], "spec")) if "spec" in root else []
            )
    return out


PATHS = crd_paths()


def test_the_walk_sees_every_kind_and_both_peer_versions() -> None:
    assert {kind for kind, _ in PATHS} == set(model.RESOURCES)
    for kind, (_, versions) in model.RESOURCES.items():
        assert {v for k, v in PATHS if k == kind} == set(versions), kind
    assert set(PATHS[(model.BGP_PEER, "v1beta1")]) < set(PATHS[(model.BGP_PEER, "v1beta2")])
    # Only the configuration kinds have a spec: the status kinds are outputs.
    assert {kind for (kind, _), paths in PATHS.items() if paths} == set(model.CONFIG_KINDS)


@pytest.mark.parametrize(("kind", "version"), sorted(PATHS))
def test_every_field_is_honoured_or_reported(kind: str, version: str) -> None:
    table = FIELDS.get(kind, {})
    missing = [p for p in PATHS[(kind, version)] if p not in table]
    assert not missing, (
        f"{kind} {version}: fields neither honoured (with a test) nor reported by "
        f"ironlb.honouring: {missing}; classify each in FIELDS"
    )


def test_no_row_for_a_field_no_crd_has() -> None:
    known = {(kind, p) for (kind, _), paths in PATHS.items() for p in paths}
    stale = [(kind, p) for kind, rows in FIELDS.items() for p in rows if (kind, p) not in known]
    assert not stale


def test_every_row_says_something() -> None:
    empty = [
        (k, p)
        for k, rows in FIELDS.items()
        for p, f in rows.items()
        if not f.honoured and not f.reported
    ]
    assert not empty


# --- honoured: the tests named exist ---------------------------------------------------------


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


TESTS = sorted({t for rows in FIELDS.values() for f in rows.values() for t in f.honoured})


@pytest.mark.parametrize("test", TESTS)
def test_named_tests_exist(test: str) -> None:
    match = re.fullmatch(r"([\w/]+\.py)::(\w+)(?:\[(.+)\])?", test)
    assert match, f"{test}: write file::function or file::function[case id]"
    file, function, case = match.groups()
    path = ROOT / file
    assert path.is_file(), test
    assert function in _functions(path), test
    if case is not None:
        assert case in path.read_text(), f"{test}: no case {case!r} in {file}"


# --- reported: ironlb.honouring finds each one ---------------------------------------------------


def _object(kind: str, version: str, example: Example) -> dict[str, Any]:
    spec = {**MINIMAL[kind], **example.spec}
    return {
        "apiVersion": f"{model.GROUP}/{version}",
        "kind": kind,
        "metadata": {"name": "subject", "namespace": NS},
        "spec": {k: v for k, v in spec.items() if v is not None},
    }


REPORTED = [
    (kind, version, path, f.reported)
    for (kind, version), paths in sorted(PATHS.items())
    for path in paths
    if (f := FIELDS.get(kind, {}).get(path)) is not None and f.reported is not None
]


def _findings(objects: list[Mapping[str, Any]]) -> list[Any]:
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(str(obj["kind"]), []).append(obj)
    config, problems = parsing.parse_config(by_kind)
    assert problems == [], "the example must be an object the API and the webhook accept"
    return honouring.not_honoured(config)


@pytest.mark.parametrize(
    ("kind", "version", "path", "example"),
    REPORTED,
    ids=[f"{k}-{v}-{p}" for k, v, p, _ in REPORTED],
)
def test_reported_fields_are_found(kind: str, version: str, path: str, example: Example) -> None:
    found = _findings([_object(kind, version, example), *example.others])
    assert [(p.kind, p.name, p.field) for p in found if p.name == "subject"] == [
        (kind, "subject", path)
    ]


def test_every_finding_is_a_reported_row() -> None:
    for kind, version, _, example in REPORTED:
        for p in _findings([_object(kind, version, example), *example.others]):
            row = FIELDS[p.kind].get(p.field)
            assert row is not None and row.reported is not None, str(p)


def test_minimal_objects_are_honoured_entirely() -> None:
    objects = [_object(kind, model.RESOURCES[kind][1][-1], Example({})) for kind in MINIMAL]
    assert _findings(objects) == []


# --- docs/configuration.md says the same ---------------------------------------------------------


def doc_rows() -> dict[str, dict[str, str]]:
    """Kind -> field -> the ironlb column ("" for a table without one), from the reference."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows: dict[str, dict[str, str]] = {}
    kind = ""
    for line in text.splitlines():
        heading = re.match(r"## (\w+)(?:, \w+)? \(`metallb\.io/", line)
        if heading:
            kind = heading.group(1)
            continue
        if line.startswith("## "):
            kind = ""
        cell = re.match(r"\| `(spec\.[^`]+)` \|", line)
        if kind and cell:
            columns = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows.setdefault(kind, {})[cell.group(1).removesuffix("[]")] = (
                columns[4] if len(columns) >= 5 else ""
            )
    return rows


def test_the_reference_marks_exactly_the_reported_fields() -> None:
    rows = doc_rows()
    for kind, table in FIELDS.items():
        documented = rows.get(kind, {})
        top = [p for p in table if re.fullmatch(r"spec\.\w+", p)]
        undocumented = [
            p for p in top if p not in documented and not any(d.startswith(p) for d in documented)
        ]
        assert not undocumented, f"{kind}: fields docs/configuration.md does not list"
        if kind == model.COMMUNITY:
            continue  # no ironlb column: nothing there is left out
        for path in top:
            says = "**not honoured**" in documented[path]
            assert says == (table[path].reported is not None), (
                f"docs/configuration.md, {kind} {path}: the ironlb column must say "
                f"'**not honoured**' exactly when ironlb.honouring reports the field"
            )
