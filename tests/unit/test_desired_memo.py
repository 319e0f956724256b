"""speaker.desired.Memo: a pass that remembers the previous one plans exactly what a fresh pass
plans, whatever changed in between, and does not judge again what did not change."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb import addresses, datapath, model, selectors
from speaker import desired

NODES = ("n1", "n2", "n3")
POOL = model.IPAddressPool(
    name=model.PoolName("pool"),
    addresses=(
        addresses.AddressRange(
            4, int(ipaddress.ip_address("10.0.0.0")), int(ipaddress.ip_address("10.0.0.15"))
        ),
    ),
)


def _sel(**labels: str) -> selectors.LabelSelector:
    return selectors.LabelSelector(match_labels=tuple(sorted(labels.items())))


def config(variant: int) -> model.Config:
    """A few configurations: every node, nodes labelled zone=a, a preferred node, none."""
    l2: tuple[model.L2Advertisement, ...] = (
        (model.L2Advertisement(name=model.L2AdvertisementName("all")),),
        (
            model.L2Advertisement(
                name=model.L2AdvertisementName("zone"), node_selectors=(_sel(zone="a"),)
            ),
            model.L2Advertisement(
                name=model.L2AdvertisementName("eth"),
                interfaces=("eth1",),
                service_selectors=(_sel(app="x"),),
            ),
        ),
        (
            model.L2Advertisement(
                name=model.L2AdvertisementName("preferring"),
                preferred_node_selectors=(
                    model.PreferredNodeSelector(weight=10, preference=_sel(zone="a")),
                ),
            ),
        ),
        (),
    )[variant]
    bgp: tuple[model.BGPAdvertisement, ...] = (
        (model.BGPAdvertisement(name=model.BGPAdvertisementName("bgp")),),
        (
            model.BGPAdvertisement(
                name=model.BGPAdvertisementName("zone"), node_selectors=(_sel(zone="a"),)
            ),
        ),
        (
            model.BGPAdvertisement(name=model.BGPAdvertisementName("one"), local_pref=100),
            model.BGPAdvertisement(
                name=model.BGPAdvertisementName("two"),
                local_pref=200,
                service_selectors=(_sel(app="x"),),
            ),
        ),
        (),
    )[variant]
    return model.Config(pools=(POOL,), l2_advertisements=l2, bgp_advertisements=bgp)


@dataclass
class World:
    """The inputs of a pass, kept as a speaker's store keeps them: an unchanged Service is the
    same object from pass to pass."""

    config: model.Config
    services: dict[str, desired.Service]
    nodes: dict[str, desired.Node]
    alive: frozenset[str]
    readiness: dict[str, datapath.NodeReadiness]
    interfaces: frozenset[str] | None

    def snapshot(self) -> desired.Snapshot:
        return desired.Snapshot(
            config=self.config,
            services=tuple(self.services[k] for k in sorted(self.services)),
            nodes=dict(self.nodes),
            alive=self.alive,
            readiness=dict(self.readiness),
        )


def _service(
    name: str, last: int, extra: int | None, local: bool, eps: Sequence[str]
) -> desired.Service:
    ips = [ipaddress.ip_address(f"10.0.0.{last}")]
    if extra is not None:
        ips.append(ipaddress.ip_address(f"10.0.0.{extra}"))
    return desired.Service(
        namespace="ns",
        name=name,
        ips=tuple(ips),
        local=local,
        shares=extra is not None,
        endpoints=tuple(desired.Endpoint(model.NodeName(n), True, True) for n in eps),
    )


services = st.builds(
    _service,
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.integers(1, 5),
    st.one_of(st.none(), st.integers(1, 5)),
    st.booleans(),
    st.lists(st.sampled_from(NODES), max_size=3),
)
changes = st.one_of(
    st.tuples(st.just("service"), services),
    st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c", "d", "e"])),
    st.tuples(st.just("relabel"), st.sampled_from(["a", "b", "c", "d", "e"]), st.booleans()),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.sampled_from(["", "a", "b"])),
    st.tuples(st.just("touch"), st.sampled_from(NODES), st.integers(0, 3)),
    st.tuples(st.just("drain"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("alive"), st.sets(st.sampled_from(NODES))),
    st.tuples(
        st.just("readiness"),
        st.sampled_from(NODES),
        st.booleans(),
        st.sets(st.sampled_from(["ns/a", "ns/b", "ns/c"])),
    ),
    st.tuples(st.just("interfaces"), st.sampled_from([None, frozenset(), frozenset({"eth1"})])),
    st.tuples(st.just("config"), st.integers(0, 3)),
    st.tuples(st.just("nothing")),
)


def apply(world: World, change: tuple[object, ...]) -> None:
    what = change[0]
    if what == "service":
        service = change[1]
        assert isinstance(service, desired.Service)
        world.services[service.key] = service
    elif what == "delete":
        world.services.pop(f"ns/{change[1]}", None)
    elif what == "relabel":
        key = f"ns/{change[1]}"
        if key in world.services:
            labels = (("app", "x"),) if change[2] else ()
            world.services[key] = replace(world.services[key], labels=labels)
    elif what in ("node", "touch"):
        name = str(change[1])
        node = world.nodes[name]
        now = dict(node.labels)
        now["zone" if what == "node" else "touched"] = str(change[2])
        world.nodes[name] = replace(node, labels=tuple(sorted(now.items())))
    elif what == "drain":
        name = str(change[1])
        drain = datapath.drain(
            deleting=bool(change[2]), taints=(), unschedulable=False, drain_on_cordon=False
        )
        world.nodes[name] = replace(world.nodes[name], drain=drain)
    elif what == "alive":
        alive = change[1]
        assert isinstance(alive, set)
        world.alive = frozenset(alive)
    elif what == "readiness":
        unready = change[3]
        assert isinstance(unready, set)
        world.readiness[str(change[1])] = datapath.NodeReadiness(
            proxy_ready=bool(change[2]), unready_local=frozenset(unready)
        )
    elif what == "interfaces":
        found = change[1]
        assert found is None or isinstance(found, frozenset)
        world.interfaces = found
    elif what == "config":
        world.config = config(int(str(change[1])))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(services, max_size=5),
    st.lists(changes, min_size=1, max_size=12),
)
def test_a_remembering_pass_plans_what_a_fresh_one_does(
    start: list[desired.Service], steps: list[tuple[object, ...]]
) -> None:
    world = World(
        config=config(0),
        services={s.key: s for s in start},
        nodes={n: desired.Node(n, (("zone", "a"),) if n == "n1" else ()) for n in NODES},
        alive=frozenset(NODES),
        readiness={},
        interfaces=None,
    )
    memos = {n: desired.Memo() for n in NODES}
    for change in [("nothing",), *steps]:
        apply(world, change)
        snap = world.snapshot()
        for me in NODES:
            name = model.NodeName(me)
            memo = memos[me]
            assert desired.l2_plan(snap, name, world.interfaces, memo) == desired.l2_plan(
                snap, name, world.interfaces
            ), change
            assert desired.bgp_plan(snap, name, memo) == desired.bgp_plan(snap, name), change


def _many(n: int) -> World:
    return World(
        config=config(0),
        services={
            f"ns/s{i}": desired.Service(
                namespace="ns",
                name=f"s{i}",
                ips=(ipaddress.ip_address(f"10.1.{i // 250}.{i % 250 + 1}"),),
                endpoints=(desired.Endpoint(model.NodeName("n2"), True, True),),
            )
            for i in range(n)
        },
        nodes={n: desired.Node(n) for n in NODES},
        alive=frozenset(NODES),
        readiness={},
        interfaces=None,
    )


def _judged(monkeypatch: pytest.MonkeyPatch, world: World, memo: desired.Memo) -> tuple[int, int]:
    """How many Services a pass judged anew, for layer 2 and BGP."""
    counts = {"l2": 0, "bgp": 0}
    l2_of, bgp_of = desired._l2_candidacy_of, desired._bgp_verdict

    def l2_counted(*args: object, **kw: object) -> object:
        counts["l2"] += 1
        return l2_of(*args, **kw)  # type: ignore[arg-type]

    def bgp_counted(*args: object, **kw: object) -> object:
        counts["bgp"] += 1
        return bgp_of(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(desired, "_l2_candidacy_of", l2_counted)
    monkeypatch.setattr(desired, "_bgp_verdict", bgp_counted)
    snap = world.snapshot()
    desired.l2_plan(snap, model.NodeName("n1"), None, memo)
    desired.bgp_plan(snap, model.NodeName("n1"), memo)
    monkeypatch.undo()
    return counts["l2"], counts["bgp"]


def test_a_pass_judges_again_only_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    world = _many(300)
    memo = desired.Memo()
    big = world.config.pools[0]
    world.config = replace(
        world.config,
        pools=(
            replace(
                big,
                addresses=(
                    addresses.AddressRange(
                        4,
                        int(ipaddress.ip_address("10.1.0.0")),
                        int(ipaddress.ip_address("10.1.1.255")),
                    ),
                ),
            ),
        ),
    )
    assert _judged(monkeypatch, world, memo) == (300, 300)
    assert _judged(monkeypatch, world, memo) == (0, 0)
    # One Service changes: it alone.
    world.services["ns/s7"] = replace(world.services["ns/s7"], labels=(("app", "x"),))
    assert _judged(monkeypatch, world, memo) == (1, 1)
    # A Node label no advertisement reads: nothing.
    world.nodes["n1"] = replace(world.nodes["n1"], labels=(("touched", "1"),))
    world.nodes["n3"] = replace(world.nodes["n3"], labels=(("touched", "1"),))
    assert _judged(monkeypatch, world, memo) == (0, 0)
    # Another node's speaker dies: every layer 2 candidacy changes, no BGP verdict of n1's.
    world.alive = frozenset({"n1", "n2"})
    assert _judged(monkeypatch, world, memo) == (300, 0)
    # This node drains: its BGP verdicts, and its layer 2 candidacies (it leaves them).
    world.nodes["n1"] = replace(
        world.nodes["n1"],
        drain=datapath.drain(deleting=True, taints=(), unschedulable=False, drain_on_cordon=False),
    )
    assert _judged(monkeypatch, world, memo) == (300, 300)
    # Another configuration object: everything.
    world.config = replace(world.config)
    assert _judged(monkeypatch, world, memo) == (300, 300)
