"""The listening socket of every HTTP server the programs run (metrics, health, the webhook).

The kubelet probes a container at its Pod's address, and a Service routes the apiserver's
admission calls there too; on an IPv6-only or IPv6-primary cluster that address is IPv6. A
server bound to `0.0.0.0` is then unreachable: probes fail and liveness restarts it for ever.
So by default a server listens on `::` with IPV6_V6ONLY off, one socket taking both families on
one port (port 0 picks one port for both); a node whose kernel has no IPv6 gets `0.0.0.0`.
"""

from __future__ import annotations

import ipaddress
import socket

BACKLOG = 128


def listen(port: int, host: str | None = None) -> socket.socket:
    """A bound, listening TCP socket: on `host`, or on every address of both families."""
    if host is not None:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
        return _bound(family, host, port)
    try:
        return _bound(socket.AF_INET6, "::", port, dual_stack=True)
    except OSError:
        # No IPv6 in this kernel (or disabled): IPv4 alone is all there is to serve.
        return _bound(socket.AF_INET, "0.0.0.0", port)


def _bound(family: int, host: str, port: int, *, dual_stack: bool = False) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port
