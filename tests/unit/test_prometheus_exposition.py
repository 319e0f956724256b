"""ironlb_io.prometheus against prometheus_client, an independent implementation: the same
metrics, set the same way, give the same exposition bytes (prometheus_client without its
`_created` series, which ours does not expose), and prometheus_client's parser reads ours back."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import prometheus_client
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import core as client_core
from prometheus_client import parser

from ironlb_io import prometheus


@pytest.fixture(autouse=True)
def no_created_series() -> Iterator[None]:
    prometheus_client.disable_created_metrics()
    try:
        yield
    finally:
        prometheus_client.enable_created_metrics()


label_values = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=8
)
values = st.one_of(
    st.floats(allow_nan=False, width=64),
    st.just(math.inf),
    st.just(-math.inf),
    st.integers(min_value=-(10**12), max_value=10**12).map(float),
)
documentation = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    doc=documentation,
    plain=values,
    series=st.dictionaries(st.tuples(label_values, label_values), values, max_size=5),
)
def test_gauges_expose_what_prometheus_client_exposes(
    doc: str, plain: float, series: dict[tuple[str, str], float]
) -> None:
    ours, theirs = prometheus.Registry(), prometheus_client.CollectorRegistry()
    prometheus.Gauge("g_plain", doc, registry=ours).set(plain)
    prometheus_client.Gauge("g_plain", doc, registry=theirs).set(plain)
    # Labels not in name order: both write them in name order.
    our_labelled = prometheus.Gauge("g_labelled", doc, ["zone", "a"], registry=ours)
    their_labelled = prometheus_client.Gauge("g_labelled", doc, ["zone", "a"], registry=theirs)
    for key in sorted(series):  # ours exposes its series in order; theirs as created
        our_labelled.labels(*key).set(series[key])
        their_labelled.labels(*key).set(series[key])
    assert ours.exposition() == prometheus_client.generate_latest(theirs)


@settings(max_examples=100, deadline=None)
@given(
    increments=st.lists(
        st.tuples(st.sampled_from(["ok", "fail"]), st.floats(min_value=0, max_value=1e9)),
        max_size=10,
    )
)
def test_counters_expose_what_prometheus_client_exposes(
    increments: list[tuple[str, float]],
) -> None:
    ours, theirs = prometheus.Registry(), prometheus_client.CollectorRegistry()
    our = prometheus.Counter("probes", "Probes sent", ["result"], registry=ours)
    their = prometheus_client.Counter("probes", "Probes sent", ["result"], registry=theirs)
    plain_ours = prometheus.Counter("plain", "Plain", registry=ours)
    plain_theirs = prometheus_client.Counter("plain", "Plain", registry=theirs)
    for result in sorted({r for r, _ in increments}):
        our.labels(result)
        their.labels(result)
    for result, amount in increments:
        our.labels(result).inc(amount)
        their.labels(result).inc(amount)
        plain_ours.inc()
        plain_theirs.inc()
    assert ours.exposition() == prometheus_client.generate_latest(theirs)


@settings(max_examples=100, deadline=None)
@given(
    observed=st.lists(
        st.tuples(st.sampled_from(["x", "y"]), st.floats(min_value=-10, max_value=10)),
        max_size=20,
    ),
    with_inf=st.booleans(),
)
def test_histograms_expose_what_prometheus_client_exposes(
    observed: list[tuple[str, float]], with_inf: bool
) -> None:
    buckets = (0.001, 0.01, 0.5, 1.0, 2.5) + ((math.inf,) if with_inf else ())
    ours, theirs = prometheus.Registry(), prometheus_client.CollectorRegistry()
    # "mode" sorts after "le": the bucket's bound is written among the labels in name order.
    our = prometheus.Histogram("pass_seconds", "Pass", ["mode"], registry=ours, buckets=buckets)
    their = prometheus_client.Histogram(
        "pass_seconds", "Pass", ["mode"], registry=theirs, buckets=buckets
    )
    plain_ours = prometheus.Histogram("plain_seconds", "Plain", registry=ours, buckets=buckets)
    plain_theirs = prometheus_client.Histogram(
        "plain_seconds", "Plain", registry=theirs, buckets=buckets
    )
    for kind in sorted({k for k, _ in observed}):
        our.labels(kind)
        their.labels(kind)
    for kind, value in observed:
        our.labels(kind).observe(value)
        their.labels(kind).observe(value)
        plain_ours.observe(value)
        plain_theirs.observe(value)
    assert ours.exposition() == prometheus_client.generate_latest(theirs)


class _Ours:
    def __init__(self, series: dict[str, float]) -> None:
        self.series = series

    def collect(self) -> Iterator[prometheus.Family]:
        gauge = prometheus.GaugeFamily("members", "Members by state", labels=["state"])
        counter = prometheus.CounterFamily("drops", "Drops by reason", labels=["reason"])
        untyped = prometheus.UntypedFamily("requests_received", "MetalLB's name", labels=["ip"])
        for key, value in self.series.items():
            gauge.add_metric([key], value)
            counter.add_metric([key], abs(value))
            untyped.add_metric([key], value)
        yield gauge
        yield counter
        yield untyped
        yield prometheus.GaugeFamily("health", "Health", 2.0)
        yield prometheus.CounterFamily("malformed", "Malformed", value=7)
        yield prometheus.CounterFamily("updates_total", "MetalLB's name", value=3)


class _Theirs:
    def __init__(self, series: dict[str, float]) -> None:
        self.series = series

    def collect(self) -> Iterator[client_core.Metric]:
        gauge = client_core.GaugeMetricFamily("members", "Members by state", labels=["state"])
        counter = client_core.CounterMetricFamily("drops", "Drops by reason", labels=["reason"])
        untyped = client_core.UnknownMetricFamily(
            "requests_received", "MetalLB's name", labels=["ip"]
        )
        for key, value in self.series.items():
            gauge.add_metric([key], value)
            counter.add_metric([key], abs(value))
            untyped.add_metric([key], value)
        yield gauge
        yield counter
        yield untyped
        yield client_core.GaugeMetricFamily("health", "Health", 2.0)
        yield client_core.CounterMetricFamily("malformed", "Malformed", value=7)
        yield client_core.CounterMetricFamily("updates_total", "MetalLB's name", value=3)


@settings(max_examples=100, deadline=None)
@given(series=st.dictionaries(label_values, values, max_size=5))
def test_collected_families_expose_what_prometheus_client_exposes(
    series: dict[str, float],
) -> None:
    ours, theirs = prometheus.Registry(), prometheus_client.CollectorRegistry()
    ours.register(_Ours(series))
    theirs.register(_Theirs(series))
    text = ours.exposition()
    assert text == prometheus_client.generate_latest(theirs)
    # And prometheus_client's parser reads it back: every sample, every value.
    parsed = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(text.decode())
        for s in family.samples
    }
    for key, value in series.items():
        assert parsed[("members", (("state", key),))] == value
        assert parsed[("drops_total", (("reason", key),))] == abs(value)
    assert parsed[("malformed_total", ())] == 7.0


def test_get_sample_value_matches_the_full_name_and_exactly_the_labels() -> None:
    registry = prometheus.Registry()
    counter = prometheus.Counter("probes", "Probes", ["target", "result"], registry=registry)
    named = prometheus.Counter("updates_total", "MetalLB's name", registry=registry)
    named.inc()
    counter.labels("healthz", "ok").inc(3)
    histogram = prometheus.Histogram("pass_seconds", "Pass", registry=registry, buckets=(1.0,))
    histogram.observe(0.5)
    histogram.observe(2.0)
    assert registry.get_sample_value("probes_total", {"target": "healthz", "result": "ok"}) == 3
    assert registry.get_sample_value("probes", {"target": "healthz", "result": "ok"}) is None
    assert registry.get_sample_value("probes_total", {"target": "healthz"}) is None
    assert registry.get_sample_value("updates_total") == 1  # a name with _total keeps one
    assert registry.get_sample_value("pass_seconds_count") == 2
    assert registry.get_sample_value("pass_seconds_sum") == 2.5
    assert registry.get_sample_value("pass_seconds_bucket", {"le": "1.0"}) == 1
    assert registry.get_sample_value("pass_seconds_bucket", {"le": "+Inf"}) == 2


def test_a_removed_series_is_no_longer_exposed() -> None:
    registry = prometheus.Registry()
    gauge = prometheus.Gauge("not_announced", "Why not", ["protocol", "reason"], registry=registry)
    gauge.labels("bgp", "noPeer").set(2)
    gauge.labels("layer2", "noEndpoints").set(1)
    gauge.remove("bgp", "noPeer")
    gauge.remove("bgp", "never there")  # nothing to forget is no error
    assert (
        registry.get_sample_value("not_announced", {"protocol": "bgp", "reason": "noPeer"}) is None
    )
    assert (
        registry.get_sample_value("not_announced", {"protocol": "layer2", "reason": "noEndpoints"})
        == 1
    )


def test_mistakes_are_refused_where_they_are_made() -> None:
    registry = prometheus.Registry()
    gauge = prometheus.Gauge("g", "G", ["a"], registry=registry)
    with pytest.raises(ValueError, match="label values"):
        gauge.labels("x", "y")
    with pytest.raises(ValueError, match="only goes up"):
        prometheus.Counter("c", "C").inc(-1)
    with pytest.raises(ValueError, match="increasing"):
        prometheus.Histogram("h", "H", buckets=(1.0, 0.5))
    with pytest.raises(ValueError, match="label values"):
        prometheus.GaugeFamily("f", "F", labels=["a"]).add_metric([], 1)
    with pytest.raises(ValueError, match="registered already"):
        registry.register(gauge)


def test_a_scrape_during_observations_sees_whole_observations() -> None:
    registry = prometheus.Registry()
    histogram = prometheus.Histogram("h", "H", registry=registry, buckets=(0.5,))
    stop = threading.Event()

    def observe() -> None:
        while not stop.is_set():
            histogram.observe(1.0)

    worker = threading.Thread(target=observe)
    worker.start()
    try:
        for _ in range(200):
            family = next(iter(histogram.collect()))
            samples = {s.name: s.value for s in family.samples if s.name != "h_bucket"}
            # Every observation is 1.0: the sum is the count, whatever the moment of the scrape.
            assert samples["h_sum"] == samples["h_count"]
    finally:
        stop.set()
        worker.join()


def test_values_are_written_as_go_writes_them() -> None:
    assert prometheus.go_float(math.inf) == "+Inf"
    assert prometheus.go_float(-math.inf) == "-Inf"
    assert prometheus.go_float(math.nan) == "NaN"
    assert prometheus.go_float(1.0) == "1.0"
    assert prometheus.go_float(12345678.0) == "1.2345678e+07"
    assert prometheus.go_float(0.25) == "0.25"
