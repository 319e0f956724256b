"""What every lab bench does the same way: one lab at a time, progress lines on stderr, and the
figures as one JSON object on the last line of stdout, printed also when a part failed.

    session = Session()
    with session.incomplete_on(BenchError, network_lab.LabError, KeyboardInterrupt):
        with session.lab() as lab:
            measure(lab, r, session.say)
    return session.report(summarise(r, session.incomplete, session.started))
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hack import lab as network_lab

Say = Callable[[str], None]


def say(message: str) -> None:
    """A progress line, on stderr: stdout ends with the figures."""
    print(message, file=sys.stderr, flush=True)


def say_since(began: float) -> Say:
    """`say` with the seconds since `began` before each line."""

    def say_at(message: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}] {message}", file=sys.stderr, flush=True)

    return say_at


class Session:
    """One run of a bench: its progress lines (`say`), its phases' times (`phases`, the lab's
    start as `lab_up`), when it started measuring (`started`: once the lab lock was held) and,
    when a part failed, why (`incomplete`)."""

    def __init__(self, say: Say = say, phases: dict[str, float] | None = None) -> None:
        self.say = say
        self.phases: dict[str, float] = {} if phases is None else phases
        self.started = time.monotonic()
        self.incomplete: str | None = None

    @contextlib.contextmanager
    def lab(self, directory: Path | None = None, **options: Any) -> Iterator[network_lab.Lab]:
        """A 3-node lab, once no other session's is running (its lock waited for, said so), for
        the block (`directory`, `options`: as `hack.lab.running`'s)."""
        with network_lab.exclusive(waiting=self.say):
            self.started = time.monotonic()  # after the wait for another session's lab
            with network_lab.running(nodes=3, directory=directory, **options) as lab:
                self.phases["lab_up"] = round(time.monotonic() - self.started, 1)
                self.say(f"lab up in {self.phases['lab_up']:.1f} s")
                yield lab

    @contextlib.contextmanager
    def incomplete_on(self, *errors: type[BaseException]) -> Iterator[None]:
        """The block's failure with one of `errors` ends the run, not the bench: it becomes
        `incomplete` ("Type: message"), and what was measured before it is still reported."""
        try:
            yield
        except errors as e:
            self.incomplete = f"{type(e).__name__}: {e}"
            self.say(f"incomplete: {self.incomplete}")

    def elapsed_s(self) -> float:
        """Seconds since `started`, to 0.1 s."""
        return round(time.monotonic() - self.started, 1)

    def report(self, figures: Mapping[str, Any]) -> int:
        """The figures as the last line of stdout, one JSON object; the exit status (1: the run
        is incomplete)."""
        print(json.dumps(figures))
        return 0 if self.incomplete is None else 1
