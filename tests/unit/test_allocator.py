"""Allocator core as tables: pools + a sequence of operations -> expected results.

The scenarios follow MetalLB's `internal/allocator` tests (TestAssignment, TestBuggyIPs,
TestAutoAssign, TestAllocation, TestPoolAllocation, TestConfigReload, TestPoolCount,
TestPoolMetrics) and the rules of its allocator, restated as data.
"""

from __future__ import annotations

import ipaddress
import itertools
from dataclasses import dataclass, field

import pytest

from controller import allocator, requests
from ironlb import addresses, selectors

R = allocator.Reason
V4, V6, DUAL = requests.ServiceFamily.IPV4, requests.ServiceFamily.IPV6, requests.ServiceFamily.DUAL
SINGLE = requests.FamilyPolicy.SINGLE_STACK
PREFER = requests.FamilyPolicy.PREFER_DUAL_STACK
REQUIRE = requests.FamilyPolicy.REQUIRE_DUAL_STACK
MAX = 2**63 - 1


def rng(text: str) -> addresses.AddressRange:
    parsed = addresses.parse_range(text)
    assert isinstance(parsed, addresses.AddressRange), parsed
    return parsed


def sel(**labels: str) -> selectors.LabelSelector:
    return selectors.LabelSelector(tuple(sorted(labels.items())))


def pool(name: str, *ranges: str, **kw: object) -> allocator.Pool:
    return allocator.Pool(name, tuple(rng(r) for r in ranges), **kw)  # type: ignore[arg-type]


def ports(*texts: str) -> tuple[tuple[str, int], ...]:
    out = []
    for t in texts:
        proto, _, number = t.partition("/")
        out.append((proto.upper(), int(number)))
    return tuple(out)


def svc(
    key: str,
    family: requests.ServiceFamily = V4,
    *,
    policy: requests.FamilyPolicy = SINGLE,
    primary: int = 4,
    share: str | None = None,
    backend: str = "",
    port: tuple[tuple[str, int], ...] = ports("tcp/80"),
    labels: dict[str, str] | None = None,
    pool_name: str | None = None,
) -> allocator.ServiceRequest:
    namespace = key.partition("/")[0] if "/" in key else "default"
    return allocator.ServiceRequest(
        key=key,
        namespace=namespace,
        labels=allocator.labels_of(labels),
        family=family,
        primary_family=6 if primary == 6 else 4,
        policy=policy,
        requested_pool=pool_name,
        sharing_key=share,
        backend_key=backend,
        ports=port,
    )


def ips(text: str) -> tuple[addresses.IPAddress, ...]:
    return tuple(ipaddress.ip_address(t.strip()) for t in text.split(",")) if text else ()


# --- steps --------------------------------------------------------------------------------------

Expect = str | allocator.Reason  # "1.2.3.4" / "1.2.3.4,1000::4" on success, or the refusal


@dataclass(frozen=True)
class Assign:
    service: allocator.ServiceRequest
    addresses: str
    expect: Expect | None = None  # None: success with exactly `addresses`


@dataclass(frozen=True)
class Allocate:
    service: allocator.ServiceRequest
    expect: Expect
    pool: str | None = None  # expected pool on success


@dataclass(frozen=True)
class FromPool:
    service: allocator.ServiceRequest
    pool: str
    expect: Expect


@dataclass(frozen=True)
class AddFamily:
    service: allocator.ServiceRequest
    expect: Expect


@dataclass(frozen=True)
class Unassign:
    key: str
    held: bool = True


@dataclass(frozen=True)
class SetPools:
    pools: tuple[allocator.Pool, ...]
    moved: tuple[tuple[str, str, str], ...] = ()
    evicted: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Holds:
    key: str
    addresses: str | None  # None: holds nothing
    pool: str | None = None


@dataclass(frozen=True)
class Counts:
    pool: str
    assigned: tuple[int, int]
    available: tuple[int, int]


Step = Assign | Allocate | FromPool | AddFamily | Unassign | SetPools | Holds | Counts


@dataclass(frozen=True)
class Scenario:
    name: str
    pools: tuple[allocator.Pool, ...]
    steps: tuple[Step, ...]
    marks: tuple[str, ...] = field(default=())


def check_result(result: allocator.Result, expect: Expect, where: str) -> None:
    if isinstance(expect, allocator.Reason):
        assert isinstance(result, allocator.AllocError), f"{where}: expected {expect}, got {result}"
        assert result.reason is expect, f"{where}: {result}"
        assert result.message, where
    else:
        assert isinstance(result, allocator.Allocation), f"{where}: expected {expect}: {result}"
        assert result.ips == ips(expect), f"{where}: got {result.ips}"


def run(scenario: Scenario, pools: tuple[allocator.Pool, ...] | None = None) -> None:
    a = allocator.Allocator()
    a.set_pools(scenario.pools if pools is None else pools)
    for i, step in enumerate(scenario.steps):
        where = f"step {i} {type(step).__name__}"
        match step:
            case Assign(service, text, expect):
                result = a.assign(service, ips(text))
                check_result(result, text if expect is None else expect, where)
            case Allocate(service, expect, pool_name):
                result = a.allocate(service)
                check_result(result, expect, where)
                if pool_name is not None:
                    assert isinstance(result, allocator.Allocation)
                    assert result.pool == pool_name, f"{where}: pool {result.pool}"
            case FromPool(service, pool_name, expect):
                check_result(a.allocate_from_pool(service, pool_name), expect, where)
            case AddFamily(service, expect):
                check_result(a.allocate_additional_family(service), expect, where)
            case Unassign(key, held):
                assert a.unassign(key) is held, where
            case SetPools(new_pools, moved, evicted):
                change = a.set_pools(new_pools)
                assert change == allocator.PoolsChange(moved, evicted), f"{where}: {change}"
            case Holds(key, text, pool_name):
                got = a.allocation(key)
                if text is None:
                    assert got is None, f"{where}: {got}"
                else:
                    assert got is not None, where
                    assert got.ips == ips(text), f"{where}: {got}"
                    if pool_name is not None:
                        assert got.pool == pool_name, f"{where}: {got}"
            case Counts(pool_name, assigned, available):
                counters = a.counters(pool_name)
                assert counters is not None, where
                used = (counters.assigned_ipv4, counters.assigned_ipv6)
                assert used == assigned, f"{where}: assigned {used}"
                free = (counters.available_ipv4, counters.available_ipv6)
                assert free == available, f"{where}: available {free}"


