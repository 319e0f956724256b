"""How long the speaker's loops wait between rounds of work. Pure.

After work that took T the next round waits at least T, so that however fast events come, at
least half of the loop's time is left to ExaBGP's acknowledgements, BFD timers and the other
loops (the passes and the status writer are both paced so)."""

from __future__ import annotations

# The least wait before a pass. An event after a quiet spell is one Service's change, and its
# route waits for this: traced in the lab (bench.bgp), a route reached the ToR's wire ~12 ms
# after the status PATCH, 5 of them this wait, then sat ~62 ms in FRR's work queues (bgpd's
# 50 ms hold, zebra's). Bursts are held back by the pause after each pass, not by this.
DEBOUNCE_S = 0.001
MAX_PAUSE_S = 2.0  # the pause after a pass never grows beyond this, however long it took


def pause_s(busy_s: float, idle_s: float) -> float:
    """How long to wait before the next pass: the last pass's duration (within bounds), so
    that passes never take more than about half of the loop, counted from the end of that
    pass. Time spent idle since then already counts: an event after a quiet minute waits
    only the debounce, not the last pass's length again."""
    return max(DEBOUNCE_S, min(busy_s, MAX_PAUSE_S) - idle_s)
