"""The membership command line's event stream: one JSON line per event on stdout.

Logs are not written here: every process logs through `ironlb_io.logs`, one schema for all.
"""

from __future__ import annotations

import json
import time
from typing import Any


def event(stream: Any, **fields: Any) -> None:
    """One JSON line on stream (the CLI's stdout), stamped with the monotonic clock.

    CLOCK_MONOTONIC is shared by every process on a host, so the benchmark can compare the stamps
    of different members directly.
    """
    fields = {"t": time.monotonic(), **fields}
    stream.write(json.dumps(fields, separators=(",", ":"), default=str) + "\n")
    stream.flush()
