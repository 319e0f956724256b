"""The layer-2 data plane: answer ARP/NDP for owned addresses and announce takeovers.

`Announcer` is the level-triggered state — owned addresses with their allowed interfaces, the
open ports, the gratuitous schedule and the counters — driven by explicit calls that carry the
time, so unit tests run it on fake ports and a fake clock. `Layer2Announcer` is the thin asyncio
shell around it: it scans interfaces (every 10 s, like MetalLB), opens a `sockets.RawPort` per
eligible one, hands every readable frame to the announcer and wakes it when gratuitous frames
are due. Callers say what the node owns now (`set_owned`); the announcer works out the change:
addresses gained are announced at once (and repeated), addresses lost are refused from the very
next request, and nothing is sent on release (as in MetalLB).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from speaker.layer2 import gratuitous, interfaces, metrics, packets, responding, sockets

logger = logging.getLogger(__name__)

SCAN_INTERVAL_S = 10.0
# Gratuitous frames go out this many addresses at a time, with the event loop (and so the
# answers to requests) running in between: a takeover of 1,000 addresses would otherwise block
# replies for tens of milliseconds per round.
GRATUITOUS_BATCH = 64


class Port(Protocol):
    """One interface's raw sockets, as the announcer uses them."""

    @property
    def name(self) -> str: ...

    @property
    def mac(self) -> bytes: ...

    @property
    def arp(self) -> bool: ...

    @property
    def ndp(self) -> bool: ...

    def send(self, frame: bytes) -> None: ...

    def set_groups(self, groups: frozenset[bytes]) -> None: ...


def normalize(
    owned: Mapping[packets.IPAddress, Collection[str]],
) -> dict[packets.IPAddress, responding.Interfaces]:
    """Allowed interfaces as frozensets; an empty collection (responding.ALL) means all."""
    return {address: frozenset(names) for address, names in owned.items()}


class Announcer:
    def __init__(
        self,
        stats: metrics.Stats | None = None,
        schedule: gratuitous.Schedule | None = None,
    ) -> None:
        self.stats = stats or metrics.Stats()
        self.schedule = schedule or gratuitous.Schedule()
        self.owned: dict[packets.IPAddress, responding.Interfaces] = {}
        self.ports: dict[str, Port] = {}

    def set_owned(
        self, owned: Mapping[packets.IPAddress, Collection[str]], now: float
    ) -> tuple[frozenset[packets.IPAddress], frozenset[packets.IPAddress]]:
        """Own exactly these addresses from now on; returns (gained or changed, lost)."""
        new = normalize(owned)
        old = self.owned
        lost = frozenset(old.keys() - new.keys())
        # A changed interface set is announced again: new interfaces must tell their neighbours.
        gained = frozenset(a for a, names in new.items() if old.get(a) != names)
        self.owned = new
        for address in lost:
            self.schedule.lose(address)
        for address in gained:
            self.schedule.gain(address, now)
        if gained or lost:
            self._sync_groups()
        # The first gratuitous round is due now: the caller's next `tick` sends it.
        return gained, lost

    def set_ports(self, ports: Mapping[str, Port]) -> None:
        self.ports = dict(ports)
        self._sync_groups()

    def handle(self, port: Port, frame: bytes) -> responding.Decision:
        """Answer one received frame if it asks for an owned address on an allowed interface."""
        decision = responding.decide(packets.parse(frame), port.name, port.mac, self.owned)
        if (
            isinstance(decision, responding.Ignore)
            and decision.reason is responding.Reason.MALFORMED
        ):
            self.stats.malformed += 1
        elif isinstance(decision, responding.Answer):
            ip = str(decision.address)
            self.stats.requests_received[ip] += 1
            try:
                port.send(decision.frame)
            except OSError as e:
                logger.warning("reply for %s on %s failed: %s", ip, port.name, e)
            else:
                self.stats.responses_sent[ip] += 1
        return decision

    def tick(self, now: float, limit: int | None = None) -> float | None:
        """Send the gratuitous rounds due at `now`, for at most `limit` addresses; returns when
        the next one is due (at or before `now` if some were left for the next call)."""
        for address in self.schedule.due(now, limit):
            allowed = self.owned.get(address)
            if allowed is None:
                continue
            v4 = isinstance(address, ipaddress.IPv4Address)
            for port in self.ports.values():
                if not responding.allows(allowed, port.name) or not (port.arp if v4 else port.ndp):
                    continue
                for frame in packets.gratuitous(port.mac, address):
                    try:
                        port.send(frame)
                    except OSError as e:
                        logger.warning("gratuitous %s on %s failed: %s", address, port.name, e)
                    else:
                        self.stats.gratuitous_sent[str(address)] += 1
        return self.schedule.next_due()

    def groups_for(self, port: Port) -> frozenset[bytes]:
        """Solicited-node multicast MACs of the IPv6 addresses owned on `port`."""
        return frozenset(
            packets.multicast_mac(packets.solicited_node(address))
            for address, allowed in self.owned.items()
            if isinstance(address, ipaddress.IPv6Address) and responding.allows(allowed, port.name)
        )

    def _sync_groups(self) -> None:
        for port in self.ports.values():
            if port.ndp:
                port.set_groups(self.groups_for(port))


