"""MetalLB's layer-2 counters: requests received, responses and gratuitous packets sent, per IP.

The hot path only bumps integers in `Stats`; a collector turns them into metrics at scrape time,
so several announcers (tests) can share a process, each on its own registry.

The series carry MetalLB's exact names (`metallb_layer2_requests_received{ip="..."}`, no
`_total`): prometheus_client appends `_total` to every counter, so they are exposed untyped,
which PromQL's rate() and MetalLB's dashboards treat the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import registry as prom_registry
from prometheus_client.core import CounterMetricFamily, Metric

REQUESTS_RECEIVED = "metallb_layer2_requests_received"
RESPONSES_SENT = "metallb_layer2_responses_sent"
GRATUITOUS_SENT = "metallb_layer2_gratuitous_sent"
# Ours (MetalLB has none): a typed counter, so it is exposed with `_total`.
MALFORMED_FRAMES = "ironlb_speaker_malformed_layer2_frames"


@dataclass
class Stats:
    requests_received: Counter[str] = field(default_factory=Counter)
    responses_sent: Counter[str] = field(default_factory=Counter)
    gratuitous_sent: Counter[str] = field(default_factory=Counter)
    # Frames the kernel filter let through that are no ARP packet or neighbour solicitation /
    # advertisement after all: truncated, a bad ICMPv6 checksum, broken options, odd ARP sizes.
    malformed: int = 0


class Collector(prom_registry.Collector):
    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
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
            metric = Metric(name, doc, "unknown")
            for ip, value in sorted(counts.items()):
                metric.add_sample(name, {"ip": ip}, float(value))
            yield metric
        yield CounterMetricFamily(
            MALFORMED_FRAMES,
            "ARP / neighbour discovery frames dropped because they do not parse",
            value=self._stats.malformed,
        )
