"""speaker.bgp_intent: BGPPeers selected for this node become sessions, announced Services
become announcements per address, and what cannot be honoured is a Problem, never silence."""

from __future__ import annotations

import ipaddress

import pytest

from ironlb import honouring, model, parsing, selectors, validation
from speaker import bgp_intent, desired
from speaker.bgp import next_hops, peers, rendering, routes

NODE = desired.Node("n1", (("rack", "a"),), False)
ip = ipaddress.ip_address


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
            peer(vrf="red", connect_time=5.0, bfd_profile="fast"),
            profiles=(profile,),
        ),
        NODE,
        {},
    )
    assert len(sessions) == 1, "the session is still made"
    assert fields(found) == {
        ("BGPPeer", "spec.vrf"),
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


# --- from the API object to ExaBGP: what is honoured, and what makes no session ------------------


def parsed(*objects: dict[str, object]) -> model.Config:
    by_kind: dict[str, list[object]] = {}
    for obj in objects:
        by_kind.setdefault(str(obj["kind"]), []).append(obj)
    config, problems = parsing.parse_config(by_kind)
    assert problems == [] and validation.validate(config) == []
    return config


def api(kind: str, name: str, **spec: object) -> dict[str, object]:
    version = "v1beta2" if kind == model.BGP_PEER else "v1beta1"
    return {
        "apiVersion": f"metallb.io/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": "metallb-system"},
        "spec": spec,
    }


BASE = {"myASN": 64512, "peerASN": 64500, "peerAddress": "10.250.0.1"}


def test_every_honoured_peer_field_reaches_the_session_and_exabgp() -> None:
    config = parsed(
        api(
            model.BGP_PEER,
            "tor",
            **BASE,
            sourceAddress="10.250.0.11",
            peerPort=1179,
            holdTime="30s",
            keepaliveTime="10s",
            routerID="192.0.2.7",
            password="s3cret",
            bfdProfile="fast",
            enableGracefulRestart=True,
            disableMP=True,
        ),
        api(
            model.BFD_PROFILE,
            "fast",
            receiveInterval=100,
            transmitInterval=200,
            detectMultiplier=5,
            passiveMode=True,
        ),
    )
    assert honouring.not_honoured(config) == [], "nothing of it goes unhonoured"
    (session,), found = bgp_intent.sessions(config, NODE, {})
    assert found == []
    assert (session.my_asn, session.peer_asn, session.peer_port) == (64512, 64500, 1179)
    assert (str(session.peer_address), str(session.source_address)) == ("10.250.0.1", "10.250.0.11")
    assert (session.hold_time, session.keepalive_time) == (30, 10)
    assert str(session.router_id) == "192.0.2.7" and session.password == "s3cret"
    assert session.graceful_restart and session.families == (4,)
    assert session.bfd == peers.BFDSettings(100, 200, 5, passive=True)
    text = rendering.config(session, ("/usr/bin/python3",), "node1")
    for line in (
        "neighbor 10.250.0.1 {",
        "router-id 192.0.2.7;",
        "local-address 10.250.0.11;",
        "local-as 64512;",
        "peer-as 64500;",
        "connect 1179;",
        "hold-time 30;",
        "outgoing-ttl 1;",
        "md5-password",
        "graceful-restart 120;",
    ):
        assert line in text, line


def test_dynamic_asn_multihop_and_the_password_secret_by_name_in_our_namespace() -> None:
    internal = api(
        model.BGP_PEER,
        "in",
        myASN=64512,
        dynamicASN="internal",
        peerAddress="10.250.0.1",
        passwordSecret={"name": "md5", "namespace": "elsewhere"},
    )
    external = api(
        model.BGP_PEER,
        "ex",
        myASN=64512,
        dynamicASN="external",
        peerAddress="10.250.0.2",
        ebgpMultiHop=True,
    )
    secret = {"kind": "Secret", "metadata": {"name": "md5"}}
    config = parsed(internal, external, secret)
    sessions, found = bgp_intent.sessions(config, NODE, {"md5": "from-the-secret"})
    assert found == []
    by_name = {s.name: s for s in sessions}
    assert by_name["in"].peer_asn == 64512 and by_name["in"].is_ibgp
    assert by_name["in"].password == "from-the-secret", "namespace ignored, as in MetalLB"
    assert by_name["ex"].peer_asn is None and by_name["ex"].ebgp_multi_hop
    text = rendering.config(by_name["ex"], ("/usr/bin/python3",), "n")
    assert "peer-as auto;" in text and "outgoing-ttl 255;" in text


def test_a_lone_hold_time_is_honoured_with_its_keepalive() -> None:
    # 10s / 3 is no whole second: the session's rounded keepalive is no finding.
    config = parsed(api(model.BGP_PEER, "tor", **BASE, holdTime="10s"))
    (session,), found = bgp_intent.sessions(config, NODE, {})
    assert found == [] and session.effective_hold_time == 10


