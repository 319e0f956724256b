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
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

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


# How long our view of who is alive must stay unchanged before the addresses we hold as a
# stand-in are announced again after a return (`Deferred`). Members back from a partition come
# back in our view one by one as each refutes its death, within about a second at N = 100.
QUIET_S = 2.0


def to_announce_again(
    mine: Iterable[Address],
    ours_with_all: Collection[Address],
    returned: Collection[str],
    we_returned: bool,
) -> tuple[frozenset[Address], frozenset[Address]]:
    """Which of our addresses to announce again (a gratuitous burst) although we kept them, when
    a member we had seen dead is live again (`returned`) or we refuted a verdict of our own
    death (`we_returned`): (now, once our view is quiet); nothing when nobody came back.

    A node announces an address when it gains it, and a router's ARP entry then points there
    until someone announces it again. A member that was away may have announced some of ours:
    while it saw us dead it owned those it would own without us, and a member cut off long
    enough sees every other member dead and owns every address. When it hears of us again it
    lets them go and stops answering, and the router keeps its MAC. We cannot know which of ours
    it took, so every one goes again; likewise members that declared us dead took ours.

    *Now*: those we would own if every member we have seen alive were alive (`ours_with_all`).
    No member can own them when it is back, so announcing them can never pull an address from
    a live owner. *Once quiet* (`Deferred`): the rest, held as a stand-in for a member dead in
    our view. If we were the one away, those members are coming back as our view catches up
    and the addresses are not ours: announced now they would move live nodes' addresses to us
    and back (the layer-2 cut test saw 42 such moves). If the member is dead indeed, they are
    still ours once the view has settled, and go then.
    bench.membership's layer-2 phase (6 members, a link cut restored once the group had the
    victim dead): before any of this, after 3 of 4 cuts the ToR still had the victim's
    addresses at the member that had stood in for it.
    """
    if not (we_returned or returned):
        return frozenset(), frozenset()
    held = frozenset(mine)
    now = held & frozenset(ours_with_all)
    return now, held - now


# After we refuted a verdict of our own death, our view of the others is the one catching up
# for this long: the addresses we hold as a stand-in then are not announced again at all.
# Members we declared dead while cut off come back as they hear of it, through push-pulls and
# reconnects (every 2 s by a few members, at most `push_pull_interval`, 15 s, apart).
STALE_VIEW_S = 30.0


@dataclass
class Deferred(Generic[Address]):
    """Addresses to announce again once the view of who is alive has not changed for `quiet`
    seconds (`to_announce_again`'s second part). Pure: the caller passes the time.

    Not at all for `stale_view` seconds after we refuted our own death: we were the one cut
    off, and a member we still have dead then is most likely alive and owning what we hold for
    it (the layer-2 cut test: a member came back in the victim's view 12 s after the victim's
    own return, and a 2 s quiet window had announced its addresses from the victim meanwhile).
    A stand-in address a node cut off held for a member dead indeed is then left where the
    group put it meanwhile, until the router re-resolves it (docs/modes.md)."""

    quiet: float = QUIET_S
    stale_view: float = STALE_VIEW_S
    pending: frozenset[Address] = frozenset()
    _alive: frozenset[str] | None = None
    _changed_at: float = 0.0
    _stale_until: float = -math.inf

    def add(self, addresses: Collection[Address], now: float, we_returned: bool) -> None:
        if we_returned:
            self.pending, self._stale_until = frozenset(), now + self.stale_view
        if now >= self._stale_until:
            self.pending |= frozenset(addresses)

    def due(
        self, alive: frozenset[str], mine: Collection[Address], now: float
    ) -> tuple[frozenset[Address], float | None]:
        """(what to announce now: pending ones still held once the view is quiet, when to ask
        again: None if nothing is pending)."""
        if alive != self._alive:
            self._alive, self._changed_at = alive, now
        if not self.pending:
            return frozenset(), None
        ready_at = self._changed_at + self.quiet
        if now < ready_at:
            return frozenset(), ready_at
        out, self.pending = self.pending & frozenset(mine), frozenset()
        return out, None

    def decide(
        self,
        mine: Collection[Address],
        ours_with_all: Collection[Address],
        returned: Collection[str],
        we_returned: bool,
        alive: frozenset[str],
        now: float,
    ) -> tuple[frozenset[Address], frozenset[Address], float | None]:
        """One pass of the rule: `to_announce_again`, its second part kept here until due.
        Returns (what to announce now, the part of it that waited for a quiet view, when to
        ask again: None if nothing is pending)."""
        at_once, later = to_announce_again(mine, ours_with_all, returned, we_returned)
        self.add(later, now, we_returned)
        settled, ask_at = self.due(alive, mine, now)
        return at_once | settled, settled, ask_at


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
