"""BFD over UDP for single-hop sessions (RFC 5881), around the pure `machine.Session`.

One receiving socket per address family on port 3784, reading the TTL / hop limit of every
datagram (IP_RECVTTL / IPV6_RECVHOPLIMIT): RFC 5881 §5 requires dropping control packets whose
TTL is not 255, which proves the sender is on the link. Each session sends from its own socket,
bound to a source port in 49152-65535 that stays the same for the session's life, with TTL 255
and DSCP CS6 (network control, as FRR's bfdd).

Demultiplexing (§6.3 of RFC 5880): by Your Discriminator when the peer set one, otherwise by the
peer's address, which then must be the address the session was made for.

Each session keeps one loop timer at its machine's next deadline; the clock is the loop's
monotonic clock, passed into the machine, never read by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import random
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from speaker.bgp.bfd import machine
from speaker.bgp.bfd import packet as pkt

log = logging.getLogger(__name__)

CONTROL_PORT = 3784
SOURCE_PORTS = (49152, 65535)
TTL = 255
DSCP_CS6 = 0xC0
_IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
_IPV6_RECVHOPLIMIT = getattr(socket, "IPV6_RECVHOPLIMIT", 51)
_IPV6_HOPLIMIT = getattr(socket, "IPV6_HOPLIMIT", 52)
_ANCILLARY = socket.CMSG_SPACE(struct.calcsize("i"))

_TTL_CMSGS = ((socket.IPPROTO_IP, socket.IP_TTL), (socket.IPPROTO_IPV6, _IPV6_HOPLIMIT))

ChangeCallback = Callable[[str, machine.StateChange], None]


@dataclass
class Stats:
    received: int = 0
    wrong_ttl: int = 0
    undecodable: int = 0
    unknown_session: int = 0
    send_errors: int = 0


@dataclass
class _Entry:
    peer: str
    session: machine.Session
    sock: socket.socket
    handle: asyncio.TimerHandle | None = None
    source_port: int = 0


def _bind_source(family: int, local: str | None, rng: random.Random) -> tuple[socket.socket, int]:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, TTL)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, DSCP_CS6)
        else:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, TTL)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, DSCP_CS6)
        for _ in range(64):
            port = rng.randint(*SOURCE_PORTS)
            try:
                sock.bind((local or "", port))
                return sock, port
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        raise OSError(errno.EADDRINUSE, "no free BFD source port")
    except BaseException:
        sock.close()
        raise


class Endpoint:
    """All BFD sessions of this speaker. `on_change(peer, change)` reports state changes."""

    def __init__(
        self,
        on_change: ChangeCallback,
        port: int = CONTROL_PORT,
        rng: random.Random | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_change = on_change
        self._port = port
        self._rng = rng or random.SystemRandom()
        self._receivers: dict[int, socket.socket] = {}
        self._by_peer: dict[str, _Entry] = {}
        self._by_discriminator: dict[int, _Entry] = {}
        self.stats = Stats()

    # --- sessions --------------------------------------------------------------------------

    def add(self, peer: str, timers: machine.Timers, local: str | None = None) -> None:
        """Start a session with `peer` (an IP address), sending from `local` if given."""
        peer = str(ipaddress.ip_address(peer))
        if peer in self._by_peer:
            self.update(peer, timers)
            return
        family = socket.AF_INET6 if ":" in peer else socket.AF_INET
        self._receiver(family)
        sock, source_port = _bind_source(family, local, self._rng)
        discriminator = self._new_discriminator()
        session = machine.Session(discriminator, timers, self._loop.time(), self._rng)
        entry = _Entry(peer, session, sock, source_port=source_port)
        self._by_peer[peer] = entry
        self._by_discriminator[discriminator] = entry
        self._run(entry, session.tick(self._loop.time()))

    def update(self, peer: str, timers: machine.Timers) -> None:
        entry = self._by_peer[peer]
        if entry.session.timers != timers:
            self._run(entry, entry.session.set_timers(timers, self._loop.time()))

    async def remove(self, peer: str, linger: float = 0.5) -> None:
        """Tell the peer AdminDown (it must not treat that as a failure), then forget it."""
        entry = self._by_peer.get(peer)
        if entry is None:
            return
        self._run(entry, entry.session.set_admin_down(True, self._loop.time()))
        if linger > 0:
            await asyncio.sleep(linger)
        self._drop(entry)

    def session(self, peer: str) -> machine.Session | None:
        entry = self._by_peer.get(peer)
        return entry.session if entry else None

    def sessions(self) -> dict[str, machine.Session]:
        return {peer: e.session for peer, e in self._by_peer.items()}

    def source_port(self, peer: str) -> int | None:
        entry = self._by_peer.get(peer)
        return entry.source_port if entry else None

    def close(self) -> None:
        for entry in list(self._by_peer.values()):
            self._drop(entry)
        for sock in self._receivers.values():
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._receivers.clear()

    def _new_discriminator(self) -> int:
        while True:
            value = self._rng.randint(1, 0xFFFFFFFF)
            if value not in self._by_discriminator:
                return value

    def _drop(self, entry: _Entry) -> None:
        if entry.handle is not None:
            entry.handle.cancel()
        self._by_peer.pop(entry.peer, None)
        self._by_discriminator.pop(entry.session.local_discriminator, None)
        entry.sock.close()

    # --- timers and sending -----------------------------------------------------------------

    def _run(self, entry: _Entry, outputs: list[machine.Output]) -> None:
        for output in outputs:
            if isinstance(output, machine.Transmit):
                self._send(entry, output.packet)
            else:
                log.info(
                    "bfd %s: %s -> %s (%s)",
                    entry.peer,
                    output.old.name,
                    output.new.name,
                    output.diag.name,
                )
                try:
                    self._on_change(entry.peer, output)
                except Exception:
                    log.exception("bfd state change callback failed")
        self._arm(entry)

    def _arm(self, entry: _Entry) -> None:
        if entry.handle is not None:
            entry.handle.cancel()
            entry.handle = None
        deadline = entry.session.next_deadline()
        if deadline is not None and entry.peer in self._by_peer:
            entry.handle = self._loop.call_at(deadline, self._fire, entry)

    def _fire(self, entry: _Entry) -> None:
        entry.handle = None
        if entry.peer in self._by_peer:
            self._run(entry, entry.session.tick(self._loop.time()))

    def _send(self, entry: _Entry, packet: pkt.ControlPacket) -> None:
        try:
            entry.sock.sendto(pkt.encode(packet), (entry.peer, self._port))
        except OSError:
            # Link down, no route, buffer full: the detection timers will tell the story.
            self.stats.send_errors += 1

    # --- receiving --------------------------------------------------------------------------

    def _receiver(self, family: int) -> None:
        if family in self._receivers:
            return
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, _IP_RECVTTL, 1)
                sock.bind(("0.0.0.0", self._port))
            else:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_RECVHOPLIMIT, 1)
                sock.bind(("::", self._port))
        except BaseException:
            sock.close()
            raise
        self._receivers[family] = sock
        self._loop.add_reader(sock.fileno(), self._readable, sock)

    def _readable(self, sock: socket.socket) -> None:
        for _ in range(64):  # bounded: let other callbacks run under a flood
            try:
                data, ancillary, _flags, address = sock.recvmsg(512, _ANCILLARY)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                source = str(ipaddress.ip_address(str(address[0]).split("%")[0]))
            except ValueError:
                continue
            self._datagram(data, _ttl(ancillary), source)

    def _datagram(self, data: bytes, ttl: int | None, source: str) -> None:
        self.stats.received += 1
        packet = pkt.decode(data)
        if packet is None:
            self.stats.undecodable += 1
            return
        if packet.your_discriminator:
            entry = self._by_discriminator.get(packet.your_discriminator)
            if entry is not None and entry.peer != source:
                entry = None
        else:
            entry = self._by_peer.get(source)
        if entry is None:
            self.stats.unknown_session += 1
            return
        if ttl != TTL:
            self.stats.wrong_ttl += 1
            return
        self._run(entry, entry.session.receive(packet, self._loop.time()))


def _ttl(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, value in ancillary:
        if (level, kind) in _TTL_CMSGS:
            with contextlib.suppress(struct.error):
                return int(struct.unpack("i", value[: struct.calcsize("i")])[0])
    return None