@pytest.mark.parametrize(
    ("spec", "passwords", "field"),
    [
        pytest.param(
            {"myASN": 64512, "dynamicASN": "internal", "interface": "eth1"},
            {},
            "spec.interface",
            id="unnumbered",
        ),
        pytest.param({**BASE, "sourceAddress": "fd00::1"}, {}, "spec.sourceAddress", id="family"),
        pytest.param({**BASE, "password": "é" * 41}, {}, "spec.password", id="password-82-bytes"),
        pytest.param(
            {**BASE, "passwordSecret": {"name": "md5"}},
            {"md5": "x" * 81},
            "spec.passwordSecret",
            id="secret-password-81-bytes",
        ),
    ],
)
def test_what_makes_no_session_is_said_once(
    spec: dict[str, object], passwords: dict[str, str], field: str
) -> None:
    secret = {"kind": "Secret", "metadata": {"name": "md5"}}
    config = parsed(api(model.BGP_PEER, "tor", **spec), secret)
    sessions, found = bgp_intent.sessions(config, NODE, passwords)
    assert sessions == []
    assert [(p.field, p.message.startswith(honouring.PREFIX)) for p in found] == [(field, True)]


def test_dual_stack_sessions_carry_the_other_family_with_the_nodes_address() -> None:
    """dualStackAddressFamily is honoured: the other family's routes go out with this node's
    address of that family (speaker.bgp.next_hops), and without one they are left out with a
    Problem of the node's."""
    config = parsed(
        api(model.BGP_PEER, "over-v4", **BASE, dualStackAddressFamily=True),
        api(
            model.BGP_PEER,
            "over-v6",
            myASN=64512,
            peerASN=64500,
            peerAddress="fd00:250::1",
            dualStackAddressFamily=True,
        ),
    )
    assert honouring.not_honoured(config) == []
    facts = next_hops.Facts(
        interfaces={"eth0": (ip("10.250.0.11"), ip("fd00:250::11"), ip("fe80::11"))},
        sources={ip("10.250.0.1"): ip("10.250.0.11"), ip("fd00:250::1"): ip("fd00:250::11")},
    )
    node = desired.Node("n1", internal_ips=("10.250.0.11", "fd00:250::11"))
    sessions, found = bgp_intent.sessions(config, node, {}, facts)
    assert found == []
    by_name = {s.name: s for s in sessions}
    assert by_name["over-v4"].families == (4, 6)
    assert by_name["over-v4"].ipv6_next_hop == ip("fd00:250::11")
    assert by_name["over-v6"].ipv4_next_hop == ip("10.250.0.11")
    announcements = [
        routes.Announcement(ip("10.252.0.5"), (routes.Advertisement(),)),
        routes.Announcement(ip("fd00:252::5"), (routes.Advertisement(),)),
    ]
    wanted = routes.desired(announcements, sessions)
    assert wanted.problems == ()
    texts = {
        name: [c.text for c in rendering.commands(by_name[name], routes.Change(announce=r))]
        for name, r in wanted.routes.items()
    }
    assert texts == {
        "over-v4": [
            "announce route 10.252.0.5/32 next-hop self origin igp",
            "announce route fd00:252::5/128 next-hop fd00:250::11 origin igp",
        ],
        "over-v6": [
            "announce route 10.252.0.5/32 next-hop 10.250.0.11 origin igp",
            "announce route fd00:252::5/128 next-hop self origin igp",
        ],
    }
    # A node with no IPv6 address to give: the IPv6 routes stay home, and the node says so.
    bare = next_hops.Facts(interfaces={"eth0": (ip("10.250.0.11"), ip("fe80::11"))})
    v4_node = desired.Node("n1", internal_ips=("10.250.0.11",))
    alone, _ = bgp_intent.sessions(config, v4_node, {}, bare)
    left = routes.desired(announcements, [s for s in alone if s.name == "over-v4"])
    assert list(left.routes["over-v4"]) == [ipaddress.ip_network("10.252.0.5/32")]
    assert [(p.name, p.field) for p in left.problems] == [
        ("over-v4", "spec.dualStackAddressFamily")
    ]
    assert "no IPv6 next hop" in left.problems[0].message


@pytest.mark.parametrize(
    ("spec", "local_as", "ibgp", "ttl"),
    [
        pytest.param({}, 64512, False, 1, id="unset-presents-my-asn"),
        pytest.param({"localASN": 65410}, 65410, False, 1, id="presents-local-asn"),
        pytest.param({"localASN": 64512}, 64512, False, 1, id="equal-to-my-asn-changes-nothing"),
        pytest.param(
            {"localASN": 65410, "peerASN": 65410}, 65410, True, 255, id="ibgp-by-local-asn"
        ),
        pytest.param({"localASN": 4200000001}, 4200000001, False, 1, id="four-byte-local-asn"),
    ],
)
def test_local_asn_is_the_asn_the_session_presents(
    spec: dict[str, object], local_as: int, ibgp: bool, ttl: int
) -> None:
    """localASN, as MetalLB renders it for FRR (`local-as N no-prepend replace-as`): the OPEN
    carries it instead of myASN (ExaBGP's `local-as`), and with it the session is iBGP exactly
    when the peer is in that AS. No finding: it is honoured."""
    config = parsed(api(model.BGP_PEER, "tor", **{**BASE, **spec}))
    assert honouring.not_honoured(config) == []
    (session,), found = bgp_intent.sessions(config, NODE, {})
    assert found == [] and session.my_asn == 64512
    assert (session.local_as, session.is_ibgp) == (local_as, ibgp)
    text = rendering.config(session, ("/usr/bin/python3",), "node1")
    assert f"local-as {local_as};" in text and f"outgoing-ttl {ttl};" in text
    assert ("64512" in text) == (local_as == 64512), "myASN nowhere when localASN replaces it"
