"""Stopping what the harness started: one rule for every process the lab, the control plane,
the deployments and the demo run.

A polite signal first (SIGTERM, or the caller's), a bounded wait, then SIGKILL and another
bounded wait. Processes started with `start_new_session=True` lead a process group of their own,
and the whole group is signalled, so a wrapper (`ip netns exec`, `env`) never leaves its child.
Standard library only: `hack/lab down` must work before any environment is installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

STOP_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 5.0


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie has left its namespaces and
    released its ports; it only waits for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def argv(pid: int) -> list[str] | None:
    """The arguments of running process `pid` as /proc/<pid>/cmdline gives them (undecodable
    bytes replaced), or None when it is gone or unreadable. A kernel thread or a zombie has
    none: [] for them."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # Each argument ends with a NUL; a process that rewrote its command line may have dropped
    # the last one.
    return raw.removesuffix(b"\0").decode(errors="replace").split("\0") if raw else []


def interrupt(signum: int, frame: FrameType | None) -> None:
    """A handler for SIGTERM (a `timeout`, a CI job cancelled): stop like Ctrl-C, so that the
    `finally` blocks stop what was started."""
    raise KeyboardInterrupt(f"signal {signum}")


def _signal(pid: int, sig: int, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait(pids: Sequence[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def stop_pids(
    pids: Sequence[int],
    *,
    sig: int = signal.SIGTERM,
    group: bool = False,
    timeout: float = STOP_TIMEOUT_S,
) -> list[int]:
    """Signal every pid (or its process group) at once, wait, SIGKILL what is left; returns
    the pids that survived both."""
    for pid in pids:
        _signal(pid, sig, group)
    _wait(pids, timeout)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL, group)
    _wait(pids, KILL_TIMEOUT_S)
    return [p for p in pids if alive(p)]


def stop(
    process: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S
) -> None:
    """Stop a process we started in a session of its own, and reap it."""
    if process.poll() is None:
        stop_pids([process.pid], sig=sig, group=True, timeout=timeout)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(KILL_TIMEOUT_S)
