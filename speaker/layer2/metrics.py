"""MetalLB's layer-2 counters: requests received, responses and gratuitous packets sent, per IP;
and ours: malformed frames, and other machines' claims on owned addresses (split brain).

The hot path only bumps integers in `Stats`; a collector turns them into metrics at scrape time,
so several announcers (tests) can share a process, each on its own registry.

The series carry MetalLB's exact names (`metallb_layer2_requests_received{ip="..."}`, no
`_total`): a counter is exposed with `_total`, so they are exposed untyped,
which PromQL's rate() and MetalLB's dashboards treat the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from ironlb_io import prometheus

REQUESTS_RECEIVED = "metallb_layer2_requests_received"
RESPONSES_SENT = "metallb_layer2_responses_sent"
GRATUITOUS_SENT = "metallb_layer2_gratuitous_sent"
# Ours (MetalLB has none): typed, so the counters are exposed with `_total`.
MALFORMED_FRAMES = "ironlb_speaker_malformed_layer2_frames"
ADDRESS_CONFLICTS = "ironlb_speaker_l2_address_conflicts"
ADDRESS_CONFLICT = "ironlb_speaker_l2_address_conflict"


@dataclass
class Stats:
    requests_received: Counter[str] = field(default_factory=Counter)
    responses_sent: Counter[str] = field(default_factory=Counter)
    gratuitous_sent: Counter[str] = field(default_factory=Counter)
    # Frames the kernel filter let through that are no ARP packet or neighbour solicitation /
    # advertisement after all: truncated, a bad ICMPv6 checksum, broken options, odd ARP sizes.
    malformed: int = 0
    # Frames in which another machine claimed an owned address, by (ip, interface).
    address_conflicts: Counter[tuple[str, str]] = field(default_factory=Counter)
    # The (ip, foreign mac) conflicts current now; replaced whole, never mutated, so a scrape
    # from another thread reads one consistent value.
    conflicting: tuple[tuple[str, str], ...] = ()


class Collector:
    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[prometheus.Family]:
        for name, doc, counts in (
            (
                REQUESTS_RECEIVED,
                "Number of layer2 requests received for owned IPs",
                self._stats.requests_received,
            ),
            (RESPONSES_SENT, "Number of layer2 responses sent", self._stats.responses_sent),
            (
                GRATUITOUS_SENT,
                "Number of gratuitous layer2 packets sent",
                self._stats.gratuitous_sent,
            ),
        ):
            metric = prometheus.UntypedFamily(name, doc, labels=["ip"])
            for ip, value in sorted(counts.items()):
                metric.add_metric([ip], float(value))
            yield metric
        yield prometheus.CounterFamily(
            MALFORMED_FRAMES,
            "ARP / neighbour discovery frames dropped because they do not parse",
            value=self._stats.malformed,
        )
        claims = prometheus.CounterFamily(
            ADDRESS_CONFLICTS,
            "Frames in which another machine claimed an address this node answers for",
            labels=["ip", "interface"],
        )
        for (ip, interface), value in sorted(self._stats.address_conflicts.items()):
            claims.add_metric([ip, interface], float(value))
        yield claims
        current = prometheus.GaugeFamily(
            ADDRESS_CONFLICT,
            "1 while another machine (mac) claims an address this node answers for",
            labels=["ip", "mac"],
        )
        for ip, mac in sorted(self._stats.conflicting):
            current.add_metric([ip, mac], 1.0)
        yield current