# --- Fixture A (TestAssignment) -----------------------------------------------------------------

FIXTURE_A = (
    pool("test", "1.2.3.4/31", "1000::4/127"),
    pool("test2", "1.2.4.0/24", "1000::4:0/120", avoid_buggy_ips=True),
    pool("test3", "1.2.5.0/24", namespaces=frozenset({"test-ns1"}), avoid_buggy_ips=True),
    pool("test4", "1.2.6.0/24", service_selectors=(sel(team="metallb"),)),
    pool(
        "test5",
        "1.2.7.0/24",
        priority=20,
        namespaces=frozenset({"test-ns1"}),
        service_selectors=(sel(team="metallb"),),
    ),
    pool(
        "test6",
        "1.2.8.0/24",
        priority=20,
        namespaces=frozenset({"test-ns2"}),
        service_selectors=(sel(foo="bar"),),
    ),
)


def assignment_scenarios(family: requests.ServiceFamily) -> list[Scenario]:
    """TestAssignment's sequences, for one family (the buggy-IP rule only exists for IPv4)."""
    v6 = family is V6
    first, second = ("1000::4", "1000::5") if v6 else ("1.2.3.4", "1.2.3.5")
    shared = "1000::4:3" if v6 else "1.2.4.3"

    def s(key: str, **kw: object) -> allocator.ServiceRequest:
        return svc(key, family, **kw)  # type: ignore[arg-type]

    scenarios = [
        Scenario(
            f"{family.value}: no sharing key means no sharing; unassign frees",
            FIXTURE_A,
            (
                Assign(s("default/s1"), first),
                Assign(s("default/s1"), first),  # idempotent
                Assign(s("default/s2"), first, R.ADDRESS_TAKEN),
                Assign(s("default/s2"), second),
                Assign(s("default/s1"), second, R.ADDRESS_TAKEN),
                Holds("default/s1", first, "test"),
                Unassign("default/s1"),
                Unassign("default/s1", held=False),
                Assign(s("default/s2"), first),  # s2 moves; .5 is free again
                Assign(s("default/s3"), second),
                Holds("default/s2", first, "test"),
            ),
        ),
        Scenario(
            f"{family.value}: the sole user may change its sharing key in place",
            FIXTURE_A,
            (
                Assign(s("default/s4", share="sharing", backend="backend"), shared),
                Assign(s("default/s4", share="share", backend="backend"), shared),
                Assign(s("default/s4", share=None, backend="other"), shared),
            ),
        ),
        Scenario(
            f"{family.value}: sharing needs equal keys, equal backends and distinct ports",
            FIXTURE_A,
            (
                Assign(s("default/s4", share="share", backend="backend"), shared),
                Assign(s("default/s3", share="share", backend="backend"), shared, R.PORT_TAKEN),
                Assign(
                    s("default/s3", share="othershare", port=ports("tcp/443")),
                    shared,
                    R.ADDRESS_TAKEN,
                ),
                Assign(
                    s("default/s3", share="share", backend="otherbackend", port=ports("tcp/443")),
                    shared,
                    R.ADDRESS_TAKEN,
                ),
                Assign(s("default/s3", port=ports("tcp/443")), shared, R.ADDRESS_TAKEN),
                Assign(
                    s("default/s3", share="share", backend="backend", port=ports("tcp/443")),
                    shared,
                ),
                Holds("default/s3", shared),
                Holds("default/s4", shared),
            ),
        ),
        Scenario(
            f"{family.value}: a sharer may change ports, not its key or backend",
            FIXTURE_A,
            (
                Assign(s("default/s4", share="share", backend="backend"), shared),
                Assign(
                    s("default/s3", share="share", backend="backend", port=ports("tcp/443")),
                    shared,
                ),
                Assign(
                    s("default/s3", share="share", backend="backend", port=ports("udp/53")), shared
                ),
                Assign(
                    s("default/s3", share="othershare", backend="backend", port=ports("udp/53")),
                    shared,
                    R.ADDRESS_TAKEN,
                ),
                Assign(
                    s("default/s3", share="share", backend="other", port=ports("udp/53")),
                    shared,
                    R.ADDRESS_TAKEN,
                ),
                # s4 may now take tcp/443, which s3 gave up.
                Assign(
                    s("default/s4", share="share", backend="backend", port=ports("tcp/443")),
                    shared,
                ),
                Unassign("default/s3"),
                # Sole user again: it may change its key.
                Assign(s("default/s4", share="new", backend="b2"), shared),
            ),
        ),
    ]
    return scenarios


def assign_a(key: str, text: str, expect: Expect | None = None, **kw: object) -> Assign:
    return Assign(svc(key, **kw), text, expect)  # type: ignore[arg-type]


