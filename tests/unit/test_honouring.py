"""ironlb.honouring: each field that is accepted but not honoured is found, on the object and
field that set it, and nothing is found for what is honoured; then the places that show the
list (the controller's `Valid` condition and Event, the speaker's `Honoured` condition, the
webhook's warnings) say it.

Objects go through `ironlb.parsing` first, as they do in every program: a finding is about an
object the API and the webhook accept.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller import config_report, webhook
from ironlb import configuration_state, honouring, model, parsing, validation
from ironlb.problems import Problem

NS = "metallb-system"
PEER = {"myASN": 64512, "peerASN": 64500, "peerAddress": "10.0.0.1"}


def api(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    version = "v1beta2" if kind == model.BGP_PEER else "v1beta1"
    return {
        "apiVersion": f"metallb.io/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def peer(name: str = "tor", **spec: Any) -> dict[str, Any]:
    return api(model.BGP_PEER, name, **{**PEER, **spec})


def profile(name: str = "fast", **spec: Any) -> dict[str, Any]:
    return api(model.BFD_PROFILE, name, **spec)


def ad(name: str = "ads", **spec: Any) -> dict[str, Any]:
    return api(model.BGP_ADVERTISEMENT, name, **spec)


def config_of(*objects: dict[str, Any]) -> model.Config:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    config, problems = parsing.parse_config(by_kind)
    assert problems == [], "a finding is about an accepted object"
    return config


def found(*objects: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(p.kind, p.name, p.field) for p in honouring.not_honoured(config_of(*objects))}


COMMUNITIES_63 = [f"65000:{i}" for i in range(62)] + ["large:1:2:3"]
ALIASES = api(
    model.COMMUNITY,
    "aliases",
    communities=[{"name": "same", "value": "65000:0"}, {"name": "new", "value": "65001:1"}],
)

CASES = [
    # (id, objects, findings)
    ("plain peer", [peer()], set()),
    ("localASN is honoured", [peer(localASN=65001)], set()),
    ("localASN equal to myASN changes nothing", [peer(localASN=64512)], set()),
    (
        "unnumbered",
        [api(model.BGP_PEER, "tor", myASN=64512, dynamicASN="internal", interface="eth1")],
        {("BGPPeer", "tor", "spec.interface")},
    ),
    ("connectTime", [peer(connectTime="5s")], {("BGPPeer", "tor", "spec.connectTime")}),
    ("vrf", [peer(vrf="red")], {("BGPPeer", "tor", "spec.vrf")}),
    (
        "keepaliveTime apart from holdTime / 3",
        [peer(holdTime="90s", keepaliveTime="10s")],
        {("BGPPeer", "tor", "spec.keepaliveTime")},
    ),
    ("keepaliveTime of holdTime / 3", [peer(holdTime="90s", keepaliveTime="30s")], set()),
    ("keepaliveTime alone (hold = 3 x)", [peer(keepaliveTime="20s")], set()),
    ("holdTime alone, not a multiple of 3", [peer(holdTime="10s")], set()),
    ("holdTime 0", [peer(holdTime="0s", keepaliveTime="0s")], set()),
    ("IPv6 routerID", [peer(routerID="fd00::7")], {("BGPPeer", "tor", "spec.routerID")}),
    ("IPv4 routerID", [peer(routerID="192.0.2.7")], set()),
    # Honoured: the other family's routes carry the node's address of that family (a node
    # without one says so itself: speaker.bgp.routes).
    ("dualStackAddressFamily", [peer(dualStackAddressFamily=True)], set()),
    (
        "password over 80 bytes",
        [peer(password="x" * 81)],
        {("BGPPeer", "tor", "spec.password")},
    ),
    ("password of 80 bytes", [peer(password="x" * 80)], set()),
    (
        "source and peer of different families",
        [peer(sourceAddress="fd00::2")],
        {("BGPPeer", "tor", "spec.sourceAddress")},
    ),
    (
        "bfdProfile on an ebgpMultiHop peer",
        [peer(bfdProfile="fast", ebgpMultiHop=True), profile()],
        {("BGPPeer", "tor", "spec.bfdProfile")},
    ),
    ("bfdProfile on a single-hop peer", [peer(bfdProfile="fast"), profile()], set()),
    (
        "echo mode and interval, minimumTtl (whether used or not)",
        [profile(echoMode=True, echoInterval=50, minimumTtl=10)],
        {
            ("BFDProfile", "fast", "spec.echoMode"),
            ("BFDProfile", "fast", "spec.echoInterval"),
            ("BFDProfile", "fast", "spec.minimumTtl"),
        },
    ),
    (
        "honoured BFD timers",
        [profile(receiveInterval=100, transmitInterval=100, detectMultiplier=5, passiveMode=True)],
        set(),
    ),
    ("63 communities", [ad(communities=COMMUNITIES_63)], set()),
    (
        "63 communities and an alias of one of them: counted once",
        [ad(communities=[*COMMUNITIES_63, "same"]), ALIASES],
        set(),
    ),
    (
        "63 communities and an alias of a 64th",
        [ad(communities=[*COMMUNITIES_63, "new"]), ALIASES],
        {("BGPAdvertisement", "ads", "spec.communities")},
    ),
    (
        "64 communities",
        [ad(communities=[*COMMUNITIES_63, "65000:99"])],
        {("BGPAdvertisement", "ads", "spec.communities")},
    ),
]


@pytest.mark.parametrize(("objects", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_findings(objects: list[dict[str, Any]], want: set[tuple[str, str, str]]) -> None:
    assert found(*objects) == want


def test_a_v1beta1_peer_is_judged_as_its_v1beta2_self() -> None:
    old = peer(keepaliveTime="10s", holdTime="90s", routerID="fd00::7")
    old["apiVersion"] = "metallb.io/v1beta1"
    assert found(old) == {
        ("BGPPeer", "tor", "spec.keepaliveTime"),
        ("BGPPeer", "tor", "spec.routerID"),
    }


def test_every_finding_says_not_honoured_and_fits_an_admission_warning() -> None:
    everything = [
        peer(
            "a-rather-long-peer-name-as-people-write-them",
            localASN=65001,
            connectTime="5s",
            vrf="red",
            holdTime="90s",
            keepaliveTime="10s",
            routerID="fd00::7",
            password="x" * 81,
            sourceAddress="fd00::2",
            bfdProfile="fast",
            ebgpMultiHop=True,
            dualStackAddressFamily=True,
        ),
        api(model.BGP_PEER, "unnumbered", myASN=64512, dynamicASN="internal", interface="eth1"),
        profile(echoMode=True, echoInterval=50, minimumTtl=10),
        ad(communities=[*COMMUNITIES_63, "65000:99"]),
    ]
    findings = honouring.not_honoured(config_of(*everything))
    assert len(findings) == 12  # dualStackAddressFamily and localASN among them are honoured
    for p in findings:
        assert p.message.startswith(honouring.PREFIX) and not p.transient
        # The apiserver may cut an admission warning beyond 256 characters.
        assert len(str(p)) <= 256, str(p)
    assert findings == validation.order(findings), "in kind order, as every list is"


def test_which_findings_mean_no_session() -> None:
    blocking = {
        p.field
        for p in honouring.not_honoured(
            config_of(
                peer("a", password="x" * 81, vrf="red"),
                peer("b", peerAddress="10.0.0.2", sourceAddress="fd00::2"),
                api(model.BGP_PEER, "c", myASN=64512, dynamicASN="internal", interface="eth1"),
            )
        )
        if honouring.blocks_session(p)
    }
    assert blocking == {"spec.password", "spec.sourceAddress", "spec.interface"}


# --- a node's list: the configuration's findings and its own -----------------------------------

VRF = Problem("BGPPeer", "tor", "spec.vrf", "not honoured: VRFs ...")
DUAL = Problem("BGPPeer", "tor", "spec.dualStackAddressFamily", "not honoured: IPv6 routes ...")
DUAL_ON_NODE = Problem("BGPPeer", "tor", "spec.dualStackAddressFamily", "no IPv6 next hop ...")
SECRET = Problem("BGPPeer", "tor", "spec.passwordSecret", "not honoured: a TCP MD5 key ...")
CROWDED = Problem("BGPPeer", "tor", "", "2 route(s) would carry more than 63 communities ...")


NO_SECRET = Problem("BGPPeer", "tor", "spec.passwordSecret", "Secret 'md5' is missing ...")
DANGLING_SECRET = Problem(
    "BGPPeer", "tor", "spec.passwordSecret.name", "Secret 'md5' does not exist ...", True
)


@pytest.mark.parametrize(
    ("configured", "own", "problems", "want"),
    [
        ([], [], [], []),
        ([VRF], [VRF], [], [VRF]),
        ([VRF, DUAL], [DUAL_ON_NODE, SECRET], [], [VRF, DUAL, SECRET]),
        ([], [DUAL_ON_NODE, CROWDED, CROWDED], [], [DUAL_ON_NODE, CROWDED]),
        ([], [NO_SECRET], [DANGLING_SECRET], []),  # validation said it: not again
        ([], [NO_SECRET], [], [NO_SECRET]),  # the Secret exists, without a password key
        ([VRF], [CROWDED], [Problem("BGPPeer", "tor", "", "no field")], [VRF, CROWDED]),
    ],
)
def test_on_node(
    configured: list[Problem], own: list[Problem], problems: list[Problem], want: list[Problem]
) -> None:
    assert honouring.on_node(configured, own, problems) == want


def test_honoured_condition() -> None:
    assert configuration_state.honoured([]) == configuration_state.Verdict(
        "True", "Honoured", "every field set is honoured"
    )
    verdict = configuration_state.honoured([VRF, SECRET, VRF])
    assert (verdict.status, verdict.reason) == ("False", "NotHonoured")
    assert verdict.message == f"{VRF}; {SECRET}"
    many = [Problem("BGPPeer", f"p{i:02}", "spec.vrf", "not honoured: x") for i in range(25)]
    message = configuration_state.honoured(many).message
    assert message.count("BGPPeer/") == configuration_state.MAX_HONOURED_LINES
    assert message.endswith("; and 5 more")


def test_honoured_condition_sits_beside_metallbs_and_never_makes_it_invalid() -> None:
    extra = {configuration_state.HONOURED_CONDITION: configuration_state.honoured([VRF])}
    status = configuration_state.status(
        configuration_state.speaker("n"), [], None, "2026-01-01T00:00:00Z", extra
    )
    assert (status["result"], status["errorSummary"]) == ("Valid", "")
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["configReconcilerValid"]["status"] == "True"
    assert (
        by_type["Honoured"]["reason"] == "NotHonoured"
        and str(VRF) in by_type["Honoured"]["message"]
    )


# --- the controller's Valid condition and Event -------------------------------------------------

HARD = Problem("BGPPeer", "tor", "spec.peerAddress", "duplicate peer")
DANGLING = Problem("BGPPeer", "tor", "spec.bfdProfile", "BFDProfile 'x' does not exist", True)


@pytest.mark.parametrize(
    ("problems", "notes", "reason", "lines"),
    [
        ([], [], "Valid", ["no problem found with the configuration"]),
        ([], [VRF], "NotHonoured", [f"spec.vrf: {VRF.message}"]),
        (
            [DANGLING],
            [VRF],
            "DanglingReference",
            [f"spec.bfdProfile: {DANGLING.message}", f"spec.vrf: {VRF.message}"],
        ),
        (
            [DANGLING, HARD],
            [VRF],
            "InvalidConfiguration",
            [
                f"spec.peerAddress: {HARD.message}",
                f"spec.bfdProfile: {DANGLING.message}",
                f"spec.vrf: {VRF.message}",
            ],
        ),
    ],
)
def test_valid_condition_with_findings(
    problems: list[Problem], notes: list[Problem], reason: str, lines: list[str]
) -> None:
    key = ("BGPPeer", "tor")
    verdict = config_report.verdicts([key], problems, notes)[key]
    assert verdict.reason == reason
    assert verdict.message.split("; ") == lines
    assert config_report.event_reason(verdict) == (
        "NotHonoured" if reason == "NotHonoured" else "InvalidConfiguration"
    )


def test_a_finding_is_one_event_per_change() -> None:
    key = ("BGPPeer", "tor")
    verdict = config_report.verdicts([key], [], [VRF])[key]
    obj: dict[str, Any] = {"metadata": {"name": "tor", "generation": 2}}
    assert config_report.needs_event(obj, verdict)
    patch = config_report.condition_patch(obj, verdict, "2026-01-01T00:00:00Z")
    assert patch is not None
    written = {**obj, "status": patch["status"]}
    assert config_report.condition_patch(written, verdict, "2026-01-01T00:00:09Z") is None
    assert not config_report.needs_event(written, verdict), "a restart posts nothing again"


# --- the webhook: allowed, with the findings as warnings ------------------------------------------


def review(obj: dict[str, Any], *current: dict[str, Any]) -> webhook.Verdict:
    group, version = obj["apiVersion"].split("/")
    request = {
        "uid": "1",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "operation": "CREATE",
        "namespace": NS,
        "name": obj["metadata"]["name"],
        "object": obj,
    }
    existing: dict[str, list[dict[str, Any]]] = {}
    for o in current:
        existing.setdefault(o["kind"], []).append(o)
    return webhook.decide(request, existing, NS)


def test_webhook_allows_and_warns_with_the_same_list() -> None:
    incoming = peer(vrf="red", localASN=65001, bfdProfile="fast", ebgpMultiHop=True)
    verdict = review(incoming, profile(echoMode=True))
    assert verdict.allowed
    want = [str(p) for p in honouring.not_honoured(config_of(incoming, profile(echoMode=True)))]
    assert list(verdict.warnings) == [w for w in want if w.startswith("BGPPeer/tor:")]
    assert [w.split(": ")[1] for w in verdict.warnings] == ["spec.bfdProfile", "spec.vrf"]
    # The profile's own findings are warned about when the profile is applied.
    on_profile = review(profile(echoMode=True, minimumTtl=10), incoming)
    assert on_profile.allowed
    assert [w.split(": ")[1] for w in on_profile.warnings] == ["spec.echoMode", "spec.minimumTtl"]


def test_webhook_still_denies_what_is_wrong_and_warns_the_rest() -> None:
    verdict = review(peer(vrf="red", holdTime="2s"))
    assert not verdict.allowed and "spec.holdTime" in verdict.message
    assert verdict.warnings == ()  # an object that does not parse is judged on its errors alone


def test_webhook_warns_nothing_for_an_honoured_object() -> None:
    assert review(peer(holdTime="90s", routerID="192.0.2.7")).warnings == ()
