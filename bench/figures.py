"""The statistics every bench reports, defined once so that their numbers mean the same thing.

A distribution is {n, min, median, p99, max}, rounded to 0.1 ms; p99 is the nearest-rank
percentile (the smallest value with at least 99% of the samples at or below it), so it is always
a time that was measured, never an interpolation between two. A run's phases (`phases_s`) are
timed to 0.1 s.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Iterator, Sequence

DIGITS = 4


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the value at position ceil(q * n) of the sorted samples."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, min, median, p99, max; all None (n = 0) when nothing was measured."""
    if not values:
        return {"n": 0, "min": None, "median": None, "p99": None, "max": None}
    return {
        "n": len(values),
        "min": round(min(values), DIGITS),
        "median": round(statistics.median(values), DIGITS),
        "p99": round(percentile(values, 0.99), DIGITS),
        "max": round(max(values), DIGITS),
    }


@contextlib.contextmanager
def phase(phases: dict[str, float], name: str) -> Iterator[None]:
    """`phases[name]`: how long the block took, in seconds; also when it failed."""
    began = time.monotonic()
    try:
        yield
    finally:
        phases[name] = round(time.monotonic() - began, 1)
