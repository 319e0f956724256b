"""Which node answers ARP/NDP for an address: a stateless election every speaker computes alike.

No lock and no lease: every speaker sorts the same eligible nodes the same way and the first one
owns the address. The order is MetalLB's (`sortL2Candidates`): a higher preferredNodeSelectors
score first, then the smallest SHA-256 of `node_name + "#" + address`, with the address printed
canonically (as Go prints it) so that "10.0.0.01"-style spellings and IPv6 case cannot split the
vote. Hashing per (node, address) spreads addresses over nodes and moves only the addresses of a
node that disappears. Services sharing an address must call this once per address.

This module only orders the candidates. Which nodes are candidates (a live speaker, not
NetworkUnavailable, not excluded, selected by an advertisement, ...) is `speaker.desired`'s
`node_verdict`, the one walk that layer 2, BGP and `--explain` share.
Liveness comes from membership; without it, from the Node Ready condition (`ready_nodes`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ironlb import addresses, datapath, model, selectors


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: model.Labels = ()
    network_unavailable: bool = False
    drain: datapath.Drain | None = None  # leaving: hands its addresses over first
    # status.addresses of type InternalIP, as the Node lists them (BGP next hops fall back on
    # them: speaker.bgp.next_hops).
    internal_ips: tuple[str, ...] = ()


def _printed(address: str) -> str:
    """The address as Go's net.IP.String() prints it, which is the text MetalLB hashes."""
    ip = addresses.parse_ip(address)
    if ip is None:
        raise ValueError(f"not an IP address: {address!r}")
    return str(ip)


def _hash(node: str, address: str) -> bytes:
    return hashlib.sha256(f"{node}#{address}".encode()).digest()


def order(address: str, nodes: Iterable[str], scores: Mapping[str, int] | None = None) -> list[str]:
    """Candidates, best first."""
    ip = _printed(address)
    weights = scores or {}
    return sorted(set(nodes), key=lambda n: (-weights.get(n, 0), _hash(n, ip)))


def owner(
    address: str, eligible_nodes: Iterable[str], scores: Mapping[str, int] | None = None
) -> str | None:
    """The node that announces address, or None when no node is eligible."""
    ranked = order(address, eligible_nodes, scores)
    return ranked[0] if ranked else None


Address = TypeVar("Address")


def to_announce_again(
    mine: Iterable[Address], returned: Collection[str], we_returned: bool
) -> frozenset[Address]:
    """Which of our addresses to announce again (a gratuitous burst) although we kept them:
    all of them when a member we had seen dead is live again (`returned`), or when we refuted a
    verdict of our own death (`we_returned`); none otherwise.

    A node announces an address when it gains it, and a router's ARP entry then points there
    until someone announces it again. A member that was away may have announced some of ours:
    while it saw us dead it owned those it would own without us, and a member cut off long
    enough sees every other member dead and owns every address. When it hears of us again it
    lets them go and stops answering, and the router keeps its MAC: the Service is unreachable
    until the router re-resolves. We cannot know which of ours it took, so every one goes
    again. Likewise members that declared us dead took ours, and we kept them in our own view.
    bench.membership's layer-2 phase (6 members, a link cut restored once the group had the
    victim dead): before this, after 3 of 4 cuts the ToR still had the victim's addresses at
    the member that had stood in for it, and a victim that had declared others dead left their
    addresses at its own MAC.
    """
    if we_returned or returned:
        return frozenset(mine)
    return frozenset()


def scores(nodes: Iterable[NodeInfo], ads: Sequence[model.L2Advertisement]) -> dict[str, int]:
    """Preference per node: the weights of matching preferredNodeSelectors, summed over ads.

    An advertisement's preferences count only for nodes its nodeSelectors select.
    """
    return scores_of(((node, model.label_map(node.labels)) for node in nodes), ads)


def scores_of(
    nodes: Iterable[tuple[NodeInfo, Mapping[str, str]]], ads: Sequence[model.L2Advertisement]
) -> dict[str, int]:
    """`scores` over nodes whose labels are already read."""
    weighted = [ad for ad in ads if ad.preferred_node_selectors]
    out: dict[str, int] = {}
    if not weighted:
        return out
    for node, labels in nodes:
        total = 0
        for ad in weighted:
            if selectors.any_matches(ad.node_selectors, labels):
                total += sum(
                    p.weight for p in ad.preferred_node_selectors if p.preference.matches(labels)
                )
        if total:
            out[node.name] = total
    return out


def ready(conditions: Sequence[Mapping[str, object]] | None) -> bool:
    """Whether a Node's status.conditions say Ready=True (Unknown and missing are not ready)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or ())


def ready_nodes(conditions: Mapping[str, Sequence[Mapping[str, object]] | None]) -> frozenset[str]:
    """Liveness without membership: the nodes whose Ready condition is True.

    Slower than membership (the node lifecycle controller needs ~40 s to mark a silent node
    NotReady) but every speaker still reads the same answer from the API.
    """
    return frozenset(name for name, conds in conditions.items() if ready(conds))
