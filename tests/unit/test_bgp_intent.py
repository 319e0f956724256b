"""speaker.bgp_intent: BGPPeers selected for this node become sessions, announced Services
become announcements per address, and what cannot be honoured is a Problem, never silence."""

from __future__ import annotations

import ipaddress

from ironlb import model, selectors
from speaker import bgp_intent, desired

NODE = desired.Node("n1", (("rack", "a"),), False)


def peer(name: str = "tor", **fields: object) -> model.BGPPeer:
    base: dict[str, object] = {
        "name": model.PeerName(name),
        "my_asn": 64501,
        "peer_asn": 64500,
        "peer_address": ipaddress.ip_address("10.250.0.1"),
    }
    base.update(fields)
    return model.BGPPeer(**base)  # type: ignore[arg-type]


def config(*peers: model.BGPPeer, profiles: tuple[model.BFDProfile, ...] = ()) -> model.Config:
    return model.Config(bgp_peers=peers, bfd_profiles=profiles)


def fields(found: list[object]) -> set[tuple[str, str]]:
    return {(p.kind, p.field) for p in found}  # type: ignore[attr-defined]


def test_only_peers_selecting_this_node_become_sessions() -> None:
    elsewhere = (selectors.LabelSelector(match_labels=(("rack", "b"),)),)
    here = (selectors.LabelSelector(match_labels=(("rack", "a"),)),)
    sessions, found = bgp_intent.sessions(
        config(peer("a", node_selectors=here), peer("b", node_selectors=elsewhere), peer("c")),
        NODE,
        {},
    )
    assert [s.name for s in sessions] == ["a", "c"] and found == []
    assert bgp_intent.sessions(config(peer()), None, {}) == ([], [])


def test_missing_secret_or_profile_is_a_problem_and_no_session() -> None:
    sessions, found = bgp_intent.sessions(
        config(peer("s", password_secret=model.SecretName("nope")), peer("p", bfd_profile="gone")),
        NODE,
        {},
    )
    assert sessions == []
    assert fields(found) == {("BGPPeer", "spec.passwordSecret"), ("BGPPeer", "spec.bfdProfile")}


def test_password_comes_from_the_secret() -> None:
    sessions, _ = bgp_intent.sessions(
        config(peer(password_secret=model.SecretName("md5"))), NODE, {"md5": "s3cret"}
    )
    assert sessions[0].password == "s3cret"


def test_fields_the_session_is_made_without_are_reported() -> None:
    profile = model.BFDProfile(
        name=model.BFDProfileName("fast"), echo_mode=True, minimum_ttl=254, receive_interval=300
    )
    sessions, found = bgp_intent.sessions(
        config(
            peer(vrf="red", local_asn=64999, connect_time=5.0, bfd_profile="fast"),
            profiles=(profile,),
        ),
        NODE,
        {},
    )
    assert len(sessions) == 1, "the session is still made"
    assert fields(found) == {
        ("BGPPeer", "spec.vrf"),
        ("BGPPeer", "spec.localASN"),
        ("BGPPeer", "spec.connectTime"),
        ("BFDProfile", "spec.echoMode"),
        ("BFDProfile", "spec.minimumTtl"),
    }
    plain, none = bgp_intent.sessions(config(peer()), NODE, {})
    assert len(plain) == 1 and none == []


def test_announcements_per_address_and_reach_per_service() -> None:
    only_b = model.BGPAdvertisement(
        name=model.BGPAdvertisementName("to-b"), peers=(model.PeerName("b"),), local_pref=200
    )
    everyone = model.BGPAdvertisement(name=model.BGPAdvertisementName("all"))
    v4, v6 = ipaddress.ip_address("10.200.0.1"), ipaddress.ip_address("fd00::1")
    plan = desired.BGPPlan(
        (
            desired.BGPService("app/x", (v4, v6), (only_b,)),
            desired.BGPService("app/y", (ipaddress.ip_address("10.200.0.2"),), (only_b,)),
            desired.BGPService("app/z", (ipaddress.ip_address("10.200.0.3"),), (everyone,)),
        )
    )
    intent = bgp_intent.intent(config(peer("a"), peer("b")), NODE, plan, {})
    assert [str(a.address) for a in intent.announcements] == [
        "10.200.0.1",
        "fd00::1",
        "10.200.0.2",
        "10.200.0.3",
    ]
    assert intent.reach == {"app/x": ("b",), "app/y": ("b",), "app/z": ("a", "b")}
    first, _, second, third = intent.announcements
    assert first.advertisements[0].local_pref == 200
    assert first.advertisements == second.advertisements
    assert third.advertisements[0].peers == frozenset()
