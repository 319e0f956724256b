"""A running member: the state machine behind an asyncio UDP socket, and the speaker's async API.

The transport's only jobs are to open datagrams (size check, AES-GCM, replay window, decoding;
failures are counted drops, never exceptions), hand them to the machine with the loop's clock,
seal and send what the machine returns, and keep one timer armed at the machine's next deadline.
asyncio runs ready I/O callbacks before due timers in each loop iteration, so a reply that
arrived while the process was starved is read before the probe it answers is judged.

For the speaker: `await node.start()`, `node.members()` (alive names, itself included),
`node.set_metadata(data)` (our own metadata, at most codec.MAX_META bytes, gossiped to every
member; callable before `start`, and then the first Alive and join carry it),
`node.metadata()` (name -> metadata of every alive member, itself included),
`node.changed` (an asyncio.Event set on every change of that set or of a member's metadata,
and when `node.returns`, the count of verdicts of our own death we refuted, grows; clear it
after reading), an optional `on_change` callback for each change (`Change.kind` tells
a change of state from one of metadata only), `node.join(seeds)` to refresh seeds,
`node.set_keyring(...)` after a Secret update, and `await node.leave()` on SIGTERM.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Callable, Iterable

from speaker.membership import codec, machine, sealing
from speaker.membership import config as cfg
from speaker.membership import messages as m

log = logging.getLogger(__name__)

AUTH_WARNING_EVERY_S = 60.0
# Drop reasons that mean the sender's key is not ours (sealing.Opener).
KEY_MISMATCH = frozenset({"unknown_key", "auth", "unauthenticated", "encrypted"})


def parse_address(text: str, default_port: int = 7946) -> m.Address:
    """host, host:port, [v6] or [v6]:port; a host name is resolved once, here."""
    text = text.strip()
    port = default_port
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, raw_port = text.partition(":")
        port = int(raw_port)
    else:
        host = text
    if not 0 < port < 65536:
        raise ValueError(f"bad port in {text!r}")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        ip = ipaddress.ip_address(info[0][4][0])
    return m.Address(str(ip), port)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, node: Node) -> None:
        self._node = node

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self._node._on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        # ICMP unreachable from a dead peer, or a local link that is down: both are normal.
        self._node.send_errors += 1


class Node:
    def __init__(
        self,
        name: str,
        bind: m.Address,
        *,
        advertise: m.Address | None = None,
        seeds: Iterable[m.Address] = (),
        keyring: sealing.Keyring | None = None,
        config: cfg.Config = cfg.DEFAULT,
        on_change: Callable[[machine.Change], None] | None = None,
        drop_rate: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        problems = cfg.validate(config)
        if problems:
            raise ValueError("; ".join(str(p) for p in problems))
        self.name = name
        self.bind = bind
        self.advertise = advertise or bind
        self.config = config
        self.on_change = on_change
        self.changed = asyncio.Event()
        self.drops: collections.Counter[str] = collections.Counter()
        self.received = 0
        self.sent = 0
        self.send_errors = 0
        # Test hook: drop this fraction of incoming datagrams (this kernel has no tc netem).
        self._drop_rate = drop_rate
        self._auth_said_at: float | None = None
        self._rng = rng or random.Random()
        keyring = keyring or sealing.Keyring()
        self._sealer = sealing.Sealer(keyring)
        self._opener = sealing.Opener(keyring)
        self._seeds = list(seeds)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._alive: frozenset[str] = frozenset()
        self._meta: bytes = b""
        self._metadata: dict[str, bytes] = {}
        self.machine = machine.Machine(
            config, name, self.advertise, random.Random(self._rng.getrandbits(64)), 0.0
        )

    # --- API -----------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        family = socket.AF_INET6 if ":" in self.bind.host else socket.AF_INET
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Protocol(self), local_addr=(self.bind.host, self.bind.port), family=family
        )
        self._transport = transport
        if self.bind.port == 0 and self.advertise.port == 0:
            port = transport.get_extra_info("sockname")[1]
            self.bind = self.advertise = m.Address(self.bind.host, port)
        self.machine = machine.Machine(
            self.config,
            self.name,
            self.advertise,
            random.Random(self._rng.getrandbits(64)),
            loop.time(),
            meta=self._meta,
            clock_offset=time.time() - loop.time(),
        )
        if self._sealer.keyring.plain:
            log.warning(
                "membership traffic is NOT encrypted: no key configured",
                extra={"node": self.name},
            )
        log.info(
            "membership started",
            extra={"node": self.name, "address": str(self.advertise)},
        )
        self._alive = self.machine.alive()
        self._metadata = self.machine.meta()
        self._apply(self.machine.join(loop.time(), self._seeds))

    def members(self) -> frozenset[str]:
        return self.machine.alive()

    @property
    def returns(self) -> int:
        """How many times we refuted a verdict of our own death (`machine.ChangeKind.RETURNED`):
        the others may have announced our addresses meanwhile."""
        return self.machine.stats.deaths_refuted

    def states(self) -> dict[str, m.State]:
        return self.machine.states()

    def metadata(self) -> dict[str, bytes]:
        """Every alive member's metadata (b"" when it has none), ours included."""
        return self.machine.meta()

    def set_metadata(self, data: bytes) -> None:
        """Publish our metadata; unchanged data sends nothing. Raises ValueError when it is
        longer than codec.MAX_META or would not fit a datagram."""
        data = bytes(data)
        if self._loop is None:
            # Not started: checked now, carried by the machine `start` makes.
            self.machine.set_meta(0.0, data)
            self._meta = data
            return
        output = self.machine.set_meta(self._loop.time(), data)
        self._meta = data
        self._apply(output)

    def join(self, seeds: Iterable[m.Address]) -> None:
        self._seeds = list(seeds)
        if self._loop is not None:
            self._apply(self.machine.join(self._loop.time(), self._seeds))

    def set_keyring(self, keyring: sealing.Keyring) -> None:
        self._sealer.set_keyring(keyring)
        self._opener.set_keyring(keyring)
        log.info("membership keyring updated", extra={"keys": len(keyring.keys)})

    async def leave(self) -> None:
        """Tell every member we are going, then close; they drop us at once."""
        if self._loop is None or self._transport is None:
            return
        output = self.machine.leave(self._loop.time())
        for i in range(self.config.leave_repeats):
            if i:
                await asyncio.sleep(self.config.leave_spacing)
            self._send_all(output.sends)
        log.info("membership left", extra={"node": self.name})
        self.close()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # --- transport -----------------------------------------------------------------------------

    def _say_unauthenticated(self, addr: tuple[str | int, ...], reason: str) -> None:
        """A datagram our key cannot open is most often a member with another key or none (a
        Secret rotated on some nodes only): say so, at most once a minute, not per datagram."""
        assert self._loop is not None
        now = self._loop.time()
        if self._auth_said_at is not None and now - self._auth_said_at < AUTH_WARNING_EVERY_S:
            return
        self._auth_said_at = now
        log.warning(
            "membership datagrams do not open with our key: a member with another memberlist key?",
            extra={"source": str(addr[0]), "reason": reason, "dropped_total": self.drops[reason]},
        )

    def _on_datagram(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.received += 1
        if self._drop_rate and self._rng.random() < self._drop_rate:
            self.drops["injected"] += 1
            return
        if len(data) > self.config.max_datagram:
            self.drops["oversized"] += 1
            return
        packet = self._opener.open(data)
        if isinstance(packet, codec.Drop):
            self.drops[packet.reason] += 1
            if packet.reason in KEY_MISMATCH:
                self._say_unauthenticated(addr, packet.reason)
            return
        messages = codec.decode(packet)
        if isinstance(messages, codec.Drop):
            self.drops[messages.reason] += 1
            return
        assert self._loop is not None
        try:
            source = m.Address(str(ipaddress.ip_address(str(addr[0]))), int(addr[1]))
            output = self.machine.receive(self._loop.time(), source, messages)
        except Exception:
            # A bug must cost one datagram, not the process.
            self.drops["error"] += 1
            log.exception("membership: datagram handling failed")
            return
        self._apply(output)

    def _on_timer(self) -> None:
        self._timer = None
        assert self._loop is not None
        try:
            output = self.machine.tick(self._loop.time())
        except Exception:
            log.exception("membership: timer handling failed")
            output = machine.Output()
        self._apply(output)

    def _send_all(self, sends: Iterable[machine.Send]) -> None:
        transport = self._transport
        if transport is None:
            return
        for send in sends:
            try:
                transport.sendto(
                    self._sealer.seal(send.packet), (send.address.host, send.address.port)
                )
                self.sent += 1
            except OSError:
                self.send_errors += 1

    def _apply(self, output: machine.Output) -> None:
        self._send_all(output.sends)
        for change in output.changes:
            log.info(
                "member changed",
                extra={
                    "node": self.name,
                    "member": change.name,
                    "state": change.state.name.lower(),
                    "incarnation": change.incarnation,
                    "address": str(change.address),
                    "change": change.kind.value,
                },
            )
            if self.on_change is not None:
                try:
                    self.on_change(change)
                except Exception:
                    log.exception("membership: change callback failed")
        if output.changes:
            alive, metadata = self.machine.alive(), self.machine.meta()
            returned = any(c.kind == machine.ChangeKind.RETURNED for c in output.changes)
            if alive != self._alive or metadata != self._metadata or returned:
                self._alive, self._metadata = alive, metadata
                self.changed.set()
        self._arm()

    def _arm(self) -> None:
        loop = self._loop
        if loop is None or self._transport is None:
            return
        deadline = self.machine.next_deadline()
        if self._timer is not None:
            if deadline == self._timer_at:
                return
            self._timer.cancel()
            self._timer = None
        if deadline != machine.INF:
            self._timer_at = deadline
            self._timer = loop.call_at(deadline, self._on_timer)


def load_keyring(paths: Iterable[str]) -> sealing.Keyring:
    """Secrets from files, one per non-empty line; the first line of the first file seals.

    A Kubernetes Secret mounted as files gives one file per key; a single file with the new key
    on its first line and the old one below works too.
    """
    secrets: list[bytes] = []
    for path in paths:
        with open(path, "rb") as f:
            secrets.extend(line.strip() for line in f.read().splitlines() if line.strip())
    return sealing.Keyring.from_secrets(secrets)
