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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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
