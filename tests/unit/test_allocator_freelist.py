"""The sorted structures under the allocator, checked against plain Python sets."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from controller import freelist

Op = tuple[bool, int]  # (add?, value)
ops = st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=200)


@contextmanager
def tiny_blocks() -> Iterator[None]:
    """Blocks of at most 4 values, so that a few dozen values split and empty many blocks."""
    with mock.patch.object(freelist, "LOAD", 2):
        yield


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(-5, 70))
def test_sorted_ints_behaves_like_a_sorted_set(operations: list[Op], probe: int) -> None:
    with tiny_blocks():
        s = freelist.SortedInts()
        model: set[int] = set()
        for add, value in operations:
            if add:
                assert s.add(value) is (value not in model)
                model.add(value)
            else:
                assert s.discard(value) is (value in model)
                model.discard(value)
            assert len(s) == len(model)
        assert list(s) == sorted(model)
        assert bool(s) is bool(model)
        assert (probe in s) is (probe in model)
        above = [v for v in model if v >= probe]
        below = [v for v in model if v <= probe]
        assert s.ceil(probe) == (min(above) if above else None)
        assert s.floor(probe) == (max(below) if below else None)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(-5, 70))
def test_run_set_keeps_maximal_runs(operations: list[Op], probe: int) -> None:
    with tiny_blocks():
        runs = freelist.RunSet()
        model: set[int] = set()
        for add, value in operations:
            if add:
                assert runs.add(value) is (value not in model)
                model.add(value)
            else:
                assert runs.remove(value) is (value in model)
                model.discard(value)
        assert len(runs) == len(model)
        listed = list(runs.runs())
        assert runs.run_count == len(listed)
        covered = [v for start, end in listed for v in range(start, end + 1)]
        assert covered == sorted(model)
        # Maximal: consecutive runs never touch.
        for (_, end), (start, _) in itertools.pairwise(listed):
            assert start > end + 1
        expected = probe
        while expected in model:
            expected += 1
        assert runs.first_absent(probe) == expected
        assert (probe in runs) is (probe in model)


def test_run_set_merges_and_splits() -> None:
    runs = freelist.RunSet()
    for v in (1, 3, 2):
        runs.add(v)
    assert list(runs.runs()) == [(1, 3)]
    runs.remove(2)
    assert list(runs.runs()) == [(1, 1), (3, 3)]
    assert runs.first_absent(1) == 2
    runs.remove(1)
    runs.remove(3)
    assert list(runs.runs()) == [] and runs.first_absent(1) == 1
    assert "x" not in runs and "x" not in freelist.SortedInts()


def test_large_sequential_fill_is_one_run() -> None:
    runs = freelist.RunSet()
    for v in range(10_000):
        runs.add(v)
    assert runs.run_count == 1 and runs.first_absent(0) == 10_000
    for v in range(0, 10_000, 2):
        runs.remove(v)
    assert runs.run_count == 5_000 and runs.first_absent(1) == 2
