"""speaker.desired: who announces what, from MetalLB's acceptance cases (its layer2/bgp tests)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import addresses, datapath, model, selectors
from ironlb import annotations as keys
from speaker import desired, election

POOL = model.IPAddressPool(
    name=model.PoolName("pool"),
    addresses=(
        addresses.AddressRange(
            4, int(ipaddress.ip_address("10.20.30.0")), int(ipaddress.ip_address("10.20.30.255"))
        ),
        addresses.AddressRange(
            6, int(ipaddress.ip_address("fc00::")), int(ipaddress.ip_address("fc00::ff"))
        ),
    ),
)


def ip(text: str) -> addresses.IPAddress:
    return ipaddress.ip_address(text)


def sel(**labels: str) -> selectors.LabelSelector:
    return selectors.LabelSelector(match_labels=tuple(sorted(labels.items())))


def l2ad(name: str = "l2", **kw: object) -> model.L2Advertisement:
    return model.L2Advertisement(name=model.L2AdvertisementName(name), **kw)  # type: ignore[arg-type]


def bgpad(name: str = "bgp", **kw: object) -> model.BGPAdvertisement:
    return model.BGPAdvertisement(name=model.BGPAdvertisementName(name), **kw)  # type: ignore[arg-type]


def node(name: str, **labels: str) -> desired.Node:
    return desired.Node(model.NodeName(name), tuple(sorted(labels.items())))


def ep(node_name: str, ready: bool = True, serving: bool | None = None) -> desired.Endpoint:
    return desired.Endpoint(model.NodeName(node_name), ready, ready if serving is None else serving)


def svc(
    address: str = "10.20.30.1",
    *,
    name: str = "svc",
    local: bool = False,
    endpoints: Iterable[desired.Endpoint] = (),
    labels: dict[str, str] | None = None,
    shares: bool = False,
    extra: Iterable[str] = (),
) -> desired.Service:
    return desired.Service(
        namespace="ns",
        name=name,
        ips=(ip(address), *map(ip, extra)),
        labels=tuple(sorted((labels or {}).items())),
        local=local,
        shares=shares,
        endpoints=tuple(endpoints),
    )


def snapshot(
    services: Iterable[desired.Service],
    nodes: Iterable[desired.Node] = (node("iris1"), node("iris2")),
    *,
    l2: Iterable[model.L2Advertisement] = (l2ad(),),
    bgp: Iterable[model.BGPAdvertisement] = (),
    alive: Iterable[str] | None = None,
    ignore_exclude_lb: bool = False,
    pools: Iterable[model.IPAddressPool] = (POOL,),
    readiness: dict[str, datapath.NodeReadiness] | None = None,
) -> desired.Snapshot:
    node_list = list(nodes)
    return desired.Snapshot(
        config=model.Config(
            pools=tuple(pools), l2_advertisements=tuple(l2), bgp_advertisements=tuple(bgp)
        ),
        services=tuple(services),
        nodes={n.name: n for n in node_list},
        alive=frozenset(
            model.NodeName(a) for a in (alive if alive is not None else [n.name for n in node_list])
        ),
        ignore_exclude_lb=ignore_exclude_lb,
        readiness=readiness or {},
    )


def announcers(snap: desired.Snapshot) -> set[str]:
    """Nodes whose plan announces anything."""
    return {n for n in snap.nodes if desired.l2_plan(snap, model.NodeName(n)).mine}


def reason(snap: desired.Snapshot, me: str, key: str = "ns/svc") -> str | None:
    return desired.l2_plan(snap, model.NodeName(me)).reasons.get(key)


# --- election order: MetalLB's verified vectors -------------------------------------------------


def names(*n: str) -> list[model.NodeName]:
    return [model.NodeName(x) for x in n]


def test_election_order_vectors() -> None:
    assert desired.election_order(names("node-a", "node-b", "node-c"), ip("10.0.0.1")) == names(
        "node-b", "node-a", "node-c"
    )
    assert desired.election_order(names("node-a", "node-b", "node-c"), ip("10.0.0.2")) == names(
        "node-b", "node-c", "node-a"
    )
    assert desired.election_order(names("iris1", "iris2"), ip("10.20.30.1")) == names(
        "iris2", "iris1"
    )
    assert desired.election_order(names("iris1", "iris2"), ip("10.20.30.2")) == names(
        "iris1", "iris2"
    )


def test_election_order_with_scores() -> None:
    scores = {model.NodeName("node-a"): 100, model.NodeName("node-b"): 100}
    assert desired.election_order(names("node-a", "node-b"), ip("10.20.30.1"), scores) == names(
        "node-b", "node-a"
    )
    scores = {model.NodeName("edge-a"): 100, model.NodeName("edge-b"): 100}
    assert desired.election_order(
        names("edge-a", "edge-b", "worker-a"), ip("10.20.30.1"), scores
    ) == names("edge-b", "edge-a", "worker-a")
    scores = {model.NodeName("edge-a"): 100}
    order = desired.election_order(
        names("edge-a", "edge-b", "worker-a", "worker-b"), ip("10.20.30.1"), scores
    )
    assert order[0] == "edge-a"


@settings(max_examples=200)
@given(
    st.sets(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.randoms(use_true_random=False),
)
def test_every_node_computes_the_same_owner(nodes: set[str], raw: int, rnd: object) -> None:
    """Order of the input never matters, and every speaker picks one of the candidates."""
    address = ipaddress.IPv4Address(raw)
    as_list = names(*nodes)
    shuffled = list(as_list)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    first = desired.election_order(as_list, address)
    assert first == desired.election_order(shuffled, address)
    assert set(first) == nodes


# --- layer 2 ------------------------------------------------------------------------------------


def test_cluster_policy_hash_winner_announces_regardless_of_endpoint_location() -> None:
    snap = snapshot([svc(endpoints=[ep("iris1")])])
    assert announcers(snap) == {"iris2"}
    assert reason(snap, "iris1") == desired.Reason.NOT_OWNER


def test_local_policy_only_nodes_with_endpoints() -> None:
    snap = snapshot([svc(local=True, endpoints=[ep("iris1")])])
    assert announcers(snap) == {"iris1"}
    snap = snapshot([svc(local=True, endpoints=[ep("iris1"), ep("iris2")])])
    assert announcers(snap) == {"iris2"}


def test_no_ready_endpoints_nobody_announces() -> None:
    snap = snapshot([svc(local=True, endpoints=[ep("iris1", ready=False, serving=False)])])
    assert announcers(snap) == set()
    snap = snapshot([svc(endpoints=[])])
    assert announcers(snap) == set()


def test_serving_terminating_endpoints_count_only_without_ready_ones() -> None:
    only_terminating = [ep("iris2", ready=False, serving=True)]
    snap = snapshot([svc(local=True, endpoints=only_terminating)])
    assert announcers(snap) == {"iris2"}
    mixed = [ep("iris2", ready=False, serving=True), ep("iris1")]
    snap = snapshot([svc(local=True, endpoints=mixed)])
    assert announcers(snap) == {"iris1"}


def test_two_services_spread_by_hash() -> None:
    both = [ep("iris1"), ep("iris2")]
    snap = snapshot(
        [
            svc("10.20.30.1", name="a", local=True, endpoints=both),
            svc("10.20.30.2", name="b", local=True, endpoints=both),
        ]
    )
    assert [e.address for e in desired.l2_plan(snap, model.NodeName("iris2")).mine] == [
        ip("10.20.30.1")
    ]
    assert [e.address for e in desired.l2_plan(snap, model.NodeName("iris1")).mine] == [
        ip("10.20.30.2")
    ]


def test_dead_speaker_is_not_a_candidate() -> None:
    snap = snapshot([svc(endpoints=[ep("iris1")])], alive=["iris1"])
    assert announcers(snap) == {"iris1"}
    snap = snapshot([svc(endpoints=[ep("iris1")])], alive=[])
    assert announcers(snap) == set()


def test_advertisement_node_selector() -> None:
    ad = l2ad(node_selectors=(sel(**{"kubernetes.io/hostname": "iris1"}),))
    nodes = [
        node("iris1", **{"kubernetes.io/hostname": "iris1"}),
        node("iris2", **{"kubernetes.io/hostname": "iris2"}),
    ]
    snap = snapshot([svc(endpoints=[ep("iris1")])], nodes, l2=[ad])
    assert announcers(snap) == {"iris1"}
    assert reason(snap, "iris2") == desired.Reason.NO_MATCHING_ADVERTISEMENT


def test_ad_only_on_node_without_local_endpoint_means_nobody() -> None:
    ad = l2ad(node_selectors=(sel(**{"kubernetes.io/hostname": "iris2"}),))
    nodes = [
        node("iris1", **{"kubernetes.io/hostname": "iris1"}),
        node("iris2", **{"kubernetes.io/hostname": "iris2"}),
    ]
    snap = snapshot([svc(local=True, endpoints=[ep("iris1")])], nodes, l2=[ad])
    assert announcers(snap) == set()


def test_exclude_label() -> None:
    excluded = {keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: ""}
    snap = snapshot([svc(endpoints=[ep("iris1")])], [node("iris1"), node("iris2", **excluded)])
    assert announcers(snap) == {"iris1"}
    snap = snapshot(
        [svc(endpoints=[ep("iris1")])], [node("iris1", **excluded), node("iris2", **excluded)]
    )
    assert announcers(snap) == set()
    snap = snapshot(
        [svc(local=True, endpoints=[ep("iris1")])],
        [node("iris1", **excluded), node("iris2", **excluded)],
        ignore_exclude_lb=True,
    )
    assert announcers(snap) == {"iris1"}


def test_network_unavailable_node_hands_over() -> None:
    down = desired.Node(model.NodeName("iris2"), (), network_unavailable=True)
    snap = snapshot([svc(endpoints=[ep("iris1")])], [node("iris1"), down])
    assert announcers(snap) == {"iris1"}


def test_service_selectors() -> None:
    ad = l2ad(service_selectors=(sel(app="foo"),))
    snap = snapshot([svc(endpoints=[ep("iris1")])], l2=[ad])
    assert announcers(snap) == set()
    assert reason(snap, "iris1") == desired.Reason.NO_MATCHING_ADVERTISEMENT
    snap = snapshot([svc(endpoints=[ep("iris1")], labels={"app": "foo"})], l2=[ad])
    assert announcers(snap) == {"iris2"}


def test_shared_ip_with_service_selector_is_never_announced() -> None:
    ad = l2ad(service_selectors=(sel(app="foo"),))
    snap = snapshot([svc(endpoints=[ep("iris1")], labels={"app": "foo"}, shares=True)], l2=[ad])
    assert announcers(snap) == set()
    assert reason(snap, "iris1") == desired.Reason.SHARED_IP_WITH_SERVICE_SELECTOR
    snap = snapshot([svc(endpoints=[ep("iris1")], shares=True)])
    assert announcers(snap) == {"iris2"}


def test_preferred_node_selectors_weights_sum() -> None:
    a = l2ad("a", preferred_node_selectors=(model.PreferredNodeSelector(70, sel(zone="a")),))
    b = l2ad("b", preferred_node_selectors=(model.PreferredNodeSelector(30, sel(zone="a")),))
    c = l2ad("c", preferred_node_selectors=(model.PreferredNodeSelector(50, sel(zone="b")),))
    nodes = [node("iris1", zone="a"), node("iris2", zone="b")]
    snap = snapshot([svc(endpoints=[ep("iris1")])], nodes, l2=[a, b, c])
    assert announcers(snap) == {"iris1"}
    # Without the preference the hash winner (iris2) announces.
    snap = snapshot([svc(endpoints=[ep("iris1")])], nodes)
    assert announcers(snap) == {"iris2"}


def test_interfaces_union_and_all() -> None:
    eth1 = l2ad("a", interfaces=("eth1",))
    eth2 = l2ad("b", interfaces=("eth2",))
    snap = snapshot([svc(endpoints=[ep("iris1")])], l2=[eth1, eth2])
    (entry,) = desired.l2_plan(snap, model.NodeName("iris2")).mine
    assert entry.interfaces == ("eth1", "eth2")
    snap = snapshot([svc(endpoints=[ep("iris1")])], l2=[eth1, l2ad("all")])
    (entry,) = desired.l2_plan(snap, model.NodeName("iris2")).mine
    assert entry.interfaces == desired.ALL_INTERFACES


IRIS2 = model.NodeName("iris2")  # the owner of svc() on two nodes (the hash winner)


def test_an_owner_without_any_named_interface_announces_nothing_and_says_why() -> None:
    """MetalLB's layer2 SetBalancer: the elected node answers only if one of the interfaces
    its advertisements name is among its announcer's; else announceFailed, no status. The
    election itself does not look at interfaces, so the address stays with that node."""
    ads = [l2ad("a", interfaces=("eth9",)), l2ad("b", interfaces=("eth8",))]
    snap = snapshot([svc(endpoints=[ep("iris1")])], l2=ads)
    plan = desired.l2_plan(snap, IRIS2, frozenset({"eth0", "eth1"}))
    assert plan.mine == ()
    (entry,) = plan.unannounceable
    assert (entry.address, entry.interfaces, entry.services) == (
        ip("10.20.30.1"),
        ("eth8", "eth9"),
        ("ns/svc",),
    )
    assert plan.owners[ip("10.20.30.1")] == "iris2"
    assert plan.reasons == {"ns/svc": desired.Reason.INTERFACE_MISSING}
    assert "eth8, eth9" in plan.messages["ns/svc"] and "eth0, eth1" in plan.messages["ns/svc"]
    # Nobody else announces it either: the other node is not elected.
    other = desired.l2_plan(snap, model.NodeName("iris1"), frozenset({"eth8"}))
    assert (other.mine, other.unannounceable) == ((), ())
    assert other.reasons["ns/svc"] == desired.Reason.NOT_OWNER


@given(
    named=st.sets(st.sampled_from(["eth0", "eth1", "eth9"]), max_size=3),
    present=st.none() | st.frozensets(st.sampled_from(["eth0", "eth1", "eth9"])),
)
def test_an_owner_announces_exactly_when_a_named_interface_answers(
    named: set[str], present: frozenset[str] | None
) -> None:
    """No list (every interface) or unknown interfaces (None) always announce; a list does
    when it meets the interfaces present. An address is either announced or unannounceable."""
    ad = l2ad("a", interfaces=tuple(sorted(named))) if named else l2ad("a")
    plan = desired.l2_plan(snapshot([svc(endpoints=[ep("iris1")])], l2=[ad]), IRIS2, present)
    answers = not named or present is None or bool(named & present)
    assert len(plan.mine) == int(answers) and len(plan.unannounceable) == int(not answers)
    assert ("ns/svc" in plan.reasons) == (not answers)


def test_both_addresses_of_a_dual_stack_service_share_the_interface_verdict() -> None:
    """Both families are elected together (MetalLB hashes the first address) and come from
    one pool's advertisements: announced together, or reported together."""
    v4 = l2ad("v4", ip_address_pools=(model.PoolName("pool"),), interfaces=("eth0",))
    snap = snapshot([svc(extra=["fc00::1"], endpoints=[ep("iris1")])], l2=[v4])
    plan = desired.l2_plan(snap, IRIS2, frozenset({"eth0"}))
    assert [e.address for e in plan.mine] == [ip("10.20.30.1"), ip("fc00::1")]
    assert plan.reasons == {}
    plan = desired.l2_plan(snap, IRIS2, frozenset({"eth1"}))
    assert [e.address for e in plan.unannounceable] == [ip("10.20.30.1"), ip("fc00::1")]


