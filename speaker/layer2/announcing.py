"""The layer-2 data plane: answer ARP/NDP for owned addresses and announce takeovers.

`Announcer` is the level-triggered state — owned addresses with their allowed interfaces, the
open ports, the gratuitous schedule and the counters — driven by explicit calls that carry the
time, so unit tests run it on fake ports and a fake clock. `Layer2Announcer` is the thin asyncio
shell around it: it scans interfaces (every 10 s, like MetalLB), opens a `sockets.RawPort` per
eligible one, hands every readable frame to the announcer and wakes it when gratuitous frames
are due. Callers say what the node owns now (`set_owned`); the announcer works out the change:
addresses gained are announced at once (and repeated), addresses lost are refused from the very
next request, and nothing is sent on release (as in MetalLB). With a refresh interval
(`--gratuitous-arp-interval`), every owned address is also announced again periodically, until
the moment it is lost (`gratuitous.Refresh`).

The same read path notices split brain: a frame in which another machine claims an owned address
(`conflicts.detect`) is counted, kept as a current conflict for `conflicts.EXPIRY_S`, logged and
handed to `on_conflict` when first seen and then every `conflicts.REPORT_INTERVAL_S` while it
lasts. Only frames that get no answer are looked at, so answering a request costs nothing more.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from speaker.layer2 import (
    conflicts,
    gratuitous,
    interfaces,
    metrics,
    packets,
    responding,
    sockets,
)

logger = logging.getLogger(__name__)

SCAN_INTERVAL_S = 10.0
# After a link or address event, the rescan waits this long: one rescan for a burst of events.
LINK_RESCAN_DELAY_S = 0.05
# Gratuitous frames go out this many addresses at a time, with the event loop (and so the
# answers to requests) running in between: a takeover of 1,000 addresses would otherwise block
# replies for tens of milliseconds per round.
GRATUITOUS_BATCH = 64
ALL_NODES_MAC = packets.multicast_mac(packets.ALL_NODES)


class _Sent(enum.Enum):
    """What became of one address's gratuitous frames."""

    SENT = "sent"  # at least one frame went out
    UNHEARD = "unheard"  # no port is open for it, or every one's link is down
    FAILED = "failed"  # none went out for another reason (a transient error: ENOBUFS)


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

    def send(self, frame: bytes) -> None:
        """Raises OSError with errno ENETDOWN when the link is down (no carrier)."""

    def set_groups(self, groups: frozenset[bytes]) -> None: ...


def normalize(
    owned: Mapping[packets.IPAddress, Collection[str]],
) -> dict[packets.IPAddress, responding.Interfaces]:
    """Allowed interfaces as frozensets; an empty collection (responding.ALL) means all."""
    return {address: frozenset(names) for address, names in owned.items()}


OnConflict = Callable[[conflicts.Conflict], None]


