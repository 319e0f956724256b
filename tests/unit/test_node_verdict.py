"""speaker.desired.node_verdict: the one walk of the node-level checks, shared by layer 2 (its
candidates and its reasons), BGP and `--explain`; a node failing several checks is told the first
in `desired.Check` order, in both modes."""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import addresses, datapath, model, selectors
from ironlb import annotations as keys
from speaker import desired, explaining

Check = desired.Check
POOL = model.IPAddressPool(
    name=model.PoolName("pool"),
    addresses=(
        addresses.AddressRange(
            4, int(ipaddress.ip_address("10.20.30.0")), int(ipaddress.ip_address("10.20.30.255"))
        ),
    ),
)
OTHER_POOL = model.PoolName("other")
IP = ipaddress.ip_address("10.20.30.1")
KEY = "ns/svc"
EXCLUDE = keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS
DRAIN = datapath.Drain(datapath.Reason.NODE_TO_BE_DELETED, "the Node is tainted for deletion")


def sel(**labels: str) -> selectors.LabelSelector:
    return selectors.LabelSelector(match_labels=tuple(sorted(labels.items())))


def ep(node: str, ready: bool = True) -> desired.Endpoint:
    return desired.Endpoint(model.NodeName(node), ready, ready)


def svc(
    *, local: bool = False, endpoints: Iterable[desired.Endpoint] = (), **labels: str
) -> desired.Service:
    return desired.Service(
        "ns", "svc", (IP,), tuple(sorted(labels.items())), local, endpoints=tuple(endpoints)
    )


def node(
    name: str,
    given: dict[str, str] | None = None,
    /,
    *,
    unavailable: bool = False,
    drain: datapath.Drain | None = None,
    **labels: str,
) -> desired.Node:
    every = {**(given or {}), **labels}
    return desired.Node(model.NodeName(name), tuple(sorted(every.items())), unavailable, drain)


def l2ad(name: str = "l2", **kw: object) -> model.L2Advertisement:
    return model.L2Advertisement(name=model.L2AdvertisementName(name), **kw)  # type: ignore[arg-type]


def bgpad(name: str = "bgp", **kw: object) -> model.BGPAdvertisement:
    return model.BGPAdvertisement(name=model.BGPAdvertisementName(name), **kw)  # type: ignore[arg-type]


def snapshot(
    service: desired.Service,
    nodes: Iterable[desired.Node],
    *,
    l2: Iterable[model.L2Advertisement] = (),
    bgp: Iterable[model.BGPAdvertisement] = (),
    alive: Iterable[str] | None = None,
    readiness: dict[str, datapath.NodeReadiness] | None = None,
    ignore_exclude_lb: bool = False,
) -> desired.Snapshot:
    node_map = {n.name: n for n in nodes}
    return desired.Snapshot(
        config=model.Config(
            pools=(POOL,), l2_advertisements=tuple(l2), bgp_advertisements=tuple(bgp)
        ),
        services=(service,),
        nodes=node_map,
        alive=frozenset(node_map if alive is None else alive),
        ignore_exclude_lb=ignore_exclude_lb,
        readiness=readiness or {},
    )


def l2_answer(snap: desired.Snapshot, me: str) -> tuple[str, str] | None:
    """Layer 2's word on the Service: None if this node is a candidate (announcing, or
    another candidate is elected), else (reason, message)."""
    plan = desired.l2_plan(snap, model.NodeName(me))
    if any(KEY in e.services for e in plan.mine):
        return None
    why, message = str(plan.reasons[KEY]), plan.messages[KEY]
    if why == desired.Reason.NOT_OWNER and message.endswith(" is elected"):
        return None
    return why, message


def bgp_answer(snap: desired.Snapshot, me: str) -> tuple[str, str] | None:
    plan = desired.bgp_plan(snap, model.NodeName(me))
    if any(s.service == KEY for s in plan.mine):
        return None
    return str(plan.reasons[KEY]), plan.messages[KEY]


def said(verdict: desired.NodeVerdict | None) -> tuple[str, str] | None:
    return None if verdict is None else (str(verdict.reason), verdict.message)


# --- the order: a node failing several checks is told the first --------------------------------

ME, OTHER = "me", "other"
EDGE = sel(role="edge")


