"""The BGP speaker's metrics under MetalLB's native names, from the speaker's state at scrape."""

from __future__ import annotations

import ipaddress

from ironlb_io import prometheus
from speaker.bgp import metrics, peers, speaking


class FakeSpeaker:
    """The read-only surface the collector scrapes."""

    def __init__(self, states: dict[str, speaking.Status], configured: dict[str, peers.Peer]):
        self._states, self._configured = states, configured

    def session_states(self) -> dict[str, speaking.Status]:
        return self._states

    def peers(self) -> dict[str, peers.Peer]:
        return self._configured

    def bfd_sessions(self) -> dict[str, object]:
        return {}

    def bfd_stats(self) -> None:
        return None


def peer(name: str, address: str) -> peers.Peer:
    return peers.Peer(
        name=name, my_asn=64512, peer_asn=64500, peer_address=ipaddress.ip_address(address)
    )


def status(name: str, address: str, *, announced: int, wanted: int) -> speaking.Status:
    return speaking.Status(
        peer=name,
        address=address,
        bgp="up",
        bfd=None,
        announced=announced,
        updates=7,
        restarts=0,
        reason="",
        wanted=wanted,
    )


def test_pending_prefixes_are_the_wanted_set_and_announced_what_is_on_the_wire() -> None:
    """MetalLB's native speaker sets pending_prefixes_total to the prefixes it should advertise
    (the whole wanted set), announced_prefixes_total to those sent: mid-way through a bulk
    change they differ, settled they agree."""
    speaker = FakeSpeaker(
        {
            "tor": status("tor", "10.250.0.1", announced=400, wanted=1000),
            "tor6": status("tor6", "fd00:250::1", announced=2, wanted=2),
        },
        {"tor": peer("tor", "10.250.0.1"), "tor6": peer("tor6", "fd00:250::1")},
    )
    registry = prometheus.Registry()
    registry.register(metrics.Collector(speaker))  # type: ignore[arg-type]
    text = registry.exposition().decode()
    assert 'metallb_bgp_pending_prefixes_total{peer="10.250.0.1:179"} 1000.0' in text
    assert 'metallb_bgp_announced_prefixes_total{peer="10.250.0.1:179"} 400.0' in text
    assert 'metallb_bgp_pending_prefixes_total{peer="[fd00:250::1]:179"} 2.0' in text
    assert 'metallb_bgp_updates_total{peer="10.250.0.1:179"} 7.0' in text