def test_address_outside_every_pool_is_not_announced() -> None:
    snap = snapshot([svc("192.0.2.1", endpoints=[ep("iris1")])])
    assert announcers(snap) == set()
    assert reason(snap, "iris1") == desired.Reason.IP_NOT_ALLOWED


def test_avoid_buggy_ips_address_is_not_in_pool() -> None:
    pool = model.IPAddressPool(
        name=model.PoolName("p"), addresses=POOL.addresses, avoid_buggy_ips=True
    )
    snap = snapshot([svc("10.20.30.0", endpoints=[ep("iris1")])], pools=[pool])
    assert reason(snap, "iris1") == desired.Reason.IP_NOT_ALLOWED


def test_shared_address_has_one_owner_even_when_candidates_differ() -> None:
    """Two Services on one address whose ads select different nodes: exactly one announcer."""
    a = l2ad("a", service_selectors=(sel(app="a"),), node_selectors=(sel(n="1"),))
    b = l2ad("b", service_selectors=(sel(app="b"),), node_selectors=(sel(n="2"),))
    nodes = [node("iris1", n="1"), node("iris2", n="2")]
    services = [
        svc(name="a", labels={"app": "a"}, endpoints=[ep("iris1")]),
        svc(name="b", labels={"app": "b"}, endpoints=[ep("iris1")]),
    ]
    snap = snapshot(services, nodes, l2=[a, b])
    assert len(announcers(snap)) == 1


