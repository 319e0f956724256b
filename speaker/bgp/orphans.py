"""Orphans reparented to the speaker: reaped here, so that they do not stay zombies.

The speaker is PID 1 of its container (the image has no init), so a process whose parent dies is
reparented to it. ExaBGP's API helper (`bridge.py`, then `sleep infinity`) is one when ExaBGP is
killed: PR_SET_PDEATHSIG ends it, and its exit status then waits for the speaker, which never
asked for it. And if ExaBGP died before the helper armed PR_SET_PDEATHSIG, the helper lives on.

Only orphans are touched, never a child the speaker started itself: its exit status belongs to
whoever waits for it (asyncio's child watcher, for ExaBGP), and reaping it here would steal it.
The test needs no bookkeeping. A process the speaker forks starts in the speaker's session and
can leave it only with setsid(), which makes it the leader of a session of its own; so a child in
another session that does not lead it was forked by someone else, and inherited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Child:
    pid: int
    state: str  # "Z": a zombie, waiting to be reaped
    session: int


def parse_stat(stat: bytes) -> tuple[int, str, int, int] | None:
    """(pid, state, ppid, session) from /proc/PID/stat; None if it cannot be read as one."""
    try:
        pid = int(stat[: stat.index(b" ")])
        # The command name is in parentheses and may hold anything, ")" and spaces included.
        fields = stat[stat.rindex(b")") + 2 :].split()
        return pid, fields[0].decode(), int(fields[1]), int(fields[3])
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def children(proc: Path = PROC) -> list[Child]:
    """This process's children (read from /proc; one that vanishes meanwhile is skipped)."""
    me = os.getpid()
    found = []
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = (proc / name / "stat").read_bytes()
        except OSError:
            continue
        parsed = parse_stat(stat)
        if parsed is not None and parsed[2] == me:
            found.append(Child(pid=parsed[0], state=parsed[1], session=parsed[3]))
    return found


def is_orphan(child: Child, own_session: int) -> bool:
    """Inherited, not started by us: in another session, and not the leader of it."""
    return child.session != own_session and child.pid != child.session


def reap(proc: Path = PROC) -> list[int]:
    """Reap the orphans that have exited; their pids."""
    own = os.getsid(0)
    reaped = []
    for child in children(proc):
        if child.state == "Z" and is_orphan(child, own):
            with contextlib.suppress(ChildProcessError):
                pid, _status = os.waitpid(child.pid, os.WNOHANG)
                if pid:
                    reaped.append(pid)
    return reaped


async def collect(
    session: int, grace: float = 0.5, timeout: float = 2.0, proc: Path = PROC
) -> list[int]:
    """Once the leader of `session` (an ExaBGP) has exited and been reaped: reap what it left to
    us, and every other orphan that has exited. One still alive after `grace` (ExaBGP died
    before its helper armed PR_SET_PDEATHSIG) is killed: it must not outlive ExaBGP. Returns
    the reaped pids; gives up after `timeout` (a later call reaps what is left)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    own = os.getsid(0)
    reaped: list[int] = []
    killed: set[int] = set()
    while True:
        reaped += reap(proc)
        left = [c for c in children(proc) if c.session == session and is_orphan(c, own)]
        if not left:
            return reaped  # (one that exited since `reap` is in `left`: reaped next round)
        now = loop.time()
        if now - start >= timeout:
            log.warning(
                "processes %s left by ExaBGP %d did not exit", [c.pid for c in left], session
            )
            return reaped
        if now - start >= grace:
            for child in left:
                if child.state != "Z" and child.pid not in killed:
                    # Our child and not reaped yet, so the pid cannot have been reused.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child.pid, signal.SIGKILL)
                    killed.add(child.pid)
        await asyncio.sleep(0.02)
