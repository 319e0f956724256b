"""The ToR's BGPPeer as the lab tiers write it (hack/objects.py `tor_peer`)."""

from __future__ import annotations

from hack import lab as network_lab
from hack import objects


def test_by_default_the_nodes_peer_with_the_tors_ipv4_address_in_metallb_system() -> None:
    assert objects.tor_peer() == {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "tor", "namespace": "metallb-system"},
        "spec": {
            "myASN": 64512,
            "peerASN": network_lab.TOR_ASN,
            "peerAddress": str(network_lab.TOR_LAN_V4),
        },
    }


def test_what_differs_between_peers_is_given_by_keyword_in_a_stable_order() -> None:
    peer = objects.tor_peer(
        "tor6",
        my_asn=64513,
        peer_asn=64501,
        peer_address=network_lab.TOR_LAN_V6,
        hold_time="3s",
        namespace="elsewhere",
        enableGracefulRestart=True,
        bfdProfile="fast",
    )
    assert peer["metadata"] == {"name": "tor6", "namespace": "elsewhere"}
    assert list(peer["spec"].items()) == [
        ("myASN", 64513),
        ("peerASN", 64501),
        ("peerAddress", str(network_lab.TOR_LAN_V6)),
        ("holdTime", "3s"),
        ("enableGracefulRestart", True),
        ("bfdProfile", "fast"),
    ]


def test_a_field_by_its_metallb_name_replaces_the_builders_in_place() -> None:
    spec = objects.tor_peer(hold_time="3s", peerAddress="10.0.0.1", holdTime="9s")["spec"]
    assert list(spec.items()) == [
        ("myASN", objects.NODE_ASN),
        ("peerASN", network_lab.TOR_ASN),
        ("peerAddress", "10.0.0.1"),
        ("holdTime", "9s"),
    ]
