"""Which addresses each LoadBalancer Service gets, with MetalLB's semantics and no Kubernetes I/O.

MetalLB's allocator (`internal/allocator`) keeps its state in memory, rebuilt on restart from the
addresses already written in Service status. This module is that state, as plain data in and
plain data out: the shell turns Kubernetes objects into `Pool`s and `ServiceRequest`s, and
`controller.converging` (MetalLB's `convergeBalancer`) walks one Service through it.

What is kept from MetalLB, deliberately:
* inside a pool, the lowest usable address wins, ranges in `spec.addresses` order; an address that
  the Service may share (same non-empty sharing key, same backend key, no common port) counts as
  usable, so a compatible shared address is reused before a free higher one;
* pools restricted by namespace or Service labels ("pinned") are tried first, by priority (lower
  positive first, 0 last), then the unrestricted auto-assign pools;
* the dual-stack and PreferDualStack rules, the order of the convergence steps and its Events.

What differs, deliberately (MetalLB leaves these to Go map order or gets them wrong):
* ties are broken by pool name, so the same inputs always give the same result;
* a pool whose resolved namespace set is empty admits no namespace (MetalLB then admits every
  namespace to explicit requests, its `isPoolCompatibleWithService` quirk);
* an address keeps its sharing key while any Service uses it (MetalLB drops it when the remaining
  users have no ports, letting a non-sharing Service in);
* the PreferDualStack top-up runs only for Services whose cluster IPs are dual-stack and that did
  not ask for explicit addresses (MetalLB tops up in both cases and clears the extra address on
  the next pass, so the Service flaps);
* capacity saturates at 2**63-1 instead of overflowing when a huge IPv6 range is not the last one.

Cost: nothing enumerates a pool. The first free address of a range is a predecessor search over
runs of used addresses (`freelist.RunSet`); avoidBuggyIPs pools search a second run set kept in a
coordinate space without the .0/.255 addresses, so skipping them is free too. Shareable addresses
are indexed by (sharing key, backend key) and then by the set of ports in use on them, so a search
costs O(s log n) where s is the number of distinct port sets among addresses with that key
(typically one or two), not a walk over every shared address.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from controller import freelist, requests
from ironlb import addresses, selectors

Port = tuple[str, int]  # (protocol, service port), e.g. ("TCP", 80)
Key = tuple[str, str]  # (sharing key, backend key)
Addr = tuple[addresses.Family, int]  # an address as (version, integer), the internal currency

MAX_INT64 = 2**63 - 1
# MetalLB reports any IPv6 CIDR of 2**62 addresses or more as MaxInt64 ("will never run out").
HUGE_BLOCK = 2**62


@dataclass(frozen=True, slots=True)
class Pool:
    """One IPAddressPool, already validated and with its namespace selectors resolved."""

    name: str
    ranges: tuple[addresses.AddressRange, ...]  # in spec.addresses order
    auto_assign: bool = True
    avoid_buggy_ips: bool = False
    priority: int = 0  # spec.serviceAllocation.priority; 0 = unset = after every positive one
    # Namespaces from spec.serviceAllocation.namespaces plus those matching namespaceSelectors.
    # None: no namespace restriction. An empty set: restricted, and nothing matches (yet).
    namespaces: frozenset[str] | None = None
    service_selectors: tuple[selectors.LabelSelector, ...] = ()  # OR-ed
    has_service_allocation: bool = False

    @property
    def restricted(self) -> bool:
        """Has spec.serviceAllocation: it is "pinned" and never in the unrestricted fallback."""
        return (
            self.has_service_allocation
            or self.namespaces is not None
            or bool(self.service_selectors)
        )

    def admits(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """MetalLB's isPoolCompatibleWithService, enforced on every assignment path."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return not self.service_selectors or any(s.matches(labels) for s in self.service_selectors)

    def has_family(self, version: addresses.Family) -> bool:
        return any(r.version == version for r in self.ranges)

    def contains(self, ip: addresses.IPAddress) -> bool:
        """Whether `ip` may be handed out from this pool (inside it and, if asked, not buggy)."""
        if self.avoid_buggy_ips and ip.version == 4 and is_buggy(int(ip)):
            return False
        return any(ip in r for r in self.ranges)