def owners_of(snap: desired.Snapshot) -> dict[addresses.IPAddress, set[str]]:
    owners: dict[addresses.IPAddress, set[str]] = {}
    for n in snap.nodes:
        for entry in desired.l2_plan(snap, model.NodeName(n)).mine:
            owners.setdefault(entry.address, set()).add(n)
    return owners


def test_dual_stack_service_is_announced_by_one_node_elected_on_its_first_address() -> None:
    """MetalLB hashes ingress[0] for every address of a Service: with these names, electing
    each address on its own would split the families (10.20.30.1 -> iris2, fc00::2 -> iris1)."""
    nodes = [node("iris1"), node("iris2")]
    assert desired.election_order(names("iris1", "iris2"), ip("fc00::2"))[0] == "iris1"
    assert desired.election_order(names("iris1", "iris2"), ip("10.20.30.1"))[0] == "iris2"
    both = [ep("iris1"), ep("iris2")]
    snap = snapshot([svc("10.20.30.1", extra=["fc00::2"], endpoints=both)], nodes)
    assert owners_of(snap) == {ip("10.20.30.1"): {"iris2"}, ip("fc00::2"): {"iris2"}}
    # Listed v6 first, the v6 address decides for both.
    snap = snapshot([svc("fc00::2", extra=["10.20.30.1"], endpoints=both)], nodes)
    assert owners_of(snap) == {ip("10.20.30.1"): {"iris1"}, ip("fc00::2"): {"iris1"}}