CORE_SCENARIOS = [
    *assignment_scenarios(V4),
    *assignment_scenarios(V6),
    Scenario(
        "avoidBuggyIPs refuses .0 and .255 explicitly",
        FIXTURE_A,
        (
            assign_a("default/s1", "1.2.4.0", R.NOT_IN_ANY_POOL),
            assign_a("default/s1", "1.2.4.255", R.NOT_IN_ANY_POOL),
            assign_a("default/s1", "1.2.4.254"),
            # The rule is IPv4 only: 1000::4:0 and 1000::4:ff are fine.
            Assign(svc("default/s2", V6), "1000::4:0"),
            Assign(svc("default/s3", V6), "1000::4:ff"),
        ),
    ),
    Scenario(
        "dual-stack assignment needs one address of each family from one pool",
        FIXTURE_A,
        (
            Assign(svc("default/s1", DUAL, policy=REQUIRE), "1.2.3.4,1000::4"),
            Assign(svc("default/s2", DUAL, policy=REQUIRE), "1.2.4.5,1000::4", R.NOT_IN_ANY_POOL),
            Assign(svc("default/s2", DUAL, policy=REQUIRE), "1.2.3.4,1.2.3.5", R.BAD_ADDRESSES),
            Assign(svc("default/s2", DUAL, policy=REQUIRE), "1000::5,1000::4", R.BAD_ADDRESSES),
            Assign(
                svc("default/s2", DUAL, policy=REQUIRE),
                "1.2.3.5,1000::5,1.2.3.4",
                R.BAD_ADDRESSES,
            ),
            Assign(svc("default/s2", DUAL, policy=REQUIRE), "", R.BAD_ADDRESSES),
            Assign(svc("default/s2", DUAL, policy=REQUIRE), "1000::5,1.2.3.5"),
            Counts("test", (2, 2), (0, 0)),
        ),
    ),
    Scenario(
        "a namespace-restricted pool admits only its namespaces",
        FIXTURE_A,
        (
            assign_a("test-ns1/s1", "1.2.5.10"),
            assign_a("test-ns2/s2", "1.2.5.11", R.POOL_NOT_COMPATIBLE),
            assign_a("default/s3", "1.2.5.12", R.POOL_NOT_COMPATIBLE),
        ),
    ),
    Scenario(
        "a selector-restricted pool admits only matching services",
        FIXTURE_A,
        (
            assign_a("default/s1", "1.2.6.10", labels={"team": "metallb"}),
            assign_a("default/s2", "1.2.6.11", R.POOL_NOT_COMPATIBLE, labels={"team": "red"}),
            assign_a("default/s3", "1.2.6.12", R.POOL_NOT_COMPATIBLE),
        ),
    ),
    Scenario(
        "namespace and selector restrictions must both hold",
        FIXTURE_A,
        (
            assign_a("test-ns1/s1", "1.2.7.10", labels={"team": "metallb"}),
            assign_a("test-ns2/s2", "1.2.7.11", R.POOL_NOT_COMPATIBLE, labels={"team": "metallb"}),
            assign_a("test-ns1/s3", "1.2.7.12", R.POOL_NOT_COMPATIBLE, labels={"team": "red"}),
            assign_a("test-ns1/s4", "1.2.8.10", R.POOL_NOT_COMPATIBLE, labels={"foo": "bar"}),
            assign_a("test-ns2/s5", "1.2.8.10", labels={"foo": "bar"}),
        ),
    ),
    Scenario(
        "TestBuggyIPs: exactly the six non-buggy addresses, then exhaustion",
        (
            pool("a", "1.2.3.0/31"),
            pool("b", "1.2.3.254/31"),
            pool("c", "1.2.4.0/31", avoid_buggy_ips=True),
            pool("d", "1.2.4.254/31", avoid_buggy_ips=True),
        ),
        (
            Allocate(svc("default/s1"), "1.2.3.0", "a"),
            Allocate(svc("default/s2"), "1.2.3.1", "a"),
            Allocate(svc("default/s3"), "1.2.3.254", "b"),
            Allocate(svc("default/s4"), "1.2.3.255", "b"),
            Allocate(svc("default/s5"), "1.2.4.1", "c"),
            Allocate(svc("default/s6"), "1.2.4.254", "d"),
            Allocate(svc("default/s7"), R.POOL_EXHAUSTED),
            Counts("c", (1, 0), (0, 0)),
            Counts("d", (1, 0), (0, 0)),
        ),
    ),
    Scenario(
        "TestAutoAssign: autoAssign=false pools are skipped by automatic allocation only",
        (
            pool("test1", "1.2.3.4/31", "1000::4/127", auto_assign=False),
            pool("test2", "1.2.3.10/31", "1000::10/127"),
        ),
        (
            Allocate(svc("default/s1"), "1.2.3.10", "test2"),
            Allocate(svc("default/s2"), "1.2.3.11", "test2"),
            Allocate(svc("default/s3"), R.POOL_EXHAUSTED),
            Allocate(svc("default/s4", V6), "1000::10"),
            Allocate(svc("default/s5", V6), "1000::11"),
            Allocate(svc("default/s6", V6), R.POOL_EXHAUSTED),
            FromPool(svc("default/s3"), "test1", "1.2.3.4"),
            assign_a("default/s7", "1.2.3.5"),
            Holds("default/s7", "1.2.3.5", "test1"),
        ),
    ),
    Scenario(
        "TestAllocation: exhaustion, then a shareable address for share-keyed services",
        (
            pool("test1", "1.2.3.4/31", "1000::4/127"),
            pool("test2", "1.2.3.10/31", "1000::10/127"),
        ),
        (
            # Unrestricted pools are tried in name order: test1 first.
            Allocate(svc("default/s1"), "1.2.3.4", "test1"),
            Allocate(svc("default/s2"), "1.2.3.5", "test1"),
            Allocate(svc("default/s3"), "1.2.3.10", "test2"),
            Allocate(svc("default/s4"), "1.2.3.11", "test2"),
            Allocate(svc("default/s5"), R.POOL_EXHAUSTED),
            Allocate(svc("default/s6"), R.POOL_EXHAUSTED),
            Unassign("default/s1"),
            Allocate(svc("default/s5", share="share", port=ports("tcp/80")), "1.2.3.4"),
            Allocate(svc("default/s6"), R.POOL_EXHAUSTED),
            Allocate(svc("default/s6", share="share", port=ports("tcp/443")), "1.2.3.4"),
            # Same key but the port is taken on every shareable address.
            Allocate(svc("default/s7", share="share", port=ports("tcp/443")), R.POOL_EXHAUSTED),
            Counts("test1", (2, 0), (0, 2)),
            *(Unassign(f"default/s{i}") for i in (2, 3, 4, 5, 6)),
            Allocate(svc("default/d1", DUAL, policy=REQUIRE), "1.2.3.4,1000::4", "test1"),
            Allocate(svc("default/d2", DUAL, policy=REQUIRE), "1.2.3.5,1000::5", "test1"),
            Allocate(svc("default/d3", DUAL, policy=REQUIRE), "1.2.3.10,1000::10", "test2"),
            Allocate(svc("default/d4", DUAL, policy=REQUIRE), "1.2.3.11,1000::11", "test2"),
            Allocate(svc("default/d5", DUAL, policy=REQUIRE), R.POOL_EXHAUSTED),
        ),
    ),
    Scenario(
        "a compatible shared lower address is reused before a free higher one",
        (pool("p", "10.0.0.0/29"),),
        (
            Allocate(svc("default/a", share="k", port=ports("tcp/80")), "10.0.0.0"),
            Allocate(svc("default/b"), "10.0.0.1"),
            Allocate(svc("default/c", share="k", port=ports("tcp/443")), "10.0.0.0"),
            Allocate(svc("default/d", share="k", port=ports("tcp/80")), "10.0.0.2"),
            # tcp/443 is taken on a's address (by c), so e joins d's instead.
            Allocate(svc("default/e", share="k", port=ports("tcp/443")), "10.0.0.2"),
            Allocate(svc("default/f", share="k", port=ports("udp/53")), "10.0.0.0"),
            Allocate(svc("default/g", share="other", port=ports("udp/53")), "10.0.0.3"),
            Allocate(
                svc("default/h", share="k", backend="app=x", port=ports("udp/53")), "10.0.0.4"
            ),
            Allocate(
                svc("default/i", share="k", backend="app=x", port=ports("udp/54")), "10.0.0.4"
            ),
            Counts("p", (5, 0), (3, 0)),
        ),
    ),
    Scenario(
        "a shared address below the first free one is found among many port sets",
        (pool("p", "10.0.0.0/24"),),
        (
            Allocate(svc("default/s1", share="k", port=ports("tcp/1")), "10.0.0.0"),
            Allocate(svc("default/s2", share="k", port=ports("tcp/1")), "10.0.0.1"),
            Allocate(svc("default/s3", share="k", port=ports("tcp/1")), "10.0.0.2"),
            Allocate(svc("default/s4", share="k", port=ports("tcp/2")), "10.0.0.0"),
            Allocate(svc("default/s5", share="k", port=ports("tcp/2")), "10.0.0.1"),
            Allocate(svc("default/s6", share="k", port=ports("tcp/1", "tcp/3")), "10.0.0.3"),
            Allocate(svc("default/s7", share="k", port=ports("tcp/3")), "10.0.0.0"),
            Allocate(svc("default/s8", share="k", port=ports("tcp/2", "tcp/3")), "10.0.0.2"),
            Allocate(svc("default/s9", share="k", port=()), "10.0.0.0"),
        ),
    ),
    Scenario(
        "TestPoolAllocation: one named pool, ranges in order, whatever autoAssign",
        (
            pool("test", "1.2.3.4/31", "1.2.3.10/31", "1000::/127", "2000::/127"),
            pool("test2", "10.20.30.0/24", "3000::/120"),
            pool("v4only", "5.6.7.8/32", auto_assign=False),
            pool("dual", "6.6.6.0/31", "6000::/127"),
        ),
        (
            FromPool(svc("default/s1"), "test", "1.2.3.4"),
            FromPool(svc("default/s2"), "test", "1.2.3.5"),
            FromPool(svc("default/s3"), "test", "1.2.3.10"),
            FromPool(svc("default/s4"), "test", "1.2.3.11"),
            FromPool(svc("default/s5"), "test", R.POOL_EXHAUSTED),
            FromPool(svc("default/s5"), "nope", R.UNKNOWN_POOL),
            FromPool(svc("default/t1", V6), "test", "1000::"),
            FromPool(svc("default/t2", V6), "test", "1000::1"),
            FromPool(svc("default/t3", V6), "test", "2000::"),
            FromPool(svc("default/t4", V6), "test", "2000::1"),
            FromPool(svc("default/t5", V6), "test", R.POOL_EXHAUSTED),
            # s1 holds an IPv4 address; asking again as IPv6 is a family mismatch.
            FromPool(svc("default/s1", V6), "test", R.FAMILY_MISMATCH),
            FromPool(svc("default/s1"), "test", "1.2.3.4"),  # re-assertion
            FromPool(svc("default/t6", V6), "v4only", R.FAMILY_UNSUPPORTED),
            FromPool(svc("default/p1", DUAL, policy=PREFER), "v4only", "5.6.7.8"),
            FromPool(svc("default/p2", DUAL, policy=PREFER), "dual", "6.6.6.0,6000::"),
            FromPool(svc("default/p3", DUAL, policy=REQUIRE), "dual", "6.6.6.1,6000::1"),
            FromPool(svc("default/p4", DUAL, policy=REQUIRE), "dual", R.POOL_EXHAUSTED),
            FromPool(svc("default/p5", DUAL, policy=REQUIRE), "test2", "10.20.30.0,3000::"),
        ),
    ),
    Scenario(
        "PreferDualStack top-up comes from the same pool",
        (
            pool("v4", "10.0.0.0/31"),
            pool("both", "10.1.0.0/31", "fd00::/127"),
        ),
        (
            FromPool(svc("default/p", DUAL, policy=PREFER), "v4", "10.0.0.0"),
            AddFamily(svc("default/p", DUAL, policy=PREFER), R.FAMILY_UNSUPPORTED),
            AddFamily(svc("default/nobody", DUAL, policy=PREFER), R.NOT_ALLOCATED),
            SetPools(
                (pool("v4", "10.0.0.0/31", "fd01::/127"), pool("both", "10.1.0.0/31", "fd00::/127"))
            ),
            AddFamily(svc("default/p", DUAL, policy=PREFER), "10.0.0.0,fd01::"),
            Holds("default/p", "10.0.0.0,fd01::", "v4"),
        ),
    ),
    Scenario(
        "TestConfigReload: keep, shrink, evict, rename, split, avoidBuggyIPs",
        (pool("test", "1.2.3.0/30", "1000::/126"),),
        (
            Assign(svc("default/s1"), "1.2.3.0"),
            Assign(svc("default/s2", V6), "1000::"),
            SetPools((pool("test", "1.2.3.0/30", "1000::/126"),)),
            SetPools((pool("test", "1.2.3.0/24", "1000::/120"),)),
            SetPools((pool("test", "1.2.3.0/30", "1000::/126"),)),
            Holds("default/s1", "1.2.3.0", "test"),
            Holds("default/s2", "1000::", "test"),
            SetPools(
                (pool("test", "1.2.3.2/31", "1000::0/126"),), evicted=(("default/s1", "test"),)
            ),
            Holds("default/s1", None),
            Holds("default/s2", "1000::", "test"),
            Assign(svc("default/s1"), "1.2.3.0", R.NOT_IN_ANY_POOL),
            SetPools((pool("test", "1.2.3.0/30", "1000::/126"),)),
            Assign(svc("default/s1"), "1.2.3.0"),
            SetPools(
                (pool("test", "1.2.3.0/30", "1000::2/127"),), evicted=(("default/s2", "test"),)
            ),
            SetPools((pool("test", "1.2.3.0/30", "1000::/126"),)),
            Assign(svc("default/s2", V6), "1000::"),
            Counts("test", (1, 1), (3, 3)),
            SetPools(
                (pool("test2", "1.2.3.0/30", "1000::/126"),),
                moved=(("default/s1", "test", "test2"), ("default/s2", "test", "test2")),
            ),
            Counts("test2", (1, 1), (3, 3)),
            SetPools(
                (
                    pool("test", "1.2.3.0/31", "1000::2/127"),
                    pool("test2", "1.2.3.2/31", "1000::/127"),
                ),
                moved=(("default/s1", "test2", "test"),),
            ),
            Holds("default/s1", "1.2.3.0", "test"),
            Holds("default/s2", "1000::", "test2"),
            Counts("test", (1, 0), (1, 2)),
            Counts("test2", (0, 1), (2, 1)),
            SetPools(
                (pool("test2", "1.2.3.0/31", "1000::/127", avoid_buggy_ips=True),),
                evicted=(("default/s1", "test"),),
            ),
            Holds("default/s2", "1000::", "test2"),
            Counts("test2", (0, 1), (1, 1)),
        ),
    ),
    Scenario(
        "TestPoolMetrics: a shared address counts once until its last user leaves",
        (pool("test", "1.2.3.4/30", "1000::4/126"),),
        (
            Counts("test", (0, 0), (4, 4)),
            Assign(svc("default/s1", share="key", port=ports("tcp/80")), "1.2.3.4"),
            Assign(svc("default/s2", share="key", port=ports("tcp/443")), "1.2.3.4"),
            Assign(svc("default/s3", share="key", port=ports("tcp/23")), "1.2.3.4"),
            Counts("test", (1, 0), (3, 4)),
            Unassign("default/s1"),
            Unassign("default/s2"),
            Counts("test", (1, 0), (3, 4)),
            Unassign("default/s3"),
            Counts("test", (0, 0), (4, 4)),
        ),
    ),
    Scenario(
        "a portless sharer keeps the key on the address (MetalLB quirk not copied)",
        (pool("p", "10.0.0.0/32"),),
        (
            Assign(svc("default/a", share="k", port=()), "10.0.0.0"),
            Assign(svc("default/b", share="k", port=()), "10.0.0.0"),
            Unassign("default/a"),
            Assign(svc("default/c"), "10.0.0.0", R.ADDRESS_TAKEN),
            Allocate(svc("default/c"), R.POOL_EXHAUSTED),
            Allocate(svc("default/d", share="k", port=()), "10.0.0.0"),
        ),
    ),
]