def failing(checks: frozenset[Check]) -> desired.Snapshot:
    """A Local Service on two nodes; "me" fails exactly `checks`, "other" none."""
    labels = {"role": "worker" if Check.SELECTED in checks else "edge"}
    if Check.EXCLUDED in checks:
        labels[EXCLUDE] = ""
    me = node(
        ME,
        labels,
        unavailable=Check.NETWORK_UNAVAILABLE in checks,
        drain=DRAIN if Check.DRAINING in checks else None,
    )
    nodes = [node(OTHER, role="edge")] + ([] if Check.NODE_OBJECT in checks else [me])
    endpoints = [ep(OTHER)] + ([] if Check.LOCAL_ENDPOINT in checks else [ep(ME)])
    readiness = {}
    if checks & {Check.KUBE_PROXY, Check.KUBE_PROXY_LOCAL}:
        readiness[ME] = datapath.NodeReadiness(
            proxy_ready=Check.KUBE_PROXY not in checks,
            unready_local=frozenset({KEY} if Check.KUBE_PROXY_LOCAL in checks else ()),
        )
    return snapshot(
        svc(local=True, endpoints=endpoints),
        nodes,
        l2=[l2ad(node_selectors=(EDGE,))],
        bgp=[bgpad(node_selectors=(EDGE,))],
        alive={OTHER} | (set() if Check.LIVE in checks else {ME}),
        readiness=readiness,
    )


ALL_SUBSETS = [
    frozenset(c) for n in range(len(Check) + 1) for c in itertools.combinations(list(Check), n)
]


@pytest.mark.parametrize("mode", list(desired.Mode))
def test_a_node_failing_several_checks_is_told_the_first_in_the_one_order(
    mode: desired.Mode,
) -> None:
    """Every combination of the node-level checks (2^9), in both modes, through node_verdict
    and through the plans that speak for it. Liveness is layer 2's alone."""
    applies = [c for c in Check if mode is desired.Mode.LAYER2 or c is not Check.LIVE]
    for checks in ALL_SUBSETS:
        snap = failing(checks)
        service = snap.services[0]
        config = snap.config
        layer2 = mode is desired.Mode.LAYER2
        ads = config.l2_advertisements if layer2 else config.bgp_advertisements
        verdict = desired.node_verdict(snap, service, ME, ads, mode)
        first = next((c for c in applies if c in checks), None)
        assert (None if verdict is None else verdict.check) == first, sorted(checks, key=str)
        answer = l2_answer if mode is desired.Mode.LAYER2 else bgp_answer
        assert answer(snap, ME) == said(verdict)


def test_the_order_is_metallbs_then_ironlbs() -> None:
    """Written down once: MetalLB's shouldAnnounce for the node itself (its advertisements'
    node selectors, the live speaker, NetworkUnavailable, the exclude label, the local
    endpoint), with ironlb's draining beside the Node's conditions and the data path last."""
    assert list(Check) == [
        Check.NODE_OBJECT,
        Check.SELECTED,
        Check.LIVE,
        Check.NETWORK_UNAVAILABLE,
        Check.EXCLUDED,
        Check.DRAINING,
        Check.LOCAL_ENDPOINT,
        Check.KUBE_PROXY,
        Check.KUBE_PROXY_LOCAL,
    ]


# --- layer 2 and BGP agree: same function, same answer ------------------------------------------

NAMES = ("n1", "n2", "n3", "n4")
_LABELS = st.fixed_dictionaries(
    {},
    optional={
        "zone": st.sampled_from(["a", "b"]),
        "role": st.sampled_from(["edge", "worker"]),
        EXCLUDE: st.just(""),
    },
)
_SELECTOR = st.builds(
    lambda zone, role: sel(**{k: v for k, v in (("zone", zone), ("role", role)) if v}),
    st.sampled_from(["", "a", "b"]),
    st.sampled_from(["", "edge", "worker"]),
)
_DRAINS = st.sampled_from(
    [None, None, DRAIN, datapath.Drain(datapath.Reason.NODE_CORDONED, "cordoned")]
)


@st.composite
def _cases(draw: st.DrawFn) -> desired.Snapshot:
    # A name without a Node object stays among the names asked about (NAMES).
    nodes = [
        node(
            name,
            draw(_LABELS),
            unavailable=draw(st.sampled_from([False, False, False, True])),
            drain=draw(_DRAINS),
        )
        for name in draw(st.sets(st.sampled_from(NAMES), min_size=2))
    ]
    # Advertisements alike in both modes: node selectors, service selectors, pools (no
    # localPref: never in conflict).
    shapes = draw(
        st.lists(
            st.tuples(
                st.lists(_SELECTOR, max_size=2),
                st.sampled_from([(), (), (sel(app="web"),), (sel(app="db"),)]),
                st.sampled_from([(), (), (model.PoolName("pool"),), (OTHER_POOL,)]),
            ),
            min_size=1,
            max_size=3,
        )
    )
    l2 = [
        l2ad(f"a{i}", node_selectors=tuple(n), service_selectors=s, ip_address_pools=p)
        for i, (n, s, p) in enumerate(shapes)
    ]
    bgp = [
        bgpad(f"a{i}", node_selectors=tuple(n), service_selectors=s, ip_address_pools=p)
        for i, (n, s, p) in enumerate(shapes)
    ]
    endpoints = [
        ep(n, ready)
        for n, ready in draw(
            st.lists(
                st.tuples(st.sampled_from(NAMES), st.sampled_from([True, True, False])),
                min_size=1,
                max_size=4,
            )
        )
    ]
    service = svc(
        local=draw(st.booleans()),
        endpoints=endpoints,
        **draw(st.sampled_from([{}, {"app": "web"}])),
    )
    readiness = {
        n: datapath.NodeReadiness(
            proxy_ready=draw(st.sampled_from([True, True, False])),
            unready_local=frozenset(draw(st.sets(st.just(KEY)))),
        )
        for n in draw(st.sets(st.sampled_from(NAMES)))
    }
    return snapshot(
        service,
        nodes,
        l2=l2,
        bgp=bgp,
        alive=set(NAMES) - draw(st.sets(st.sampled_from(NAMES), max_size=2)),
        readiness=readiness,
        ignore_exclude_lb=draw(st.booleans()),
    )


