"""Prometheus metrics in the text exposition format (0.0.4), for the speaker's processes.

What the speaker needs of a metrics library, and no more: gauges, counters and histograms that
the code sets (`Gauge`, `Counter`, `Histogram`, with labels), collectors that read state at
scrape time and yield families (`GaugeFamily`, `CounterFamily`, `UntypedFamily`), a `Registry`
of both, and its exposition. prometheus_client did this for 5 MB a process; the speaker runs on
every node, beside a Go MetalLB that it is measured against.

The exposition is prometheus_client's, line for line (labels in name order), but without its
`_created` series (as with its PROMETHEUS_DISABLE_CREATED_SERIES): a counter `x` (or `x_total`)
is exposed as `x_total`, and a family that MetalLB exposes without `_total` is untyped, under its
exact name. Values are set from the
speaker's loop thread and read by the HTTP thread: a histogram's observation and a scrape take
its lock, so the scrape sees whole observations; a single value is one store.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol, Self

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Sample(NamedTuple):
    name: str  # the full name: `x_total`, `x_bucket`
    labels: dict[str, str]
    value: float


DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Family:
    """One metric family as collected: its name, help, type and samples."""

    kind = "untyped"
    suffix = ""  # what the exposition appends to the family's name (a counter's `_total`)

    def __init__(
        self,
        name: str,
        documentation: str,
        value: float | None = None,
        labels: Sequence[str] = (),
    ) -> None:
        # MetalLB names some counters with their `_total` (metallb_bgp_updates_total): the
        # family is named without it, and the exposition puts it back.
        self.name = name.removesuffix(self.suffix) if self.suffix else name
        self.documentation = documentation
        self.labels = tuple(labels)
        self.samples: list[Sample] = []
        if value is not None:
            if self.labels:
                raise ValueError(f"{name}: a value without label values, but labels {labels}")
            self.add_metric((), value)

    def add_metric(self, values: Sequence[str], value: float, name_suffix: str = "") -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name}: label values {values} for labels {self.labels}")
        labels = dict(zip(self.labels, values, strict=True))
        self.add_sample(self.name + (name_suffix or self.suffix), labels, value)

    def add_sample(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.samples.append(Sample(name, dict(labels), float(value)))


class GaugeFamily(Family):
    kind = "gauge"


class CounterFamily(Family):
    kind = "counter"
    suffix = "_total"


class UntypedFamily(Family):
    kind = "untyped"


class HistogramFamily(Family):
    kind = "histogram"


class Collector(Protocol):
    def collect(self) -> Iterable[Family]: ...


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        with self._lock:
            if any(c is collector for c in self._collectors):
                raise ValueError(f"{collector!r} is registered already")
            self._collectors.append(collector)

    def unregister(self, collector: Collector) -> None:
        with self._lock:
            self._collectors = [c for c in self._collectors if c is not collector]

    def collect(self) -> Iterable[Family]:
        with self._lock:
            collectors = list(self._collectors)
        for collector in collectors:
            yield from collector.collect()

    def get_sample_value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of the sample `name` (its full name: `x_total`, `x_bucket`) with exactly
        these labels, or None when there is none (for tests and for reading one value)."""
        wanted = dict(labels or {})
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == wanted:
                    return sample.value
        return None

    def exposition(self) -> bytes:
        return exposition(self.collect())


def exposition(families: Iterable[Family]) -> bytes:
    lines: list[str] = []
    for family in families:
        name = family.name + family.suffix
        lines.append(f"# HELP {name} {_escape_help(family.documentation)}\n")
        lines.append(f"# TYPE {name} {family.kind}\n")
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(
                    f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels.items())
                )
                lines.append(f"{sample.name}{{{labels}}} {go_float(sample.value)}\n")
            else:
                lines.append(f"{sample.name} {go_float(sample.value)}\n")
    return "".join(lines).encode()


def go_float(value: float) -> str:
    """A value as Prometheus (Go) writes it: +Inf, -Inf, NaN, and exponents from 1e+07 up."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


# --- metrics the code sets --------------------------------------------------------------------


class _Metric:
    family: type[Family]

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        suffix = self.family.suffix
        self.name = name.removesuffix(suffix) if suffix else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Self] = {}
        self._children_lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def _child(self) -> Self:
        return type(self)(self.name, self.documentation)

    def labels(self, *values: str) -> Self:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: label values {values} for labels {self.labelnames}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            with self._children_lock:
                child = self._children.setdefault(key, self._child())
        return child

    def remove(self, *values: str) -> None:
        """Forget the series with these label values (it is no longer exposed)."""
        with self._children_lock:
            self._children.pop(tuple(str(v) for v in values), None)

    def _series(self) -> list[tuple[tuple[str, ...], Self]]:
        if not self.labelnames:
            return [((), self)]
        with self._children_lock:
            return sorted(self._children.items())

    def _add(self, family: Family, values: tuple[str, ...]) -> None:
        raise NotImplementedError

    def collect(self) -> Iterable[Family]:
        family = self.family(self.name, self.documentation, labels=self.labelnames)
        for values, series in self._series():
            series._add(family, values)
        yield family


class _Value(_Metric):
    """A metric of one value a series."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        self.value = 0.0
        self._lock = threading.Lock()
        super().__init__(name, documentation, labelnames, registry)

    def _add(self, family: Family, values: tuple[str, ...]) -> None:
        family.add_metric(values, self.value)


class Gauge(_Value):
    family = GaugeFamily

    def set(self, value: float) -> None:
        self.value = float(value)


class Counter(_Value):
    family = CounterFamily

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter only goes up ({amount})")
        with self._lock:  # += is a read and a write: two threads may count at once
            self.value += amount


class Histogram(_Metric):
    family = HistogramFamily

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if bounds != [float(b) for b in buckets] or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be increasing: {buckets}")
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = tuple(bounds)
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._lock = threading.Lock()
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> Self:
        return type(self)(self.name, self.documentation, buckets=self.bounds)

    def observe(self, value: float) -> None:
        with self._lock:
            self._sum += value
            for i, bound in enumerate(self.bounds):
                if value <= bound:
                    self._counts[i] += 1
                    break

    def _add(self, family: Family, values: tuple[str, ...]) -> None:
        with self._lock:
            counts, total = list(self._counts), self._sum
        # The parent's labels (the family's): a child has none of its own.
        pairs = dict(zip(family.labels, values, strict=True))
        cumulative = 0
        for bound, count in zip(self.bounds, counts, strict=True):
            cumulative += count
            family.add_sample(
                self.name + "_bucket", {**pairs, "le": go_float(bound)}, float(cumulative)
            )
        family.add_sample(self.name + "_count", pairs, float(cumulative))
        family.add_sample(self.name + "_sum", pairs, total)