@pytest.mark.parametrize("scenario", CORE_SCENARIOS, ids=lambda s: s.name)
def test_core(scenario: Scenario) -> None:
    run(scenario)


@pytest.mark.parametrize("scenario", CORE_SCENARIOS, ids=lambda s: s.name)
def test_core_is_independent_of_pool_order(scenario: Scenario) -> None:
    run(scenario, tuple(reversed(scenario.pools)))


# --- automatic pool choice ----------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    name: str
    pools: tuple[allocator.Pool, ...]
    service: allocator.ServiceRequest
    expect: Expect
    pool: str | None = None


NS1 = frozenset({"test-ns1"})
CHOICES = [
    Choice(
        "pinned by namespace beats unrestricted",
        (pool("free", "10.0.0.0/24"), pool("mine", "10.1.0.0/24", namespaces=NS1)),
        svc("test-ns1/a"),
        "10.1.0.0",
        "mine",
    ),
    Choice(
        "lower positive priority first",
        (
            pool("p10", "10.10.0.0/24", priority=10, namespaces=NS1),
            pool("p5", "10.5.0.0/24", priority=5, namespaces=NS1),
            pool("p20", "10.20.0.0/24", priority=20, namespaces=NS1),
        ),
        svc("test-ns1/a"),
        "10.5.0.0",
        "p5",
    ),
    Choice(
        "priority 0 comes after every positive priority",
        (
            pool("a-unset", "10.0.0.0/24", namespaces=NS1),
            pool("b-far", "10.99.0.0/24", priority=99, namespaces=NS1),
        ),
        svc("test-ns1/a"),
        "10.99.0.0",
        "b-far",
    ),
    Choice(
        "equal priority: by pool name",
        (
            pool("zeta", "10.2.0.0/24", priority=3, namespaces=NS1),
            pool("alpha", "10.1.0.0/24", priority=3, namespaces=NS1),
        ),
        svc("test-ns1/a"),
        "10.1.0.0",
        "alpha",
    ),
    Choice(
        "a pinned pool for another namespace is never used",
        (pool("theirs", "10.1.0.0/24", namespaces=frozenset({"x"})), pool("free", "10.0.0.0/24")),
        svc("test-ns1/a"),
        "10.0.0.0",
        "free",
    ),
    Choice(
        "a selector-pinned pool wins for labelled services",
        (
            pool("free", "10.0.0.0/24"),
            pool("team", "10.1.0.0/24", service_selectors=(sel(team="metallb"),)),
        ),
        svc("default/a", labels={"team": "metallb"}),
        "10.1.0.0",
        "team",
    ),
    Choice(
        "a pool with only a priority pins every service",
        (
            pool("free", "10.0.0.0/24"),
            pool("prio", "10.1.0.0/24", priority=1, has_service_allocation=True),
        ),
        svc("default/a"),
        "10.1.0.0",
        "prio",
    ),
    Choice(
        "a pinned pool with autoAssign=false is skipped",
        (
            pool("free", "10.0.0.0/24"),
            pool("mine", "10.1.0.0/24", namespaces=NS1, auto_assign=False),
        ),
        svc("test-ns1/a"),
        "10.0.0.0",
        "free",
    ),
    Choice(
        "a pinned pool without room falls back to unrestricted ones",
        (
            pool("free", "10.0.0.0/24"),
            pool("mine", "10.1.0.0/32", namespaces=NS1, avoid_buggy_ips=True),
        ),
        svc("test-ns1/a"),
        "10.0.0.0",
        "free",
    ),
    Choice(
        "restricted pools are never the unrestricted fallback",
        (pool("mine", "10.1.0.0/24", namespaces=NS1),),
        svc("default/a"),
        R.NO_POOL_ADMITS,
    ),
    Choice(
        "an empty resolved namespace set admits nobody (MetalLB quirk not copied)",
        (pool("nobody", "10.1.0.0/24", namespaces=frozenset()),),
        svc("default/a"),
        R.NO_POOL_ADMITS,
    ),
    Choice(
        "unrestricted pools in name order",
        (pool("b", "10.2.0.0/24"), pool("a", "10.1.0.0/24")),
        svc("default/a"),
        "10.1.0.0",
        "a",
    ),
    Choice(
        "ranges in spec order, not address order",
        (pool("p", "10.0.0.10/31", "10.0.0.0/31"),),
        svc("default/a"),
        "10.0.0.10",
    ),
    Choice(
        "a start-end range that is not a CIDR",
        (pool("p", "10.0.0.7-10.0.0.9"),),
        svc("default/a"),
        "10.0.0.7",
    ),
    Choice(
        "IPv4 service skips IPv6-only pools",
        (pool("a6", "fd00::/120"), pool("b4", "10.0.0.0/24")),
        svc("default/a"),
        "10.0.0.0",
        "b4",
    ),
    Choice(
        "no pool of the family",
        (pool("a6", "fd00::/120"),),
        svc("default/a"),
        R.FAMILY_UNSUPPORTED,
    ),
    Choice(
        "RequireDualStack needs one pool with both families",
        (pool("a4", "10.0.0.0/24"), pool("b6", "fd00::/120")),
        svc("default/a", DUAL, policy=REQUIRE),
        R.FAMILY_UNSUPPORTED,
    ),
    Choice(
        "PreferDualStack takes a dual pool over earlier single-family pools",
        (
            pool("a4", "10.0.0.0/24"),
            pool("b6", "fd00::/120"),
            pool("c", "10.9.0.0/24", "fd09::/120"),
        ),
        svc("default/a", DUAL, policy=PREFER),
        "10.9.0.0,fd09::",
        "c",
    ),
    Choice(
        "PreferDualStack without a dual pool: the primary family (IPv4 by default)",
        (pool("a6", "fd00::/120"), pool("b4", "10.0.0.0/24")),
        svc("default/a", DUAL, policy=PREFER),
        "10.0.0.0",
        "b4",
    ),
    Choice(
        "PreferDualStack without a dual pool: the primary family from ipFamilies[0]",
        (pool("a4", "10.0.0.0/24"), pool("b6", "fd00::/120")),
        svc("default/a", DUAL, policy=PREFER, primary=6),
        "fd00::",
        "b6",
    ),
    Choice(
        "PreferDualStack: the secondary family when the primary has no room",
        (pool("a4", "10.0.0.0/24", auto_assign=False), pool("b6", "fd00::/120")),
        svc("default/a", DUAL, policy=PREFER),
        "fd00::",
        "b6",
    ),
    Choice(
        "dual-stack result is [IPv4, IPv6] even when IPv6 is primary",
        (pool("c", "fd09::/120", "10.9.0.0/24"),),
        svc("default/a", DUAL, policy=REQUIRE, primary=6),
        "10.9.0.0,fd09::",
    ),
    Choice(
        "dual cluster IPs with SingleStack get nothing",
        (pool("c", "10.9.0.0/24", "fd09::/120"),),
        svc("default/a", DUAL, policy=SINGLE),
        R.FAMILY_UNSUPPORTED,
    ),
    Choice(
        "no cluster IPs",
        (pool("c", "10.9.0.0/24"),),
        allocator.ServiceRequest("default/a", "default", family=None),
        R.NO_CLUSTER_IPS,
    ),
    Choice(
        "a /8 is searched, not walked",
        (pool("big", "10.0.0.0/8"),),
        svc("default/a"),
        "10.0.0.0",
    ),
    Choice(
        "a /64 is searched, not walked",
        (pool("big", "fd00:1:2:3::/64"),),
        svc("default/a", V6),
        "fd00:1:2:3::",
    ),
    Choice(
        "avoidBuggyIPs starts a /16 at .1",
        (pool("p", "10.0.0.0/16", avoid_buggy_ips=True),),
        svc("default/a"),
        "10.0.0.1",
    ),
    Choice(
        "avoidBuggyIPs on a range that holds only buggy addresses",
        (pool("p", "10.0.0.255-10.0.1.0", avoid_buggy_ips=True),),
        svc("default/a"),
        R.POOL_EXHAUSTED,
    ),
]