@settings(max_examples=150)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4), st.booleans()), min_size=1, max_size=6)
)
def test_shared_addresses_with_different_first_addresses_have_one_owner(
    specs: list[tuple[int, int, bool]],
) -> None:
    """Services sharing addresses in any combination and order: one owner per address."""
    nodes = [node(n) for n in ("n1", "n2", "n3", "n4")]
    ready = [ep(n.name) for n in nodes]
    services = [
        svc(f"10.20.30.{v4}", name=f"s{i}", shares=True, extra=[f"fc00::{v6}"], endpoints=ready)
        if v6_last
        else svc(
            f"fc00::{v6}", name=f"s{i}", shares=True, extra=[f"10.20.30.{v4}"], endpoints=ready
        )
        for i, (v4, v6, v6_last) in enumerate(specs)
    ]
    owners = owners_of(snapshot(services, nodes))
    assert owners and all(len(v) == 1 for v in owners.values())


@settings(max_examples=150)
@given(
    st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), unique=True, min_size=0, max_size=4),
    st.lists(
        st.tuples(
            st.integers(1, 6),
            st.booleans(),
            st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), max_size=4),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_at_most_one_announcer_per_address(
    alive: list[str], specs: list[tuple[int, bool, list[str]]]
) -> None:
    nodes = [node(n) for n in ("n1", "n2", "n3", "n4")]
    services = [
        svc(f"10.20.30.{last}", name=f"s{i}", local=local, endpoints=[ep(e) for e in eps])
        for i, (last, local, eps) in enumerate(specs)
    ]
    snap = snapshot(services, nodes, alive=alive)
    owners: dict[addresses.IPAddress, set[str]] = {}
    for n in snap.nodes:
        for entry in desired.l2_plan(snap, model.NodeName(n)).mine:
            owners.setdefault(entry.address, set()).add(n)
            assert n in alive
    assert all(len(v) == 1 for v in owners.values())


# --- BGP ----------------------------------------------------------------------------------------


def bgp_snap(services: Iterable[desired.Service], **kw: object) -> desired.Snapshot:
    return snapshot(services, l2=(), **kw)  # type: ignore[arg-type]


def test_bgp_cluster_every_selected_node_announces() -> None:
    snap = bgp_snap([svc(endpoints=[ep("iris1")])], bgp=[bgpad()])
    for me in ("iris1", "iris2"):
        plan = desired.bgp_plan(snap, model.NodeName(me))
        assert [s.service for s in plan.mine] == ["ns/svc"]


def test_bgp_local_policy() -> None:
    snap = bgp_snap([svc(local=True, endpoints=[ep("iris1")])], bgp=[bgpad()])
    assert desired.bgp_plan(snap, model.NodeName("iris1")).mine
    assert (
        desired.bgp_plan(snap, model.NodeName("iris2")).reasons["ns/svc"]
        == desired.Reason.NO_LOCAL_ENDPOINTS
    )


