"""Bounded exponential backoff with jitter, for every start-up dependency that may come late.

A dependency that is not there yet (cluster DNS, the apiserver, a mounted key, an address on the
node) is retried, never fatal: the first retry after `first` seconds, each next one `factor` times
later, never more than `cap`. Jitter spreads the retries of a whole DaemonSet that failed at
once: each delay is drawn from [delay * (1 - jitter), delay].
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FIRST_S = 1.0
FACTOR = 2.0
CAP_S = 30.0
JITTER = 0.2


@dataclass
class Backoff:
    first: float = FIRST_S
    factor: float = FACTOR
    cap: float = CAP_S
    jitter: float = JITTER
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError("backoff needs 0 < first <= cap, factor >= 1, 0 <= jitter < 1")

    def ceiling(self, attempt: int) -> float:
        """The delay before retry number `attempt` (0-based), before jitter."""
        delay = self.first
        for _ in range(attempt):
            delay *= self.factor
            if delay >= self.cap:
                return self.cap
        return min(delay, self.cap)

    def next(self) -> float:
        """The delay before the next retry; each call counts one more failure."""
        ceiling = self.ceiling(self.attempt)
        self.attempt += 1
        return ceiling * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        """After a success: the next failure starts from `first` again."""
        self.attempt = 0