@pytest.mark.parametrize("case", CHOICES, ids=lambda c: c.name)
def test_pool_choice(case: Choice) -> None:
    for pools in (case.pools, tuple(reversed(case.pools))):
        a = allocator.Allocator()
        a.set_pools(pools)
        result = a.allocate(case.service)
        check_result(result, case.expect, case.name)
        if case.pool is not None:
            assert isinstance(result, allocator.Allocation)
            assert result.pool == case.pool


def test_buggy_addresses_are_skipped_across_a_24_boundary() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "10.0.0.0/16", avoid_buggy_ips=True)])
    for last in range(1, 255):
        assert isinstance(
            a.assign(svc(f"default/s{last}"), ips(f"10.0.0.{last}")), allocator.Allocation
        )
    check_result(a.allocate(svc("default/next")), "10.0.1.1", "after a full /24")
    # Without avoidBuggyIPs the same layout yields 10.0.0.0 first, then .255.
    b = allocator.Allocator()
    b.set_pools([pool("p", "10.0.0.0/16")])
    for last in range(1, 255):
        assert isinstance(
            b.assign(svc(f"default/s{last}"), ips(f"10.0.0.{last}")), allocator.Allocation
        )
    check_result(b.allocate(svc("default/x")), "10.0.0.0", "plain")
    check_result(b.allocate(svc("default/y")), "10.0.0.255", "plain")
    check_result(b.allocate(svc("default/z")), "10.0.1.0", "plain")


