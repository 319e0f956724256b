"""Prometheus metrics of a running member, read from its counters at scrape time.

A collector (rather than counters bumped on the hot path) keeps the packet path free of metric
calls and lets several members share a process in tests, each on its own registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ironlb_io import prometheus
from speaker.membership import messages as m

if TYPE_CHECKING:
    from speaker.membership import node as node_module

PREFIX = "ironlb_memberlist_"
DROP_REASONS = (
    "oversized",
    "truncated",
    "malformed",
    "oversized_meta",
    "version",
    "auth",
    "unknown_key",
    "replay",
    "unauthenticated",
    "encrypted",
    "error",
    "injected",
)


class Collector:
    def __init__(self, member: node_module.Node) -> None:
        self._member = member

    def collect(self) -> Iterator[prometheus.Family]:
        member = self._member
        stats = member.machine.stats
        states = prometheus.GaugeFamily(
            PREFIX + "members", "Known members by state, this one included.", labels=["state"]
        )
        counts = dict.fromkeys(m.State, 0)
        for state in member.machine.states().values():
            counts[state] += 1
        for state, count in counts.items():
            states.add_metric([state.name.lower()], count)
        yield states

        def counter(name: str, doc: str, value: int) -> prometheus.CounterFamily:
            return prometheus.CounterFamily(PREFIX + name, doc, value=value)

        yield counter("probes_sent", "Direct probes sent.", stats.probes_sent)
        yield counter(
            "probes_failed", "Probes with no ack, direct or indirect.", stats.probes_failed
        )
        yield counter(
            "indirect_probes_sent", "Indirect probe requests sent.", stats.indirect_probes_sent
        )
        yield counter(
            "suspicions_raised", "Members this one started suspecting.", stats.suspicions_raised
        )
        refuted = prometheus.CounterFamily(
            PREFIX + "suspicions_refuted",
            "Suspicions ended by a refutation: of another member, or of this one by itself.",
            labels=["who"],
        )
        refuted.add_metric(["other"], stats.suspicions_refuted)
        refuted.add_metric(["self"], stats.self_refutations)
        yield refuted
        yield counter("deaths_declared", "Members this one declared dead.", stats.deaths_declared)
        yield counter("late_timers", "Timers that fired late (local slowness).", stats.late_ticks)
        yield counter(
            "suspicions_withheld",
            "Failed probes while this member was itself slow: suspected privately, not gossiped.",
            stats.suspicions_withheld,
        )
        yield counter(
            "last_words",
            "Private suspicions run out: the suspect asked once more before being declared dead.",
            stats.last_words,
        )
        yield prometheus.GaugeFamily(
            PREFIX + "health_score",
            "Lifeguard local health (0 = healthy).",
            member.machine.awareness,
        )
        dropped = prometheus.CounterFamily(
            PREFIX + "datagrams_dropped", "Datagrams discarded, by reason.", labels=["reason"]
        )
        for reason in DROP_REASONS:
            dropped.add_metric([reason], member.drops.get(reason, 0))
        yield dropped
        yield counter("datagrams_received", "Datagrams received.", member.received)
        yield counter("datagrams_sent", "Datagrams sent.", member.sent)
        yield counter("send_errors", "Datagrams the kernel refused to send.", member.send_errors)


def register(member: node_module.Node, registry: prometheus.Registry) -> Collector:
    collector = Collector(member)
    registry.register(collector)
    return collector
