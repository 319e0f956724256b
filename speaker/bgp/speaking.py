"""The speaker's BGP side: sessions to the selected peers, carrying the desired routes.

`Speaker` is level-triggered: `set_peers` and `set_routes` state what should be, and each peer's
runner converges on it by diffing against what its ExaBGP process has acknowledged. Every peer
has its own ExaBGP process and runner, so adding, removing or changing one peer never touches
another's session (docs/bgp.md: ExaBGP's reload can lose a SIGUSR1 while it is busy).

A runner restarts a dead ExaBGP (0.1 s, then doubling up to 30 s; back to 0.1 s after a session
that reached Established) and re-announces everything, since a fresh process knows nothing.
Shutting a runner down (`peers.farewell` decides how) closes the session with a Cease
NOTIFICATION and then stops ExaBGP: the peer drops all our routes at once, however many there
are. A peer that negotiated graceful restart is the exception: ExaBGP ends such a session
without a NOTIFICATION whatever it is told, and the peer would keep our routes as stale for two
minutes, so its routes are withdrawn first and the runner waits until ExaBGP reports the
withdrawals on the wire (or the session is gone, or 5 s passed).

That shutdown takes up to WITHDRAW_WAIT + 10 s, so `set_peers` does not wait for it: a runner
taken away ends in the background (`Speaker.close` waits for it). A replacement for the same
peer (same name, or a new name for the same address) starts only once the old runner ended,
since two ExaBGPs must never hold a session to one peer; until then `session_states` shows it
idle, waiting for the previous session to end. Other peers start at once.

Graceful restart (RFC 4724, `enableGracefulRestart`): when the speaker process itself stops
(`Speaker.close(restarting=True)`: a DaemonSet update, not a peer removed from the
configuration), the runner of such a peer withdraws nothing: ExaBGP closes the session without a
NOTIFICATION, so the peer, as helper, keeps our routes as stale and keeps forwarding to this node
(whose kube-proxy still serves) while the next speaker starts. That one's ExaBGP sends no
End-of-RIB by itself (`manual-eor`): the runner sends it once the session is up, the routes are
complete (`set_routes(complete=True)`: the agent has its first data-path verdicts, so the routes
are this node's answer and not an empty start) and ExaBGP took every one of them, so the peer
replaces the stale routes with current ones and drops only those not announced again. Sending
it earlier would have the peer drop routes that come back a moment later: a gap in forwarding
for a node that was ready all along. It goes out at the latest EOR_AT_THE_LATEST_S after the
session came up, whatever is missing (the peer's restart timer would end the wait anyway).

BFD: a peer with a BFD profile gets a BFD session. When one that was Up goes Down for any reason
but the peer's own AdminDown, the BGP session is torn down at once (Cease); ExaBGP then
reconnects by itself, which succeeds when the path is back. The runner does not hold BGP down
until BFD is Up again: a router with dynamic neighbors (FRR `bgp listen range`) only creates its
BFD session once BGP is established, so waiting for BFD first would wait forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ironlb import problems
from speaker.bgp import events, exabgp, peers, rendering, routes
from speaker.bgp.bfd import machine as bfd_machine
from speaker.bgp.bfd import packet as bfd_packet
from speaker.bgp.bfd import threaded as bfd_threaded
from speaker.bgp.bfd import transport as bfd_transport

log = logging.getLogger(__name__)

# A crash after a working session: start again at once (the peer dropped its routes).
FIRST_RESTART_DELAY = 0.1
MAX_RESTART_DELAY = 30.0
WITHDRAW_WAIT = 5.0
BFD_WITHDRAW_WAIT = 1.0  # BFD said the path is gone: about one detect time, then tear down
RETRY_AFTER_REFUSAL = 30.0
EOR_AT_THE_LATEST_S = 10.0


# How a runner gets its ExaBGP; tests pass a fake with the same surface.
ProcessFactory = Callable[
    [peers.Peer, exabgp.Options, Callable[[events.Event], None]], exabgp.Process
]


@dataclass(frozen=True, slots=True)
class Status:
    """One peer's session as the speaker sees it. `bgp`: idle, starting, connecting, connected,
    up or down (ExaBGP running but not established); `bfd`: None without a profile."""

    peer: str
    address: str
    bgp: str
    bfd: str | None
    announced: int
    updates: int
    restarts: int
    reason: str
    # The prefixes this node wants on the session (MetalLB's pending_prefixes_total): equal to
    # `announced` once ExaBGP took them all.
    wanted: int = 0

    @property
    def up(self) -> bool:
        return self.bgp == "up"


def _bfd_timers(settings: peers.BFDSettings) -> bfd_machine.Timers:
    return bfd_machine.Timers(
        desired_min_tx_us=settings.transmit_interval_ms * 1000,
        required_min_rx_us=settings.receive_interval_ms * 1000,
        detect_mult=settings.detect_multiplier,
        passive=settings.passive,
    )


class _Runner:
    """Keeps one peer's ExaBGP alive and its routes converged."""

    def __init__(self, owner: Speaker, peer: peers.Peer) -> None:
        self.owner = owner
        self.peer = peer
        self.desired: dict[routes.Prefix, routes.RouteAttributes] = {}
        self.applied: dict[routes.Prefix, routes.RouteAttributes] = {}
        self.on_wire: set[routes.Prefix] = set()
        self.bgp = "idle"
        self.reason = ""
        self.restarts = 0
        self.updates = 0
        self.refused = 0
        self._closing = False
        self._farewell = peers.Farewell.CEASE  # decided when closing
        self._eor_due = False  # graceful restart: End-of-RIB to send once the routes are handed
        self._teardown = False
        self._went_up = False  # in the current ExaBGP's life
        self._retry_at: float | None = None
        self._up_at: float | None = None  # when the session last came up (loop time)
        self._wake = asyncio.Event()
        self._wire_changed = asyncio.Event()
        self._state_changed = asyncio.Event()
        self.synced = asyncio.Event()
        # Cleared when new routes reach an idle runner, set once it has taken them up (its
        # first command is then written before it next yields): see Speaker.handed_over.
        self.handed = asyncio.Event()
        self.handed.set()
        self._idle = False  # waiting for something to do, ExaBGP running
        self.process: exabgp.Process | None = None
        self.task = asyncio.create_task(self._run(), name=f"bgp-{peer.name}")

    # --- inputs ------------------------------------------------------------------------------

    def set_desired(self, wanted: Mapping[routes.Prefix, routes.RouteAttributes]) -> None:
        wanted = dict(wanted)
        if wanted != self.desired:
            self.desired = wanted
            self._retry_at = None
            self.synced.clear()
            if self._idle:
                self.handed.clear()
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def request_teardown(self) -> None:
        self._teardown = True
        self._wake.set()

    async def close(self, restarting: bool = False) -> None:
        self._farewell = peers.farewell(self.peer, restarting)
        self._closing = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), WITHDRAW_WAIT + 10.0)
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        finally:
            if self.process is not None:
                await self.process.kill()

    # --- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = FIRST_RESTART_DELAY
        logged = ""  # the same failure again and again is logged once, then at debug level
        while not self._closing:
            self._went_up = False
            process = self.owner.process_factory(self.peer, self.owner.options, self._on_event)
            self.process = process
            self.applied = {}
            self.on_wire.clear()
            self._set_bgp("starting", "")
            try:
                await process.start()
                if self.bgp == "starting":  # unless ExaBGP already reported a state
                    self._set_bgp("connecting", "")
                await self._serve(process)
            except (exabgp.ExaBGPError, OSError, ValueError) as e:
                self.reason = str(e)
            finally:
                await process.kill()
            if self.closing():
                break
            self.restarts += 1
            if process.returncode is not None:
                self.reason = f"ExaBGP exited with {process.returncode}"
            self._set_bgp("idle", self.reason)
            if self._went_up:
                delay = FIRST_RESTART_DELAY
                logged = ""
            level = logging.DEBUG if self.reason == logged else logging.WARNING
            logged = self.reason
            log.log(level, "bgp %s: %s; restarting ExaBGP in %.1fs", self.peer.name, logged, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait_closing(), delay)
            delay = min(delay * 2, MAX_RESTART_DELAY)
        self._set_bgp("idle", "stopped")

    def closing(self) -> bool:
        # A method, not the attribute: the attribute changes while this runner awaits.
        return self._closing

    async def _wait_closing(self) -> None:
        while not self._closing:
            self._wake.clear()
            await self._wake.wait()

    async def _serve(self, process: exabgp.Process) -> None:
        """Converge until ExaBGP dies (returns) or we are closing (ends the session, returns)."""
        try:
            await self._converge(process)
        finally:
            self._idle = False
            self.handed.set()  # nothing left to wait for

    async def _converge(self, process: exabgp.Process) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            # Whatever the desired routes are now is taken up in this turn: diffed, rendered
            # and the first command written before the next await that waits for ExaBGP.
            self._idle = False
            self.handed.set()
            if process.exited.is_set():
                return
            if self._closing:
                await self._shut(process)
                return
            if self._teardown:
                self._teardown = False
                if self.bgp in ("up", "connected"):
                    log.warning("bgp %s: BFD down, tearing the session down", self.peer.name)
                    if self.peer.graceful_restart:
                        # ExaBGP closes a graceful-restart session without a NOTIFICATION, and
                        # the peer then keeps our routes as stale for up to its restart time:
                        # withdrawn first (bounded), BFD's verdict takes effect there now. The
                        # routes go back into ExaBGP on the next turn, for when it reconnects.
                        await self._withdraw_all(process, BFD_WITHDRAW_WAIT)
                    await process.command(rendering.teardown(self.peer))
            if self._retry_at is None or loop.time() >= self._retry_at:
                self._retry_at = None
                await self._push(process, routes.diff_peer(self.applied, self.desired))
            eor_deadline = self._eor_deadline()
            if eor_deadline is not None and (self._eor_ready() or loop.time() >= eor_deadline):
                # After the push: ExaBGP puts the marker on the wire behind the routes.
                if not self._eor_ready():
                    log.warning(
                        "bgp %s: End-of-RIB after %.0f s although %s",
                        self.peer.name,
                        EOR_AT_THE_LATEST_S,
                        "ExaBGP has not taken every route"
                        if self.owner.routes_complete
                        else "this node's first data-path verdicts are still missing",
                    )
                self._eor_due = False
                for family in self.peer.families:
                    await process.command(rendering.end_of_rib(family))
            if self.applied == self.desired:
                self.synced.set()
            wake_at = [t for t in (self._retry_at, self._eor_deadline()) if t is not None]
            timeout = max(0.0, min(wake_at) - loop.time()) if wake_at else None
            waiters = [
                asyncio.ensure_future(self._wake.wait()),
                asyncio.ensure_future(process.exited.wait()),
            ]
            self._idle = True
            try:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()

    def _eor_deadline(self) -> float | None:
        """When the End-of-RIB due goes out at the latest; None: none is due now."""
        if not self._eor_due or self.bgp != "up" or self._up_at is None:
            return None
        return self._up_at + EOR_AT_THE_LATEST_S

    def _eor_ready(self) -> bool:
        """The peer may drop whatever we did not announce again: our routes are this node's
        answer and ExaBGP has every one of them."""
        return self.owner.routes_complete and self.applied == self.desired

    async def _push(self, process: exabgp.Process, change: routes.Change) -> None:
        if not change:
            return
        for command in rendering.commands(self.peer, change):
            if self._teardown and not self._closing:
                return  # handle the teardown first; the rest follows on the next turn
            if not await process.command(command.text):
                self.refused += 1
                self._retry_at = asyncio.get_running_loop().time() + RETRY_AFTER_REFUSAL
                continue
            for prefix in command.withdraw:
                self.applied.pop(prefix, None)
            if command.attributes is not None:
                for prefix in command.announce:
                    self.applied[prefix] = command.attributes
        self.owner._changed()

    async def _withdraw_all(self, process: exabgp.Process, wait_s: float) -> None:
        """Withdraw every route we announced, and wait (at most `wait_s`) until ExaBGP reports
        them off the wire or the session down."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(exabgp.ExaBGPError):
            await self._push(process, routes.diff_peer(self.applied, {}))
        deadline = loop.time() + wait_s
        while self.bgp == "up" and self.on_wire and loop.time() < deadline:
            self._wire_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wire_changed.wait(), deadline - loop.time())

    async def _shut(self, process: exabgp.Process) -> None:
        if self._farewell is peers.Farewell.KEEP:
            log.info(
                "bgp %s: leaving %d routes to the peer's graceful restart",
                self.peer.name,
                len(self.on_wire),
            )
            await process.stop()  # with graceful restart negotiated: no NOTIFICATION
            return
        loop = asyncio.get_running_loop()
        if self._farewell is peers.Farewell.WITHDRAW:
            await self._withdraw_all(process, WITHDRAW_WAIT)
        if self.bgp == "up":
            # Until ExaBGP reports the session down, the NOTIFICATION may not be out yet, and
            # stopping ExaBGP first would only close the connection. ExaBGP reconnects after a
            # teardown by itself; it is stopped as soon as the session is reported down.
            with contextlib.suppress(exabgp.ExaBGPError):
                await process.command(rendering.teardown(self.peer))
            deadline = loop.time() + 2.0
            while self.bgp == "up" and loop.time() < deadline:
                self._state_changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._state_changed.wait(), deadline - loop.time())
        await process.stop()

    # --- what ExaBGP reports -----------------------------------------------------------------

    def _set_bgp(self, state: str, reason: str) -> None:
        if (state, reason) == (self.bgp, self.reason):
            return
        self.bgp, self.reason = state, reason
        self._state_changed.set()
        self.owner._changed()

    def _on_event(self, event: events.Event) -> None:
        if isinstance(event, events.StateChange):
            if event.state in ("connected", "up") and self._retry_at is not None:
                # ExaBGP refuses `next-hop self` until it knows the session's local address,
                # that is until it has a connection: an announcement made before the peer
                # answered is refused, and must not wait out RETRY_AFTER_REFUSAL (a route
                # 30 s late after every start whose connect was slower than our first push).
                self._retry_at = None
                self._wake.set()
            if event.state == "up":
                self._went_up = True
                self._up_at = asyncio.get_running_loop().time()
                if self.peer.graceful_restart:
                    self._eor_due = True
                    self._wake.set()
            else:
                self._eor_due = False
                self.on_wire.clear()
                self._wire_changed.set()
            log.info("bgp %s: session %s %s", self.peer.name, event.state, event.reason)
            self._set_bgp(event.state, event.reason)
        elif isinstance(event, events.Sent):
            self.updates += 1
            self.on_wire |= event.announced
            self.on_wire -= event.withdrawn
            self._wire_changed.set()
        elif isinstance(event, events.Other) and event.text:
            log.debug("bgp %s: exabgp says %s", self.peer.name, event.text[:200])

    def status(self, bfd: bfd_machine.Session | None) -> Status:
        return Status(
            peer=self.peer.name,
            address=str(self.peer.peer_address),
            bgp=self.bgp,
            bfd=bfd.state.name.lower() if bfd is not None else None,
            announced=len(self.on_wire),
            updates=self.updates,
            restarts=self.restarts,
            reason=self.reason,
            wanted=len(self.desired),
        )


class Speaker:
    """BGP sessions of this node. `on_change()` is called after any visible change."""

    def __init__(
        self,
        options: exabgp.Options,
        on_change: Callable[[], None] | None = None,
        bfd_port: int = bfd_transport.CONTROL_PORT,
        process_factory: ProcessFactory = exabgp.Process,
    ) -> None:
        self.options = options
        self.process_factory = process_factory
        self.on_change = on_change
        self._bfd_port = bfd_port
        self._bfd: bfd_threaded.ThreadedEndpoint | None = None
        self._runners: dict[str, _Runner] = {}
        # What the latest set_peers asked for (checked): the runners, plus the peers whose
        # runner waits for an old one to end. Kept so that a runner that ends starts whatever is
        # wanted by then (level-triggered: the latest set_peers wins, not the one that waited).
        self._wanted: dict[str, peers.Peer] = {}
        # Runners taken away and still ending (a Cease, or withdrawals first), with the task
        # that ends each: a pass does not wait for them, close() does.
        self._stopping: dict[_Runner, asyncio.Task[None]] = {}
        self._desired: dict[str, dict[routes.Prefix, routes.RouteAttributes]] = {}
        # Whether the routes are this node's answer yet (see set_routes); until they are, no
        # End-of-RIB goes out, and a graceful-restart peer keeps our stale routes meanwhile.
        self.routes_complete = True
        self._closed = False

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:
                log.exception("bgp change callback failed")

    # --- peers ---------------------------------------------------------------------------------

    async def set_peers(
        self, wanted: Iterable[peers.Peer], *, handing_over: bool = False
    ) -> list[problems.Problem]:
        """Make the sessions exactly `wanted` (by name). Returns what could not be honoured.
        Does not wait for sessions taken away to end (see the module's description); after
        `close` it does nothing (a pass may still be under way while the speaker stops).
        `handing_over`: those taken away go to another speaker on this node, and end as for a
        restart (`peers.farewell`): a graceful-restart peer keeps our routes until its
        End-of-RIB."""
        if self._closed:
            return []
        found: list[problems.Problem] = []
        by_name: dict[str, peers.Peer] = {}
        for peer in wanted:
            issues = peers.check(peer)
            found += issues
            if issues:
                continue
            by_name[peer.name] = peer
        stopping = [r for name, r in self._runners.items() if name not in by_name]
        for name, peer in by_name.items():
            runner = self._runners.get(name)
            if runner is None:
                continue
            if runner.peer == peer:
                continue
            if dataclasses.replace(runner.peer, bfd=None) == dataclasses.replace(peer, bfd=None):
                runner.peer = peer  # only BFD timers changed: no reason to reset BGP
                continue
            stopping.append(runner)
        self._wanted = by_name
        for runner in stopping:
            del self._runners[runner.peer.name]
            self._stopping[runner] = asyncio.create_task(
                self._stop_runner(runner, restarting=handing_over),
                name=f"bgp-{runner.peer.name}-stop",
            )
        self._start_wanted()
        await self._sync_bfd()
        self._changed()
        return found

    def _start_wanted(self) -> None:
        """Start a runner for every wanted peer without one, unless a runner for the same name
        or address is still ending: its ExaBGP may still hold the session (withdrawing, or
        waiting for the Cease to go out)."""
        if self._closed:
            return
        ending = [r.peer for r in self._stopping]
        for name, peer in self._wanted.items():
            if name in self._runners:
                continue
            if any(p.name == name or p.peer_address == peer.peer_address for p in ending):
                continue  # started by _stop_runner once the old one ended
            runner = _Runner(self, peer)
            runner.set_desired(self._desired.get(name, {}))
            self._runners[name] = runner

    async def _stop_runner(self, runner: _Runner, restarting: bool = False) -> None:
        try:
            await runner.close(restarting=restarting)
        except Exception:
            log.exception("bgp %s: stopping the session failed", runner.peer.name)
        finally:
            del self._stopping[runner]
        # Cancelled (close() itself was cancelled): nothing starts. Otherwise whatever waited for
        # this runner starts now, as the latest set_peers wants it.
        self._start_wanted()
        self._changed()

    async def handed_over(self, timeout: float) -> None:
        """Until every running session has taken up the routes of the last `set_routes` (its
        first command written to ExaBGP), at most `timeout`. A caller with more work to do
        waits for this first, so that announcing starts before that work rather than after.
        A session still busy with earlier commands, or whose ExaBGP is starting, is not waited
        for: it takes the routes up when it gets there."""
        waiting = [r.handed.wait() for r in self._runners.values() if not r.handed.is_set()]
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), timeout)

    async def _sync_bfd(self) -> None:
        # The wanted peers, not only the running ones: a BFD session is per address, and one
        # whose BGP replacement waits for the old runner keeps it (no flap at the peer).
        wanted = {str(p.peer_address): p for p in self._wanted.values() if p.bfd}
        if not wanted and self._bfd is None:
            return
        if self._bfd is None:
            self._bfd = bfd_threaded.ThreadedEndpoint(self._on_bfd, port=self._bfd_port)
        endpoint = self._bfd
        current = endpoint.sessions()
        await asyncio.gather(*(endpoint.remove(a) for a in current if a not in wanted))
        if self._closed:
            return  # close() came meanwhile and closed the endpoint: open nothing
        for address, peer in wanted.items():
            assert peer.bfd is not None
            source = str(peer.source_address) if peer.source_address else None
            try:
                endpoint.add(address, _bfd_timers(peer.bfd), source)
            except OSError as e:
                log.error("bfd %s: cannot open a session: %s", address, e)

    def _on_bfd(self, address: str, change: bfd_machine.StateChange) -> None:
        lost = change.old == bfd_packet.State.UP and change.new != bfd_packet.State.UP
        if lost and not change.remote_admin_down:
            for runner in self._runners.values():
                if str(runner.peer.peer_address) == address:
                    runner.request_teardown()
        self._changed()

    # --- routes ------------------------------------------------------------------------------

    def set_routes(self, desired: routes.Routes, complete: bool = True) -> None:
        """The routes every peer must carry; peers not mentioned carry none. `complete`: they
        are this node's answer (False while the agent still waits for its first data-path
        verdicts: an End-of-RIB then would end a peer's graceful restart too early)."""
        self._desired = {name: dict(r) for name, r in desired.items()}
        newly_complete = complete and not self.routes_complete
        self.routes_complete = complete
        for name, runner in self._runners.items():
            runner.set_desired(self._desired.get(name, {}))
            if newly_complete:
                runner.wake()

    async def wait_synced(self, timeout: float) -> bool:
        """Until ExaBGP acknowledged the desired routes for every peer (tests, shutdown),
        including a peer whose runner waits for an old one to end."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    for runner in list(self._runners.values()):
                        await runner.synced.wait()
                    if not self._waiting():
                        return True
                    # A runner that ends starts its replacement before its task is done.
                    ending = list(self._stopping.values())
                    if not ending:
                        return False  # cannot happen: whatever waits, waits for one of these
                    await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            return False

    def _waiting(self) -> dict[str, peers.Peer]:
        """Wanted peers without a runner yet: each waits for an old runner to end."""
        if self._closed:
            return {}
        return {n: p for n, p in self._wanted.items() if n not in self._runners}

    # --- state ---------------------------------------------------------------------------------

    def session_states(self) -> dict[str, Status]:
        """Every wanted peer's session; one waiting for its old runner to end is idle (the old
        one's state would describe a session that is going away, with the old settings)."""
        bfd = self._bfd.sessions() if self._bfd else {}
        states = {
            name: r.status(bfd.get(str(r.peer.peer_address))) for name, r in self._runners.items()
        }
        for name, peer in self._waiting().items():
            session = bfd.get(str(peer.peer_address))
            states[name] = Status(
                peer=name,
                address=str(peer.peer_address),
                bgp="idle",
                bfd=session.state.name.lower() if session is not None else None,
                announced=0,
                updates=0,
                restarts=0,
                reason="waiting for the previous session to end",
            )
        return dict(sorted(states.items()))

    def bfd_sessions(self) -> dict[str, bfd_machine.Session]:
        return self._bfd.sessions() if self._bfd else {}

    def bfd_stats(self) -> bfd_transport.Stats | None:
        """The BFD endpoint's receive counters; None until a peer with BFD was configured."""
        return self._bfd.stats if self._bfd else None

    def peers(self) -> dict[str, peers.Peer]:
        """The configured peers (as `session_states`: a waiting one included)."""
        return {**self._waiting(), **{name: r.peer for name, r in self._runners.items()}}

    def process_ids(self) -> dict[str, int | None]:
        return {n: (r.process.pid if r.process else None) for n, r in self._runners.items()}

    def stats(self) -> dict[str, Any]:
        return {
            name: {"refused": r.refused, "updates": r.updates, "restarts": r.restarts}
            for name, r in self._runners.items()
        }

    async def close(self, restarting: bool = False) -> None:
        """Close every session (`peers.farewell`: a Cease, or withdrawals first for a peer
        with graceful restart), then stop BFD. `restarting`: this process stops but the node
        stays (a speaker update): peers with graceful restart keep our routes as stale instead,
        until the next speaker's End-of-RIB or their restart time."""
        if self._closed:
            return
        self._closed = True
        runners = list(self._runners.values())
        self._runners.clear()
        self._wanted = {}
        # Those already ending were taken away from the configuration (closed as such, not
        # as restarting); each is bounded like a runner's close, and they run side by side.
        await asyncio.gather(
            *(r.close(restarting=restarting) for r in runners), *self._stopping.values()
        )
        if self._bfd is not None:
            await asyncio.gather(*(self._bfd.remove(a) for a in self._bfd.sessions()))
            self._bfd.close()
            self._bfd = None
        self._changed()