def test_freed_hole_is_found_again_far_inside_a_huge_pool() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "10.0.0.0/8")])
    for i in range(300):
        assert isinstance(a.allocate(svc(f"default/s{i}")), allocator.Allocation)
    assert a.unassign("default/s150")
    check_result(a.allocate(svc("default/again")), "10.0.0.150", "hole")
    check_result(a.allocate(svc("default/after")), "10.0.1.44", "after the run")


def test_reasserting_updates_ports_and_keys() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "10.0.0.0/32")])
    check_result(a.allocate(svc("default/a", share="k", port=ports("tcp/80"))), "10.0.0.0", "a")
    # a re-asserts with tcp/443 instead: b may then take tcp/80 on the same address.
    check_result(a.allocate(svc("default/a", share="k", port=ports("tcp/443"))), "10.0.0.0", "a")
    check_result(a.allocate(svc("default/b", share="k", port=ports("tcp/80"))), "10.0.0.0", "b")
    assert a.allocation_key("default/a") == ("k", "")
    assert a.allocation_key("default/none") == ("", "")


def test_duplicate_pool_names_are_a_programming_error() -> None:
    a = allocator.Allocator()
    with pytest.raises(ValueError, match="duplicate"):
        a.set_pools([pool("p", "10.0.0.0/24"), pool("p", "10.1.0.0/24")])


