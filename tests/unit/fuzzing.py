"""What the fuzz tests (`test_fuzz_*.py`) share: a count of inputs per area, and a hang guard.

Every input a fuzz test hands to a parser goes through `feed`, which counts it under the test's
area (the terminal summary prints the counts, so a run says how much it tried, not just that it
passed) and runs the parser under a real-time alarm: Hypothesis' deadline only judges an example
after it returned, and a parser stuck in a loop never returns. The alarm's bound is generous on
purpose; it separates "terminates" from "does not", it is not a speed requirement.
"""

from __future__ import annotations

import collections
import copy
import datetime
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

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


# --- JSON: what the API (or anyone reaching the webhook) can hand a parser ------------------------


def json_values(keys: Any = None, max_leaves: int = 25) -> Any:
    """Any JSON value; object keys drawn from `keys` (a strategy) when given."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**64), 2**64)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20)
        | st.sampled_from(_INTERESTING)
    )
    names = keys if keys is not None else st.text(max_size=12) | st.sampled_from(_INTERESTING)
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(names, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


# Values that parsers look at twice: addresses, ranges, durations, communities, selector words.
_INTERESTING = (
    "",
    " ",
    "10.0.0.0/24",
    "10.0.0.1",
    "fc00::/64",
    "fe80::1%eth0",
    "::ffff:10.0.0.1",
    "1.2.3.4-1.2.3.9",
    "1.2.3.9-1.2.3.4",
    "0.0.0.0/0",
    "1:2",
    "65535:65536",
    "large:1:2:3",
    "90s",
    "1m30s",
    "-1s",
    "9999999999h",
    "In",
    "NotIn",
    "Exists",
    "metallb-system",
    "a",
    "\u0000",
    "\ud800",
    "x" * 300,
)


# Keys of metallb.io objects, so that random JSON objects often say something a parser reads.
OBJECT_KEYS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "spec",
        "addresses",
        "autoAssign",
        "ipAddressPools",
        "ipAddressPoolSelectors",
        "nodeSelectors",
        "matchLabels",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "interfaces",
        "peers",
        "myASN",
        "peerASN",
        "peerAddress",
        "holdTime",
        "bfdProfile",
        "communities",
        "aggregationLength",
        "localPref",
        "serviceAllocation",
        "namespaces",
        "priority",
    ]
) | st.text(max_size=8)


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, as key/index paths (the root is `()`)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += json_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += json_paths(child, (*prefix, index))
    return out


def mutate_json(value: Any, draw: Callable[[Any], Any], keys: Any = None) -> Any:
    """A valid JSON document with one to three places below the root replaced, deleted, wrapped
    in a list or given an unknown sibling. `draw` is a Hypothesis `data.draw`."""
    out = copy.deepcopy(value)
    for _ in range(draw(st.integers(1, 3))):
        places = json_paths(out)[1:]  # the root stays: the API only ever hands over objects
        if not places:
            break
        path = draw(st.sampled_from(places))
        replacement = draw(json_values(keys, max_leaves=8))
        parent = out
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = draw(st.sampled_from(("replace", "delete", "wrap", "sibling")))
        if action == "delete":
            del parent[last]
        elif action == "wrap":
            parent[last] = [parent[last]]
        elif action == "sibling" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = replacement
        else:
            parent[last] = replacement
    return out
