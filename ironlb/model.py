"""The metallb.io resources as typed, immutable values.

Everything downstream of the API (allocator, speaker, webhook) reads these instead of raw dicts, so
a field's meaning and default are decided once, here and in `ironlb.parsing`. Field names are
MetalLB's JSON names in snake_case (`autoAssign` -> `auto_assign`, `peerASN` -> `peer_asn`,
`vrf` -> `vrf`); defaults are MetalLB's, applied at parse time so that no consumer re-derives them.
Values are frozen dataclasses holding tuples, so a whole `Config` can be compared with `==` to
decide whether anything changed, and shared across tasks without copying.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NewType

# Aliased: `addresses` is also the name of an IPAddressPool field.
from ironlb import addresses as addrs
from ironlb import selectors

PoolName = NewType("PoolName", str)
L2AdvertisementName = NewType("L2AdvertisementName", str)
BGPAdvertisementName = NewType("BGPAdvertisementName", str)
PeerName = NewType("PeerName", str)
BFDProfileName = NewType("BFDProfileName", str)
CommunityName = NewType("CommunityName", str)  # the name of a Community *object*
AliasName = NewType("AliasName", str)  # an alias defined inside a Community object
SecretName = NewType("SecretName", str)
NodeName = NewType("NodeName", str)

# Kind names as they appear in `kind:` and in Problems.
IP_ADDRESS_POOL = "IPAddressPool"
L2_ADVERTISEMENT = "L2Advertisement"
BGP_ADVERTISEMENT = "BGPAdvertisement"
BGP_PEER = "BGPPeer"
BFD_PROFILE = "BFDProfile"
COMMUNITY = "Community"
SERVICE_L2_STATUS = "ServiceL2Status"
SERVICE_BGP_STATUS = "ServiceBGPStatus"
CONFIGURATION_STATE = "ConfigurationState"
SECRET = "Secret"

GROUP = "metallb.io"

# Kind -> (plural resource, served versions); the storage version is last.
RESOURCES: Mapping[str, tuple[str, tuple[str, ...]]] = {
    IP_ADDRESS_POOL: ("ipaddresspools", ("v1beta1",)),
    L2_ADVERTISEMENT: ("l2advertisements", ("v1beta1",)),
    BGP_ADVERTISEMENT: ("bgpadvertisements", ("v1beta1",)),
    BGP_PEER: ("bgppeers", ("v1beta1", "v1beta2")),
    BFD_PROFILE: ("bfdprofiles", ("v1beta1",)),
    COMMUNITY: ("communities", ("v1beta1",)),
    SERVICE_L2_STATUS: ("servicel2statuses", ("v1beta1",)),
    SERVICE_BGP_STATUS: ("servicebgpstatuses", ("v1beta1",)),
    CONFIGURATION_STATE: ("configurationstates", ("v1beta1",)),
}

# The kinds that make up the configuration (the status kinds are outputs, not inputs).
CONFIG_KINDS = (
    IP_ADDRESS_POOL,
    L2_ADVERTISEMENT,
    BGP_ADVERTISEMENT,
    BGP_PEER,
    BFD_PROFILE,
    COMMUNITY,
)

DEFAULT_PEER_PORT = 179
DEFAULT_AGGREGATION_LENGTH = 32
DEFAULT_AGGREGATION_LENGTH_V6 = 128

Labels = tuple[tuple[str, str], ...]  # sorted (key, value) pairs: hashable, order-free


def label_map(labels: Labels) -> dict[str, str]:
    return dict(labels)


# --- IPAddressPool ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceAllocation:
    """`spec.serviceAllocation`: which Services may take addresses from a pool, and in what order.

    `namespace_selectors` are kept unresolved: the allocator matches them against the Namespaces
    it watches, so a namespace relabel needs no re-parse.
    """

    priority: int = 0
    namespaces: tuple[str, ...] = ()
    namespace_selectors: tuple[selectors.LabelSelector, ...] = ()
    service_selectors: tuple[selectors.LabelSelector, ...] = ()


@dataclass(frozen=True, slots=True)
class IPAddressPool:
    name: PoolName
    # One range per `spec.addresses` entry, in the order written (allocation order).
    addresses: tuple[addrs.AddressRange, ...]
    auto_assign: bool = True
    avoid_buggy_ips: bool = False
    # None when `spec.serviceAllocation` is absent; MetalLB treats absent and present-but-empty
    # differently (a present one makes the pool "pinned").
    service_allocation: ServiceAllocation | None = None
    labels: Labels = ()
    namespace: str = ""

    @property
    def families(self) -> frozenset[addrs.Family]:
        return frozenset(r.version for r in self.addresses)


# --- Advertisements ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreferredNodeSelector:
    weight: int
    preference: selectors.LabelSelector


def _selects_pool(
    names: tuple[PoolName, ...],
    pool_selectors: tuple[selectors.LabelSelector, ...],
    pool: IPAddressPool,
) -> bool:
    """MetalLB's rule: both lists empty selects every pool; otherwise name OR selector."""
    if not names and not pool_selectors:
        return True
    if pool.name in names:
        return True
    labels = label_map(pool.labels)
    return any(s.matches(labels) for s in pool_selectors)