def test_overlapping_pools_prefer_the_current_then_the_requested_pool() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("a", "10.0.0.0/24"), pool("b", "10.0.0.0/30", auto_assign=False)])
    check_result(a.assign(svc("default/x"), ips("10.0.0.1")), "10.0.0.1", "x")
    assert a.allocation("default/x") == allocator.Allocation("a", ips("10.0.0.1"))
    result = a.assign(svc("default/y", pool_name="b"), ips("10.0.0.2"))
    assert isinstance(result, allocator.Allocation) and result.pool == "b"
    # Re-asserting keeps the recorded pool even without the annotation.
    result = a.assign(svc("default/y"), ips("10.0.0.2"))
    assert isinstance(result, allocator.Allocation) and result.pool == "b"
    assert a.pool_for(ips("10.0.0.200")) == "a"
    assert a.pool_for(ips("10.0.1.0")) is None


def test_shareable_buggy_address_is_skipped_in_an_avoiding_pool() -> None:
    """Only overlapping pools (MetalLB's tests) can put a buggy address in use inside an
    avoidBuggyIPs pool; sharing must skip it there too."""
    a = allocator.Allocator()
    a.set_pools([pool("a", "10.0.0.0/31"), pool("b", "10.0.0.0/30", avoid_buggy_ips=True)])
    check_result(a.assign(svc("default/x", share="k"), ips("10.0.0.0")), "10.0.0.0", "x")
    assert a.allocation("default/x") == allocator.Allocation("a", ips("10.0.0.0"))
    sharer = svc("default/y", share="k", port=ports("tcp/443"))
    check_result(a.allocate_from_pool(sharer, "b"), "10.0.0.1", "y")
    check_result(
        a.allocate_from_pool(svc("default/z", share="k", port=ports("tcp/8")), "a"), "10.0.0.0", "z"
    )
    avoiding = a.pool("b")
    assert avoiding is not None
    assert not avoiding.contains(ipaddress.ip_address("10.0.0.0"))
    assert avoiding.contains(ipaddress.ip_address("10.0.0.2"))


