"""Desired routes per peer (MetalLB §5.3-5.4, §9.5 cases 61-66) and the minimal route diff."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.bgp import peers, routes

ip = ipaddress.ip_address
net = ipaddress.ip_network
C = routes.Community
LC = routes.LargeCommunity
NO_ADVERTISE = C(65535, 65282)


def peer(
    name: str = "peer1", asn: int = 64500, address: str = "10.0.0.1", **kw: object
) -> peers.Peer:
    return peers.Peer(name=name, my_asn=64512, peer_asn=asn, peer_address=ip(address), **kw)  # type: ignore[arg-type]


EBGP = peer("peer1")
IBGP = peer("peer-i", asn=64512, address="10.0.0.2")
V6 = peer("peer6", address="fd00::1")


def announce(address: str, *ads: routes.Advertisement) -> routes.Announcement:
    return routes.Announcement(ip(address), ads or (routes.Advertisement(),))


def attrs(
    local_pref: int | None = None,
    communities: tuple[routes.Community, ...] = (),
    large: tuple[routes.LargeCommunity, ...] = (),
) -> routes.RouteAttributes:
    return routes.RouteAttributes(local_pref, frozenset(communities), frozenset(large))


def ad(**kw: object) -> routes.Advertisement:
    for key in ("communities", "large_communities", "peers"):
        if key in kw:
            kw[key] = frozenset(kw[key])  # type: ignore[arg-type]
    return routes.Advertisement(**kw)  # type: ignore[arg-type]


CASES = [
    pytest.param(
        [announce("10.20.30.1")],
        [EBGP],
        {"peer1": {net("10.20.30.1/32"): attrs()}},
        id="61-single-service-host-route",
    ),
    pytest.param([], [EBGP, IBGP], {"peer1": {}, "peer-i": {}}, id="61-nothing-announced"),
    pytest.param(
        [announce("10.20.30.1", ad(peers={"peer1"}))],
        [EBGP, peer("peer2", address="10.0.0.3")],
        {"peer1": {net("10.20.30.1/32"): attrs()}, "peer2": {}},
        id="62-peers-list-limits-sessions",
    ),
    pytest.param(
        [announce("10.20.30.1", ad(peers={"nobody"}))],
        [EBGP],
        {"peer1": {}},
        id="62-peers-list-naming-no-session",
    ),
    pytest.param(
        [
            announce("192.168.10.1", ad(aggregation_length=24)),
            announce("192.168.10.77", ad(aggregation_length=24)),
        ],
        [EBGP],
        {"peer1": {net("192.168.10.0/24"): attrs()}},
        id="65-aggregated-once-for-all-services",
    ),
    pytest.param(
        [announce("192.168.10.1", ad(), ad(aggregation_length=24))],
        [EBGP],
        {"peer1": {net("192.168.10.1/32"): attrs(), net("192.168.10.0/24"): attrs()}},
        id="65-aggregation-32-and-24-both",
    ),
    pytest.param(
        [
            announce(
                "198.51.100.10",
                ad(local_pref=100, communities={NO_ADVERTISE}),
                ad(aggregation_length=24),
            ),
            announce(
                "198.51.100.11",
                ad(local_pref=100, communities={NO_ADVERTISE}),
                ad(aggregation_length=24),
            ),
        ],
        [IBGP],
        {
            "peer-i": {
                net("198.51.100.10/32"): attrs(100, (NO_ADVERTISE,)),
                net("198.51.100.11/32"): attrs(100, (NO_ADVERTISE,)),
                net("198.51.100.0/24"): attrs(),
            }
        },
        id="docs-example-localpref-no-advertise-and-aggregate",
    ),
    pytest.param(
        [
            announce(
                "10.20.30.1",
                ad(
                    local_pref=150,
                    communities={C(1111, 2222)},
                    large_communities={LC(123, 9999, 123)},
                ),
            )
        ],
        [EBGP, IBGP],
        {
            "peer1": {net("10.20.30.1/32"): attrs(None, (C(1111, 2222),), (LC(123, 9999, 123),))},
            "peer-i": {net("10.20.30.1/32"): attrs(150, (C(1111, 2222),), (LC(123, 9999, 123),))},
        },
        id="66-communities-everywhere-localpref-only-ibgp",
    ),
    pytest.param(
        [
            announce("10.20.30.1", ad(communities={C(1, 1)})),
            announce("10.20.30.1", ad(communities={C(2, 2)}, large_communities={LC(1, 2, 3)})),
        ],
        [EBGP],
        {"peer1": {net("10.20.30.1/32"): attrs(None, (C(1, 1), C(2, 2)), (LC(1, 2, 3),))}},
        id="66-overlapping-ads-union-communities",
    ),
    pytest.param(
        [announce("10.20.30.1", ad(local_pref=50), ad(local_pref=200))],
        [IBGP],
        {"peer-i": {net("10.20.30.1/32"): attrs(200)}},
        id="conflicting-localpref-highest-wins",
    ),
    pytest.param(
        [announce("10.20.30.1", ad(local_pref=50), ad())],
        [IBGP],
        {"peer-i": {net("10.20.30.1/32"): attrs(50)}},
        id="localpref-set-by-one-of-two",
    ),
    pytest.param(
        [announce("fd00:252::1"), announce("10.20.30.1")],
        [EBGP, V6],
        {
            "peer1": {net("10.20.30.1/32"): attrs()},
            "peer6": {net("fd00:252::1/128"): attrs()},
        },
        id="family-must-match-session",
    ),
    pytest.param(
        [announce("fd00:252::17", ad(aggregation_length=24, aggregation_length_v6=120))],
        [V6],
        {"peer6": {net("fd00:252::/120"): attrs()}},
        id="v6-aggregation-length",
    ),
    pytest.param(
        [announce("fd00:252::1"), announce("10.20.30.1")],
        [peer("dual", dual_stack=True, ipv6_next_hop=ip("fd00::11"))],
        {"dual": {net("10.20.30.1/32"): attrs(), net("fd00:252::1/128"): attrs()}},
        id="dual-stack-session-carries-both",
    ),
]


@pytest.mark.parametrize(("announcements", "sessions", "expected"), CASES)
def test_desired(
    announcements: list[routes.Announcement],
    sessions: list[peers.Peer],
    expected: dict[str, dict[routes.Prefix, routes.RouteAttributes]],
) -> None:
    result = routes.desired(announcements, sessions)
    assert result.routes == expected
    assert result.problems == ()


def test_dual_stack_without_next_hop_is_a_problem() -> None:
    dual = peer("dual", dual_stack=True)
    result = routes.desired([announce("fd00:252::1"), announce("10.20.30.1")], [dual])
    assert result.routes == {"dual": {net("10.20.30.1/32"): attrs()}}
    assert [(p.name, p.field) for p in result.problems] == [("dual", "spec.dualStackAddressFamily")]


def test_sixty_three_communities_is_the_limit() -> None:
    many = {C(1, i) for i in range(62)}
    ok = announce("10.0.0.1", ad(communities=many, large_communities={LC(1, 1, 1)}))
    too_many = announce(
        "10.0.0.2", ad(communities=many | {C(2, 0)}, large_communities={LC(1, 1, 1)})
    )
    result = routes.desired([ok, too_many], [EBGP])
    assert list(result.routes["peer1"]) == [net("10.0.0.1/32")]
    assert result.routes["peer1"][net("10.0.0.1/32")].community_count == 63
    (problem,) = result.problems
    assert problem.name == "peer1" and "10.0.0.2/32" in problem.message and "64" in problem.message


def test_union_over_the_limit_is_dropped_per_peer() -> None:
    # Each ad alone is fine; their union for one prefix is not, and only where both apply.
    first = ad(communities={C(1, i) for i in range(40)})
    second = ad(communities={C(2, i) for i in range(40)}, peers={"peer1"})
    result = routes.desired(
        [announce("10.0.0.1", first, second)], [EBGP, peer("peer2", address="10.0.0.9")]
    )
    assert result.routes["peer1"] == {}
    assert result.routes["peer2"] == {net("10.0.0.1/32"): attrs(None, tuple(first.communities))}
    assert len(result.problems) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"aggregation_length": 33},
        {"aggregation_length_v6": 129},
        {"local_pref": -1},
        {"communities": frozenset({C(65536, 0)})},
        {"large_communities": frozenset({LC(0, 0, 1 << 32)})},
    ],
)
def test_advertisement_rejects_out_of_range(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        routes.Advertisement(**kwargs)  # type: ignore[arg-type]


# --- diff ---------------------------------------------------------------------------------------


def test_diff_table() -> None:
    a, b, c = net("10.0.0.1/32"), net("10.0.0.2/32"), net("10.0.0.3/32")
    applied = {"p": {a: attrs(), b: attrs(100)}, "gone": {c: attrs()}}
    wanted = {"p": {a: attrs(), b: attrs(200), c: attrs()}, "new": {a: attrs()}}
    changes = routes.diff(applied, wanted)
    assert changes == {
        "p": routes.Change(announce={b: attrs(200), c: attrs()}),
        "gone": routes.Change(withdraw=frozenset({c})),
        "new": routes.Change(announce={a: attrs()}),
    }


def test_diff_of_equal_is_empty() -> None:
    same = {"p": {net("10.0.0.1/32"): attrs(1, (C(1, 2),))}, "q": {}}
    assert routes.diff(same, same) == {}


_prefixes = st.sampled_from([net(f"10.0.{i}.0/24") for i in range(4)] + [net("fd00::/120")])
_attrs = st.builds(
    routes.RouteAttributes,
    local_pref=st.none() | st.integers(0, 3),
    communities=st.frozensets(st.builds(C, st.integers(0, 2), st.integers(0, 2)), max_size=2),
    large_communities=st.frozensets(
        st.builds(LC, st.integers(0, 1), st.integers(0, 1), st.integers(0, 1)), max_size=1
    ),
)
_table = st.dictionaries(
    st.sampled_from(["p1", "p2", "p3"]), st.dictionaries(_prefixes, _attrs, max_size=5), max_size=3
)


@settings(max_examples=200, deadline=None)
@given(applied=_table, wanted=_table)
def test_applying_the_diff_yields_desired(
    applied: dict[str, dict[routes.Prefix, routes.RouteAttributes]],
    wanted: dict[str, dict[routes.Prefix, routes.RouteAttributes]],
) -> None:
    changes = routes.diff(applied, wanted)
    assert routes.apply(applied, changes) == {p: r for p, r in wanted.items() if r}
    for name, change in changes.items():
        before, after = applied.get(name, {}), wanted.get(name, {})
        # Minimal: only what differs is touched, and a re-announcement is never also withdrawn.
        assert all(before.get(p) != a for p, a in change.announce.items())
        assert all(p not in after for p in change.withdraw)
        assert not change.withdraw & change.announce.keys()
        assert change


def test_prefix_keeps_the_address_family_of_small_addresses() -> None:
    """Prefixes are built from the address's integer: `::1` must not come back as IPv4."""
    ad = routes.Advertisement(aggregation_length=24, aggregation_length_v6=64)
    assert ad.prefix(ipaddress.ip_address("::1")) == ipaddress.ip_network("::/64")
    assert ad.prefix(ipaddress.ip_address("0.0.0.1")) == ipaddress.ip_network("0.0.0.0/24")
    assert ad.prefix(ipaddress.ip_address("10.1.2.3")) == ipaddress.ip_network("10.1.2.0/24")
    full = routes.Advertisement()
    assert full.prefix(ipaddress.ip_address("2001:db8::7")) == ipaddress.ip_network(
        "2001:db8::7/128"
    )
