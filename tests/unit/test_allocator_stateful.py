"""Random sequences of allocator operations against invariants and a brute-force oracle.

The pools are tiny (a few addresses each, .0/.255 included) so that every property can be
recounted by enumeration: no address is held by two Services that may not share it, every
address lies in its recorded pool, counters equal a recount, the first usable address MetalLB's
linear scan would pick is the one we pick, and replaying the same operations on a fresh allocator
(with the pool list reversed) gives the same results.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass
from typing import Any

import hypothesis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controller import allocator, converging, requests
from ironlb import addresses, selectors

R = allocator.Reason
F = requests.ServiceFamily
P = requests.FamilyPolicy

RANGES = tuple(
    r
    for r in (
        addresses.parse_range(t)
        for t in (
            "10.0.0.253-10.0.1.2",  # crosses a /24: .255 and .0 inside
            "10.0.2.0/30",
            "10.0.3.255/32",  # only a buggy address
            "fd00::/126",
            "fd00::10-fd00::12",
        )
    )
    if isinstance(r, addresses.AddressRange)
)
assert len(RANGES) == 5
OUTSIDE = (ipaddress.ip_address("10.0.9.9"), ipaddress.ip_address("fd00::99"))
UNIVERSE = tuple(r.address(v) for r in RANGES for v in range(r.first, r.last + 1)) + OUTSIDE
POOL_NAMES = ("p0", "p1", "p2")
TEAM = selectors.LabelSelector((("team", "x"),))
PORTS = (("TCP", 80), ("TCP", 443), ("UDP", 53))
KEYS = tuple(f"{ns}/s{i}" for ns in ("a", "b") for i in range(3))


@st.composite
def pool_sets(draw: st.DrawFn) -> tuple[allocator.Pool, ...]:
    overlap = draw(st.booleans())
    owners: dict[str, list[addresses.AddressRange]] = {n: [] for n in POOL_NAMES}
    for r in draw(st.permutations(RANGES)):
        chosen = draw(st.sets(st.sampled_from(POOL_NAMES), max_size=2 if overlap else 1))
        for name in sorted(chosen):
            owners[name].append(r)
    pools = []
    for name, ranges in owners.items():
        if not ranges:
            continue
        # Mostly unrestricted auto-assign pools, so that allocation and sharing happen often.
        restricted = draw(st.integers(0, 3)) == 0
        pools.append(
            allocator.Pool(
                name,
                tuple(ranges),
                auto_assign=draw(st.integers(0, 4)) > 0,
                avoid_buggy_ips=draw(st.booleans()),
                priority=draw(st.integers(0, 2)),
                namespaces=draw(
                    st.sampled_from([None, frozenset({"a"}), frozenset({"a", "b"}), frozenset()])
                )
                if restricted
                else None,
                service_selectors=draw(st.sampled_from([(), (TEAM,)])) if restricted else (),
                has_service_allocation=restricted,
            )
        )
    return tuple(pools)


FAMILIES = [
    (F.IPV4, P.SINGLE_STACK),
    (F.IPV6, P.SINGLE_STACK),
    (F.IPV4, P.PREFER_DUAL_STACK),
    (F.DUAL, P.PREFER_DUAL_STACK),
    (F.DUAL, P.REQUIRE_DUAL_STACK),
]


@st.composite
def service_requests(draw: st.DrawFn) -> allocator.ServiceRequest:
    key = draw(st.sampled_from(KEYS))
    family, policy = draw(st.sampled_from(FAMILIES))
    return allocator.ServiceRequest(
        key=key,
        namespace=key.partition("/")[0],
        labels=draw(st.sampled_from([(), (("team", "x"),)])),
        family=family,
        primary_family=draw(st.sampled_from([4, 6])),
        policy=policy,
        sharing_key=draw(st.sampled_from([None, "k", "k", "k", "j"])),
        backend_key=draw(st.sampled_from(["", "", "", "app=b"])),
        ports=tuple(sorted(draw(st.sets(st.sampled_from(PORTS), min_size=1, max_size=2))))
        if draw(st.integers(0, 5))
        else (),
    )


@dataclass(frozen=True)
class Op:
    kind: str
    args: tuple[Any, ...]
    result: Any


def apply(a: allocator.Allocator, kind: str, args: tuple[Any, ...]) -> Any:
    if kind == "set_pools":
        return a.set_pools(args[0])
    if kind == "allocate":
        return a.allocate(args[0])
    if kind == "from_pool":
        return a.allocate_from_pool(args[0], args[1])
    if kind == "assign":
        return a.assign(args[0], args[1])
    if kind == "additional":
        return a.allocate_additional_family(args[0])
    if kind == "unassign":
        return a.unassign(args[0])
    if kind == "converge":
        return converging.converge(a, args[0])
    raise AssertionError(kind)


def priority_order(pool: allocator.Pool) -> tuple[float, str]:
    return (pool.priority if pool.priority > 0 else float("inf"), pool.name)


class AllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.a = allocator.Allocator()
        self.pools: tuple[allocator.Pool, ...] = ()
        # The request each holder last succeeded with: its sharing terms are what it holds.
        self.terms: dict[str, allocator.ServiceRequest] = {}
        self.log: list[Op] = []

    # -- bookkeeping --

    def run(self, kind: str, *args: Any) -> Any:
        result = apply(self.a, kind, args)
        self.log.append(Op(kind, args, result))
        return result

    def settle(self, svc: allocator.ServiceRequest, succeeded: bool) -> None:
        if self.a.allocation(svc.key) is None:
            self.terms.pop(svc.key, None)
        elif succeeded:
            self.terms[svc.key] = svc

    def admits(self, pool: allocator.Pool, svc: allocator.ServiceRequest) -> bool:
        return pool.admits(svc.namespace, dict(svc.labels))

    # -- the brute-force oracle: MetalLB's linear scan over a small pool --

    def holders(self, ip: addresses.IPAddress) -> list[str]:
        return [k for k, alloc in self.a.allocations() if ip in alloc.ips]

    def usable(self, ip: addresses.IPAddress, svc: allocator.ServiceRequest) -> bool:
        others = [k for k in self.holders(ip) if k != svc.key]
        if not others:
            return True
        mine = svc.key_pair
        theirs = self.terms[others[0]].key_pair
        if not mine[0] or mine != theirs:
            return False
        used = {p for k in others for p in self.terms[k].ports}
        return used.isdisjoint(svc.ports)

    def first_usable(
        self, pool: allocator.Pool, version: int, svc: allocator.ServiceRequest
    ) -> addresses.IPAddress | None:
        for r in pool.ranges:
            if r.version != version:
                continue
            for value in range(r.first, r.last + 1):
                ip = r.address(value)
                if pool.contains(ip) and self.usable(ip, svc):
                    return ip
        return None

    def expected_single(
        self, pools: list[allocator.Pool], svc: allocator.ServiceRequest
    ) -> tuple[str, addresses.IPAddress] | None:
        version = 4 if svc.family is F.IPV4 else 6
        for p in pools:
            ip = self.first_usable(p, version, svc)
            if ip is not None:
                return p.name, ip
        return None

    # -- rules --

    @initialize(pools=pool_sets())
    def first_pools(self, pools: tuple[allocator.Pool, ...]) -> None:
        self.set_pools(pools)

    @rule(pools=pool_sets())
    def set_pools(self, pools: tuple[allocator.Pool, ...]) -> None:
        before = dict(self.a.allocations())
        change = self.run("set_pools", pools)
        self.pools = pools
        by_name = {p.name: p for p in pools}
        for key, old_pool in change.evicted:
            assert before[key].pool == old_pool
            assert not any(all(p.contains(ip) for ip in before[key].ips) for p in pools)
            self.terms.pop(key, None)
        for key, old_pool, new_pool in change.moved:
            assert before[key].pool == old_pool and old_pool != new_pool
            assert all(by_name[new_pool].contains(ip) for ip in before[key].ips)
        untouched = set(before) - {k for k, _ in change.evicted} - {k for k, *_ in change.moved}
        for key in untouched:
            assert self.a.allocation(key) == before[key]

    @rule(svc=service_requests())
    def allocate(self, svc: allocator.ServiceRequest) -> None:
        held = self.a.allocation(svc.key)
        pinned = sorted(
            (p for p in self.pools if p.auto_assign and p.restricted and self.admits(p, svc)),
            key=priority_order,
        )
        unpinned = sorted(
            (p for p in self.pools if p.auto_assign and not p.restricted), key=lambda p: p.name
        )
        single = svc.family in (F.IPV4, F.IPV6)
        expected = None
        if held is None and single:
            expected = self.expected_single(pinned, svc) or self.expected_single(unpinned, svc)
        result = self.run("allocate", svc)
        ok = isinstance(result, allocator.Allocation)
        self.settle(svc, ok)
        if held is not None:
            return
        if single:
            if expected is None:
                assert not ok, result
            else:
                assert ok, (result, expected)
                assert (result.pool, result.ips) == (expected[0], (expected[1],))
        if ok:
            chosen = next(p for p in self.pools if p.name == result.pool)
            assert chosen.auto_assign and self.admits(chosen, svc)
            shared = any(len(self.holders(ip)) > 1 for ip in result.ips)
            hypothesis.event(f"allocate ok single={single} shared={shared}")
        else:
            hypothesis.event(f"allocate {result.reason.value}")

    @rule(svc=service_requests())
    def allocate_again(self, svc: allocator.ServiceRequest) -> None:
        """Automatic allocation is the common path; give it twice the weight."""
        self.allocate(svc)

    @rule(svc=service_requests(), name=st.sampled_from(POOL_NAMES))
    def from_pool(self, svc: allocator.ServiceRequest, name: str) -> None:
        held = self.a.allocation(svc.key)
        target = next((p for p in self.pools if p.name == name), None)
        expected = None
        single = svc.family in (F.IPV4, F.IPV6)
        if held is None and single and target is not None and self.admits(target, svc):
            expected = self.expected_single([target], svc)
        result = self.run("from_pool", svc, name)
        ok = isinstance(result, allocator.Allocation)
        self.settle(svc, ok)
        if held is not None:
            return
        if target is None:
            assert isinstance(result, allocator.AllocError) and result.reason is R.UNKNOWN_POOL
        elif not self.admits(target, svc):
            assert isinstance(result, allocator.AllocError)
            assert result.reason is R.POOL_NOT_COMPATIBLE
        elif single and expected is None:
            assert isinstance(result, allocator.AllocError), result
        elif single and expected is not None:
            assert isinstance(result, allocator.Allocation), (result, expected)
            assert (result.pool, result.ips) == (name, (expected[1],))
        if ok:
            assert result.pool == name

    @rule(
        svc=service_requests(),
        picks=st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=2).filter(
            lambda picks: len(picks) == 1 or picks[0].version != picks[1].version
        )
        | st.lists(st.sampled_from(UNIVERSE), min_size=2, max_size=3),
    )
    def assign(self, svc: allocator.ServiceRequest, picks: list[addresses.IPAddress]) -> None:
        result = self.run("assign", svc, tuple(picks))
        ok = isinstance(result, allocator.Allocation)
        hypothesis.event(f"assign {'ok' if ok else result.reason.value}")
        self.settle(svc, ok)
        if ok:
            chosen = next(p for p in self.pools if p.name == result.pool)
            assert self.admits(chosen, svc)
            assert result.ips == tuple(picks)
        elif len(picks) == 1 and not any(p.contains(picks[0]) for p in self.pools):
            assert result.reason is R.NOT_IN_ANY_POOL

    @rule(svc=service_requests())
    def additional(self, svc: allocator.ServiceRequest) -> None:
        before = self.a.allocation(svc.key)
        result = self.run("additional", svc)
        ok = isinstance(result, allocator.Allocation)
        self.settle(svc, ok)
        if ok:
            assert before is not None and len(before.ips) == 1
            assert result.ips[0] == before.ips[0] and result.pool == before.pool
            assert result.ips[1].version != before.ips[0].version

    @rule(key=st.sampled_from(KEYS))
    def unassign(self, key: str) -> None:
        held = self.a.allocation(key) is not None
        assert self.run("unassign", key) is held
        assert self.a.allocation(key) is None
        self.terms.pop(key, None)

    @rule(svc=service_requests(), stale=st.booleans(), pick=st.sampled_from(UNIVERSE))
    def converge(
        self, svc: allocator.ServiceRequest, stale: bool, pick: addresses.IPAddress
    ) -> None:
        held = self.a.allocation(svc.key)
        current = (pick,) if stale or held is None else held.ips
        decision = self.run("converge", dataclasses.replace(svc, current_ips=current))
        after = self.a.allocation(svc.key)
        if decision.status is converging.Status.SET:
            assert after is not None and after.ips == decision.ips and after.pool == decision.pool
            self.terms[svc.key] = svc
        elif decision.status is converging.Status.CLEAR:
            assert after is None
        self.settle(svc, False)

    # -- invariants --

    @invariant()
    def nobody_shares_what_they_may_not(self) -> None:
        by_ip: dict[addresses.IPAddress, list[str]] = {}
        for key, alloc in self.a.allocations():
            assert 1 <= len(alloc.ips) <= 2
            if len(alloc.ips) == 2:
                assert alloc.ips[0].version != alloc.ips[1].version
            for ip in alloc.ips:
                by_ip.setdefault(ip, []).append(key)
        for ip, keys in by_ip.items():
            if len(keys) < 2:
                continue
            terms = [self.terms[k] for k in keys]
            assert all(t.key_pair == terms[0].key_pair for t in terms), (ip, keys)
            assert terms[0].key_pair[0], (ip, keys)
            ports = [p for t in terms for p in t.ports]
            assert len(ports) == len(set(ports)), (ip, keys)

    @invariant()
    def every_address_is_inside_its_pool(self) -> None:
        by_name = {p.name: p for p in self.pools}
        for _, alloc in self.a.allocations():
            assert alloc.pool in by_name
            assert all(by_name[alloc.pool].contains(ip) for ip in alloc.ips), alloc

    @invariant()
    def counters_equal_a_recount(self) -> None:
        for p in self.pools:
            counters = self.a.counters(p.name)
            assert counters is not None
            held = {
                ip for _, alloc in self.a.allocations() if alloc.pool == p.name for ip in alloc.ips
            }
            used4 = sum(1 for ip in held if ip.version == 4)
            used6 = len(held) - used4
            cap4 = sum(
                1
                for r in p.ranges
                if r.version == 4
                for v in range(r.first, r.last + 1)
                if p.contains(r.address(v))
            )
            cap6 = sum(r.size for r in p.ranges if r.version == 6)
            assert (counters.assigned_ipv4, counters.assigned_ipv6) == (used4, used6)
            assert (counters.capacity_ipv4, counters.capacity_ipv6) == (cap4, cap6)
            assert (counters.available_ipv4, counters.available_ipv6) == (
                cap4 - used4,
                cap6 - used6,
            )

    def teardown(self) -> None:
        """Same operations on a fresh allocator, pools listed the other way round: same results."""
        replay = allocator.Allocator()
        for op in self.log:
            args = (tuple(reversed(op.args[0])),) if op.kind == "set_pools" else op.args
            assert apply(replay, op.kind, args) == op.result, op
        assert list(replay.allocations()) == list(self.a.allocations())


AllocatorMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None
)
TestAllocatorMachine = AllocatorMachine.TestCase