def test_named_pool_refusals() -> None:
    a = allocator.Allocator()
    a.set_pools(
        [
            pool("dual", "10.0.0.0/32", "fd00::/128"),
            pool("mine", "10.1.0.0/24", namespaces=frozenset({"test-ns1"})),
        ]
    )
    check_result(a.allocate_from_pool(svc("default/a"), "mine"), R.POOL_NOT_COMPATIBLE, "ns")
    check_result(a.allocate_from_pool(svc("default/a", DUAL), "dual"), R.FAMILY_UNSUPPORTED, "ss")
    unknown = allocator.ServiceRequest(
        "default/u", "default", family=requests.ServiceFamily.UNKNOWN
    )
    check_result(a.allocate_from_pool(unknown, "dual"), R.UNKNOWN_CLUSTER_FAMILY, "unknown")
    check_result(a.allocate(unknown), R.UNKNOWN_CLUSTER_FAMILY, "unknown")
    check_result(
        a.allocate_from_pool(svc("default/p", DUAL, policy=PREFER), "dual"), "10.0.0.0,fd00::", "p"
    )
    result = a.allocate_from_pool(svc("default/q", DUAL, policy=PREFER), "dual")
    check_result(result, R.POOL_EXHAUSTED, "q")
    assert "IPv4 or IPv6" in str(result)


def test_allocations_are_listed_in_key_order() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "10.0.0.0/24")])
    for key in ("default/c", "default/a", "default/b"):
        a.allocate(svc(key))
    assert [k for k, _ in a.allocations()] == ["default/a", "default/b", "default/c"]
    assert a.counters("missing") is None
    assert [p.name for p in a.pools] == ["p"] and a.pool("p") is not None


# --- capacity (TestPoolCount) -------------------------------------------------------------------

CAPACITY = [
    # (ranges, avoidBuggyIPs, (capacity v4, capacity v6, total))
    (("1.2.3.0/24",), False, (256, 0, 256)),
    (("1.2.3.0/24", "2.3.4.128/25"), False, (384, 0, 384)),
    (("1.2.3.0/24", "2.3.4.128/25"), True, (381, 0, 381)),
    (("1.2.3.0/24", "2.3.4.128/25", "1000::/64"), True, (381, MAX, MAX)),
    (("1000::/64", "1.2.3.0/24"), False, (256, MAX, MAX)),
    (("1.2.3.0/31", "1000::/127"), True, (1, 2, 3)),
    (("1.2.3.254/31",), True, (1, 0, 1)),
    (("1.2.3.1/32",), True, (1, 0, 1)),
    (("10.0.0.0/8",), True, (2**24 - 2 * 2**16, 0, 2**24 - 2 * 2**16)),
    (("10.0.0.255-10.0.2.0",), True, (254, 0, 254)),
    (("10.0.0.3-10.0.0.9",), True, (7, 0, 7)),
    (("1000::/66",), False, (0, MAX, MAX)),  # 2**62 addresses: "never runs out"
    (("1000::/67",), False, (0, 2**61, 2**61)),
    (("1000::/67", "2000::/67", "3000::/67", "4000::/67", "5000::/67"), False, (0, MAX, MAX)),
    (("1000::1-1000::4:0:0:0",), False, (0, 4 * 2**48, 4 * 2**48)),
]


@pytest.mark.parametrize(("ranges", "avoid", "expect"), CAPACITY)
def test_capacity(ranges: tuple[str, ...], avoid: bool, expect: tuple[int, int, int]) -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", *ranges, avoid_buggy_ips=avoid)])
    counters = a.counters("p")
    assert counters is not None
    got = (counters.capacity_ipv4, counters.capacity_ipv6, counters.capacity)
    assert got == expect
    assert (counters.available_ipv4, counters.available_ipv6) == expect[:2]


def test_capacity_matches_a_recount_on_small_ranges() -> None:
    for first, last in itertools.product(range(0, 520, 37), range(0, 520, 41)):
        if first > last:
            continue
        r = addresses.AddressRange(4, first, last)
        expected = sum(1 for v in range(first, last + 1) if v % 256 not in (0, 255))
        assert allocator.range_capacity(r, True) == expected, (first, last)
        assert allocator.range_capacity(r, False) == last - first + 1


def test_huge_pool_available_counts_down_from_max() -> None:
    a = allocator.Allocator()
    a.set_pools([pool("p", "fd00::/64")])
    a.allocate(svc("default/a", V6))
    counters = a.counters("p")
    assert counters is not None
    assert counters.assigned_ipv6 == 1 and counters.available_ipv6 == MAX - 1
    assert counters.assigned == 1 and counters.capacity == MAX
