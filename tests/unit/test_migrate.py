"""bench.migrate's pure parts: the longest gap a witness saw, whose status objects are whose."""

from __future__ import annotations

import pytest

from bench import migrate


@pytest.mark.parametrize(
    ("first", "changes", "expected"),
    [
        (True, [], 0.0),  # answered throughout
        (True, [(12.0, False), (12.5, True)], 0.5),
        (True, [(11.0, False), (11.2, True), (13.0, False), (14.0, True)], 1.0),  # the longest
        (True, [(5.0, False), (10.5, True)], 0.5),  # gone before the window: counted from start
        (True, [(18.0, False)], 2.0),  # still gone at the end
        (False, [], 10.0),  # never there
        (True, [(9.0, False), (9.5, True), (21.0, False)], 0.0),  # outside the window
    ],
)
def test_the_longest_gap_is_measured_within_the_window(
    first: bool, changes: list[tuple[float, bool]], expected: float
) -> None:
    assert migrate.longest_gap(first, changes, 10.0, 20.0) == expected


def test_status_objects_are_ironlbs_only_when_ironlb_alone_wrote_them() -> None:
    ours = {"metadata": {"managedFields": [{"manager": "ironlb-speaker"}]}}
    theirs = {"metadata": {"managedFields": [{"manager": "speaker"}]}}
    both = {"metadata": {"managedFields": [{"manager": "speaker"}, {"manager": "ironlb-speaker"}]}}
    assert migrate.ironlbs(ours)
    assert not migrate.ironlbs(theirs)
    assert not migrate.ironlbs(both)
    assert not migrate.ironlbs({"metadata": {}})  # read without managedFields: nobody's