@dataclass(frozen=True, slots=True)
class ServiceRequest:
    """What the allocator needs to know about one Service, taken from its spec and status."""

    key: str  # "<namespace>/<name>"
    namespace: str
    labels: tuple[tuple[str, str], ...] = ()
    # From spec.clusterIPs; None when the Service has none (not allocatable).
    family: requests.ServiceFamily | None = requests.ServiceFamily.IPV4
    primary_family: addresses.Family = 4  # spec.ipFamilies[0]
    policy: requests.FamilyPolicy = requests.FamilyPolicy.SINGLE_STACK
    requested: requests.RequestedIPs = requests.NOTHING_REQUESTED
    requested_pool: str | None = None
    sharing_key: str | None = None  # None when the annotation is absent
    backend_key: str = ""
    ports: tuple[Port, ...] = ()
    current_ips: tuple[addresses.IPAddress, ...] = ()  # status.loadBalancer.ingress[*].ip
    load_balancer: bool = True  # spec.type == LoadBalancer

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def key_pair(self) -> Key:
        return (self.sharing_key or "", self.backend_key)

    def admitted_by(self, pool: Pool) -> bool:
        return pool.admits(self.namespace, self.label_map)


def labels_of(mapping: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((mapping or {}).items()))


@dataclass(frozen=True, slots=True)
class Allocation:
    pool: str
    ips: tuple[addresses.IPAddress, ...]


class Reason(enum.Enum):
    """Why an assignment or allocation was refused; the message says it for a person."""

    NO_POOLS = "no-pools"
    NO_CLUSTER_IPS = "no-cluster-ips"
    NOT_ENOUGH_CLUSTER_IPS = "not-enough-cluster-ips"
    UNKNOWN_CLUSTER_FAMILY = "unknown-cluster-family"
    INVALID_REQUEST = "invalid-request"  # unparsable annotation, both annotation and spec, ...
    BAD_ADDRESSES = "bad-addresses"  # none, more than two, or two of one family
    FAMILY_MISMATCH = "family-mismatch"  # requested or held addresses vs the Service's family
    NOT_IN_ANY_POOL = "not-in-any-pool"
    UNKNOWN_POOL = "unknown-pool"
    POOL_NOT_COMPATIBLE = "pool-not-compatible"  # the pool does not admit this Service
    WRONG_POOL = "wrong-pool"  # requested addresses outside the requested pool
    ADDRESS_TAKEN = "address-taken"  # in use by a Service it may not be shared with
    PORT_TAKEN = "port-taken"  # shareable, but a port is already used there
    NO_POOL_ADMITS = "no-pool-admits"  # no auto-assign pool admits the Service
    FAMILY_UNSUPPORTED = "family-unsupported"  # no candidate pool has the family needed
    POOL_EXHAUSTED = "pool-exhausted"
    NOT_ALLOCATED = "not-allocated"


@dataclass(frozen=True, slots=True)
class AllocError:
    reason: Reason
    message: str

    def __str__(self) -> str:
        return self.message


Result = Allocation | AllocError


@dataclass(frozen=True, slots=True)
class PoolsChange:
    """What `set_pools` did to existing allocations."""

    moved: tuple[tuple[str, str, str], ...] = ()  # (service, old pool, new pool): re-homed
    evicted: tuple[tuple[str, str], ...] = ()  # (service, old pool): no pool holds its IPs


@dataclass(frozen=True, slots=True)
class PoolCounters:
    """IPAddressPool status and the metallb_allocator_* gauges; shared addresses count once."""

    assigned_ipv4: int
    assigned_ipv6: int
    available_ipv4: int
    available_ipv6: int
    capacity_ipv4: int
    capacity_ipv6: int

    @property
    def assigned(self) -> int:
        return self.assigned_ipv4 + self.assigned_ipv6

    @property
    def capacity(self) -> int:
        return min(MAX_INT64, self.capacity_ipv4 + self.capacity_ipv6)


