"""ExaBGP's API helper: relay its stdin/stdout to the speaker over a Unix socket.

ExaBGP talks to "processes" it spawns itself (`process x { run ...; }`), so the speaker cannot
simply own ExaBGP's API pipes: they belong to a grandchild. This helper is that grandchild and
does nothing but copy bytes: ExaBGP's events and acks (our stdin) go to the socket, the speaker's
commands (from the socket) go to our stdout. It is run as `python -I bridge.py SOCKET` and so
imports nothing but the standard library (no package, no site-packages: starts in ~20 ms).

It exits as soon as either side closes. ExaBGP is started with `exabgp.api.terminate=true`, so a
dead helper makes ExaBGP exit, which closes the BGP sessions: a speaker that lost its API can
never leave stale routes behind a session that looks healthy.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys


def relay(path: str) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        print(f"bridge: cannot connect to {path}: {e}", file=sys.stderr)
        return 1
    stdin = sys.stdin.fileno()
    stdout = sys.stdout.fileno()
    selector = selectors.DefaultSelector()
    selector.register(stdin, selectors.EVENT_READ)
    selector.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj == stdin:
                data = os.read(stdin, 65536)
                if not data:
                    return 0
                sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    return 0
                view = memoryview(data)
                while view:
                    written = os.write(stdout, view)
                    view = view[written:]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: bridge.py SOCKET", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(relay(sys.argv[1]))
    except (BrokenPipeError, ConnectionError):
        sys.exit(0)
