"""Which node answers ARP/NDP for an address: a stateless election every speaker computes alike.

No lock and no lease: every speaker sorts the same eligible nodes the same way and the first one
owns the address. The order is MetalLB's (`sortL2Candidates`): a higher preferredNodeSelectors
score first, then the smallest SHA-256 of `node_name + "#" + address`, with the address printed
canonically (as Go prints it) so that "10.0.0.01"-style spellings and IPv6 case cannot split the
vote. Hashing per (node, address) spreads addresses over nodes and moves only the addresses of a
node that disappears. Services sharing an address must call this once per address.

Eligibility (design.md, metallb-behaviour.md §4.1 step 5-6): a live speaker, not
NetworkUnavailable, not labelled exclude-from-external-load-balancers, selected by some
L2Advertisement that applies, and for `externalTrafficPolicy: Local` hosting a serving endpoint;
and, beyond MetalLB, not draining (being deleted, tainted for deletion, cordoned when configured)
and with a data path that is ready (`ironlb.datapath`: its kube-proxy is healthy, and for a
Local Service reports the local endpoint).
Liveness comes from membership; without it, from the Node Ready condition (`ready_nodes`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ironlb import addresses, datapath, model
from ironlb import annotations as keys


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


def _selected(ad: model.L2Advertisement, labels: Mapping[str, str]) -> bool:
    return not ad.node_selectors or any(s.matches(labels) for s in ad.node_selectors)


def excluded(node: NodeInfo, ignore_exclude_label: bool = False) -> bool:
    """Labelled out of load balancing (unless the speaker runs with --ignore-exclude-lb); the
    one rule for both modes."""
    labels = model.label_map(node.labels)
    return keys.EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS in labels and not ignore_exclude_label


def usable(
    nodes: Iterable[NodeInfo], alive: frozenset[str], ignore_exclude_label: bool = False
) -> tuple[tuple[NodeInfo, Mapping[str, str]], ...]:
    """The nodes that pass every check of their own (a live speaker, not NetworkUnavailable,
    not excluded, not leaving), each with its labels read once.

    The cheap checks come before the labels are read: at 1,000 Nodes with a handful of live
    speakers, reading every Node's labels for every Service was most of a pass.
    """
    out: list[tuple[NodeInfo, Mapping[str, str]]] = []
    for node in nodes:
        if node.name not in alive or node.network_unavailable or node.drain is not None:
            continue
        if excluded(node, ignore_exclude_label):
            continue
        out.append((node, model.label_map(node.labels)))
    return tuple(out)


def selected(
    usable_nodes: Iterable[tuple[NodeInfo, Mapping[str, str]]],
    ads: Sequence[model.L2Advertisement],
) -> frozenset[str]:
    """The usable nodes some of these advertisements select."""
    return frozenset(
        node.name for node, labels in usable_nodes if any(_selected(ad, labels) for ad in ads)
    )


def eligible(
    nodes: Iterable[NodeInfo],
    alive: frozenset[str],
    ads: Sequence[model.L2Advertisement],
    *,
    endpoint_nodes: frozenset[str] | None = None,
    ignore_exclude_label: bool = False,
    not_ready: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """Names of the nodes that may announce a service's address.

    ads are the L2Advertisements that apply to the service (its pool, its labels);
    endpoint_nodes, for externalTrafficPolicy Local, the nodes hosting a serving endpoint;
    not_ready, the nodes whose data path (kube-proxy) is not ready for this service.
    """
    out = selected(usable(nodes, alive, ignore_exclude_label), ads) - not_ready
    if endpoint_nodes is not None:
        out &= endpoint_nodes
    return out


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
            if _selected(ad, labels):
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
