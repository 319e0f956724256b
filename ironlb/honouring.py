"""What ironlb accepts but does not do, said where a user looks: pure.

MetalLB's FRR modes honour fields that ironlb's ExaBGP speaker and its own single-hop BFD
cannot (a VRF, unnumbered sessions, BFD echo, ...). The API accepts them, as it must for a
MetalLB manifest to apply unchanged, so the gap has to be said out loud instead:
`not_honoured(config)` lists each field an object sets that ironlb does not honour, as a
`Problem` naming the object, the field's path and what happens instead. The one list feeds every
place a person looks: the webhook returns it as admission warnings (`kubectl apply` prints
them), the controller folds it into each object's `Valid` condition with an Event, every
speaker puts it into its ConfigurationState's `Honoured` condition, and `ironlb status` prints
it. Nothing here refuses anything: refusing is parsing's and validation's job.

The rules read the parsed model only, so they are the same wherever they run. What only a node
can know (a password read from a Secret, communities merged from several advertisements onto
one route) is checked where it is known, with the same limits: `password_finding` for a
Secret's password, and `speaker.bgp.routes` keeps its own copy of `MAX_COMMUNITIES` (the data
planes do not import the model). `blocks_session` says which findings mean that no session is
made at all; `on_node` joins a node's own problems to the list without repeating it.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable

from ironlb import model, validation
from ironlb.problems import Problem

# TCP_MD5SIG_MAXKEYLEN: the kernel refuses longer keys (and ExaBGP would not start).
MAX_PASSWORD_BYTES = 80
# Legacy and large communities counted together, as MetalLB counts them.
MAX_COMMUNITIES = 63
PREFIX = "not honoured: "

# Fields whose finding on a BGPPeer means the session is not made at all.
_NO_SESSION = frozenset({"spec.interface", "spec.sourceAddress", "spec.password"})


def not_honoured(config: model.Config) -> list[Problem]:
    """Every field set in `config` that ironlb accepts but does not honour, in kind order."""
    found: list[Problem] = []
    for peer in config.bgp_peers:
        found += peer_findings(peer)
    for profile in config.bfd_profiles:
        found += profile_findings(profile)
    for ad in config.bgp_advertisements:
        found += advertisement_findings(ad, config)
    return validation.order(found)


def blocks_session(finding: Problem) -> bool:
    """Whether this finding about a BGPPeer means that no session is made for it."""
    return finding.kind == model.BGP_PEER and finding.field in _NO_SESSION


def _note(kind: str, name: str, field: str, message: str) -> Problem:
    return Problem(kind, name, field, PREFIX + message)


def password_finding(peer: str, field: str, password: str) -> Problem | None:
    """A TCP MD5 key the kernel cannot take (`field` says where it came from)."""
    size = len(password.encode())
    if size <= MAX_PASSWORD_BYTES:
        return None
    return _note(
        model.BGP_PEER,
        peer,
        field,
        f"a TCP MD5 key is at most {MAX_PASSWORD_BYTES} bytes, this one has {size}; "
        "no session is made",
    )


def peer_findings(peer: model.BGPPeer) -> list[Problem]:
    found: list[Problem] = []

    def note(field: str, message: str) -> None:
        found.append(_note(model.BGP_PEER, peer.name, field, message))

    if peer.peer_address is None and peer.interface:
        note("spec.interface", "unnumbered BGP is not supported; no session is made")
    if (
        peer.peer_address is not None
        and peer.source_address is not None
        and peer.source_address.version != peer.peer_address.version
    ):
        note(
            "spec.sourceAddress",
            f"an IPv{peer.source_address.version} source for an "
            f"IPv{peer.peer_address.version} peer; no session is made",
        )
    if (
        peer.keepalive_time is not None
        and peer.hold_time
        and not math.isclose(peer.keepalive_time, peer.hold_time / 3)
    ):
        note(
            "spec.keepaliveTime",
            f"keepalives go every hold time / 3 ({peer.hold_time / 3:g}s), "
            f"not every {peer.keepalive_time:g}s (ExaBGP has no keepalive setting)",
        )
    if peer.connect_time is not None:
        note("spec.connectTime", "ExaBGP retries a failed connection on its own schedule")
    if isinstance(peer.router_id, ipaddress.IPv6Address):
        note(
            "spec.routerID",
            "a router ID is 32 bits: the IPv6 value is ignored (the IPv4 sourceAddress, "
            "else one derived from the node name, is used)",
        )
    password = password_finding(peer.name, "spec.password", peer.password)
    if password is not None:
        found.append(password)
    if peer.bfd_profile is not None and peer.ebgp_multi_hop:
        note(
            "spec.bfdProfile",
            "BFD is single-hop only (RFC 5881, TTL 255): with a router more than one hop "
            "away it never comes up and does not protect this session",
        )
    if peer.vrf:
        note("spec.vrf", "VRFs are not supported; the session uses the default routing table")
    return found


def profile_findings(profile: model.BFDProfile) -> list[Problem]:
    found: list[Problem] = []

    def note(field: str, message: str) -> None:
        found.append(_note(model.BFD_PROFILE, profile.name, field, message))

    if profile.echo_mode:
        note("spec.echoMode", "BFD echo is not implemented; control packets alone detect failures")
    if profile.echo_interval is not None:
        note("spec.echoInterval", "no echo packets are sent (BFD echo is not implemented)")
    if profile.minimum_ttl is not None:
        note("spec.minimumTtl", "BFD is single-hop only and accepts TTL 255 alone (RFC 5881)")
    return found


def advertisement_findings(ad: model.BGPAdvertisement, config: model.Config) -> list[Problem]:
    count = len(config.resolve_communities(ad))
    if count <= MAX_COMMUNITIES:
        return []
    return [
        _note(
            model.BGP_ADVERTISEMENT,
            ad.name,
            "spec.communities",
            f"{count} communities, but a route carries at most {MAX_COMMUNITIES}; "
            "its routes are not announced",
        )
    ]


def session_findings(peer: model.BGPPeer, config: model.Config) -> list[Problem]:
    """What a node that opens `peer`'s session makes it without: the peer's findings and
    those of its BFD profile."""
    found = peer_findings(peer)
    profile = config.bfd_profile(peer.bfd_profile) if peer.bfd_profile else None
    if profile is not None:
        found += profile_findings(profile)
    return found


def on_node(
    config_findings: list[Problem],
    node_findings: Iterable[Problem],
    problems: Iterable[Problem] = (),
) -> list[Problem]:
    """A node's whole list: the configuration's findings, then the node's own problems that
    neither a finding nor a configuration problem (`problems`, parsing's and validation's)
    already states for the same object and field or a part of it. A data plane's words for
    the same fact (a session not made for a Secret that does not exist) would only repeat it.
    What only the node knows stays (a dual-stack session whose node has no address of the
    other family to give as next hop: `speaker.bgp.routes`)."""
    said = [(p.kind, p.name, p.field) for p in (*config_findings, *problems)]

    def repeats(p: Problem) -> bool:
        return bool(p.field) and any(
            (kind, name) == (p.kind, p.name) and field.startswith(p.field)
            for kind, name, field in said
        )

    own = [p for p in node_findings if not repeats(p)]
    return list(dict.fromkeys([*config_findings, *own]))