def test_bgp_no_endpoints_withdrawn_in_both_policies() -> None:
    for local in (False, True):
        snap = bgp_snap(
            [svc(local=local, endpoints=[ep("iris1", ready=False, serving=False)])], bgp=[bgpad()]
        )
        assert not desired.bgp_plan(snap, model.NodeName("iris1")).mine


def test_bgp_serving_not_ready_counts_as_healthy() -> None:
    snap = bgp_snap([svc(endpoints=[ep("iris1", ready=False, serving=True)])], bgp=[bgpad()])
    assert desired.bgp_plan(snap, model.NodeName("iris2")).mine


def test_bgp_node_selector_and_exclusions() -> None:
    ad = bgpad(node_selectors=(sel(rack="a"),))
    nodes = [node("iris1", rack="a"), node("iris2", rack="b")]
    snap = bgp_snap([svc(endpoints=[ep("iris1")])], bgp=[ad], nodes=nodes)
    assert desired.bgp_plan(snap, model.NodeName("iris1")).mine
    assert (
        desired.bgp_plan(snap, model.NodeName("iris2")).reasons["ns/svc"]
        == desired.Reason.NOT_OWNER
    )
    excluded = [node("iris1", **{keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: ""})]
    snap = bgp_snap([svc(endpoints=[ep("iris1")])], bgp=[bgpad()], nodes=excluded)
    assert (
        desired.bgp_plan(snap, model.NodeName("iris1")).reasons["ns/svc"]
        == desired.Reason.NODE_EXCLUDED
    )
    unavailable = [desired.Node(model.NodeName("iris1"), (), network_unavailable=True)]
    snap = bgp_snap([svc(endpoints=[ep("iris1")])], bgp=[bgpad()], nodes=unavailable)
    assert (
        desired.bgp_plan(snap, model.NodeName("iris1")).reasons["ns/svc"]
        == desired.Reason.NODE_NETWORK_UNAVAILABLE
    )


def test_bgp_conflicting_local_pref_with_service_selectors() -> None:
    a = bgpad("a", local_pref=100, service_selectors=(sel(app="x"),))
    b = bgpad("b", local_pref=200, service_selectors=(sel(app="x"),))
    snap = bgp_snap([svc(endpoints=[ep("iris1")], labels={"app": "x"})], bgp=[a, b])
    assert (
        desired.bgp_plan(snap, model.NodeName("iris1")).reasons["ns/svc"]
        == desired.Reason.CONFLICTING_ADVERTISEMENTS
    )
    c = bgpad("c", local_pref=200, aggregation_length=24)
    snap = bgp_snap(
        [svc(endpoints=[ep("iris1")], labels={"app": "x"})], bgp=[bgpad("a", local_pref=100), c]
    )
    assert desired.bgp_plan(snap, model.NodeName("iris1")).mine


def test_advertisements_select_pools_by_name_or_by_label() -> None:
    """ipAddressPools OR ipAddressPoolSelectors, in both modes (MetalLB's rule): an address of
    a pool the advertisement does not select is not announced by it."""
    tiered = model.IPAddressPool(
        name=model.PoolName("tiered"),
        addresses=(addresses.AddressRange(4, int(ip("10.9.0.0")), int(ip("10.9.0.255"))),),
        labels=(("tier", "gold"),),
    )
    pools = (POOL, tiered)
    services = [svc(endpoints=[ep("iris1")]), svc("10.9.0.1", name="gold", endpoints=[ep("iris1")])]
    by_name = {"ip_address_pools": (model.PoolName("pool"),)}
    by_label = {"ip_address_pool_selectors": (sel(tier="gold"),)}
    for fields, wanted in (
        (by_name, {"ns/svc"}),
        (by_label, {"ns/gold"}),
        ({**by_name, **by_label}, {"ns/svc", "ns/gold"}),
    ):
        l2 = snapshot(services, l2=[l2ad(**fields)], pools=pools)
        l2_announced = {
            s for n in l2.nodes for e in desired.l2_plan(l2, n).mine for s in e.services
        }
        assert l2_announced == wanted
        bgp = bgp_snap(services, bgp=[bgpad(**fields)], pools=pools)
        assert {s.service for s in desired.bgp_plan(bgp, model.NodeName("iris1")).mine} == wanted


def test_bgp_service_selectors() -> None:
    ad = bgpad(service_selectors=(sel(app="foo"),))
    chosen = svc(endpoints=[ep("iris1")], labels={"app": "foo"})
    other = svc("10.20.30.2", name="other", endpoints=[ep("iris1")], labels={"app": "bar"})
    plan = desired.bgp_plan(bgp_snap([chosen, other], bgp=[ad]), model.NodeName("iris1"))
    assert [s.service for s in plan.mine] == ["ns/svc"]


def test_bgp_and_l2_are_independent() -> None:
    snap = snapshot([svc(endpoints=[ep("iris1")])], bgp=[bgpad()])
    assert desired.bgp_plan(snap, model.NodeName("iris1")).mine
    assert desired.bgp_plan(snap, model.NodeName("iris2")).mine
    assert announcers(snap) == {"iris2"}


# --- data-path readiness and drain (beyond MetalLB) ---------------------------------------------

READY = datapath.NodeReadiness(proxy_ready=True)
PROXY_DOWN = datapath.NodeReadiness(proxy_ready=False)


def owner_of(snap: desired.Snapshot, address: str = "10.20.30.1") -> str:
    owners = {desired.l2_plan(snap, model.NodeName(n)).owners.get(ip(address)) for n in snap.nodes}
    assert len(owners) == 1, owners  # every node computes the same owner
    found = owners.pop()
    assert found is not None
    return found


