"""What the fuzz tests (`test_fuzz_*.py`) share: a count of inputs per area, and a hang guard.

Every input a fuzz test hands to a parser goes through `feed`, which counts it under the test's
area (the terminal summary prints the counts, so a run says how much it tried, not just that it
passed) and runs the parser under a real-time alarm: Hypothesis' deadline only judges an example
after it returned, and a parser stuck in a loop never returns. The alarm's bound is generous on
purpose; it separates "terminates" from "does not", it is not a speed requirement.
"""

from __future__ import annotations

import collections
import datetime
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

T = TypeVar("T")

TRIED: collections.Counter[str] = collections.Counter()
HANG_SECONDS = 20.0

# Sized so that the whole fuzz set stays within about a minute on two busy cores. The deadline
# is far above any parser's cost: it only flags a pathological (super-linear) input.
DEADLINE = datetime.timedelta(seconds=5)


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=DEADLINE,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class Hang(AssertionError):
    """A parser did not return within HANG_SECONDS."""


@contextmanager
def _alarm(area: str) -> Iterator[None]:
    def fire(_signum: int, _frame: FrameType | None) -> None:
        raise Hang(f"{area}: the parser did not return within {HANG_SECONDS:.0f} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def feed(area: str, parse: Callable[..., T], *args: Any) -> T:
    """`parse(*args)`, counted under `area` and bounded in time."""
    TRIED[area] += 1
    with _alarm(area):
        return parse(*args)


def mutate(data: bytes, draw: Callable[[Any], Any]) -> bytes:
    """One to four random edits of a valid input: flip, set to a boundary value, cut, extend,
    insert, delete or repeat a span. `draw` is a Hypothesis `data.draw`."""
    from hypothesis import strategies as st

    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(_EDITS))
        at = draw(st.integers(0, len(out))) if out else 0
        if edit == "flip" and at < len(out):
            out[at] ^= draw(st.integers(1, 255))
        elif edit == "boundary" and at < len(out):
            out[at] = draw(st.sampled_from((0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)))
        elif edit == "truncate":
            del out[at:]
        elif edit == "extend":
            out += draw(st.binary(min_size=1, max_size=64))
        elif edit == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif edit == "delete":
            del out[at : at + draw(st.integers(1, 16))]
        elif edit == "repeat":
            out[at:at] = out[at : at + draw(st.integers(1, 32))]
    return bytes(out)


_EDITS = ("flip", "boundary", "truncate", "extend", "insert", "delete", "repeat")