@dataclass(frozen=True, slots=True)
class L2Advertisement:
    name: L2AdvertisementName
    ip_address_pools: tuple[PoolName, ...] = ()
    ip_address_pool_selectors: tuple[selectors.LabelSelector, ...] = ()
    node_selectors: tuple[selectors.LabelSelector, ...] = ()  # OR; empty = every node
    interfaces: tuple[str, ...] = ()  # empty = every interface
    service_selectors: tuple[selectors.LabelSelector, ...] = ()  # OR; empty = every service
    preferred_node_selectors: tuple[PreferredNodeSelector, ...] = ()
    labels: Labels = ()
    namespace: str = ""

    @property
    def all_interfaces(self) -> bool:
        return not self.interfaces

    def selects(self, pool: IPAddressPool) -> bool:
        return _selects_pool(self.ip_address_pools, self.ip_address_pool_selectors, pool)


@dataclass(frozen=True, slots=True)
class BGPCommunity:
    """A community value: legacy `a:b` (two uint16) or `large:a:b:c` (three uint32)."""

    large: bool
    values: tuple[int, ...]

    @property
    def sort_key(self) -> tuple[int, int, int]:
        """MetalLB's order: a legacy `a:b` sorts as the large community `(a<<16|b):0:0`."""
        if self.large:
            return (self.values[0], self.values[1], self.values[2])
        return ((self.values[0] << 16) | self.values[1], 0, 0)

    def __lt__(self, other: BGPCommunity) -> bool:
        return (self.sort_key, self.large) < (other.sort_key, other.large)

    def __str__(self) -> str:
        text = ":".join(str(v) for v in self.values)
        return f"large:{text}" if self.large else text


@dataclass(frozen=True, slots=True, order=True)
class CommunityRef:
    """A `communities` entry that is not a community value: the name of a Community alias."""

    name: AliasName

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class BGPAdvertisement:
    name: BGPAdvertisementName
    aggregation_length: int = DEFAULT_AGGREGATION_LENGTH
    aggregation_length_v6: int = DEFAULT_AGGREGATION_LENGTH_V6
    local_pref: int = 0  # 0 = not set
    # In the order written; aliases stay references so a Community change needs no re-parse.
    communities: tuple[BGPCommunity | CommunityRef, ...] = ()
    ip_address_pools: tuple[PoolName, ...] = ()
    ip_address_pool_selectors: tuple[selectors.LabelSelector, ...] = ()
    node_selectors: tuple[selectors.LabelSelector, ...] = ()
    peers: tuple[PeerName, ...] = ()  # empty = every peer
    service_selectors: tuple[selectors.LabelSelector, ...] = ()
    labels: Labels = ()
    namespace: str = ""

    def selects(self, pool: IPAddressPool) -> bool:
        return _selects_pool(self.ip_address_pools, self.ip_address_pool_selectors, pool)

    def aggregation_for(self, family: addrs.Family) -> int:
        return self.aggregation_length if family == 4 else self.aggregation_length_v6