def test_node_with_kube_proxy_down_is_no_l2_candidate_and_says_why() -> None:
    service = svc(endpoints=[ep("iris1")])
    first = owner_of(snapshot([service]))
    other = "iris2" if first == "iris1" else "iris1"
    snap = snapshot([service], readiness={first: PROXY_DOWN, other: READY})
    assert owner_of(snap) == other
    assert reason(snap, first) == "kubeProxyNotReady"
    plan = desired.l2_plan(snap, model.NodeName(other))
    assert [e.address for e in plan.mine] == [ip("10.20.30.1")]
    # Back healthy: the hash winner again.
    snap = snapshot([service], readiness={first: READY, other: READY})
    assert owner_of(snap) == first


def test_a_node_without_a_readiness_verdict_counts_as_ready() -> None:
    service = svc(endpoints=[ep("iris1")])
    first = owner_of(snapshot([service]))
    other = "iris2" if first == "iris1" else "iris1"
    assert owner_of(snapshot([service], readiness={other: READY})) == first


def test_nobody_ready_means_nobody_announces() -> None:
    snap = snapshot(
        [svc(endpoints=[ep("iris1")])], readiness={"iris1": PROXY_DOWN, "iris2": PROXY_DOWN}
    )
    assert announcers(snap) == set()
    assert reason(snap, "iris1") == reason(snap, "iris2") == "kubeProxyNotReady"


def test_local_service_lagging_in_kube_proxy_moves_only_that_service() -> None:
    local = svc(local=True, endpoints=[ep("iris1"), ep("iris2")])
    cluster = svc("10.20.30.2", name="other", endpoints=[ep("iris1")])
    first = owner_of(snapshot([local, cluster]))
    other = "iris2" if first == "iris1" else "iris1"
    lag = datapath.NodeReadiness(proxy_ready=True, unready_local=frozenset({"ns/svc", "ns/other"}))
    snap = snapshot([local, cluster], readiness={first: lag})
    assert owner_of(snap) == other
    assert reason(snap, first) == "kubeProxyNoLocalEndpoints"
    # The lag list only counts for Local Services: the Cluster one stays where it was.
    before = owner_of(snapshot([local, cluster]), "10.20.30.2")
    assert owner_of(snap, "10.20.30.2") == before


def test_draining_node_is_no_candidate() -> None:
    service = svc(endpoints=[ep("iris1")])
    first = owner_of(snapshot([service]))
    other = "iris2" if first == "iris1" else "iris1"
    for drain in (
        datapath.Drain(datapath.Reason.NODE_DELETING, "deleting"),
        datapath.Drain(datapath.Reason.NODE_TO_BE_DELETED, "tainted"),
        datapath.Drain(datapath.Reason.NODE_CORDONED, "cordoned"),
    ):
        nodes = [desired.Node(model.NodeName(first), drain=drain), node(other)]
        snap = snapshot([service], nodes)
        assert owner_of(snap) == other
        assert reason(snap, first) == drain.reason


def test_not_elected_names_the_owner() -> None:
    snap = snapshot([svc(endpoints=[ep("iris1")])])
    first = owner_of(snap)
    other = "iris2" if first == "iris1" else "iris1"
    plan = desired.l2_plan(snap, model.NodeName(other))
    assert plan.reasons["ns/svc"] == "notOwner"
    assert plan.messages["ns/svc"] == f"{first} is elected"


def test_reasons_for_explain() -> None:
    """The reasons `ironlb status --explain` must name, each from its own cause."""
    local = svc(local=True, endpoints=[ep("iris1")])
    assert reason(snapshot([local]), "iris2") == "noLocalEndpoints"
    assert reason(snapshot([svc(endpoints=[])]), "iris1") == "noEndpoints"
    excluded = [node("iris1", **{keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: ""}), node("iris2")]
    assert reason(snapshot([svc(endpoints=[ep("iris1")])], excluded), "iris1") == (
        "nodeLabeledExcludeBalancers"
    )
    only2 = l2ad(node_selectors=(sel(host="iris2"),))
    nodes = [node("iris1", host="iris1"), node("iris2", host="iris2")]
    assert reason(snapshot([svc(endpoints=[ep("iris1")])], nodes, l2=[only2]), "iris1") == (
        "noMatchingAdvertisement"
    )
    assert reason(snapshot([svc(endpoints=[ep("iris1")])], l2=[]), "iris1") == (
        "noMatchingAdvertisement"
    )