SELECTOR_WORDS = {
    # The one check both modes name in their own words: layer 2 ironlb's, BGP MetalLB's.
    ("noMatchingAdvertisement", "no L2Advertisement of the pool selects this node"): "unselected",
    ("notOwner", "no BGPAdvertisement of the pool selects this node"): "unselected",
    # ... and the Service's own check that no advertisement applies, each naming its kind.
    ("noMatchingAdvertisement", "no L2Advertisement selects the pool and the Service"): "no-ads",
    ("noMatchingAdvertisement", "no BGPAdvertisement selects this Service"): "no-ads",
}


def same_words(answer: tuple[str, str] | None) -> object:
    return SELECTOR_WORDS.get(answer, answer) if answer is not None else None


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_layer2_and_bgp_give_a_node_the_same_reason(snap: desired.Snapshot) -> None:
    """For random nodes and Services, each node's layer 2 candidacy and BGP decision agree:
    a candidate in one is one in the other, and a node that is not is told the same reason in
    the same words (the selector check aside, named per mode). Layer 2 alone asks for a live
    speaker: a node that is none says so there, where BGP goes on to a later check or announces.
    """
    service = snap.services[0]
    labels = model.label_map(service.labels)
    bgp_ads = [
        ad
        for ad in snap.config.bgp_advertisements
        if ad.selects(POOL) and selectors.any_matches(ad.service_selectors, labels)
    ]
    for me in NAMES:
        l2, bgp = l2_answer(snap, me), bgp_answer(snap, me)
        if me not in snap.alive and l2 == ("notOwner", "this node's speaker is not a live member"):
            verdict = desired.node_verdict(snap, service, me, bgp_ads, desired.Mode.BGP)
            assert verdict is None or list(Check).index(verdict.check) > 2
            assert bgp == said(verdict)
            continue
        assert same_words(l2) == same_words(bgp), me


# --- layer 2 eligibility (moved from test_election.py with the rules) ---------------------------


def test_eligibility_rules() -> None:
    nodes = [
        node("a", zone="x"),
        node("b", zone="y"),
        node("c", {EXCLUDE: ""}, zone="x"),
        node("d", unavailable=True, zone="x"),
        node("e", zone="x"),
    ]
    alive = {"a", "b", "c", "d"}
    everywhere = [l2ad()]
    cluster = svc(endpoints=[ep("a")])

    def eligible(
        ads: list[model.L2Advertisement],
        service: desired.Service = cluster,
        ignore_exclude_lb: bool = False,
    ) -> frozenset[str]:
        snap = snapshot(service, nodes, alive=alive, ignore_exclude_lb=ignore_exclude_lb)
        return desired.candidates(snap, service, ads)

    assert eligible(everywhere) == {"a", "b"}
    assert eligible(everywhere, ignore_exclude_lb=True) == {"a", "b", "c"}
    only_x = [l2ad(node_selectors=(sel(zone="x"),))]
    assert eligible(only_x) == {"a"}
    # Advertisements are OR-ed: computed over all of them, so every speaker gets the same set.
    assert eligible([*only_x, l2ad("y", node_selectors=(sel(zone="y"),))]) == {"a", "b"}
    assert eligible(everywhere, svc(local=True, endpoints=[ep("b")])) == {"b"}
    assert eligible([]) == frozenset()


# --- the reasons the one order changed (before it, layer 2 and BGP walked differently) ---------