# --- BGPPeer, BFDProfile, Community ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BGPPeer:
    """A BGPPeer in its v1beta2 shape (v1beta1 objects are converted on parse).

    Timers are seconds. As in MetalLB's parsed Peer, `hold_time` and `keepalive_time` are either
    both None (not configured) or both set: a lone one derives the other (keepalive = hold/3,
    hold = 3 x keepalive).
    """

    name: PeerName
    my_asn: int
    peer_asn: int = 0  # 0 when `dynamic_asn` is used instead
    dynamic_asn: str = ""  # "" | "internal" | "external"
    local_asn: int = 0
    peer_address: addrs.IPAddress | None = None
    interface: str = ""
    source_address: addrs.IPAddress | None = None
    peer_port: int = DEFAULT_PEER_PORT
    hold_time: float | None = None
    keepalive_time: float | None = None
    connect_time: float | None = None
    router_id: addrs.IPAddress | None = None
    node_selectors: tuple[selectors.LabelSelector, ...] = ()  # OR; empty = every node
    password: str = field(default="", repr=False)
    password_secret: SecretName | None = None
    bfd_profile: BFDProfileName | None = None
    enable_graceful_restart: bool = False
    ebgp_multi_hop: bool = False
    vrf: str = ""
    disable_mp: bool = False
    dual_stack_address_family: bool = False
    labels: Labels = ()
    namespace: str = ""

    @property
    def is_ibgp(self) -> bool:
        return self.dynamic_asn == "internal" or (
            not self.dynamic_asn and self.peer_asn == self.my_asn
        )


@dataclass(frozen=True, slots=True)
class BFDProfile:
    """Unset values stay None: MetalLB applies no defaults, the BFD daemon does."""

    name: BFDProfileName
    receive_interval: int | None = None  # milliseconds
    transmit_interval: int | None = None  # milliseconds
    detect_multiplier: int | None = None
    echo_interval: int | None = None  # milliseconds
    echo_mode: bool = False
    passive_mode: bool = False
    minimum_ttl: int | None = None
    labels: Labels = ()
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class CommunityAlias:
    name: AliasName
    value: BGPCommunity


@dataclass(frozen=True, slots=True)
class Community:
    name: CommunityName
    communities: tuple[CommunityAlias, ...] = ()
    labels: Labels = ()
    namespace: str = ""


# --- Status kinds (written by speakers) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceL2Status:
    name: str
    node: NodeName
    service_name: str
    service_namespace: str
    interfaces: tuple[str, ...] = ()  # empty when announcing on every interface
    labels: Labels = ()
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class ServiceBGPStatus:
    name: str
    node: NodeName
    service_name: str
    service_namespace: str
    peers: tuple[PeerName, ...] = ()  # sorted
    labels: Labels = ()
    namespace: str = ""


# --- The bundle ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Every configuration object that parsed, in a deterministic order, plus the Secret names.

    Only names of Secrets are kept (never their data) so that a Config can be logged and compared
    freely; `secret_names` is what the dangling `passwordSecret` check needs.
    """

    pools: tuple[IPAddressPool, ...] = ()
    l2_advertisements: tuple[L2Advertisement, ...] = ()
    bgp_advertisements: tuple[BGPAdvertisement, ...] = ()
    bgp_peers: tuple[BGPPeer, ...] = ()
    bfd_profiles: tuple[BFDProfile, ...] = ()
    communities: tuple[Community, ...] = ()
    secret_names: frozenset[SecretName] = frozenset()

    def pool(self, name: str) -> IPAddressPool | None:
        return next((p for p in self.pools if p.name == name), None)

    def peer(self, name: str) -> BGPPeer | None:
        return next((p for p in self.bgp_peers if p.name == name), None)

    def bfd_profile(self, name: str) -> BFDProfile | None:
        return next((p for p in self.bfd_profiles if p.name == name), None)

    def community_aliases(self) -> dict[AliasName, BGPCommunity]:
        """Alias -> value; on a duplicate alias (a validation Problem) the first definition wins."""
        aliases: dict[AliasName, BGPCommunity] = {}
        for community in self.communities:
            for alias in community.communities:
                aliases.setdefault(alias.name, alias.value)
        return aliases

    def resolve_communities(self, ad: BGPAdvertisement) -> tuple[BGPCommunity, ...]:
        """The ad's community values with aliases resolved; unknown aliases are left out."""
        aliases = self.community_aliases()
        values: list[BGPCommunity] = []
        for entry in ad.communities:
            value = aliases.get(entry.name) if isinstance(entry, CommunityRef) else entry
            if value is not None and value not in values:
                values.append(value)
        return tuple(values)

    def pools_for(self, ad: L2Advertisement | BGPAdvertisement) -> tuple[IPAddressPool, ...]:
        return tuple(p for p in self.pools if ad.selects(p))
