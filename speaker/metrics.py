"""The speaker's own Prometheus metrics, in the registry `/metrics` serves (the data planes,
membership and the prober add their collectors to the same `REGISTRY`)."""

from __future__ import annotations

from collections.abc import Iterator

from ironlb_io import prometheus

REGISTRY = prometheus.Registry()


class Announced:
    """`metallb_speaker_announced`, one series per (service, protocol, node, ip) of the latest
    pass, built at scrape time. A labelled Gauge costs a lookup under a lock per series and
    pass: ~0.2 s for a pass that announces 10,000 Services, spent before the next command
    could go to ExaBGP."""

    def __init__(self) -> None:
        self.series: frozenset[tuple[str, str, str, str]] = frozenset()  # replaced whole

    def collect(self) -> Iterator[prometheus.Family]:
        family = prometheus.GaugeFamily(
            "metallb_speaker_announced",
            "Services announced from this node",
            labels=["service", "protocol", "node", "ip"],
        )
        for labels in self.series:
            family.add_metric(labels, 1.0)
        yield family


ANNOUNCED = Announced()
REGISTRY.register(ANNOUNCED)
CONFIG_STALE = prometheus.Gauge(
    "metallb_k8s_client_config_stale_bool",
    "1 while some metallb.io object is left out because it is invalid",
    registry=REGISTRY,
)
PASS_SECONDS = prometheus.Histogram(
    "ironlb_speaker_pass_seconds",
    "Time of one pass: snapshot, plans, and handing them to the data planes",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
PASS_CPU_SECONDS = prometheus.Histogram(
    "ironlb_speaker_pass_cpu_seconds",
    "CPU time of one pass on the speaker's loop thread (its wall time less the waits for a "
    "core, and less any wait for ExaBGP; what runs meanwhile on that thread is counted too)",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
CONFIG_LOADED = prometheus.Gauge(
    "metallb_k8s_client_config_loaded_bool",
    "1 once the configuration was loaded",
    registry=REGISTRY,
)
STANDING = prometheus.Gauge(
    "ironlb_speaker_taking_over",
    "With --take-over-from: 1 for what this node does now (standingBy while the other load "
    "balancer's speaker serves here, layer2Only while it starts, serving otherwise)",
    ["standing"],
    registry=REGISTRY,
)
NOT_ANNOUNCED = prometheus.Gauge(
    "ironlb_speaker_services_not_announced",
    "Services this node does not announce, by protocol and reason",
    ["protocol", "reason"],
    registry=REGISTRY,
)