def test_bgp_withdraws_when_not_ready_or_draining() -> None:
    service = svc(endpoints=[ep("iris1")])
    ads = [bgpad()]
    assert desired.bgp_plan(bgp_snap([service], bgp=ads), model.NodeName("iris1")).mine
    snap = bgp_snap([service], bgp=ads, readiness={"iris1": PROXY_DOWN})
    plan = desired.bgp_plan(snap, model.NodeName("iris1"))
    assert not plan.mine and plan.reasons["ns/svc"] == "kubeProxyNotReady"
    assert desired.bgp_plan(snap, model.NodeName("iris2")).mine  # the other node is unaffected
    drain = datapath.Drain(datapath.Reason.NODE_TO_BE_DELETED, "tainted")
    snap = bgp_snap([service], nodes=[desired.Node(model.NodeName("iris1"), drain=drain)], bgp=ads)
    plan = desired.bgp_plan(snap, model.NodeName("iris1"))
    assert not plan.mine and plan.reasons["ns/svc"] == "nodeToBeDeleted"
    local = svc(local=True, endpoints=[ep("iris1")])
    lag = datapath.NodeReadiness(proxy_ready=True, unready_local=frozenset({"ns/svc"}))
    plan = desired.bgp_plan(
        bgp_snap([local], bgp=ads, readiness={"iris1": lag}), model.NodeName("iris1")
    )
    assert not plan.mine and plan.reasons["ns/svc"] == "kubeProxyNoLocalEndpoints"


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["n1", "n2", "n3", "n4"]),
        st.builds(
            datapath.NodeReadiness,
            st.booleans(),
            st.frozensets(st.sampled_from(["ns/s0", "ns/s1", "ns/s2"])),
        ),
    ),
    st.lists(
        st.tuples(
            st.integers(1, 20), st.booleans(), st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]))
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_with_readiness_still_one_owner_and_never_a_not_ready_one(
    readiness: dict[str, datapath.NodeReadiness], specs: list[tuple[int, bool, list[str]]]
) -> None:
    nodes = [node(n) for n in ("n1", "n2", "n3", "n4")]
    services = [
        # One address each: a shared address is served if any of its Services may be.
        svc(f"10.20.30.{i + 1}", name=f"s{i}", local=local, endpoints=[ep(e) for e in eps])
        for i, (_, local, eps) in enumerate(specs)
    ]
    snap = snapshot(services, nodes, readiness=readiness)
    owners: dict[addresses.IPAddress, set[str]] = {}
    for n in snap.nodes:
        for entry in desired.l2_plan(snap, model.NodeName(n)).mine:
            owners.setdefault(entry.address, set()).add(n)
            state = readiness.get(n)
            for key in entry.services:
                service = next(s for s in services if s.key == key)
                assert state is None or state.ready_for(key, service.local)
    assert all(len(v) == 1 for v in owners.values())


def test_a_lag_list_cut_by_gossip_still_gives_every_service_one_announcer() -> None:
    """30 Local Services lag in iris1's kube-proxy: more than gossip carries. If iris1 elected
    from its whole list while iris2 elects from the cut one, each would leave to the other the
    Services past the cut that iris1 wins on the hash, and nobody would announce them; both
    electing from the gossiped view (what the speaker does) gives each exactly one announcer."""
    services = [
        svc(f"10.20.30.{i + 1}", name=f"frontend-svc-{i:02}", local=True,
            endpoints=[ep("iris1"), ep("iris2")])
        for i in range(30)
    ]  # fmt: skip
    lag = datapath.NodeReadiness(
        proxy_ready=True,
        unready_local=frozenset(f"ns/frontend-svc-{i:02}" for i in range(30)),
    )
    gossiped = lag.as_gossiped()
    assert gossiped.overflow and gossiped.unready_local < lag.unready_local

    def announced(readiness_by_node: dict[str, dict[str, datapath.NodeReadiness]]) -> list[int]:
        counts = []
        for service in services:
            address = service.ips[0]
            counts.append(
                sum(
                    address
                    in {
                        e.address
                        for e in desired.l2_plan(
                            snapshot(services, readiness=readiness_by_node[n]), model.NodeName(n)
                        ).mine
                    }
                    for n in ("iris1", "iris2")
                )
            )
        return counts

    split = announced({"iris1": {"iris1": lag}, "iris2": {"iris1": gossiped}})
    assert 0 in split  # the disagreement the gossiped view prevents
    agreed = announced({"iris1": {"iris1": gossiped}, "iris2": {"iris1": gossiped}})
    assert agreed == [1] * len(services)


# --- the per-pass electorate is the election over every Node ------------------------------------

_NODE_NAMES = ("n1", "n2", "n3", "n4", "n5")
_LABELS = st.fixed_dictionaries(
    {},
    optional={
        "zone": st.sampled_from(["a", "b"]),
        "role": st.sampled_from(["edge", "worker"]),
        keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: st.just(""),
    },
)
_SELECTOR = st.builds(
    lambda zone, role: sel(**{k: v for k, v in (("zone", zone), ("role", role)) if v}),
    st.sampled_from(["", "a", "b"]),
    st.sampled_from(["", "edge", "worker"]),
)
_DRAIN = datapath.Drain(next(iter(datapath.Reason)), "leaving")


