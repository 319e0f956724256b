"""The process inside every lab Pod: says who answered and whom it saw, nothing else.

    python -m hack.echo --pod NAME --node NODE [--port 8080] [--health-port 8081] [--drain S]
                        [--stream-port 8082]

On `--port` (TCP, IPv4 and IPv6) each connection gets one line, `<pod> <node> <client address>`,
so a test reads from a client's own connection which backend answered and whether the client's
source address survived the load balancer and kube-proxy (Local) or was rewritten (Cluster).

With `--stream-port`, each connection there is a long-lived stream: `<pod> <node> <n>` every
50 ms (n counting from 0) until the client closes, so a client sees how long a connection
through the load balancer lives and where it lands. Without it (the default) nothing else listens.

On `--health-port`, `GET /ready` answers 200 while the process is ready and 503 once it is not:
the Pod's readiness probe reads it, the way a kubelet would. SIGUSR1 makes the process unready,
SIGUSR2 ready again, so a test can flip readiness through a real probe. SIGTERM starts a drain:
the process keeps serving (and stays ready, as an application draining in-flight work does) for
`--drain` seconds, then exits; that is the window in which its endpoint is terminating but serving.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import itertools
import signal
import socket
import sys
import threading
import time
from types import FrameType

STREAM_EVERY_S = 0.05


def client_address(peer: str) -> str:
    """The client's address as the client would write it (an IPv4 client on the dual-stack
    socket arrives as ::ffff:a.b.c.d)."""
    address = ipaddress.ip_address(peer.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def listener(port: int) -> socket.socket:
    """One socket for both families."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(128)
    return s


class Echo:
    def __init__(self, pod: str, node: str) -> None:
        self.pod = pod
        self.node = node
        self.ready = threading.Event()
        self.ready.set()
        self.stop_at: float | None = None

    def serve_echo(self, server: socket.socket) -> None:
        while True:
            conn, peer = server.accept()
            with conn, contextlib.suppress(OSError):
                conn.sendall(f"{self.pod} {self.node} {client_address(peer[0])}\n".encode())

    def serve_stream(self, server: socket.socket) -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self._stream, args=(conn,), daemon=True).start()

    def _stream(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            for n in itertools.count():
                conn.sendall(f"{self.pod} {self.node} {n}\n".encode())
                time.sleep(STREAM_EVERY_S)

    def serve_health(self, server: socket.socket) -> None:
        while True:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(2.0)
                try:
                    request = conn.recv(1024).decode(errors="replace")
                except OSError:
                    continue
                ok = request.startswith("GET /ready") and self.ready.is_set()
                body = b"ok\n" if ok else b"not ready\n"
                status = b"200 OK" if ok else b"503 Service Unavailable"
                head = b"HTTP/1.0 " + status + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
                with contextlib.suppress(OSError):
                    conn.sendall(head + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.echo", description=__doc__)
    parser.add_argument("--pod", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--health-port", type=int, default=8081)
    parser.add_argument("--drain", type=float, default=0.0, help="seconds served after SIGTERM")
    parser.add_argument("--stream-port", type=int, default=0, help="long-lived streams; 0 = off")
    args = parser.parse_args(argv)
    echo = Echo(args.pod, args.node)
    servers = [listener(args.port), listener(args.health_port)]
    targets = [echo.serve_echo, echo.serve_health]
    if args.stream_port:
        servers.append(listener(args.stream_port))
        targets.append(echo.serve_stream)
    for target, server in zip(targets, servers, strict=True):
        threading.Thread(target=target, args=(server,), daemon=True).start()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGUSR1:
            echo.ready.clear()
        elif signum == signal.SIGUSR2:
            echo.ready.set()
        elif echo.stop_at is None:
            echo.stop_at = time.monotonic() + args.drain

    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    print(f"{args.pod} on {args.node} serving :{args.port}, health :{args.health_port}", flush=True)
    while echo.stop_at is None or time.monotonic() < echo.stop_at:
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
