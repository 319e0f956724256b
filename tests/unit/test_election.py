"""The L2 election: MetalLB's verified order, preference scores, and agreement over random views.

Who is eligible is speaker.desired's `node_verdict` (tests/unit/test_node_verdict.py)."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import model, selectors
from speaker import election


def selector(**labels: str) -> selectors.LabelSelector:
    return selectors.LabelSelector(tuple(sorted(labels.items())))


def ad(
    name: str = "ad",
    nodes: tuple[selectors.LabelSelector, ...] = (),
    preferred: tuple[tuple[int, selectors.LabelSelector], ...] = (),
) -> model.L2Advertisement:
    return model.L2Advertisement(
        name=model.L2AdvertisementName(name),
        node_selectors=nodes,
        preferred_node_selectors=tuple(
            model.PreferredNodeSelector(weight=w, preference=p) for w, p in preferred
        ),
    )


def node(name: str, **labels: str) -> election.NodeInfo:
    return election.NodeInfo(name, tuple(sorted(labels.items())))


# metallb-behaviour.md §4.1, matching TestSortL2Candidates and TestShouldAnnounceEPSlices.
@pytest.mark.parametrize(
    ("candidates", "ip", "weights", "expected"),
    [
        (["node-a", "node-b", "node-c"], "10.0.0.1", {}, ["node-b", "node-a", "node-c"]),
        (["node-a", "node-b", "node-c"], "10.0.0.2", {}, ["node-b", "node-c", "node-a"]),
        (["node-a", "node-b"], "10.20.30.1", {"node-a": 100, "node-b": 100}, ["node-b", "node-a"]),
        (
            ["edge-a", "edge-b", "worker-a"],
            "10.20.30.1",
            {"edge-a": 100, "edge-b": 100},
            ["edge-b", "edge-a", "worker-a"],
        ),
        (["iris1", "iris2"], "10.20.30.1", {}, ["iris2", "iris1"]),
        (["iris1", "iris2"], "10.20.30.2", {}, ["iris1", "iris2"]),
    ],
)
def test_verified_vectors(
    candidates: list[str], ip: str, weights: dict[str, int], expected: list[str]
) -> None:
    assert election.order(ip, candidates, weights) == expected
    assert election.owner(ip, candidates, weights) == expected[0]


def test_single_preferred_node_wins_over_hash() -> None:
    nodes = ["edge-a", "edge-b", "worker-a", "worker-b"]
    assert election.order("10.20.30.1", nodes, {"edge-a": 100})[0] == "edge-a"


def test_order_is_the_documented_hash() -> None:
    nodes = [f"n{i}" for i in range(10)]
    ip = "192.0.2.7"
    by_hash = sorted(nodes, key=lambda n: hashlib.sha256(f"{n}#{ip}".encode()).digest())
    assert election.order(ip, nodes) == by_hash


def test_no_eligible_node_means_no_owner() -> None:
    assert election.owner("10.0.0.1", []) is None


def test_address_spelling_does_not_change_the_owner() -> None:
    nodes = [f"n{i}" for i in range(20)]
    assert election.owner("2001:DB8::1", nodes) == election.owner("2001:db8:0:0::1", nodes)
    assert election.owner("::ffff:10.0.0.1", nodes) == election.owner("10.0.0.1", nodes)


def test_removing_a_non_owner_keeps_the_owner() -> None:
    nodes = [f"n{i}" for i in range(8)]
    winner = election.owner("10.1.1.1", nodes)
    for other in nodes:
        if other != winner:
            assert election.owner("10.1.1.1", [n for n in nodes if n != other]) == winner


def test_preference_scores_sum_over_ads_and_need_node_selection() -> None:
    nodes = [node("a", tier="edge"), node("b", tier="edge", zone="x"), node("c")]
    ads = [
        ad("one", preferred=((70, selector(tier="edge")),)),
        ad("two", preferred=((30, selector(zone="x")),)),
        ad("three", nodes=(selector(zone="nowhere"),), preferred=((50, selector(tier="edge")),)),
    ]
    assert election.scores(nodes, ads) == {"a": 70, "b": 100}
    # "one" and "two" select every node: all three are candidates, and the preference decides.
    assert election.owner("10.20.30.1", ["a", "b", "c"], election.scores(nodes, ads)) == "b"


def test_ready_fallback() -> None:
    conditions = {
        "a": [{"type": "Ready", "status": "True"}],
        "b": [{"type": "Ready", "status": "Unknown"}],
        "c": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}],
        "d": None,
        "e": [
            {"type": "NetworkUnavailable", "status": "False"},
            {"type": "Ready", "status": "True"},
        ],
    }
    assert election.ready_nodes(conditions) == {"a", "e"}


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
ips = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)


@settings(max_examples=200, deadline=None)
@given(
    view=st.lists(names, min_size=1, max_size=12, unique=True),
    ip=ips,
    weights=st.dictionaries(names, st.integers(0, 300), max_size=6),
    seed=st.integers(0, 2**32),
)
def test_every_node_elects_the_same_owner_for_the_same_view(
    view: list[str], ip: str, weights: dict[str, int], seed: int
) -> None:
    rng = random.Random(seed)
    answers = set()
    for _ in range(5):  # each speaker sees the same set in its own order
        shuffled = view[:]
        rng.shuffle(shuffled)
        answers.add(election.owner(ip, shuffled, weights))
    assert len(answers) == 1
    (winner,) = answers
    assert winner in view
    best = max(weights.get(n, 0) for n in view)
    assert weights.get(winner, 0) == best


@settings(max_examples=200, deadline=None)
@given(view=st.lists(names, min_size=2, max_size=12, unique=True), ip=ips, data=st.data())
def test_losing_the_owner_moves_only_to_the_runner_up(
    view: list[str], ip: str, data: st.DataObject
) -> None:
    ranked = election.order(ip, view)
    assert election.owner(ip, ranked[1:]) == ranked[1]
    gone = data.draw(st.sampled_from(view))
    if gone != ranked[0]:
        assert election.owner(ip, [n for n in view if n != gone]) == ranked[0]


@pytest.mark.parametrize(
    ("returned", "we_returned", "expected"),
    [
        (set(), False, (set(), set())),  # nobody came back: nothing to repeat
        # n2 may have announced any of ours while away: "a" (ours with everyone alive) at once,
        # "b" (held for a member dead in our view) once the view is quiet.
        ({"n2"}, False, ({"a"}, {"b"})),
        (set(), True, ({"a"}, {"b"})),  # the others took ours while they had us dead
        ({"n2"}, True, ({"a"}, {"b"})),
    ],
)
def test_kept_addresses_are_announced_again_when_someone_comes_back(
    returned: set[str], we_returned: bool, expected: tuple[set[str], set[str]]
) -> None:
    now, later = election.to_announce_again(["a", "b"], ["a", "c"], returned, we_returned)
    assert (now, later) == expected


def test_stand_in_addresses_wait_for_a_quiet_view_and_go_only_if_still_held() -> None:
    deferred: election.Deferred[str] = election.Deferred(quiet=2.0)
    alone = frozenset({"n1"})
    everyone = frozenset({"n1", "n2", "n3"})
    assert deferred.due(alone, ["a"], 0.0) == (frozenset(), None)  # nothing pending
    deferred.add({"b", "c"}, 0.5, we_returned=False)
    assert deferred.due(alone, ["a", "b", "c"], 1.0) == (frozenset(), 2.0)  # quiet since 0.0
    # Members come back as our view catches up: each change restarts the wait.
    assert deferred.due(frozenset({"n1", "n2"}), ["a", "c"], 1.5) == (frozenset(), 3.5)
    assert deferred.due(everyone, ["a", "c"], 2.0) == (frozenset(), 4.0)
    assert deferred.due(everyone, ["a", "c"], 3.9) == (frozenset(), 4.0)
    # Quiet: what is still held goes ("b" went back to its owner), once.
    assert deferred.due(everyone, ["a", "c"], 4.0) == (frozenset({"c"}), None)
    assert deferred.due(everyone, ["a", "c"], 9.0) == (frozenset(), None)


def test_after_our_own_return_stand_in_addresses_are_not_announced_again() -> None:
    """We were the one cut off: what we hold for members still dead in our view is most likely
    theirs, alive; for `stale_view` seconds none of it goes, and what was pending is dropped."""
    deferred: election.Deferred[str] = election.Deferred(quiet=2.0, stale_view=30.0)
    everyone = frozenset({"n1", "n2", "n3"})
    deferred.add({"c"}, 0.0, we_returned=False)
    deferred.add({"b"}, 1.0, we_returned=True)
    assert deferred.pending == frozenset()
    deferred.add({"b"}, 20.0, we_returned=False)  # a member back in our view, 19 s later
    assert deferred.due(everyone, ["b", "c"], 25.0) == (frozenset(), None)
    deferred.add({"b"}, 31.0, we_returned=False)  # the view has long caught up
    assert deferred.due(everyone, ["b"], 31.0) == (frozenset({"b"}), None)  # quiet since 25


@settings(max_examples=200, deadline=None)
@given(
    view=st.lists(names, min_size=2, max_size=8, unique=True),
    ips_=st.lists(ips, min_size=1, max_size=20, unique=True),
    data=st.data(),
)
def test_what_goes_at_once_is_never_a_live_members_address(
    view: list[str], ips_: list[str], data: st.DataObject
) -> None:
    """Whoever we see alive, an address announced again at once is one no member we have seen
    alive would own: announcing it cannot pull it from a live owner, however stale our view."""
    me = view[0]
    seen = set(view)
    alive = {me} | set(data.draw(st.lists(st.sampled_from(view))))

    def mine(live: set[str]) -> list[str]:
        return [ip for ip in ips_ if election.owner(ip, live) == me]

    now, later = election.to_announce_again(mine(alive), mine(alive | seen), {"x"}, False)
    assert now | later == set(mine(alive))
    for ip in now:
        assert election.owner(ip, seen) == me


def test_a_pass_announces_the_at_once_part_and_keeps_the_rest_until_the_view_is_quiet() -> None:
    deferred: election.Deferred[str] = election.Deferred(quiet=2.0)
    everyone = frozenset({"n1", "n2"})
    again, settled, ask_at = deferred.decide(["a", "b"], ["a"], {"n2"}, False, everyone, 0.0)
    assert (again, settled, ask_at) == (frozenset({"a"}), frozenset(), 2.0)
    again, settled, ask_at = deferred.decide(["a", "b"], [], set(), False, everyone, 2.0)
    assert (again, settled, ask_at) == (frozenset({"b"}), frozenset({"b"}), None)