OpenPort = Callable[[interfaces.InterfaceFacts, interfaces.Eligibility], sockets.RawPort]


class Layer2Announcer:
    """ARP/NDP responders on every eligible interface of this network namespace."""

    def __init__(
        self,
        *,
        exclude: Iterable[str] = interfaces.DEFAULT_EXCLUDE,
        scan_interval: float = SCAN_INTERVAL_S,
        stats: metrics.Stats | None = None,
        scan: Callable[[], list[interfaces.InterfaceFacts]] = sockets.scan,
        open_port: OpenPort = sockets.RawPort,
    ) -> None:
        self.core = Announcer(stats)
        self._exclude: re.Pattern[str] | None = interfaces.exclusion(exclude)
        self._scan_interval = scan_interval
        self._scan = scan
        self._open_port = open_port
        self._ports: dict[str, sockets.RawPort] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gratuitous_timer: asyncio.TimerHandle | None = None
        self._scan_timer: asyncio.TimerHandle | None = None

    @property
    def stats(self) -> metrics.Stats:
        return self.core.stats

    @property
    def ports(self) -> Mapping[str, sockets.RawPort]:
        return self._ports

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            self.rescan()
        except OSError as e:  # tried again at every periodic scan
            logger.warning("layer2: interface scan failed: %s (retrying)", e)
        self._scan_timer = self._loop.call_later(self._scan_interval, self._periodic_scan)

    async def close(self) -> None:
        for timer in (self._gratuitous_timer, self._scan_timer):
            if timer is not None:
                timer.cancel()
        self._gratuitous_timer = self._scan_timer = None
        for name in list(self._ports):
            self._close_port(name)
        self.core.set_ports({})
        self._loop = None

    async def __aenter__(self) -> Layer2Announcer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def set_owned(self, owned: Mapping[packets.IPAddress, Collection[str]]) -> None:
        """Own exactly these addresses (empty interface collection = every interface)."""
        loop = self._running_loop()
        gained, lost = self.core.set_owned(owned, loop.time())
        if gained or lost:
            logger.info(
                "layer2: %d addresses owned (%d new or changed, %d released)",
                len(self.core.owned),
                len(gained),
                len(lost),
            )
            logger.debug(
                "layer2: gained %s, lost %s", sorted(map(str, gained)), sorted(map(str, lost))
            )
        self._arm()

    def rescan(self) -> None:
        """Open ports on interfaces that became eligible, close those that stopped being."""
        loop = self._running_loop()
        wanted: dict[str, tuple[interfaces.InterfaceFacts, interfaces.Eligibility]] = {}
        for facts in self._scan():
            eligible = interfaces.eligibility(facts, self._exclude)
            if eligible.any:
                wanted[facts.name] = (facts, eligible)
        for name, port in list(self._ports.items()):
            entry = wanted.get(name)
            if entry is None or _identity(*entry) != (port.index, port.mac, port.arp, port.ndp):
                self._close_port(name)
        for name, (facts, eligible) in wanted.items():
            if name in self._ports:
                continue
            try:
                port = self._open_port(facts, eligible)
            except OSError as e:
                logger.warning("layer2: cannot open raw sockets on %s: %s (retrying)", name, e)
                continue
            self._ports[name] = port
            for sock in port.sockets:
                loop.add_reader(sock.fileno(), self._readable, port, sock)
            logger.info(
                "layer2: answering on %s (%s)",
                name,
                "+".join(p for p, on in (("arp", port.arp), ("ndp", port.ndp)) if on),
            )
        self.core.set_ports(self._ports)

    def _close_port(self, name: str) -> None:
        port = self._ports.pop(name)
        if self._loop is not None:
            for sock in port.sockets:
                self._loop.remove_reader(sock.fileno())
        port.close()
        logger.info("layer2: stopped answering on %s", name)

    def _readable(self, port: sockets.RawPort, sock: socket.socket) -> None:
        for frame in sockets.read_frames(sock):
            self.core.handle(port, frame)

    def _periodic_scan(self) -> None:
        loop = self._running_loop()
        try:
            self.rescan()
        except OSError as e:
            logger.warning("layer2: interface scan failed: %s", e)
        self._scan_timer = loop.call_later(self._scan_interval, self._periodic_scan)

    def _arm(self) -> None:
        loop = self._running_loop()
        if self._gratuitous_timer is not None:
            self._gratuitous_timer.cancel()
            self._gratuitous_timer = None
        due = self.core.schedule.next_due()
        if due is not None:
            self._gratuitous_timer = loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self._gratuitous_timer = None
        self.core.tick(self._running_loop().time(), GRATUITOUS_BATCH)
        # A due time in the past (a batch left over) runs on the next loop iteration, after
        # the sockets have been polled.
        self._arm()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("Layer2Announcer.start() must be awaited first")
        return self._loop


def _identity(
    facts: interfaces.InterfaceFacts, eligible: interfaces.Eligibility
) -> tuple[int, bytes, bool, bool]:
    return facts.index, facts.mac, eligible.arp, eligible.ndp
