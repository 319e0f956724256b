"""speaker.explaining: one Service's verdict on this node, as `/explain` serves it."""

from __future__ import annotations

import ipaddress

from ironlb import configuration_state, model
from speaker import desired, explaining

IP = ipaddress.ip_address("10.0.0.1")
SERVICE = desired.Service("ns", "web", (IP,))
READY = configuration_state.Verdict("True", "Ready", "kube-proxy answers healthy")


def seen(**kw: object) -> explaining.Seen:
    base: dict[str, object] = {
        "services": {SERVICE.key: SERVICE},
        "l2": desired.L2Plan(
            (), {IP: "node2"}, {"ns/web": desired.Reason.NOT_OWNER}, {"ns/web": "node2 is elected"}
        ),
        "bgp": None,
        "reached": {},
        "datapath": READY,
    }
    base.update(kw)
    return explaining.Seen(**base)  # type: ignore[arg-type]


def test_unknown_service_is_none() -> None:
    assert explaining.explained("node1", seen(), "ns/other") is None


def test_not_elected_says_who_is() -> None:
    body = explaining.explained("node1", seen(), "ns/web")
    assert body is not None
    assert body["verdicts"] == [
        {
            "protocol": "layer2",
            "announcing": False,
            "reason": "notOwner",
            "message": "node2 is elected",
            "ips": ["10.0.0.1"],
        }
    ]
    assert body["datapath"] == {
        "ready": True,
        "reason": None,
        "message": "kube-proxy answers healthy",
    }


def test_announcing_in_l2_and_bgp_with_peers() -> None:
    l2 = desired.L2Plan((desired.L2Address(IP, (), ("ns/web",)),), {IP: "node1"})
    bgp = desired.BGPPlan((desired.BGPService("ns/web", (IP,), ()),))
    body = explaining.explained(
        "node1", seen(l2=l2, bgp=bgp, reached={"ns/web": (model.PeerName("tor"),)}), "ns/web"
    )
    assert body is not None
    assert [(v["protocol"], v["announcing"], v["reason"]) for v in body["verdicts"]] == [
        ("layer2", True, None),
        ("bgp", True, None),
    ]
    assert body["verdicts"][1]["message"] == "to peers tor"


def test_bgp_planned_but_no_session_is_its_own_reason() -> None:
    bgp = desired.BGPPlan((desired.BGPService("ns/web", (IP,), ()),))
    body = explaining.explained("node1", seen(l2=None, bgp=bgp), "ns/web")
    assert body is not None
    assert body["verdicts"][0]["reason"] == explaining.PEER_DOWN


def test_datapath_not_ready_and_conflicts_of_this_service_only() -> None:
    down = configuration_state.Verdict("False", "kubeProxyNotReady", "refused")
    conflicts = [
        {"ip": "10.0.0.1", "mac": "aa:bb:cc:dd:ee:ff", "interface": "eth0", "last_seen_s_ago": 0.1},
        {"ip": "10.0.0.9", "mac": "aa:bb:cc:dd:ee:ff", "interface": "eth0", "last_seen_s_ago": 0.1},
    ]
    body = explaining.explained("node1", seen(datapath=down), "ns/web", conflicts)
    assert body is not None
    assert body["datapath"] == {"ready": False, "reason": "kubeProxyNotReady", "message": "refused"}
    assert [c["ip"] for c in body["conflicts"]] == ["10.0.0.1"]