def test_layer2_names_an_unselected_node_so_before_its_own_conditions() -> None:
    """Changed: layer 2 asked for a live speaker, NetworkUnavailable, the exclude label and
    draining before the advertisements' node selectors; MetalLB (both modes) and BGP asked
    whether the pool's advertisements select the node first. A node both unselected and, say,
    NetworkUnavailable said nodeNetworkUnavailable in layer 2 and notOwner in BGP; now both
    name the selector check (each in its mode's word)."""
    cordoned = datapath.Drain(datapath.Reason.NODE_CORDONED, "cordoned")
    for me, alive in (
        (node(ME, unavailable=True, role="worker"), None),
        (node(ME, {EXCLUDE: ""}, role="worker"), None),
        (node(ME, drain=cordoned, role="worker"), None),
        (node(ME, role="worker"), {OTHER}),  # no live member either
    ):
        snap = snapshot(
            svc(endpoints=[ep(ME)]),
            [me, node(OTHER, role="edge")],
            l2=[l2ad(node_selectors=(EDGE,))],
            bgp=[bgpad(node_selectors=(EDGE,))],
            alive=alive,
        )
        assert l2_answer(snap, ME) == (
            "noMatchingAdvertisement",
            "no L2Advertisement of the pool selects this node",
        )
        assert bgp_answer(snap, ME) == (
            "notOwner",
            "no BGPAdvertisement of the pool selects this node",
        )


def test_bgp_asks_the_services_questions_first() -> None:
    """Changed in BGP: no endpoint anywhere, and no BGPAdvertisement for the Service, are the
    Service's answers on every node, asked before this node's checks, as layer 2 (and MetalLB's
    layer 2) asks them. Before, BGP asked for an endpoint anywhere last (MetalLB's BGP order)
    and for the advertisements' node selectors before their service selectors."""
    one = [node(ME)]
    # No endpoint anywhere: was nodeNetworkUnavailable / noLocalEndpoints / kubeProxyNotReady.
    for service, nodes, readiness in (
        (svc(), [node(ME, unavailable=True)], None),
        (svc(local=True), one, None),
        (svc(), one, {ME: datapath.NodeReadiness(proxy_ready=False)}),
    ):
        snap = snapshot(service, nodes, l2=[l2ad()], bgp=[bgpad()], readiness=readiness)
        assert bgp_answer(snap, ME) == ("noEndpoints", "no ready or serving endpoint anywhere")
        assert l2_answer(snap, ME) == bgp_answer(snap, ME)
    # The pool has no BGPAdvertisement: was notOwner.
    snap = snapshot(svc(endpoints=[ep(ME)]), one, l2=[l2ad()])
    assert bgp_answer(snap, ME) == (
        "noMatchingAdvertisement",
        "no BGPAdvertisement selects this Service",
    )
    # The Service's advertisement selects other nodes; another advertisement of the pool, for
    # other Services, selects this one: was noMatchingAdvertisement, now this node is not
    # selected (the advertisement that applies does not select it).
    ads = [bgpad("db", service_selectors=(sel(app="db"),)), bgpad("web", node_selectors=(EDGE,))]
    snap = snapshot(svc(endpoints=[ep(ME)], app="web"), [node(ME, role="worker")], bgp=ads)
    assert bgp_answer(snap, ME) == ("notOwner", "no BGPAdvertisement of the pool selects this node")


def test_bgp_names_a_missing_local_endpoint_before_kube_proxy() -> None:
    """Changed in BGP (layer 2 already did so): the local endpoint is MetalLB's check, the
    data path ironlb's own, asked last. Was kubeProxyNotReady."""
    snap = snapshot(
        svc(local=True, endpoints=[ep(OTHER)]),
        [node(ME), node(OTHER)],
        l2=[l2ad()],
        bgp=[bgpad()],
        readiness={ME: datapath.NodeReadiness(proxy_ready=False)},
    )
    assert bgp_answer(snap, ME) == ("noLocalEndpoints", "no ready endpoint on this node")
    assert l2_answer(snap, ME) == bgp_answer(snap, ME)


# --- --explain speaks through the plans ----------------------------------------------------------


def test_explain_gives_bgp_the_verdicts_words() -> None:
    """The BGP plan carries each reason's message, as the layer 2 plan does, and `/explain`
    prints it: a draining node's own words, not a blank; no Node object said as such."""
    service = svc(endpoints=[ep(ME)])
    draining = snapshot(service, [node(ME, drain=DRAIN)], bgp=[bgpad()])
    nameless = snapshot(service, [node(OTHER)], bgp=[bgpad()])
    for snap, words in (
        (draining, ("nodeToBeDeleted", DRAIN.message)),
        (nameless, ("notOwner", "no Node object for this node")),
    ):
        seen = explaining.Seen(
            {KEY: service}, None, desired.bgp_plan(snap, model.NodeName(ME)), {}, None
        )
        body = explaining.explained(ME, seen, KEY)
        assert body is not None
        (verdict,) = body["verdicts"]
        assert (verdict["reason"], verdict["message"]) == words