class Announcer:
    def __init__(
        self,
        stats: metrics.Stats | None = None,
        schedule: gratuitous.Schedule | None = None,
        *,
        refresh: gratuitous.Refresh | None = None,
        on_conflict: OnConflict | None = None,
        tracker: conflicts.Tracker | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.stats = stats or metrics.Stats()
        self.schedule = schedule or gratuitous.Schedule()
        # Periodic announcements of every owned address; off unless given an interval.
        self.refresh = refresh or gratuitous.Refresh()
        self.owned: dict[packets.IPAddress, responding.Interfaces] = {}
        self.ports: dict[str, Port] = {}
        # This node's MACs: the ports' and those of the interfaces that do not announce.
        self.own_macs: frozenset[bytes] = frozenset()
        self.conflicts = tracker or conflicts.Tracker()
        self.on_conflict = on_conflict
        # Read only when a claim is seen; `clock` paces expiry and reports, `wall_clock` dates.
        self.clock = clock
        self._wall_clock = wall_clock

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
            self.refresh.lose(address)
        for address in gained:
            self.schedule.gain(address, now)
            self.refresh.own(address, now)
        if gained or lost:
            self._sync_groups()
            self._forget(self.conflicts.retain(self.owned), "address released")
        # The first gratuitous round is due now: the caller's next `tick` sends it.
        return gained, lost

    def announce_again(
        self, addresses: Collection[packets.IPAddress], now: float
    ) -> frozenset[packets.IPAddress]:
        """Announce these owned addresses again as if just gained (a gratuitous burst): another
        node may have announced them meanwhile, and a router's entry may still point there.
        Returns the ones owned (the others are not ours to announce)."""
        again = frozenset(a for a in addresses if a in self.owned)
        for address in again:
            self.schedule.gain(address, now)
        return again

    def set_ports(self, ports: Mapping[str, Port], other_macs: Collection[bytes] = ()) -> None:
        """Answer on these ports; `other_macs` are this node's other interfaces' MACs (frames
        from them claim nothing)."""
        self.ports = dict(ports)
        self.own_macs = frozenset(port.mac for port in self.ports.values()) | frozenset(other_macs)
        self._sync_groups()

    def handle(self, port: Port, frame: bytes) -> responding.Decision:
        """Answer one received frame if it asks for an owned address on an allowed interface;
        note it as a conflict if another machine claims an owned address in it."""
        packet = packets.parse(frame)
        decision = responding.decide(packet, port.name, port.mac, self.owned)
        if isinstance(decision, responding.Ignore):
            if decision.reason is responding.Reason.MALFORMED:
                self.stats.malformed += 1
            else:
                # An answered request is never a claim (its sender IP differs from its target).
                claim = conflicts.detect(packet, port.name, self.own_macs, self.owned)
                if claim is not None:
                    self._claimed(claim)
        else:
            ip = str(decision.address)
            self.stats.requests_received[ip] += 1
            try:
                port.send(decision.frame)
            except OSError as e:
                logger.warning("reply for %s on %s failed: %s", ip, port.name, e)
            else:
                self.stats.responses_sent[ip] += 1
        return decision

    def expire_conflicts(self) -> float | None:
        """Forget the conflicts no longer seen; returns when (on `clock`) the next one expires."""
        self._forget(self.conflicts.expire(self.clock()), "no longer seen")
        return self.conflicts.next_expiry()

    def _claimed(self, claim: conflicts.Claim) -> None:
        ip = str(claim.ip)
        self.stats.address_conflicts[ip, claim.interface] += 1
        known = len(self.conflicts.current)
        report = self.conflicts.observe(claim, self.clock(), self._wall_clock())
        if len(self.conflicts.current) != known:
            self._publish_conflicts()
        if report is None:
            return
        logger.warning(
            "layer2 address conflict: another machine claims an address this node answers for",
            extra={
                "ip": ip,
                "mac": report.mac,
                "interface": report.interface,
                "count": report.count,
                "since": report.first_seen,
            },
        )
        if self.on_conflict is not None:
            try:
                self.on_conflict(report)
            except Exception:
                logger.exception("layer2: on_conflict callback failed", extra={"ip": ip})

    def _forget(self, dropped: list[conflicts.Conflict], why: str) -> None:
        if not dropped:
            return
        for conflict in dropped:
            logger.info(
                "layer2 address conflict over",
                extra={
                    "ip": str(conflict.ip),
                    "mac": conflict.mac,
                    "count": conflict.count,
                    "why": why,
                },
            )
        self._publish_conflicts()

    def _publish_conflicts(self) -> None:
        self.stats.conflicting = tuple((str(c.ip), c.mac) for c in self.conflicts.current)

    def tick(self, now: float, limit: int | None = None) -> float | None:
        """Send the gratuitous frames due at `now` (takeover rounds first, then periodic ones),
        for at most `limit` addresses; returns when the next are due (at or before `now` if
        some were left for the next call)."""
        burst = self.schedule.due(now, limit)
        for address in burst:
            self.refresh.sent(address, now)
        left = None if limit is None else limit - len(burst)
        periodic = [] if left == 0 else self.refresh.due(now, left, self.schedule.pending())
        for address in burst:
            if self._announce(address) is _Sent.UNHEARD:
                # A burst nobody can hear ends. With no link up we are the one cut off: what we
                # took over meanwhile we took from a view of the others gone stale, and going on
                # once the link is back would pull live nodes' addresses to us until our view
                # catches up (the layer-2 cut test saw 42 moves of other nodes' addresses).
                # What we hold when we are back goes again through the return path
                # (`speaker.election.to_announce_again`).
                self.schedule.lose(address)
        for address in periodic:
            self._announce(address)
        return self.next_due()

    def next_due(self) -> float | None:
        """When gratuitous frames are next due, takeover or periodic; None: none will be."""
        due = [t for t in (self.schedule.next_due(), self.refresh.next_due()) if t is not None]
        return min(due, default=None)

    def _announce(self, address: packets.IPAddress) -> _Sent:
        """Gratuitous ARP (both forms) or an unsolicited NA for `address` on every port it is
        announced on, each frame counted in `metallb_layer2_gratuitous_sent` as in MetalLB."""
        allowed = self.owned.get(address)
        if allowed is None:
            return _Sent.UNHEARD
        v4 = isinstance(address, ipaddress.IPv4Address)
        sent = failed = False
        for port in self.ports.values():
            if not responding.allows(allowed, port.name) or not (port.arp if v4 else port.ndp):
                continue
            for frame in packets.gratuitous(port.mac, address):
                try:
                    port.send(frame)
                except OSError as e:
                    failed = failed or e.errno != errno.ENETDOWN
                    logger.warning("gratuitous %s on %s failed: %s", address, port.name, e)
                else:
                    sent = True
                    self.stats.gratuitous_sent[str(address)] += 1
        if sent:
            return _Sent.SENT
        return _Sent.FAILED if failed else _Sent.UNHEARD

    def groups_for(self, port: Port) -> frozenset[bytes]:
        """Solicited-node multicast MACs of the IPv6 addresses owned on `port`, and all-nodes
        (where other machines' unsolicited advertisements go) if there is any."""
        groups = frozenset(
            packets.multicast_mac(packets.solicited_node(address))
            for address, allowed in self.owned.items()
            if isinstance(address, ipaddress.IPv6Address) and responding.allows(allowed, port.name)
        )
        # The kernel is in all-nodes on every interface with IPv6 (and a port that answers NDP
        # has a link-local address); joining it too keeps conflicts from depending on that.
        return groups | {ALL_NODES_MAC} if groups else groups

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
        on_conflict: OnConflict | None = None,
        tracker: conflicts.Tracker | None = None,
        gratuitous_interval: float = 0.0,
        link_events: Callable[[], socket.socket] | None = sockets.link_events,
    ) -> None:
        """`on_conflict(conflict)` is called on the event loop this announcer runs on, when
        another machine's claim on an owned address is first seen and every
        `conflicts.REPORT_INTERVAL_S` while it goes on; it must not block (hand the conflict
        to another loop with `call_soon_threadsafe`). `tracker` sets the expiry and pacing.
        `gratuitous_interval` > 0 announces every owned address again that often (seconds).
        `link_events` opens the socket whose readability means links or addresses changed
        (None: the periodic scan only)."""
        self.core = Announcer(
            stats,
            refresh=gratuitous.Refresh(gratuitous_interval),
            on_conflict=on_conflict,
            tracker=tracker,
        )
        self._exclude: re.Pattern[str] | None = interfaces.exclusion(exclude)
        self._scan_interval = scan_interval
        self._scan = scan
        self._open_port = open_port
        self._ports: dict[str, sockets.RawPort] = {}
        # The names of `_ports`, replaced whole after each scan: readable from any thread.
        self._answering: frozenset[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gratuitous_timer: asyncio.TimerHandle | None = None
        self._scan_timer: asyncio.TimerHandle | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._link_events = link_events
        self._link_socket: socket.socket | None = None
        self._link_rescan: asyncio.TimerHandle | None = None

    @property
    def stats(self) -> metrics.Stats:
        return self.core.stats

    @property
    def ports(self) -> Mapping[str, sockets.RawPort]:
        return self._ports

    @property
    def answering(self) -> frozenset[str] | None:
        """The interfaces answering ARP/NDP after the latest scan (None before the first):
        MetalLB's announcer.GetInterfaces. A snapshot, safe from any thread."""
        return self._answering

    def conflicts(self) -> Mapping[packets.IPAddress, conflicts.Conflict]:
        """Owned addresses another machine claimed within the last `conflicts.EXPIRY_S`
        seconds, with the foreign MAC seen last. A read-only snapshot: safe from any thread."""
        return self.core.conflicts.by_address

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.core.refresh.enabled:
            logger.info(
                "layer2: periodic gratuitous ARP/NDP every %g s", self.core.refresh.interval
            )
        try:
            self.rescan()
        except OSError as e:  # tried again at every periodic scan
            logger.warning("layer2: interface scan failed: %s (retrying)", e)
        self._scan_timer = self._loop.call_later(self._scan_interval, self._periodic_scan)
        if self._link_events is not None:
            try:
                self._link_socket = self._link_events()
            except OSError as e:
                logger.warning("layer2: no link events (%s): interfaces scanned every %g s only",
                               e, self._scan_interval)  # fmt: skip
            else:
                self._loop.add_reader(self._link_socket.fileno(), self._link_changed)

    def _link_changed(self) -> None:
        """Links or addresses changed: rescan shortly (one rescan for a burst of events)."""
        assert self._link_socket is not None
        sockets.drain(self._link_socket)
        if self._link_rescan is None:
            self._link_rescan = self._running_loop().call_later(
                LINK_RESCAN_DELAY_S, self._rescan_now
            )

    def _rescan_now(self) -> None:
        self._link_rescan = None
        self._rescan_logged()

    def _rescan_logged(self) -> None:
        """`rescan`, a failure logged: the next event or periodic scan tries again."""
        try:
            self.rescan()
        except OSError as e:
            logger.warning("layer2: interface scan failed: %s", e)

    async def close(self) -> None:
        for timer in (
            self._gratuitous_timer,
            self._scan_timer,
            self._expiry_timer,
            self._link_rescan,
        ):
            if timer is not None:
                timer.cancel()
        self._gratuitous_timer = self._scan_timer = self._expiry_timer = self._link_rescan = None
        if self._link_socket is not None:
            if self._loop is not None:
                self._loop.remove_reader(self._link_socket.fileno())
            self._link_socket.close()
            self._link_socket = None
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

    def announce_again(self, addresses: Collection[packets.IPAddress]) -> None:
        """Announce these owned addresses again (`Announcer.announce_again`)."""
        again = self.core.announce_again(addresses, self._running_loop().time())
        if again:
            logger.info("layer2: %d addresses announced again", len(again))
            self._arm()

    def rescan(self) -> None:
        """Open ports on interfaces that became eligible, close those that stopped being."""
        loop = self._running_loop()
        wanted: dict[str, tuple[interfaces.InterfaceFacts, interfaces.Eligibility]] = {}
        macs: set[bytes] = set()
        for facts in self._scan():
            macs.add(facts.mac)
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
        self.core.set_ports(self._ports, macs)
        self._answering = frozenset(self._ports)
        # A port (re)opened announces nothing by itself. Back from a cut, our view of who is
        # alive is stale until membership catches up: what we took over while cut off is not
        # ours, and announcing it would pull live nodes' addresses to us. Our own addresses,
        # taken by a stand-in while the others had us dead, go again through the return path
        # (`speaker.election.to_announce_again`), which comes once the link is up and the
        # port open (`_link_changed`).

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
        if self._expiry_timer is None and self.core.conflicts.current:
            self._arm_expiry(self.core.conflicts.next_expiry())

    def _arm_expiry(self, due: float | None) -> None:
        """Wake at `due` (on the core's monotonic clock) to drop conflicts no longer seen."""
        self._expiry_timer = None
        if due is not None:
            delay = max(0.0, due - self.core.clock())
            self._expiry_timer = self._running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._arm_expiry(self.core.expire_conflicts())

    def _periodic_scan(self) -> None:
        loop = self._running_loop()
        self._rescan_logged()
        self._scan_timer = loop.call_later(self._scan_interval, self._periodic_scan)

    def _arm(self) -> None:
        loop = self._running_loop()
        if self._gratuitous_timer is not None:
            self._gratuitous_timer.cancel()
            self._gratuitous_timer = None
        due = self.core.next_due()
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