# --- addresses -----------------------------------------------------------------------------------


def is_buggy(value: int) -> bool:
    """IPv4 x.y.z.0 and x.y.z.255 confuse smurf protection in some CPE firmware."""
    return (value & 0xFF) in (0, 255)


# From a buggy address to the nearest non-buggy one above (.0 -> .1, .255 -> next .1) or below.
_SKIP_UP = {0: 1, 255: 2}
_SKIP_DOWN = {255: 1, 0: 2}


def _compress(value: int) -> int:
    """Index of a non-buggy IPv4 address among non-buggy addresses (254 per /24)."""
    return (value >> 8) * 254 + (value & 0xFF) - 1


def _decompress(index: int) -> int:
    block, offset = divmod(index, 254)
    return (block << 8) | (offset + 1)


def _ip(addr: Addr) -> addresses.IPAddress:
    version, value = addr
    return ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)


def _addr(ip: addresses.IPAddress) -> Addr:
    return (4 if ip.version == 4 else 6, int(ip))


def _family_name(version: int) -> str:
    return "IPv4" if version == 4 else "IPv6"


def _buggy_up_to(n: int) -> int:
    """How many integers in [0, n] end in .0 or .255."""
    if n < 0:
        return 0
    return n // 256 + 1 + (n + 1) // 256


