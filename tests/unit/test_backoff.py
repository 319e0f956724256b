"""ironlb.backoff: the retry schedule of every start-up dependency."""

from __future__ import annotations

import random

import pytest

from ironlb import backoff


class Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_default_schedule_doubles_from_one_second_to_thirty() -> None:
    b = backoff.Backoff(rng=Fixed(0.0))
    assert [b.next() for _ in range(8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_jitter_only_shortens_and_stays_within_its_fraction() -> None:
    b = backoff.Backoff(rng=random.Random(7))
    for attempt in range(50):
        ceiling = b.ceiling(attempt)
        delay = b.next()
        assert ceiling * (1 - backoff.JITTER) <= delay <= ceiling
    # Not every draw is the ceiling: retries of many speakers spread out.
    jittered = backoff.Backoff(rng=random.Random(3))
    assert len({round(jittered.next(), 6) for _ in range(10)}) > 1


def test_reset_starts_again_from_the_first_delay() -> None:
    b = backoff.Backoff(rng=Fixed(0.0))
    for _ in range(10):
        b.next()
    b.reset()
    assert b.next() == 1.0


def test_ceiling_never_overflows_after_many_failures() -> None:
    assert backoff.Backoff().ceiling(10_000) == backoff.CAP_S


@pytest.mark.parametrize(
    "kwargs",
    [{"first": 0.0}, {"first": 40.0, "cap": 30.0}, {"factor": 0.5}, {"jitter": 1.0}],
)
def test_nonsense_schedules_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        backoff.Backoff(**kwargs)  # type: ignore[arg-type]
