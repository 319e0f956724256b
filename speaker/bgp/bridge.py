"""ExaBGP's API helper: hand its stdin/stdout over to the speaker, then wait.

ExaBGP talks to "processes" it spawns itself (`process x { run ...; }`), so the speaker cannot
simply own ExaBGP's API pipes: they belong to a grandchild. This helper is that grandchild. It
connects to the speaker's Unix socket, passes its stdin and stdout (the two pipe ends ExaBGP
uses) with SCM_RIGHTS, and replaces itself with `sleep infinity`: from then on the speaker reads
and writes ExaBGP's pipes directly, with no copy in between, and the helper costs ~1 MB instead
of a Python interpreter's ~12 MB (measured).

The helper must stay alive (ExaBGP stops the peer when its process dies), and must not outlive
ExaBGP: PR_SET_PDEATHSIG is set first and survives the exec. It signals only a death after it was
set, so the helper then checks that ExaBGP is still its parent, and gives up if not (`orphaned`).
Should it be left behind all the same, the speaker kills it (`orphans`). Run as
`python -I bridge.py SOCKET`: standard library only, no site-packages.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import sys

_PR_SET_PDEATHSIG = 1


def orphaned(parent_at_start: int, parent_now: int, speaker: int) -> bool:
    """Whether ExaBGP died before PR_SET_PDEATHSIG was armed, so that no signal will come: the
    parent changed meanwhile, or was already not ExaBGP when we started: the speaker (which
    inherits orphans as PID 1 of its container) or init. ExaBGP is neither: the speaker starts
    it, and it is never PID 1."""
    return parent_now != parent_at_start or parent_now in (1, speaker)


def _peer_pid(sock: socket.socket) -> int:
    """The pid of the process listening on the other end: the speaker."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def hand_over(path: str) -> int:
    parent = os.getppid()  # ExaBGP, unless it already died
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if orphaned(parent, os.getppid(), _peer_pid(sock)):
            print("bridge: ExaBGP is gone, nothing to hand over", file=sys.stderr)
            return 1
        socket.send_fds(sock, [b"ironlb"], [sys.stdin.fileno(), sys.stdout.fileno()])
    except OSError as e:
        print(f"bridge: cannot hand the API over to {path}: {e}", file=sys.stderr)
        return 1
    finally:
        sock.close()
    with contextlib.suppress(OSError):
        os.execvp("sleep", ["sleep", "infinity"])
    while True:  # no `sleep` binary: wait here instead, at the cost of an interpreter
        signal.pause()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: bridge.py SOCKET", file=sys.stderr)
        sys.exit(2)
    sys.exit(hand_over(sys.argv[1]))
