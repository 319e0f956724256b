"""The next hop of the routes a dual-stack session carries in the family it is not: pure.

A BGPPeer with `dualStackAddressFamily` has one TCP session carrying both families. For the
session's own family the next hop is "self", the session's local address; for the other family
"self" means nothing (an IPv4 session has no IPv6 address), so this node has to name one.

MetalLB's FRR mode renders such a peer with both address families activated and no next-hop
policy, so FRR's own rule applies (bgpd, `bgp_zebra_nexthop_set`): the interface holding the
session's local address gives it, its global IPv6 address for IPv6 routes over an IPv4 session
(its link-local one when it has none), its IPv4 address for IPv4 routes over an IPv6 session
(the router ID when it has none). `choose` takes the same interface, and a fallback a router
can forward to:

1. the address of the other family on the interface that holds the session's local address
   (`sourceAddress`, else the address the kernel connects to the peer from): the Node's
   InternalIP of that family if the interface holds it, else the first the kernel lists;
2. else the Node's first InternalIP of that family, the address Kubernetes knows the node by;
3. else none: the routes of that family are not announced to the peer, and `routes.desired`
   says so as a Problem (which the speaker's ConfigurationState shows).

Only an address a router can forward to qualifies: not loopback, link-local, multicast or
unspecified. (FRR's link-local and router ID fallbacks are left out: a link-local next hop
cannot be resolved by a router that does not know the interface, and a router ID need not be an
address of the node at all.) The shell reads the facts (`speaker.bgp.local_addresses`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from speaker.bgp import peers

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Facts:
    """This node's addresses, as the shell read them.

    `interfaces`: each interface's addresses, both families, in the order the kernel lists
    them. `sources`: for a peer address, the local address the kernel would connect to it from
    (missing when it has no route to the peer)."""

    interfaces: Mapping[str, tuple[IPAddress, ...]] = field(default_factory=dict)
    sources: Mapping[IPAddress, IPAddress] = field(default_factory=dict)


def usable(address: IPAddress) -> bool:
    """Whether a router could forward to `address` as a next hop."""
    return not (
        address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
    )


def _parsed(addresses: Iterable[str]) -> list[IPAddress]:
    out: list[IPAddress] = []
    for text in addresses:
        try:
            out.append(ipaddress.ip_address(text))
        except ValueError:
            continue  # not an address: the kubelet would not write it, a person might
    return out


def choose(
    family: peers.Family,
    local: IPAddress | None,
    facts: Facts,
    internal_ips: Iterable[str] = (),
) -> IPAddress | None:
    """The next hop for routes of `family` on a session whose local address is `local`
    (None: not known), in the order of the module's description."""
    known = [a for a in _parsed(internal_ips) if a.version == family and usable(a)]
    if local is not None:
        holding = next((on for on in facts.interfaces.values() if local in on), ())
        there = [a for a in holding if a.version == family and usable(a)]
        if there:
            return next((a for a in there if a in known), there[0])
    return known[0] if known else None


def local_address(peer: peers.Peer, facts: Facts) -> IPAddress | None:
    """The session's local address: `sourceAddress`, else the kernel's choice toward the peer."""
    if peer.source_address is not None:
        return peer.source_address
    return facts.sources.get(peer.peer_address)


def with_next_hop(peer: peers.Peer, facts: Facts, internal_ips: Iterable[str] = ()) -> peers.Peer:
    """`peer` with the next hop of its other family filled in, when it is dual-stack, has
    none given and an address was found (else unchanged: `routes.desired` then leaves those
    routes out, saying so)."""
    other: peers.Family = 6 if peer.family == 4 else 4
    if not peer.dual_stack or peer.next_hop(other) is not None:
        return peer
    hop = choose(other, local_address(peer, facts), facts, internal_ips)
    if isinstance(hop, ipaddress.IPv6Address):
        return dataclasses.replace(peer, ipv6_next_hop=hop)
    if isinstance(hop, ipaddress.IPv4Address):
        return dataclasses.replace(peer, ipv4_next_hop=hop)
    return peer
