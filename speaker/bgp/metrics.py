"""Prometheus metrics of the BGP speaker, read from its state at scrape time.

Names and label values follow MetalLB: the native speaker's `metallb_bgp_*` with `peer` =
`address:port`, and the FRR-mode `metallb_bfd_*` with `peer` = the peer's address. MetalLB's BFD
counters carry no `_total` suffix; a counter is exposed with one, so they are
exposed untyped to keep the names that dashboards and alerts already use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from ironlb_io import prometheus
from speaker.bgp import peers, speaking
from speaker.bgp.bfd import packet as bfd_packet

# Ours: MetalLB's FRR mode has no such counter (bfdd drops bad packets silently).
MALFORMED_BFD = "ironlb_speaker_malformed_bfd_packets"


def peer_label(peer: peers.Peer) -> str:
    host = str(peer.peer_address)
    if isinstance(peer.peer_address, ipaddress.IPv6Address):
        host = f"[{host}]"
    return f"{host}:{peer.peer_port}"


class Collector:
    def __init__(self, speaker: speaking.Speaker) -> None:
        self._speaker = speaker

    def collect(self) -> Iterator[prometheus.Family]:
        states = self._speaker.session_states()
        configured = self._speaker.peers()
        up = prometheus.GaugeFamily(
            "metallb_bgp_session_up", "BGP session state (1 is up, 0 is down)", labels=["peer"]
        )
        announced = prometheus.GaugeFamily(
            "metallb_bgp_announced_prefixes_total",
            "Number of prefixes currently being advertised on the BGP session",
            labels=["peer"],
        )
        pending = prometheus.GaugeFamily(
            "metallb_bgp_pending_prefixes_total",
            "Number of prefixes that should be advertised on the BGP session",
            labels=["peer"],
        )
        updates = prometheus.CounterFamily(
            "metallb_bgp_updates_total",
            "Number of BGP UPDATE messages sent",
            labels=["peer"],
        )
        for name, status in states.items():
            label = [peer_label(configured[name])]
            up.add_metric(label, 1 if status.up else 0)
            announced.add_metric(label, status.announced)
            pending.add_metric(label, status.wanted)
            updates.add_metric(label, status.updates)
        yield up
        yield announced
        yield pending
        yield updates

        sessions = self._speaker.bfd_sessions()
        bfd_up = prometheus.GaugeFamily(
            "metallb_bfd_session_up", "BFD session state (1 is up, 0 is down)", labels=["peer"]
        )
        families = {
            "control_packet_input": "Number of received BFD control packets",
            "control_packet_output": "Number of sent BFD control packets",
            "session_up_events": "Number of BFD session up events",
            "session_down_events": "Number of BFD session down events",
        }
        counters = {
            key: prometheus.UntypedFamily(f"metallb_bfd_{key}", doc, labels=["peer"])
            for key, doc in families.items()
        }
        for address, session in sorted(sessions.items()):
            bfd_up.add_metric([address], 1 if session.state == bfd_packet.State.UP else 0)
            counters["control_packet_input"].add_metric([address], session.packets_in)
            counters["control_packet_output"].add_metric([address], session.packets_out)
            counters["session_up_events"].add_metric([address], session.up_events)
            counters["session_down_events"].add_metric([address], session.down_events)
        yield bfd_up
        yield from counters.values()
        stats = self._speaker.bfd_stats()
        yield prometheus.CounterFamily(
            MALFORMED_BFD,
            "BFD control packets dropped because they do not decode (RFC 5880 6.8.6 checks)",
            value=stats.undecodable if stats else 0,
        )
