"""Cross-object validation: one table per MetalLB rule, plus selector disjointness properties."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import model, parsing, selectors, validation
from ironlb.problems import Problem

NS = "metallb-system"


def obj(
    kind: str, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NS}
    if labels:
        metadata["labels"] = labels
    return {"kind": kind, "metadata": metadata, "spec": spec}


def pool(name: str, *cidrs: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return obj("IPAddressPool", name, {"addresses": list(cidrs)}, labels)


def bgpadv(name: str, **spec: Any) -> dict[str, Any]:
    return obj("BGPAdvertisement", name, spec)


def l2adv(name: str, **spec: Any) -> dict[str, Any]:
    return obj("L2Advertisement", name, spec)


def peer(name: str, address: str = "10.0.0.1", **spec: Any) -> dict[str, Any]:
    return obj("BGPPeer", name, {"myASN": 64500, "peerASN": 64501, "peerAddress": address, **spec})


def community(name: str, **aliases: str) -> dict[str, Any]:
    return obj(
        "Community", name, {"communities": [{"name": k, "value": v} for k, v in aliases.items()]}
    )


def bfd(name: str, **spec: Any) -> dict[str, Any]:
    return obj("BFDProfile", name, spec)


def sel(**labels: str) -> dict[str, Any]:
    return {"matchLabels": labels}


def problems_of(*objects: dict[str, Any], secrets: tuple[str, ...] = ()) -> list[Problem]:
    by_kind: dict[str, list[Any]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    by_kind["Secret"] = [{"metadata": {"name": s}} for s in secrets]
    config, parse_problems = parsing.parse_config(by_kind)
    assert parse_problems == [], "fixtures must parse"
    return validation.validate(config)


def where(problems: list[Problem]) -> set[tuple[str, str, str, bool]]:
    return {(p.kind, p.name, p.field, p.transient) for p in problems}


# --- Overlaps -------------------------------------------------------------------------------

OVERLAPS: list[tuple[str, list[dict[str, Any]], set[tuple[str, str, str, bool]]]] = [
    ("disjoint v4", [pool("a", "10.0.0.0/24"), pool("b", "10.0.1.0/24")], set()),
    ("adjacent ranges", [pool("a", "10.0.0.1-10.0.0.9"), pool("b", "10.0.0.10-10.0.0.20")], set()),
    ("same family only", [pool("a", "10.0.0.0/24"), pool("b", "::a00:0/120")], set()),
    (
        "equal cidrs",
        [pool("a", "10.0.0.0/24"), pool("b", "10.0.0.0/24")],
        {
            ("IPAddressPool", "a", "spec.addresses[0]", False),
            ("IPAddressPool", "b", "spec.addresses[0]", False),
        },
    ),
    (
        "contained cidr",
        [pool("a", "10.0.0.0/16"), pool("b", "192.168.0.0/24", "10.0.3.0/24")],
        {
            ("IPAddressPool", "a", "spec.addresses[0]", False),
            ("IPAddressPool", "b", "spec.addresses[1]", False),
        },
    ),
    (
        "range into cidr",
        [pool("a", "10.0.0.0/30"), pool("b", "10.0.0.3-10.0.0.40")],
        {
            ("IPAddressPool", "a", "spec.addresses[0]", False),
            ("IPAddressPool", "b", "spec.addresses[0]", False),
        },
    ),
    (
        "ranges overlap by one address",
        [pool("a", "10.0.0.1-10.0.0.10"), pool("b", "10.0.0.10-10.0.0.20")],
        {
            ("IPAddressPool", "a", "spec.addresses[0]", False),
            ("IPAddressPool", "b", "spec.addresses[0]", False),
        },
    ),
    (
        "ipv6",
        [
            pool("a", "fc00:f853:ccd:e799::/124"),
            pool("b", "fc00:f853:ccd:e799::8-fc00:f853:ccd:e799::20"),
        ],
        {
            ("IPAddressPool", "a", "spec.addresses[0]", False),
            ("IPAddressPool", "b", "spec.addresses[0]", False),
        },
    ),
    ("ipv6 /64 vs /64", [pool("a", "fd00:1::/64"), pool("b", "fd00:2::/64")], set()),
    (
        "within one pool",
        [pool("a", "10.0.0.0/24", "10.1.0.0/24", "10.0.0.128/25")],
        {("IPAddressPool", "a", "spec.addresses[2]", False)},
    ),
    (
        "within one pool v6 range",
        [pool("a", "fd00::/120", "fd00::ff-fd00::1ff")],
        {("IPAddressPool", "a", "spec.addresses[1]", False)},
    ),
]


@pytest.mark.parametrize(
    ("objects", "expected"), [c[1:] for c in OVERLAPS], ids=[c[0] for c in OVERLAPS]
)
def test_overlaps(objects: list[dict[str, Any]], expected: set[tuple[str, str, str, bool]]) -> None:
    assert where(problems_of(*objects)) == expected


def test_overlap_message_names_both_ends() -> None:
    problems = problems_of(pool("a", "10.0.0.0/24"), pool("b", "10.0.0.128/25"))
    by_name = {p.name: p.message for p in problems}
    assert "10.0.0.128/25 overlaps with 10.0.0.0/24 in IPAddressPool 'a'" in by_name["b"]
    assert "10.0.0.0/24 overlaps with 10.0.0.128/25 in IPAddressPool 'b'" in by_name["a"]


def test_overlap_sweep_finds_every_pair() -> None:
    # One wide range overlapping many small ones, which do not overlap each other.
    smalls = [pool(f"s{i:02}", f"10.0.{i}.0/24") for i in range(20)]
    problems = problems_of(pool("wide", "10.0.0.0/16"), *smalls)
    assert len([p for p in problems if p.name == "wide"]) == 20
    assert {p.name for p in problems} == {"wide", *(f"s{i:02}" for i in range(20))}


@settings(max_examples=100)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8)), min_size=1, max_size=3),
        min_size=1,
        max_size=5,
    )
)
def test_overlap_rule_matches_brute_force(spec: list[list[tuple[int, int]]]) -> None:
    pools = [
        pool(f"p{i}", *(f"10.0.0.{start}-10.0.0.{start + size}" for start, size in ranges))
        for i, ranges in enumerate(spec)
    ]
    expected: set[tuple[str, str, str, bool]] = set()
    flat = [(i, j, s, s + n) for i, ranges in enumerate(spec) for j, (s, n) in enumerate(ranges)]
    for (i, j, a0, a1), (k, m, b0, b1) in itertools.combinations(flat, 2):
        if a0 <= b1 and b0 <= a1:
            expected.add(("IPAddressPool", f"p{k}", f"spec.addresses[{m}]", False))
            if i != k:
                expected.add(("IPAddressPool", f"p{i}", f"spec.addresses[{j}]", False))
    assert where(problems_of(*pools)) == expected


def test_duplicate_pool_names() -> None:
    a = pool("a", "10.0.0.0/24")
    again = pool("a", "10.1.0.0/24")
    again["metadata"]["namespace"] = "elsewhere"
    assert where(problems_of(a, again)) == {("IPAddressPool", "a", "metadata.name", False)}


# --- Peers ------------------------------------------------------------------------------------

PEERS: list[tuple[str, list[dict[str, Any]], set[str]]] = [
    ("different address", [peer("a", "10.0.0.1"), peer("b", "10.0.0.2")], set()),
    ("same address", [peer("a"), peer("b")], {"a", "b"}),
    ("same address other port", [peer("a"), peer("b", peerPort=1179)], set()),
    ("same address other vrf", [peer("a"), peer("b", vrf="red")], set()),
    ("same address same vrf", [peer("a", vrf="red"), peer("b", vrf="red")], {"a", "b"}),
    ("differing asn still duplicates", [peer("a"), peer("b", peerASN=64999)], {"a", "b"}),
    (
        "disjoint node selectors",
        [peer("a", nodeSelectors=[sel(rack="r1")]), peer("b", nodeSelectors=[sel(rack="r2")])],
        set(),
    ),
    (
        "overlapping node selectors",
        [peer("a", nodeSelectors=[sel(rack="r1")]), peer("b", nodeSelectors=[sel(zone="z")])],
        {"a", "b"},
    ),
    ("one selects all nodes", [peer("a", nodeSelectors=[sel(rack="r1")]), peer("b")], {"a", "b"}),
    (
        "exists vs does not exist",
        [
            peer("a", nodeSelectors=[{"matchExpressions": [{"key": "bgp", "operator": "Exists"}]}]),
            peer(
                "b",
                nodeSelectors=[{"matchExpressions": [{"key": "bgp", "operator": "DoesNotExist"}]}],
            ),
        ],
        set(),
    ),
    (
        "one of two selectors overlaps",
        [
            peer("a", nodeSelectors=[sel(rack="r1"), sel(rack="r3")]),
            peer(
                "b",
                nodeSelectors=[
                    sel(rack="r2"),
                    {
                        "matchExpressions": [
                            {"key": "rack", "operator": "In", "values": ["r3", "r4"]}
                        ]
                    },
                ],
            ),
        ],
        {"a", "b"},
    ),
    ("ipv6 same", [peer("a", "fd00::1"), peer("b", "fd00:0::1")], {"a", "b"}),
    (
        "same interface",
        [
            obj("BGPPeer", "a", {"myASN": 1, "peerASN": 2, "interface": "eth0"}),
            obj("BGPPeer", "b", {"myASN": 1, "peerASN": 3, "interface": "eth0"}),
        ],
        {"a", "b"},
    ),
]


@pytest.mark.parametrize(("objects", "names"), [c[1:] for c in PEERS], ids=[c[0] for c in PEERS])
def test_duplicate_peers(objects: list[dict[str, Any]], names: set[str]) -> None:
    problems = problems_of(*objects)
    assert {p.name for p in problems} == names
    assert all(p.kind == "BGPPeer" and not p.transient for p in problems)
    assert all(p.field in ("spec.peerAddress", "spec.interface") for p in problems)


# --- Aggregation length vs pool prefixes --------------------------------------------------------

AGGREGATION: list[tuple[str, list[dict[str, Any]], set[tuple[str, str, str, bool]]]] = [
    (
        "/26 on a /28 pool",
        [pool("p", "10.0.0.0/28"), bgpadv("a", aggregationLength=26)],
        {("BGPAdvertisement", "a", "spec.aggregationLength", False)},
    ),
    ("/28 on a /28 pool", [pool("p", "10.0.0.0/28"), bgpadv("a", aggregationLength=28)], set()),
    ("/24 on a /24 pool", [pool("p", "192.168.10.0/24"), bgpadv("a", aggregationLength=24)], set()),
    ("/30 on a /28 pool", [pool("p", "10.0.0.0/28"), bgpadv("a", aggregationLength=30)], set()),
    # 10.0.0.1-10.0.0.6 summarises to /32, /31, /31, /32: the widest is /31.
    (
        "range widest /31",
        [pool("p", "10.0.0.1-10.0.0.6"), bgpadv("a", aggregationLength=31)],
        set(),
    ),
    (
        "range narrower than /31",
        [pool("p", "10.0.0.1-10.0.0.6"), bgpadv("a", aggregationLength=30)],
        {("BGPAdvertisement", "a", "spec.aggregationLength", False)},
    ),
    (
        "v6 /120 on /124",
        [pool("p", "fd00::/124"), bgpadv("a", aggregationLengthV6=120)],
        {("BGPAdvertisement", "a", "spec.aggregationLengthV6", False)},
    ),
    (
        "v4 length ignored for v6 pool",
        [pool("p", "fd00::/124"), bgpadv("a", aggregationLength=8)],
        set(),
    ),
    (
        "only selected pools count",
        [
            pool("p", "10.0.0.0/28"),
            pool("q", "10.1.0.0/24"),
            bgpadv("a", aggregationLength=24, ipAddressPools=["q"]),
        ],
        set(),
    ),
    (
        "pool selected by label",
        [
            pool("p", "10.0.0.0/28", labels={"tier": "x"}),
            bgpadv("a", aggregationLength=24, ipAddressPoolSelectors=[sel(tier="x")]),
        ],
        {("BGPAdvertisement", "a", "spec.aggregationLength", False)},
    ),
]


@pytest.mark.parametrize(
    ("objects", "expected"), [c[1:] for c in AGGREGATION], ids=[c[0] for c in AGGREGATION]
)
def test_aggregation_length(
    objects: list[dict[str, Any]], expected: set[tuple[str, str, str, bool]]
) -> None:
    assert where(problems_of(*objects)) == expected


def test_aggregation_message() -> None:
    (problem,) = problems_of(pool("p", "10.0.0.0/28"), bgpadv("a", aggregationLength=26))
    assert "invalid aggregation length 26" in problem.message
    assert "/28" in problem.message and "'p'" in problem.message


# --- localPref (metallb-behaviour §2.3) -----------------------------------------------------------

DUAL = pool("p", "10.0.0.0/24", "fd00::/120")
V4 = pool("p", "10.0.0.0/24")
V6 = pool("p", "fd00::/120")

LOCAL_PREF: list[tuple[str, list[dict[str, Any]], bool]] = [
    ("same localPref", [V4, bgpadv("a", localPref=100), bgpadv("b", localPref=100)], False),
    (
        "different localPref, nothing else differs",
        [V4, bgpadv("a", localPref=100), bgpadv("b", localPref=200)],
        True,
    ),
    ("one unset", [V4, bgpadv("a", localPref=100), bgpadv("b")], True),
    (
        "(a) v4 pool, v4 lengths differ",
        [V4, bgpadv("a", localPref=100), bgpadv("b", localPref=200, aggregationLength=24)],
        False,
    ),
    (
        "(a) v4 pool, only v6 lengths differ",
        [V4, bgpadv("a", localPref=100), bgpadv("b", localPref=200, aggregationLengthV6=120)],
        True,
    ),
    (
        "(a) v6 pool, v6 lengths differ",
        [V6, bgpadv("a", localPref=100), bgpadv("b", localPref=200, aggregationLengthV6=120)],
        False,
    ),
    (
        "(a) v6 pool, only v4 lengths differ",
        [V6, bgpadv("a", localPref=100), bgpadv("b", localPref=200, aggregationLength=24)],
        True,
    ),
    (
        "(a) dual pool, one family differs",
        [DUAL, bgpadv("a", localPref=100), bgpadv("b", localPref=200, aggregationLength=24)],
        True,
    ),
    (
        "(a) dual pool, both differ",
        [
            DUAL,
            bgpadv("a", localPref=100),
            bgpadv("b", localPref=200, aggregationLength=24, aggregationLengthV6=120),
        ],
        False,
    ),
    (
        "(b) disjoint peers",
        [V4, bgpadv("a", localPref=100, peers=["x"]), bgpadv("b", localPref=200, peers=["y"])],
        False,
    ),
    (
        "(b) shared peer",
        [
            V4,
            bgpadv("a", localPref=100, peers=["x", "z"]),
            bgpadv("b", localPref=200, peers=["y", "z"]),
        ],
        True,
    ),
    (
        "(b) one peer list empty = all peers",
        [V4, bgpadv("a", localPref=100, peers=["x"]), bgpadv("b", localPref=200)],
        True,
    ),
    (
        "(c) disjoint nodes",
        [
            V4,
            bgpadv("a", localPref=100, nodeSelectors=[sel(rack="1")]),
            bgpadv("b", localPref=200, nodeSelectors=[sel(rack="2")]),
        ],
        False,
    ),
    (
        "(c) overlapping nodes",
        [
            V4,
            bgpadv("a", localPref=100, nodeSelectors=[sel(rack="1")]),
            bgpadv("b", localPref=200, nodeSelectors=[sel(zone="2")]),
        ],
        True,
    ),
    (
        "different pools",
        [
            V4,
            pool("q", "10.1.0.0/24"),
            bgpadv("a", localPref=100, ipAddressPools=["p"]),
            bgpadv("b", localPref=200, ipAddressPools=["q"]),
        ],
        False,
    ),
    (
        "serviceSelectors exempt",
        [
            V4,
            bgpadv("a", localPref=100),
            bgpadv("b", localPref=200, serviceSelectors=[sel(app="x")]),
        ],
        False,
    ),
]


@pytest.mark.parametrize(
    ("objects", "conflict"), [c[1:] for c in LOCAL_PREF], ids=[c[0] for c in LOCAL_PREF]
)
def test_local_pref_rule(objects: list[dict[str, Any]], conflict: bool) -> None:
    problems = [p for p in problems_of(*objects) if p.field == "spec.localPref"]
    if conflict:
        assert where(problems) == {
            ("BGPAdvertisement", "a", "spec.localPref", False),
            ("BGPAdvertisement", "b", "spec.localPref", False),
        }
    else:
        assert problems == []


def test_local_pref_verdict_depends_on_each_pools_families() -> None:
    # Compatible on the v4-only pool (v4 lengths differ), in conflict on the dual-stack one.
    problems = problems_of(
        pool("p4", "10.0.0.0/24"),
        pool("q", "10.1.0.0/24", "fd00::/120"),
        bgpadv("a", localPref=100),
        bgpadv("b", localPref=200, aggregationLength=24),
    )
    assert {p.name for p in problems} == {"a", "b"}
    assert all("IPAddressPool 'q'" in p.message for p in problems)


def test_local_pref_conflict_reported_once_per_pair() -> None:
    problems = problems_of(
        pool("p", "10.0.0.0/24"),
        pool("q", "10.1.0.0/24"),
        bgpadv("a", localPref=1),
        bgpadv("b", localPref=2),
    )
    assert len(problems) == 2


# --- Communities ----------------------------------------------------------------------------------


def test_duplicate_alias_across_objects() -> None:
    problems = problems_of(
        community("c1", gold="1:1", silver="1:2"), community("c2", bronze="1:3", gold="1:4")
    )
    assert where(problems) == {
        ("Community", "c1", "spec.communities[0].name", False),
        ("Community", "c2", "spec.communities[1].name", False),
    }
    assert "'gold'" in problems[0].message


def test_duplicate_alias_within_object() -> None:
    raw = obj(
        "Community",
        "c",
        {"communities": [{"name": "x", "value": "1:1"}, {"name": "x", "value": "1:2"}]},
    )
    assert {p.field for p in problems_of(raw)} == {
        "spec.communities[0].name",
        "spec.communities[1].name",
    }


# --- Dangling references: transient ---

DANGLING: list[
    tuple[str, list[dict[str, Any]], tuple[str, ...], set[tuple[str, str, str, bool]]]
] = [
    (
        "l2 missing pool",
        [V4, l2adv("l", ipAddressPools=["p", "nope"])],
        (),
        {("L2Advertisement", "l", "spec.ipAddressPools[1]", True)},
    ),
    (
        "bgp missing pool",
        [bgpadv("a", ipAddressPools=["nope"])],
        (),
        {("BGPAdvertisement", "a", "spec.ipAddressPools[0]", True)},
    ),
    ("present pool", [V4, bgpadv("a", ipAddressPools=["p"])], (), set()),
    (
        "unknown alias",
        [bgpadv("a", communities=["1:1", "gold"])],
        (),
        {("BGPAdvertisement", "a", "spec.communities[1]", True)},
    ),
    ("known alias", [community("c", gold="1:1"), bgpadv("a", communities=["gold"])], (), set()),
    (
        "missing peer",
        [peer("r"), bgpadv("a", peers=["r", "s"])],
        (),
        {("BGPAdvertisement", "a", "spec.peers[1]", True)},
    ),
    (
        "missing bfd profile",
        [peer("r", bfdProfile="fast")],
        (),
        {("BGPPeer", "r", "spec.bfdProfile", True)},
    ),
    ("present bfd profile", [peer("r", bfdProfile="fast"), bfd("fast")], (), set()),
    (
        "missing secret",
        [peer("r", passwordSecret={"name": "pw"})],
        ("other",),
        {("BGPPeer", "r", "spec.passwordSecret.name", True)},
    ),
    ("present secret", [peer("r", passwordSecret={"name": "pw"})], ("pw",), set()),
    (
        "bfd echo with an ipv6 pool",
        [peer("r", bfdProfile="echo"), bfd("echo", echoMode=True), V6, bgpadv("a")],
        (),
        {("BGPPeer", "r", "spec.bfdProfile", True)},
    ),
    (
        "bfd echo with ipv4 only",
        [peer("r", bfdProfile="echo"), bfd("echo", echoMode=True), V4, bgpadv("a")],
        (),
        set(),
    ),
    (
        "bfd echo, ad to another peer",
        [
            peer("r", bfdProfile="echo"),
            peer("s", "10.0.0.2"),
            bfd("echo", echoMode=True),
            V6,
            bgpadv("a", peers=["s"]),
        ],
        (),
        set(),
    ),
]


@pytest.mark.parametrize(
    ("objects", "secrets", "expected"), [c[1:] for c in DANGLING], ids=[c[0] for c in DANGLING]
)
def test_dangling_references_are_transient(
    objects: list[dict[str, Any]],
    secrets: tuple[str, ...],
    expected: set[tuple[str, str, str, bool]],
) -> None:
    assert where(problems_of(*objects, secrets=secrets)) == expected


def test_invalid_objects_ignores_transient() -> None:
    problems = problems_of(
        pool("a", "10.0.0.0/24"), pool("b", "10.0.0.0/25"), bgpadv("x", ipAddressPools=["gone"])
    )
    assert validation.invalid_objects(problems) == {("IPAddressPool", "a"), ("IPAddressPool", "b")}
    assert [p.name for p in validation.about(problems, "BGPAdvertisement", "x")] == ["x"]


# --- Determinism ----------------------------------------------------------------------------------


def test_problem_order_is_deterministic_and_grouped() -> None:
    objects = [
        bgpadv("z", ipAddressPools=["missing"]),
        pool("b", "10.0.0.0/24"),
        peer("r1"),
        pool("a", "10.0.0.0/25"),
        peer("r2"),
        community("c", x="1:1"),
        community("d", x="1:2"),
    ]
    first = problems_of(*objects)
    assert problems_of(*reversed(objects)) == first
    kinds = [p.kind for p in first]
    assert kinds == sorted(kinds, key=validation.KIND_ORDER.__getitem__)
    assert [p.name for p in first if p.kind == "IPAddressPool"] == ["a", "b"]


def test_a_realistic_configuration_has_no_problems() -> None:
    problems = problems_of(
        pool("public", "198.51.100.0/24", "2001:db8::/120", labels={"tier": "public"}),
        pool("internal", "10.20.0.0/16", "10.21.0.1-10.21.0.99"),
        l2adv("l2", ipAddressPools=["internal"], interfaces=["eth0"]),
        bgpadv(
            "host-routes",
            ipAddressPoolSelectors=[sel(tier="public")],
            localPref=100,
            communities=["gold"],
        ),
        bgpadv(
            "aggregate", ipAddressPools=["public"], aggregationLength=24, aggregationLengthV6=120
        ),
        peer(
            "tor1",
            "192.0.2.1",
            nodeSelectors=[sel(rack="1")],
            bfdProfile="fast",
            passwordSecret={"name": "pw"},
        ),
        peer("tor2", "192.0.2.1", nodeSelectors=[sel(rack="2")]),
        bfd("fast", receiveInterval=100),
        community("c", gold="65000:1"),
        secrets=("pw",),
    )
    assert problems == []


small_selector = st.dictionaries(
    st.sampled_from(["rack", "zone"]), st.sampled_from(["1", "2"]), max_size=2
).map(lambda d: {"matchLabels": d})
random_objects = st.lists(
    st.one_of(
        st.builds(
            lambda n, rs: pool(f"p{n}", *(f"10.0.0.{a}-10.0.0.{a + b}" for a, b in rs)),
            st.integers(0, 3),
            st.lists(st.tuples(st.integers(0, 40), st.integers(0, 20)), min_size=1, max_size=2),
        ),
        st.builds(
            lambda n, lp, agg, pools, peers, nodes: bgpadv(
                f"a{n}",
                localPref=lp,
                aggregationLength=agg,
                ipAddressPools=pools,
                peers=peers,
                nodeSelectors=nodes,
            ),
            st.integers(0, 3),
            st.sampled_from([0, 100, 200]),
            st.integers(24, 32),
            st.lists(st.sampled_from(["p0", "p1", "p9"]), unique=True, max_size=2),
            st.lists(st.sampled_from(["r0", "r1"]), unique=True, max_size=2),
            st.lists(small_selector, unique_by=str, max_size=2),
        ),
        st.builds(
            lambda n, a, nodes: peer(f"r{n}", a, nodeSelectors=nodes),
            st.integers(0, 3),
            st.sampled_from(["10.0.0.1", "10.0.0.2"]),
            st.lists(small_selector, unique_by=str, max_size=2),
        ),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(random_objects, st.randoms(use_true_random=False))
def test_validate_is_total_and_order_independent(objects: list[dict[str, Any]], rnd: Any) -> None:
    by_kind: dict[str, list[Any]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    config, _ = parsing.parse_config(by_kind)
    problems = validation.validate(config)
    shuffled = {k: rnd.sample(v, len(v)) for k, v in by_kind.items()}
    config2, _ = parsing.parse_config(shuffled)
    assert validation.validate(config2) == problems
    assert len(set(problems)) == len(problems)


# --- Selector disjointness ---

KEYS = ["k1", "k2"]
VALUES = ["x", "y", "z"]
requirement = st.builds(
    selectors.Requirement,
    key=st.sampled_from(KEYS),
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    values=st.frozensets(st.sampled_from(VALUES), min_size=1, max_size=2),
).map(
    lambda r: (
        r
        if r.operator in ("In", "NotIn")
        else selectors.Requirement(r.key, r.operator, frozenset())
    )
)
label_selector = st.builds(
    selectors.LabelSelector,
    match_labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2).map(
        lambda d: tuple(sorted(d.items()))
    ),
    match_expressions=st.lists(requirement, max_size=3).map(tuple),
)
# Every label set over the keys, with "w" standing for any value no selector mentions.
ALL_LABEL_SETS = [
    {k: v for k, v in zip(KEYS, choice, strict=True) if v is not None}
    for choice in itertools.product([None, *VALUES, "w"], repeat=len(KEYS))
]


@settings(max_examples=200)
@given(label_selector, label_selector)
def test_disjoint_is_exact(a: selectors.LabelSelector, b: selectors.LabelSelector) -> None:
    both = any(a.matches(labels) and b.matches(labels) for labels in ALL_LABEL_SETS)
    assert selectors.disjoint(a, b) == (not both)


@settings(max_examples=100)
@given(st.lists(label_selector, max_size=2), st.lists(label_selector, max_size=2))
def test_lists_disjoint_is_exact(
    a: list[selectors.LabelSelector], b: list[selectors.LabelSelector]
) -> None:
    both = any(
        selectors.any_matches(tuple(a), labels) and selectors.any_matches(tuple(b), labels)
        for labels in ALL_LABEL_SETS
    )
    assert selectors.lists_disjoint(tuple(a), tuple(b)) == (not both)


def test_model_config_lookup_helpers() -> None:
    config, _ = parsing.parse_config(
        {"IPAddressPool": [V4], "BGPPeer": [peer("r")], "BFDProfile": [bfd("b")]}
    )
    assert config.pool("p") is not None and config.pool("q") is None
    assert config.peer("r") is not None and config.bfd_profile("b") is not None
    assert isinstance(config, model.Config)
