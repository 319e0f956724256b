"""ExaBGP's API helper: hand its stdin/stdout over to the speaker, then wait.

ExaBGP talks to "processes" it spawns itself (`process x { run ...; }`), so the speaker cannot
simply own ExaBGP's API pipes: they belong to a grandchild. This helper is that grandchild. It
connects to the speaker's Unix socket, passes its stdin and stdout (the two pipe ends ExaBGP
uses) with SCM_RIGHTS, and replaces itself with `sleep infinity`: from then on the speaker reads
and writes ExaBGP's pipes directly, with no copy in between, and the helper costs ~1 MB instead
of a Python interpreter's ~12 MB (measured).

The helper must stay alive (ExaBGP stops the peer when its process dies), and must not outlive
ExaBGP: PR_SET_PDEATHSIG is set before the exec and survives it. Run as
`python -I bridge.py SOCKET`: standard library only, no site-packages.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1


def hand_over(path: str) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        socket.send_fds(sock, [b"ironlb"], [sys.stdin.fileno(), sys.stdout.fileno()])
    except OSError as e:
        print(f"bridge: cannot hand the API over to {path}: {e}", file=sys.stderr)
        return 1
    finally:
        sock.close()
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        os.execvp("sleep", ["sleep", "infinity"])
    except OSError:
        pass
    while True:  # no `sleep` binary: wait here instead, at the cost of an interpreter
        signal.pause()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: bridge.py SOCKET", file=sys.stderr)
        sys.exit(2)
    sys.exit(hand_over(sys.argv[1]))
