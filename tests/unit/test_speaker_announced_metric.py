"""`metallb_speaker_announced`: built at scrape time from the latest pass's series."""

from __future__ import annotations

from ironlb_io import prometheus
from speaker import metrics


def _lines(registry: prometheus.Registry) -> list[str]:
    text = registry.exposition().decode()
    return [line for line in text.splitlines() if line.startswith("metallb_speaker_announced{")]


def test_one_series_per_label_set_and_replaced_whole() -> None:
    collector = metrics.Announced()
    registry = prometheus.Registry()
    registry.register(collector)
    assert _lines(registry) == []
    collector.series = frozenset(
        {("ns/a", "bgp", "node1", "10.0.0.1"), ("ns/b", "layer2", "node1", "10.0.0.2")}
    )
    name = "metallb_speaker_announced"
    assert sorted(_lines(registry)) == [
        f'{name}{{ip="10.0.0.1",node="node1",protocol="bgp",service="ns/a"}} 1.0',
        f'{name}{{ip="10.0.0.2",node="node1",protocol="layer2",service="ns/b"}} 1.0',
    ]
    # A Service no longer announced leaves no stale series behind.
    collector.series = frozenset({("ns/b", "layer2", "node1", "10.0.0.2")})
    assert [line.split("{")[1].split("}")[0] for line in _lines(registry)] == [
        'ip="10.0.0.2",node="node1",protocol="layer2",service="ns/b"'
    ]