def range_capacity(r: addresses.AddressRange, avoid_buggy_ips: bool) -> int:
    """Usable addresses in a range, in closed form (MetalLB's poolCount, without overflow)."""
    if r.version == 6:
        first_block = -(-r.first // HUGE_BLOCK)
        if (first_block + 1) * HUGE_BLOCK - 1 <= r.last:
            return MAX_INT64
        return min(MAX_INT64, r.size)
    size = r.size
    if avoid_buggy_ips:
        size -= _buggy_up_to(r.last) - _buggy_up_to(r.first - 1)
    return size


def pool_capacity(pool: Pool) -> tuple[int, int]:
    """(IPv4, IPv6) capacity, each capped at 2**63-1."""
    v4 = sum(range_capacity(r, pool.avoid_buggy_ips) for r in pool.ranges if r.version == 4)
    v6 = sum(range_capacity(r, pool.avoid_buggy_ips) for r in pool.ranges if r.version == 6)
    return min(MAX_INT64, v4), min(MAX_INT64, v6)


# --- per-family state ----------------------------------------------------------------------------


class _Use:
    """One address in use: by whom, under which key, with which ports."""

    __slots__ = ("key", "ports", "users")

    def __init__(self, key: Key) -> None:
        self.key = key  # every user has this key (the sharing rule guarantees it)
        self.users: dict[str, frozenset[Port]] = {}
        self.ports: dict[Port, str] = {}


class _Family:
    """The addresses in use of one IP family, indexed for the two searches allocation needs."""

    def __init__(self, version: addresses.Family) -> None:
        self.version = version
        self.used = freelist.RunSet()
        # The used non-buggy IPv4 addresses in compressed coordinates, for avoidBuggyIPs pools.
        self.unbuggy = freelist.RunSet()
        self.uses: dict[int, _Use] = {}
        # (sharing, backend) -> ports in use on the address -> addresses with exactly those.
        self.shared: dict[Key, dict[frozenset[Port], freelist.SortedInts]] = {}

    def _index(self, value: int, use: _Use) -> None:
        if use.key[0]:
            groups = self.shared.setdefault(use.key, {})
            groups.setdefault(frozenset(use.ports), freelist.SortedInts()).add(value)

    def _unindex(self, value: int, use: _Use) -> None:
        if not use.key[0]:
            return
        groups = self.shared[use.key]
        signature = frozenset(use.ports)
        members = groups[signature]
        members.discard(value)
        if not members:
            del groups[signature]
            if not groups:
                del self.shared[use.key]

    def join(self, value: int, service: str, key: Key, ports: frozenset[Port]) -> None:
        use = self.uses.get(value)
        if use is None:
            use = self.uses[value] = _Use(key)
            self.used.add(value)
            if self.version == 4 and not is_buggy(value):
                self.unbuggy.add(_compress(value))
        else:
            self._unindex(value, use)
        use.users[service] = ports
        for port in ports:
            use.ports[port] = service
        self._index(value, use)

    def leave(self, value: int, service: str) -> None:
        use = self.uses[value]
        self._unindex(value, use)
        for port in use.users.pop(service):
            del use.ports[port]
        if use.users:
            self._index(value, use)
            return
        del self.uses[value]
        self.used.remove(value)
        if self.version == 4 and not is_buggy(value):
            self.unbuggy.remove(_compress(value))

    def first_free(self, r: addresses.AddressRange, avoid_buggy_ips: bool) -> int | None:
        """The lowest unused address of `r`, O(log n)."""
        if not (avoid_buggy_ips and self.version == 4):
            value = self.used.first_absent(r.first)
            return value if value <= r.last else None
        lo = r.first + _SKIP_UP.get(r.first & 0xFF, 0)
        hi = r.last - _SKIP_DOWN.get(r.last & 0xFF, 0)
        if lo > hi:
            return None
        index = self.unbuggy.first_absent(_compress(lo))
        return _decompress(index) if index <= _compress(hi) else None

    def first_shareable(
        self,
        r: addresses.AddressRange,
        avoid_buggy_ips: bool,
        key: Key,
        ports: frozenset[Port],
        below: int | None,
    ) -> int | None:
        """The lowest address of `r` below `below` whose users would share it with a Service
        holding `key` and `ports`: same key, and no port of `ports` in use there."""
        best = below
        found = None
        for signature, members in self.shared.get(key, {}).items():
            if not signature.isdisjoint(ports):
                continue
            value = members.ceil(r.first)
            while value is not None and value <= r.last and (best is None or value < best):
                if avoid_buggy_ips and self.version == 4 and is_buggy(value):
                    value = members.ceil(value + 1)
                    continue
                best = found = value
                break
        return found


class _Lookup:
    """Which pools contain an address: elementary segments between range boundaries.

    Validated configurations have no overlapping ranges, but MetalLB's own tests use overlapping
    pools, so each segment lists every pool covering it (in name order).
    """

    def __init__(self, pools: Sequence[Pool], version: addresses.Family) -> None:
        ranges = [(r, p.name) for p in pools for r in p.ranges if r.version == version]
        self.points = sorted({r.first for r, _ in ranges} | {r.last + 1 for r, _ in ranges})
        self.covers: list[tuple[str, ...]] = []
        for point in self.points:
            names = dict.fromkeys(n for r, n in ranges if r.first <= point <= r.last)
            self.covers.append(tuple(names))

    def pools_at(self, value: int) -> tuple[str, ...]:
        i = bisect.bisect_right(self.points, value) - 1
        return self.covers[i] if i >= 0 else ()


@dataclass(frozen=True, slots=True)
class _Held:
    pool: str
    addrs: tuple[Addr, ...]
    ports: frozenset[Port]
    key: Key

    @property
    def ips(self) -> tuple[addresses.IPAddress, ...]:
        return tuple(_ip(a) for a in self.addrs)


def _priority_order(pool: Pool) -> tuple[float, str]:
    return (pool.priority if pool.priority > 0 else float("inf"), pool.name)


# --- the allocator -------------------------------------------------------------------------------


class Allocator:
    """In-memory assignment state: which Service holds which addresses from which pool."""

    def __init__(self) -> None:
        self._pools: dict[str, Pool] = {}
        self._lookup = {4: _Lookup((), 4), 6: _Lookup((), 6)}
        self._families: dict[int, _Family] = {4: _Family(4), 6: _Family(6)}
        self._held: dict[str, _Held] = {}
        # pool -> version -> address -> number of Services holding it from that pool
        self._in_use: dict[str, dict[int, dict[int, int]]] = {}
        self._capacity: dict[str, tuple[int, int]] = {}

    # -- queries --

    @property
    def pools(self) -> tuple[Pool, ...]:
        return tuple(self._pools.values())

    def pool(self, name: str) -> Pool | None:
        return self._pools.get(name)

    def allocation(self, service: str) -> Allocation | None:
        held = self._held.get(service)
        return None if held is None else Allocation(held.pool, held.ips)

    def allocations(self) -> Iterator[tuple[str, Allocation]]:
        for service in sorted(self._held):
            yield service, Allocation(self._held[service].pool, self._held[service].ips)

    def allocation_key(self, service: str) -> Key:
        """The (sharing, backend) key held; a change means other Services may now fit."""
        held = self._held.get(service)
        return ("", "") if held is None else held.key

    def pool_for(self, ips: Sequence[addresses.IPAddress]) -> str | None:
        """The pool that contains all of `ips` (honouring avoidBuggyIPs), if any."""
        return self._home([_addr(ip) for ip in ips], ())

    def counters(self, pool: str) -> PoolCounters | None:
        if pool not in self._pools:
            return None
        cap4, cap6 = self._capacity[pool]
        in_use = self._in_use[pool]
        used4, used6 = len(in_use[4]), len(in_use[6])
        return PoolCounters(used4, used6, cap4 - used4, cap6 - used6, cap4, cap6)

    # -- configuration --

    def set_pools(self, pools: Iterable[Pool]) -> PoolsChange:
        """Replace the pools; re-home allocations whose addresses moved to another pool and
        evict those no pool contains any more (their Services get new addresses on converge)."""
        by_name: dict[str, Pool] = {}
        for pool in pools:
            if pool.name in by_name:
                raise ValueError(f"duplicate pool name {pool.name!r}")
            by_name[pool.name] = pool
        self._pools = {name: by_name[name] for name in sorted(by_name)}
        ordered = tuple(self._pools.values())
        self._lookup = {4: _Lookup(ordered, 4), 6: _Lookup(ordered, 6)}
        self._capacity = {p.name: pool_capacity(p) for p in ordered}
        for name in self._pools:
            self._in_use.setdefault(name, {4: {}, 6: {}})
        moved: list[tuple[str, str, str]] = []
        evicted: list[tuple[str, str]] = []
        for service in sorted(self._held):
            held = self._held[service]
            home = self._home(held.addrs, (held.pool,))
            if home is None:
                self._release(service)
                evicted.append((service, held.pool))
            elif home != held.pool:
                self._count(held.pool, held.addrs, -1)
                self._held[service] = dataclasses.replace(held, pool=home)
                self._count(home, held.addrs, +1)
                moved.append((service, held.pool, home))
        for name in [n for n in self._in_use if n not in self._pools]:
            del self._in_use[name]
        return PoolsChange(tuple(moved), tuple(evicted))

    # -- assignment --

    def assign(self, service: ServiceRequest, ips: Sequence[addresses.IPAddress]) -> Result:
        """Give `service` exactly `ips` (an explicit request, or re-asserting its status)."""
        if not ips or len(ips) > 2:
            what = (
                "no addresses" if not ips else f"more than two addresses {requests.go_quoted(ips)}"
            )
            return AllocError(Reason.BAD_ADDRESSES, what)
        if len(ips) == 2 and ips[0].version == ips[1].version:
            return AllocError(Reason.BAD_ADDRESSES, f'"{ips[0]}" "{ips[1]}" has the same family')
        addrs = tuple(_addr(ip) for ip in ips)
        held = self._held.get(service.key)
        # Only overlapping pools (MetalLB's tests) give a choice: the pool asked for, else the
        # one already recorded, so that re-asserting never moves a Service between pools.
        prefer = (service.requested_pool, held.pool if held else None)
        home = self._home(addrs, prefer, service)
        if home is None:
            return AllocError(Reason.NOT_IN_ANY_POOL, self._not_in_pool_message(ips))
        pool = self._pools[home]
        if not service.admitted_by(pool):
            return AllocError(
                Reason.POOL_NOT_COMPATIBLE, f"pool {home} not compatible for ip assignment"
            )
        ports = frozenset(service.ports)
        for addr in addrs:
            problem = self._sharing_problem(addr, service.key, service.key_pair, ports)
            if problem is not None:
                return problem
        self._hold(service.key, _Held(home, addrs, ports, service.key_pair))
        return Allocation(home, tuple(ips))

    def allocate(self, service: ServiceRequest) -> Result:
        """Automatic allocation: pinned pools by priority, then unrestricted auto-assign pools."""
        held = self._held.get(service.key)
        if held is not None:
            return self.assign(service, held.ips)
        problem = self._family_problem(service)
        if problem is not None:
            return problem
        pinned = sorted(
            (
                p
                for p in self._pools.values()
                if p.auto_assign and p.restricted and service.admitted_by(p)
            ),
            key=_priority_order,
        )
        unpinned = [p for p in self._pools.values() if p.auto_assign and not p.restricted]
        for candidates in (pinned, unpinned):
            found = self._best(candidates, service)
            if found is not None:
                pool, addrs = found
                self._hold(service.key, _Held(pool.name, addrs, *self._terms(service)))
                return Allocation(pool.name, tuple(_ip(a) for a in addrs))
        candidates = pinned + unpinned
        if not candidates:
            return AllocError(
                Reason.NO_POOL_ADMITS,
                f"no available IPs: no auto-assign address pool admits {service.key}",
            )
        if not any(self._could_serve(p, service) for p in candidates):
            return AllocError(
                Reason.FAMILY_UNSUPPORTED,
                f"no available IPs: no address pool for {service.key} has "
                f"{self._family_wanted(service)} addresses",
            )
        names = ", ".join(p.name for p in candidates)
        return AllocError(
            Reason.POOL_EXHAUSTED, f"no available IPs: every candidate pool is full ({names})"
        )

    def allocate_from_pool(self, service: ServiceRequest, pool_name: str) -> Result:
        """`metallb.io/address-pool`: only that pool, whatever its autoAssign."""
        held = self._held.get(service.key)
        if held is not None:
            held_family, _ = requests.family_of(held.ips)
            prefer = service.policy is requests.FamilyPolicy.PREFER_DUAL_STACK
            if not prefer and held_family is not service.family:
                return AllocError(
                    Reason.FAMILY_MISMATCH,
                    f"IP for wrong family assigned alloc {held_family.value} service family "
                    f"{service.family.value if service.family else 'none'}",
                )
            return self.assign(service, held.ips)
        pool = self._pools.get(pool_name)
        if pool is None:
            return AllocError(Reason.UNKNOWN_POOL, f'unknown pool "{pool_name}"')
        if not service.admitted_by(pool):
            return AllocError(
                Reason.POOL_NOT_COMPATIBLE, f"pool {pool_name} not compatible for ip assignment"
            )
        problem = self._family_problem(service)
        if problem is not None:
            return problem
        found = self._best([pool], service)
        if found is None:
            if not self._could_serve(pool, service):
                return AllocError(
                    Reason.FAMILY_UNSUPPORTED,
                    f'no available IPs in pool "{pool_name}": it has no '
                    f"{self._family_wanted(service)} addresses",
                )
            return AllocError(
                Reason.POOL_EXHAUSTED,
                f'no available IPs in pool "{pool_name}" for {self._family_wanted(service)}',
            )
        _, addrs = found
        self._hold(service.key, _Held(pool_name, addrs, *self._terms(service)))
        return Allocation(pool_name, tuple(_ip(a) for a in addrs))

    def allocate_additional_family(self, service: ServiceRequest) -> Result:
        """PreferDualStack with one address: add the other family from the same pool."""
        held = self._held.get(service.key)
        if held is None or len(held.addrs) != 1:
            return AllocError(Reason.NOT_ALLOCATED, f"{service.key} does not hold exactly one IP")
        (existing,) = held.addrs
        missing: addresses.Family = 6 if existing[0] == 4 else 4
        pool = self._pools.get(held.pool)
        if pool is None:
            return AllocError(Reason.UNKNOWN_POOL, f'unknown pool "{held.pool}"')
        found = self._first_in_pool(pool, missing, service)
        if found is None:
            return AllocError(
                Reason.POOL_EXHAUSTED if pool.has_family(missing) else Reason.FAMILY_UNSUPPORTED,
                f"no available IPs in pool {pool.name} for {_family_name(missing)} IPFamily",
            )
        return self.assign(service, (_ip(existing), _ip((missing, found))))

    def unassign(self, service: str) -> bool:
        """Free whatever `service` holds; True if it held something."""
        return self._release(service) is not None

    # -- internals --

    @staticmethod
    def _terms(service: ServiceRequest) -> tuple[frozenset[Port], Key]:
        return frozenset(service.ports), service.key_pair

    def _hold(self, service: str, held: _Held) -> None:
        self._release(service)
        self._held[service] = held
        for version, value in held.addrs:
            self._families[version].join(value, service, held.key, held.ports)
        self._count(held.pool, held.addrs, +1)

    def _release(self, service: str) -> _Held | None:
        held = self._held.pop(service, None)
        if held is None:
            return None
        for version, value in held.addrs:
            self._families[version].leave(value, service)
        self._count(held.pool, held.addrs, -1)
        return held

    def _count(self, pool: str, addrs: Iterable[Addr], delta: int) -> None:
        in_use = self._in_use.setdefault(pool, {4: {}, 6: {}})
        for version, value in addrs:
            counts = in_use[version]
            n = counts.get(value, 0) + delta
            if n:
                counts[value] = n
            else:
                del counts[value]

    def _home(
        self,
        addrs: Sequence[Addr],
        prefer: Sequence[str | None],
        service: ServiceRequest | None = None,
    ) -> str | None:
        """The pool to record for `addrs`: one containing them all, preferring the named ones,
        then one that admits `service`, then the first by name."""
        homes: list[str] | None = None
        for version, value in addrs:
            here = [
                n
                for n in self._lookup[version].pools_at(value)
                if not (version == 4 and self._pools[n].avoid_buggy_ips and is_buggy(value))
            ]
            homes = here if homes is None else [n for n in homes if n in here]
        if not homes:
            return None
        for name in prefer:
            if name in homes:
                return name
        if service is not None:
            for name in homes:
                if service.admitted_by(self._pools[name]):
                    return name
        return homes[0]

    def _not_in_pool_message(self, ips: Sequence[addresses.IPAddress]) -> str:
        message = f"{requests.go_quoted(ips)} is not allowed in config"
        avoiding = [
            p.name
            for p in self._pools.values()
            if p.avoid_buggy_ips and any(ip in r for ip in ips for r in p.ranges)
        ]
        if avoiding:
            message += f" (pool {avoiding[0]} avoids addresses ending in .0 and .255)"
        return message

    def _sharing_problem(
        self, addr: Addr, service: str, key: Key, ports: frozenset[Port]
    ) -> AllocError | None:
        """MetalLB's checkSharing: may `service` use `addr` next to its current users?"""
        version, value = addr
        use = self._families[version].uses.get(value)
        if use is None:
            return None
        others = sorted(u for u in use.users if u != service)
        if not others:
            return None  # the sole user may change its key and ports in place
        ip = _ip(addr)
        why = _key_mismatch(use.key, key)
        if why is not None:
            return AllocError(
                Reason.ADDRESS_TAKEN, f"{ip} is already in use by {', '.join(others)}: {why}"
            )
        for port in sorted(ports):
            holder = use.ports.get(port)
            if holder is not None and holder != service:
                return AllocError(
                    Reason.PORT_TAKEN,
                    f'port {port[0]}/{port[1]} is already in use on "{ip}" by {holder}',
                )
        return None

    def _family_problem(self, service: ServiceRequest) -> AllocError | None:
        family = service.family
        if family is None:
            return AllocError(Reason.NO_CLUSTER_IPS, "service has no cluster IPs")
        if family is requests.ServiceFamily.UNKNOWN:
            return AllocError(
                Reason.UNKNOWN_CLUSTER_FAMILY, "cannot tell the IP family of the cluster IPs"
            )
        if (
            family is requests.ServiceFamily.DUAL
            and service.policy is requests.FamilyPolicy.SINGLE_STACK
        ):
            return AllocError(
                Reason.FAMILY_UNSUPPORTED,
                "no available IPs: cluster IPs of both families with ipFamilyPolicy SingleStack",
            )
        return None

    @staticmethod
    def _family_wanted(service: ServiceRequest) -> str:
        if service.family is requests.ServiceFamily.IPV4:
            return "IPv4"
        if service.family is requests.ServiceFamily.IPV6:
            return "IPv6"
        if service.policy is requests.FamilyPolicy.REQUIRE_DUAL_STACK:
            return "IPv4 and IPv6"
        return "IPv4 or IPv6"

    @staticmethod
    def _could_serve(pool: Pool, service: ServiceRequest) -> bool:
        """Whether `pool` has the families `service` needs, were it empty."""
        if service.family is requests.ServiceFamily.IPV4:
            return pool.has_family(4)
        if service.family is requests.ServiceFamily.IPV6:
            return pool.has_family(6)
        if service.policy is requests.FamilyPolicy.REQUIRE_DUAL_STACK:
            return pool.has_family(4) and pool.has_family(6)
        return pool.has_family(4) or pool.has_family(6)

    def _first_in_pool(
        self, pool: Pool, version: addresses.Family, service: ServiceRequest
    ) -> int | None:
        """MetalLB's getIPFromCIDR over the pool's ranges in order: the first range that has a
        free or shareable address gives its lowest one. Callers search only families in which
        the Service holds nothing (holders re-assert instead), so its own addresses never count."""
        family = self._families[version]
        key = service.key_pair
        ports = frozenset(service.ports)
        avoid = pool.avoid_buggy_ips
        for r in pool.ranges:
            if r.version != version:
                continue
            best = family.first_free(r, avoid)
            if key[0]:
                shared = family.first_shareable(r, avoid, key, ports, best)
                if shared is not None:
                    best = shared
            if best is not None:
                return best
        return None

    def _best(
        self, pools: Sequence[Pool], service: ServiceRequest
    ) -> tuple[Pool, tuple[Addr, ...]] | None:
        """MetalLB's findBestPoolForService + selectIPsForFamilyAndPolicy over ordered pools."""
        family = service.family
        if family is requests.ServiceFamily.IPV4 or family is requests.ServiceFamily.IPV6:
            version: addresses.Family = 4 if family is requests.ServiceFamily.IPV4 else 6
            for pool in pools:
                found = self._first_in_pool(pool, version, service)
                if found is not None:
                    return pool, ((version, found),)
            return None
        prefer = service.policy is requests.FamilyPolicy.PREFER_DUAL_STACK
        primary: addresses.Family = service.primary_family
        secondary: addresses.Family = 4 if primary == 6 else 6
        fallback: dict[int, tuple[Pool, tuple[Addr, ...]]] = {}
        for pool in pools:
            v4 = self._first_in_pool(pool, 4, service)
            v6 = self._first_in_pool(pool, 6, service)
            if v4 is not None and v6 is not None:
                return pool, ((4, v4), (6, v6))  # always [IPv4, IPv6]
            if not prefer:
                continue
            for version, value in ((4, v4), (6, v6)):
                if value is not None and version not in fallback:
                    fallback[version] = (pool, ((version, value),))
        return fallback.get(primary) or fallback.get(secondary)


def _key_mismatch(existing: Key, new: Key) -> str | None:
    """MetalLB's sharingOK, as the reason sharing is refused."""
    if not existing[0]:
        return "existing service does not allow sharing"
    if not new[0]:
        return "new service does not allow sharing"
    if existing[0] != new[0]:
        return f'sharing key "{new[0]}" does not match existing sharing key "{existing[0]}"'
    if existing[1] != new[1]:
        return f'backend key "{new[1]}" does not match existing backend key "{existing[1]}"'
    return None