@st.composite
def _electorate_case(draw: st.DrawFn) -> tuple[desired.Snapshot, desired.Service]:
    nodes = [
        desired.Node(
            model.NodeName(name),
            tuple(sorted(draw(_LABELS).items())),
            network_unavailable=draw(st.booleans()),
            drain=draw(st.sampled_from([None, None, _DRAIN])),
        )
        for name in draw(st.sets(st.sampled_from(_NODE_NAMES), min_size=1))
    ]
    ads = [
        l2ad(
            f"l2-{i}",
            node_selectors=tuple(draw(st.lists(_SELECTOR, max_size=2))),
            preferred_node_selectors=tuple(
                model.PreferredNodeSelector(draw(st.integers(1, 100)), draw(_SELECTOR))
                for _ in range(draw(st.integers(0, 2)))
            ),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    service = svc(
        local=draw(st.booleans()),
        endpoints=[ep(n) for n in draw(st.sets(st.sampled_from(_NODE_NAMES), min_size=1))],
    )
    readiness = {
        n: datapath.NodeReadiness(
            proxy_ready=draw(st.booleans()),
            unready_local=frozenset(draw(st.sets(st.just(service.key)))),
        )
        for n in draw(st.sets(st.sampled_from(_NODE_NAMES)))
    }
    snap = snapshot(
        [service],
        nodes,
        l2=ads,
        alive=draw(st.sets(st.sampled_from(_NODE_NAMES))),
        ignore_exclude_lb=draw(st.booleans()),
        readiness=readiness,
    )
    return snap, service


@settings(max_examples=300)
@given(_electorate_case())
def test_candidacy_from_the_pass_electorate_is_the_election_over_every_node(
    case: tuple[desired.Snapshot, desired.Service],
) -> None:
    """The pass reads each Node once and shares it between Services; the answer stays the
    definition's: `desired.candidates` (`node_verdict` asked of every Node; it replaced
    `election.eligible` when eligibility moved out of the election) and `election.scores`."""
    snap, service = case
    not_ready = snap.not_ready()
    electorate = desired._Electorate(snap)
    got = desired._l2_candidacy(snap, service, POOL, not_ready, electorate)
    assert isinstance(got, desired._L2Candidacy)
    want = desired.candidates(snap, service, snap.config.l2_advertisements)
    assert got.candidates == want
    assert got.scores == election.scores(
        (snap.nodes[n] for n in want), snap.config.l2_advertisements
    )
    # Asked again (another Service with the same advertisements), the cached answer is the same.
    assert desired._l2_candidacy(snap, service, POOL, not_ready, electorate) == got


def test_services_with_the_same_advertisements_and_unready_nodes_share_one_candidate_set() -> None:
    """The election's memo keeps the candidate sets it was asked about: one shared object per
    (advertisements, unready nodes), not a copy per Service, keeps it small at 10,000
    Services; and its answers are the election's."""
    services = [svc(f"10.20.30.{i}", name=f"s{i}", endpoints=[ep("n1")]) for i in range(1, 4)]
    nodes = [node(f"n{i}") for i in range(1, 5)]
    down = {"n4": datapath.NodeReadiness(proxy_ready=False)}
    for readiness in ({}, down):
        snap = snapshot(services, nodes, readiness=readiness)
        electorate = desired._Electorate(snap)
        not_ready = snap.not_ready()
        found = [desired._l2_candidacy(snap, s, POOL, not_ready, electorate) for s in snap.services]
        assert all(isinstance(c, desired._L2Candidacy) for c in found)
        sets = [c.candidates for c in found if isinstance(c, desired._L2Candidacy)]
        assert all(c is sets[0] for c in sets)
        assert sets[0] == ({"n1", "n2", "n3"} if readiness else {"n1", "n2", "n3", "n4"})
        plan = desired.l2_plan(snap, model.NodeName("n1"))
        for s in services:
            assert plan.owners[s.ips[0]] == election.owner(str(s.ips[0]), sets[0])


# --- pool_of, remembered per configuration object -------------------------------------------------


def v4_pool(name: str, first: int, last: int, *, buggy: bool = False) -> model.IPAddressPool:
    return model.IPAddressPool(
        model.PoolName(name),
        (addresses.AddressRange(4, first, last),),
        avoid_buggy_ips=buggy,
    )


BASE = int(ipaddress.IPv4Address("10.9.0.0"))
pool_bounds = st.tuples(st.integers(0, 600), st.integers(0, 600)).map(sorted)


@settings(max_examples=200)
@given(
    st.lists(st.tuples(pool_bounds, st.booleans()), min_size=1, max_size=4),
    st.lists(st.tuples(pool_bounds, st.booleans()), min_size=1, max_size=4),
    st.lists(st.lists(st.integers(0, 600), min_size=1, max_size=2), min_size=1, max_size=12),
)
def test_pool_of_answers_as_the_scan_would_for_whichever_configuration_it_is_asked(
    first: list[tuple[list[int], bool]],
    second: list[tuple[list[int], bool]],
    asked: list[list[int]],
) -> None:
    """Asked alternately of two configurations (a configuration change and back, a reader of an
    older pass), the remembered answer is always the one the scan of that configuration gives:
    no answer of one configuration is ever taken for another's."""

    def config(spec: list[tuple[list[int], bool]]) -> model.Config:
        return model.Config(
            pools=tuple(
                v4_pool(f"p{k}", BASE + lo, BASE + hi, buggy=buggy)
                for k, ((lo, hi), buggy) in enumerate(spec)
            )
        )

    configs = [config(first), config(second)]
    for turn, offsets in enumerate(asked * 2):
        cfg = configs[turn % 2]
        ips = tuple(ipaddress.IPv4Address(BASE + o) for o in offsets)
        assert desired.pool_of(cfg, ips) == desired._first_pool_holding(cfg, ips)


def test_pool_of_honours_avoid_buggy_ips_and_needs_every_address() -> None:
    pools = (v4_pool("buggy", BASE, BASE + 511, buggy=True), v4_pool("any", BASE, BASE + 511))
    cfg = model.Config(pools=pools)

    def name(*offsets: int) -> str | None:
        found = desired.pool_of(cfg, [ipaddress.IPv4Address(BASE + o) for o in offsets])
        return None if found is None else str(found.name)

    assert name(255) == "any"  # a .255 address is not for a pool that avoids buggy IPs
    assert name(1) == "buggy"
    assert name(1, 600) is None  # the second address is in no pool
