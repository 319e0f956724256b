"""hack.witness.Lines: a watcher's JSON lines, read without blocking and without losing any."""

from __future__ import annotations

import subprocess
import sys
import time

from hack import witness

SCRIPT = (
    "import json, sys, time\n"
    "print(json.dumps({'macs': ['a'], 't': 1}) + '\\n' + json.dumps({'macs': ['b'], 't': 2}),"
    " flush=True)\n"
    "time.sleep(0.5)\n"
    "print(json.dumps({'macs': ['c'], 't': 3}), flush=True)\n"
)


def test_lines_that_arrive_together_are_all_read_and_kept_in_order() -> None:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        reader = witness.lines_of(process)
        deadline = time.monotonic() + 10
        while len(reader.queue) < 2 and time.monotonic() < deadline:
            reader.fill(wait_s=0.1)
        # Both lines of the first write, though select only woke once.
        assert [e["macs"] for e in reader.queue] == [["a"], ["b"]]
        assert reader.queue.popleft()["t"] == 1  # what until() does: one at a time
        assert [e["t"] for e in witness.printed(process)] == [2]
        while not reader.ended and time.monotonic() < deadline:
            reader.fill(wait_s=0.1)
        assert [e["t"] for e in witness.printed(process)] == [3]
        assert witness.printed(process) == []
    finally:
        process.kill()
        process.wait(5)
        assert process.stdout is not None
        process.stdout.close()
