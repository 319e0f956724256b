"""Real, short-lived processes for the tests of the speaker's process handling.

A scenario is a Python script run in a process of its own that makes itself a child subreaper,
so that orphans come to it as they come to the speaker (PID 1 of its container), while pytest's
own process stays as it was. Every process a test makes carries a mark in its environment, and
whatever is left of them afterwards is killed, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARK = "IRONLB_TEST_MARK"

_PRELUDE = """\
import ctypes, json, os, sys
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER


def child_states():
    # {pid: state} of this process's children, read from /proc.
    states = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat", "rb").read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[1]) == os.getpid():
                states[int(name)] = fields[0].decode()
    return states


"""


def kill_marked(mark: str) -> None:
    """SIGKILL every process that carries `mark` in its environment."""
    needle = f"{MARK}={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path("/proc", name, "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(name), signal.SIGKILL)


@contextlib.contextmanager
def marked_environment() -> Iterator[dict[str, str]]:
    """An environment for the processes of one test; they are killed at the end."""
    mark = uuid.uuid4().hex
    try:
        yield dict(os.environ, **{MARK: mark, "PYTHONPATH": str(ROOT)})
    finally:
        kill_marked(mark)


def run_scenario(script: str, timeout: float = 60.0) -> Any:
    """Run `script` (which may call `child_states()`) in a subreaper; the JSON it prints last."""
    with marked_environment() as env:
        done = subprocess.run(
            [sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
