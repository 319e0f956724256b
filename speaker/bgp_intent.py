"""From the metallb.io model and this node's BGP plan to what `speaker.bgp` consumes: pure.

`sessions` picks the BGPPeers whose nodeSelectors match this node and turns each into a
`peers.Peer` (password from the Secret when `passwordSecret` is used, BFD timers from the
profile, and for a dual-stack session the next hop of its other family, chosen by
`speaker.bgp.next_hops` from the addresses the shell read); `announcements` resolves each
announced Service's advertisements (community aliases included) per address. Anything that
cannot be honoured is a Problem, never an exception: the fields a session is made without are
`ironlb.honouring`'s findings (the same list the webhook, the controller and the
ConfigurationState show), plus what only this node knows (a password Secret's content).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from ironlb import honouring, model, selectors
from ironlb.problems import Problem
from speaker import desired
from speaker.bgp import next_hops, peers, routes

# No address read: a dual-stack session's other family can only get the Node's InternalIP.
NO_FACTS = next_hops.Facts()


@dataclass(frozen=True, slots=True)
class Intent:
    sessions: tuple[peers.Peer, ...]
    announcements: tuple[routes.Announcement, ...]
    # Service key -> names of the peers its prefixes are configured to reach (ServiceBGPStatus).
    reach: Mapping[str, tuple[model.PeerName, ...]]
    problems: tuple[Problem, ...] = ()


def _bfd(profile: model.BFDProfile | None) -> peers.BFDSettings | None:
    if profile is None:
        return None
    return peers.BFDSettings(
        receive_interval_ms=profile.receive_interval or peers.DEFAULT_BFD_INTERVAL_MS,
        transmit_interval_ms=profile.transmit_interval or peers.DEFAULT_BFD_INTERVAL_MS,
        detect_multiplier=profile.detect_multiplier or peers.DEFAULT_BFD_MULTIPLIER,
        passive=profile.passive_mode,
    )


def session_for(
    peer: model.BGPPeer, config: model.Config, passwords: Mapping[str, str]
) -> peers.Peer | Problem:
    def problem(field: str, message: str) -> Problem:
        return Problem(model.BGP_PEER, peer.name, field, message)

    if peer.peer_address is None:
        return problem("spec.interface", "unnumbered BGP (interface) is not supported by ironlb")
    password = peer.password
    if peer.password_secret:
        secret = passwords.get(peer.password_secret)
        if secret is None:
            return problem(
                "spec.passwordSecret",
                f"Secret {peer.password_secret!r} is missing or has no `password` key",
            )
        password = secret
        too_long = honouring.password_finding(peer.name, "spec.passwordSecret", password)
        if too_long is not None:
            return too_long
    profile = None
    if peer.bfd_profile:
        profile = config.bfd_profile(peer.bfd_profile)
        if profile is None:
            return problem("spec.bfdProfile", f"BFDProfile {peer.bfd_profile!r} does not exist")
    if peer.dynamic_asn == "internal":
        peer_asn: int | None = peer.my_asn
    elif peer.dynamic_asn == "external":
        peer_asn = None
    else:
        peer_asn = peer.peer_asn
    router_id = peer.router_id if isinstance(peer.router_id, ipaddress.IPv4Address) else None
    try:
        return peers.Peer(
            name=peer.name,
            my_asn=peer.my_asn,
            peer_asn=peer_asn,
            peer_address=peer.peer_address,
            peer_port=peer.peer_port,
            source_address=peer.source_address,
            router_id=router_id,
            hold_time=None if peer.hold_time is None else round(peer.hold_time),
            keepalive_time=None if peer.keepalive_time is None else round(peer.keepalive_time),
            ebgp_multi_hop=peer.ebgp_multi_hop,
            password=password,
            graceful_restart=peer.enable_graceful_restart,
            dual_stack=peer.dual_stack_address_family,
            bfd=_bfd(profile),
            # localASN equal to myASN changes nothing (FRR would refuse it as a local-as).
            local_asn=peer.local_asn or None,
        )
    except ValueError as e:
        return problem("spec", str(e))


def sessions(
    config: model.Config,
    node: desired.Node | None,
    passwords: Mapping[str, str],
    facts: next_hops.Facts = NO_FACTS,
) -> tuple[list[peers.Peer], list[Problem]]:
    """The sessions of this node; a dual-stack one gets the next hop of its other family
    from `facts` and the Node's InternalIPs (`next_hops`)."""
    if node is None:
        return [], []
    labels = model.label_map(node.labels)
    out: list[peers.Peer] = []
    found: list[Problem] = []
    for peer in config.bgp_peers:
        if not selectors.any_matches(peer.node_selectors, labels):
            continue
        findings = honouring.session_findings(peer, config)
        found.extend(findings)
        if any(honouring.blocks_session(f) for f in findings):
            continue  # said by the finding: no session
        session = session_for(peer, config, passwords)
        if isinstance(session, Problem):
            found.append(session)
        else:
            out.append(next_hops.with_next_hop(session, facts, node.internal_ips))
    return out, found


def advertisement(config: model.Config, ad: model.BGPAdvertisement) -> routes.Advertisement:
    values = config.resolve_communities(ad)
    return routes.Advertisement(
        aggregation_length=ad.aggregation_length,
        aggregation_length_v6=ad.aggregation_length_v6,
        local_pref=ad.local_pref or None,
        communities=frozenset(routes.Community(*c.values) for c in values if not c.large),
        large_communities=frozenset(routes.LargeCommunity(*c.values) for c in values if c.large),
        peers=frozenset(ad.peers),
    )


def intent(
    config: model.Config,
    node: desired.Node | None,
    plan: desired.BGPPlan,
    passwords: Mapping[str, str],
    facts: next_hops.Facts = NO_FACTS,
) -> Intent:
    session_list, found = sessions(config, node, passwords, facts)
    names = [s.name for s in session_list]
    announcements: list[routes.Announcement] = []
    reach: dict[str, tuple[model.PeerName, ...]] = {}
    # Services share a handful of advertisements: resolve each once, not once per Service.
    resolved: dict[
        tuple[int, ...], tuple[tuple[routes.Advertisement, ...], tuple[model.PeerName, ...]]
    ] = {}
    for service in plan.mine:
        group = tuple(map(id, service.advertisements))
        found_group = resolved.get(group)
        if found_group is None:
            ads = tuple(advertisement(config, ad) for ad in service.advertisements)
            reached = sorted({n for n in names for ad in ads if ad.applies_to(n)})
            # One tuple for the group, shared by its Services (read only).
            found_group = resolved[group] = (ads, tuple(model.PeerName(n) for n in reached))
        ads, peers_reached = found_group
        for address in service.ips:
            announcements.append(routes.Announcement(address, ads))
        if peers_reached:
            reach[service.service] = peers_reached
    return Intent(tuple(session_list), tuple(announcements), reach, tuple(found))
