"""speaker.pacing.pause_s: how long the loop waits before the next pass."""

from __future__ import annotations

import pytest

from speaker import pacing

D, M = pacing.DEBOUNCE_S, pacing.MAX_PAUSE_S


@pytest.mark.parametrize(
    ("busy_s", "idle_s", "want"),
    [
        # Right after a pass: as long as it took, within bounds.
        (0.0, 0.0, D),
        (0.3, 0.0, 0.3),
        (60.0, 0.0, M),
        # An event a while after the pass: the quiet time already counts.
        (0.3, 0.1, 0.2),
        (0.3, 0.3, D),
        (1.2, 120.0, D),
        (60.0, 0.5, M - 0.5),
        (60.0, 5.0, D),
    ],
)
def test_the_pause_counts_from_the_end_of_the_last_pass(
    busy_s: float, idle_s: float, want: float
) -> None:
    assert pacing.pause_s(busy_s, idle_s) == pytest.approx(want)
