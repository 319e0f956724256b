"""What a pass's consumers keep from pass to pass (the series of `metallb_speaker_announced`,
the status objects wanted, the Services by key, who is elected in layer 2) gives what a fresh
computation gives, whatever changed between two passes."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import model
from speaker import accounting, desired, status

NAMES = [f"s{i}" for i in range(6)]
IPS = [ipaddress.ip_address(f"10.250.0.{i}") for i in range(1, 7)]
NODES = ["n1", "n2", "n3"]


class _Quiet:
    def post_assigned(self, service: str, protocol: str) -> None:
        pass

    def post_service_event(self, key: str, reason: str, message: str, *, warning: bool) -> None:
        pass

    def post_node_event(self, reason: str, message: str, *, warning: bool) -> None:
        pass


@st.composite
def passes(draw: Any) -> list[tuple[tuple[desired.Service, ...], dict[Any, str | None]]]:
    """A sequence of (Services, owners): each pass keeps some Service objects as they were,
    makes others again (the same or different), drops or adds some."""
    out: list[tuple[tuple[desired.Service, ...], dict[Any, str | None]]] = []
    kept: dict[str, desired.Service] = {}
    for _ in range(draw(st.integers(1, 5))):
        services = []
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=6)):
            old = kept.get(name)
            if old is not None and draw(st.booleans()):
                services.append(old)  # the same object: unchanged in the store
                continue
            ips = tuple(draw(st.lists(st.sampled_from(IPS), unique=True, max_size=2)))
            services.append(desired.Service("app", name, ips, local=draw(st.booleans())))
        kept = {s.name: s for s in services}
        owners = {ip: draw(st.sampled_from([*NODES, None])) for ip in IPS if draw(st.booleans())}
        out.append((tuple(services), owners))
    return out


def _plans(
    services: tuple[desired.Service, ...], owners: dict[Any, str | None], kept: dict[Any, Any]
) -> tuple[desired.L2Plan, dict[str, tuple[model.PeerName, ...]]]:
    """Layer 2 entries for the addresses owned by n1 (an entry object kept while its address's
    holders are the same, as the plans' memo keeps them) and BGP reach for the local ones."""
    mine = []
    for ip in IPS:
        holders = tuple(sorted(s.key for s in services if ip in s.ips))
        if owners.get(ip) == "n1" and holders:
            entry = kept.get(ip)
            if entry is None or entry.services != holders:
                entry = kept[ip] = desired.L2Address(ip, (), holders)
            mine.append(entry)
    reached: dict[str, tuple[model.PeerName, ...]] = {
        s.key: (model.PeerName("tor"),) for s in services if s.local and s.ips
    }
    return desired.L2Plan(tuple(mine), owners), reached


def _fresh_series(
    services: tuple[desired.Service, ...],
    l2: desired.L2Plan,
    reached: dict[str, tuple[model.PeerName, ...]],
) -> set[tuple[str, str, str, str]]:
    want = {(k, "layer2", "n1", str(e.address)) for e in l2.mine for k in e.services}
    by_key = {s.key: s for s in services}
    want |= {(k, "bgp", "n1", str(ip)) for k in reached for ip in by_key[k].ips}
    return want


@settings(max_examples=150, deadline=None)
@given(sequence=passes())
def test_kept_series_equal_fresh_ones(
    sequence: list[tuple[tuple[desired.Service, ...], dict[Any, str | None]]],
) -> None:
    books = accounting.Accounting("n1", _Quiet())  # type: ignore[arg-type]
    entries: dict[Any, Any] = {}
    try:
        for services, owners in sequence:
            l2, reached = _plans(services, owners, entries)
            snap = desired.Snapshot(model.Config(), services, {}, frozenset(NODES))
            books.account(l2, desired.BGPPlan(()), reached, snap, layer2=True, bgp=True)
            assert books._metric_labels == _fresh_series(services, l2, reached)
    finally:
        empty = desired.Snapshot(model.Config(), (), {}, frozenset(NODES))
        books.account(desired.L2Plan((), {}), desired.BGPPlan(()), {}, empty, layer2=True, bgp=True)


@settings(max_examples=150, deadline=None)
@given(sequence=passes())
def test_announcers_answer_what_a_dict_of_every_service_answers(
    sequence: list[tuple[tuple[desired.Service, ...], dict[Any, str | None]]],
) -> None:
    for services, owners in sequence:
        lazy = status.Announcers(desired.services_by_key(services), owners)
        whole = {
            (s.namespace, s.name): frozenset(o for ip in s.ips if (o := owners.get(ip)) is not None)
            for s in services
        }
        assert dict(lazy) == whole
        assert len(lazy) == len(whole)
        for name in NAMES:
            assert lazy.get(("app", name), frozenset()) == whole.get(("app", name), frozenset())
        assert lazy.get(("other", "s0")) is None


def test_services_by_key_is_made_again_only_for_another_tuple() -> None:
    a = desired.Service("app", "a", (IPS[0],))
    b = desired.Service("app", "b", (IPS[1],))
    first = (a, b)
    index = desired.services_by_key(first)
    assert dict(index) == {"app/a": a, "app/b": b}
    assert desired.services_by_key(first) is index
    # An equal tuple that is another object (the store made a new one): made again.
    again = desired.services_by_key((a, b))
    assert again is not index and dict(again) == dict(index)
    assert dict(desired.services_by_key((b,))) == {"app/b": b}


def test_a_services_key_follows_its_name_through_replace() -> None:
    a = desired.Service("app", "a", (IPS[0],))
    assert a.key == "app/a"
    assert dataclasses.replace(a, name="b").key == "app/b"
    assert dataclasses.replace(a, namespace="x").key == "x/a"
    # Not a field that compares: equal Services are equal whatever way they were made.
    assert a == desired.Service("app", "a", (IPS[0],))


def test_wanted_status_objects_are_kept_while_they_say_the_same() -> None:
    first = status.wanted_bgp("n1", {"app/a": (model.PeerName("tor"), model.PeerName("tor"))})
    again = status.wanted_bgp("n1", {"app/a": [model.PeerName("tor")]})
    assert first == again and first[0] is again[0]
    other = status.wanted_bgp("n1", {"app/a": (model.PeerName("tor2"),)})
    assert other[0] is not first[0] and other[0].status["peers"] == ["tor2"]
    plan = desired.L2Plan((desired.L2Address(IPS[0], ("eth0",), ("app/a",)),), {})
    (l2,) = status.wanted_l2("n1", plan)
    assert status.wanted_l2("n1", plan)[0] is l2
    assert l2.status["interfaces"] == [{"name": "eth0"}]
