"""A discrete-event network for the membership state machine: simulated clock, loss, delay,
partitions, killed members and slow members.

Every packet goes through the real codec, so a message the machine cannot encode, or that does
not fit a datagram, fails the simulation rather than passing silently.

With a `Host` the members also share the host's CPU as real processes do: each datagram and
timer costs CPU time, a member handles one at a time, every member waits for one of the host's
cores, and a member's socket holds a bounded number of datagrams (the kernel drops the rest).
Without it every member handles every event the instant it is due.
"""

from __future__ import annotations

import collections
import heapq
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from speaker.membership import codec, machine, sealing
from speaker.membership import config as cfg
from speaker.membership import messages as m

Change = machine.Change


@dataclass
class SimNode:
    name: str
    address: m.Address
    machine: machine.Machine
    running: bool = True
    # Extra latency applied to everything this node processes: a CPU-starved member.
    lag: float = 0.0
    # Extra latency on its incoming packets only: a receive backlog, timers still on time.
    inbound_lag: float = 0.0
    token: int = 0
    scheduled: float = float("inf")
    # `Change`, not `machine.Change`: in this class body `machine` is the field above.
    log: list[tuple[float, Change]] = field(default_factory=list)
    # With a Host: datagrams waiting in the socket, a timer that is due, on a core or queued.
    inbox: collections.deque[tuple[m.Address, bytes]] = field(default_factory=collections.deque)
    tick_due: bool = False
    busy: bool = False
    runnable: bool = False
    # Stopped (SIGSTOP): holds no core, its socket fills, its timers wait.
    stopped: bool = False


@dataclass(frozen=True)
class Host:
    """The CPU and sockets the members share (`Network(host=...)`).

    Costs are CPU seconds per event of one `python -m speaker.membership` process: decrypting,
    decoding, the machine, encoding, encrypting, the system calls and asyncio's loop around them.
    They are calibrated on the real processes: at N = 100 and 2% loss these costs put each
    simulated member at 0.57% of a core, and bench.membership measured 0.61% for the real ones
    (`/proc/<pid>/stat`, docs/membership.md); the machine and codec alone take 46 us a ping.
    `rcvbuf` is how many datagrams a member's socket holds (Linux's default 212,992-byte receive
    buffer over the 768 to 2,304 bytes each small datagram is charged): a member further behind
    loses the rest, as on a real host. `busy` is the fraction of each core other processes take
    (the benchmark itself, the kernel, whatever else runs).
    """

    cores: int = 2
    per_datagram: float = 0.0003
    per_timer: float = 0.00015
    per_send: float = 0.0001
    rcvbuf: int = 200
    busy: float = 0.0


# A benchmark's host: two cores, a fifth of each taken by other processes (the run that found
# the false deaths at N = 100 had the host 37% busy, the members' own 0.6 cores included).
BUSY_TWO_CORES = Host(busy=0.2)


class Network:
    def __init__(
        self,
        seed: int,
        config: cfg.Config = cfg.DEFAULT,
        *,
        loss: float = 0.0,
        delay: tuple[float, float] = (0.0002, 0.002),
        host: Host | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.host = host
        self.overflows = 0  # datagrams a full socket dropped (with a Host)
        self.cpu_seconds = 0.0  # CPU the members used (with a Host)
        self._free_cores = host.cores if host is not None else 0
        self._run_queue: collections.deque[str] = collections.deque()
        self.config = config
        self.loss = loss
        self.delay = delay
        self.now = 0.0
        self.nodes: dict[str, SimNode] = {}
        self.by_address: dict[m.Address, str] = {}
        self.groups: dict[str, int] | None = None
        self.sent = 0
        self.delivered = 0
        self._events: list[tuple[float, int, str, object]] = []
        self._counter = 0

    # --- building ------------------------------------------------------------------------------

    def add(self, name: str, *, seeds: Iterable[str] = ()) -> SimNode:
        index = len(self.nodes) + 1
        address = m.Address(f"10.0.{index // 250}.{index % 250 + 1}", 7946)
        node = SimNode(
            name,
            address,
            machine.Machine(
                self.config, name, address, random.Random(self.rng.getrandbits(64)), self.now
            ),
        )
        self.nodes[name] = node
        self.by_address[address] = name
        seed_addresses = [self.nodes[s].address for s in seeds]
        self._apply(node, node.machine.join(self.now, seed_addresses))
        return node

    def cluster(self, n: int, prefix: str = "n") -> list[str]:
        names = [f"{prefix}{i}" for i in range(1, n + 1)]
        for i, name in enumerate(names):
            self.add(name, seeds=names[:1] if i else ())
        return names

    def start_in_batches(self, n: int, batch: int = 10, prefix: str = "m") -> list[str]:
        """n members started `batch` at a time, a second apart, through the first two, as
        bench.membership starts real ones (a hundred at once would starve a shared host)."""
        names = [f"{prefix}{i}" for i in range(n)]
        for first in range(0, n, batch):
            for name in names[first : first + batch]:
                self.add(name, seeds=[s for s in names[:2] if s != name and s in self.nodes])
            self.run_for(1.0)
        return names

    # --- faults --------------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        self.nodes[name].running = False

    def partition(self, *groups: Iterable[str]) -> None:
        self.groups = {}
        for i, group in enumerate(groups):
            for name in group:
                self.groups[name] = i

    def heal(self) -> None:
        self.groups = None

    def stop(self, name: str) -> None:
        """SIGSTOP: the member keeps its socket (which fills) and its timers (which wait)."""
        self.nodes[name].stopped = True

    def resume(self, name: str) -> None:
        node = self.nodes[name]
        node.stopped = False
        self._ready(node)

    def leave(self, name: str) -> None:
        node = self.nodes[name]
        self._apply(node, node.machine.leave(self.now))
        node.running = False

    def set_meta(self, name: str, meta: bytes) -> None:
        node = self.nodes[name]
        self._apply(node, node.machine.set_meta(self.now, meta))

    # --- running -------------------------------------------------------------------------------

    def run_until(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            at, _, kind, payload = heapq.heappop(self._events)
            self.now = at
            if self.host is not None:
                self._host_event(kind, payload)
                continue
            if kind == "tick":
                name, token = cast(tuple[str, int], payload)
                node = self.nodes[name]
                if node.running and token == node.token:
                    node.scheduled = float("inf")
                    self._apply(node, node.machine.tick(at))
            else:
                source, name, packet = cast(tuple[m.Address, str, bytes], payload)
                node = self.nodes[name]
                if node.running:
                    decoded = codec.decode(packet)
                    assert not isinstance(decoded, codec.Drop), decoded
                    self.delivered += 1
                    self._apply(node, node.machine.receive(at, source, decoded))
        self.now = until

    def run_for(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    # --- the shared host (Host) ---------------------------------------------------------------

    def _host_event(self, kind: str, payload: object) -> None:
        assert self.host is not None
        if kind == "tick":
            name, token = cast(tuple[str, int], payload)
            node = self.nodes[name]
            if node.running and token == node.token:
                node.tick_due = True
                self._ready(node)
        elif kind == "packet":
            source, name, packet = cast(tuple[m.Address, str, bytes], payload)
            node = self.nodes[name]
            if not node.running:
                return
            if len(node.inbox) >= self.host.rcvbuf:
                self.overflows += 1
                return
            node.inbox.append((source, packet))
            self._ready(node)
        else:  # "done": the member's event is handled and its core is free
            node = self.nodes[cast(str, payload)]
            node.busy = False
            self._free_cores += 1
            self._ready(node)
        self._dispatch()

    def _ready(self, node: SimNode) -> None:
        has_work = node.tick_due or bool(node.inbox)
        if node.running and has_work and not node.busy and not node.runnable and not node.stopped:
            node.runnable = True
            self._run_queue.append(node.name)

    def _dispatch(self) -> None:
        """Hand free cores to waiting members, first come first served, one event each (a
        member that still has work goes to the back of the queue, as the scheduler rotates
        runnable processes)."""
        assert self.host is not None
        while self._free_cores and self._run_queue:
            node = self.nodes[self._run_queue.popleft()]
            node.runnable = False
            if not node.running or node.stopped:
                continue
            # asyncio reads the socket before it runs the timers that are due.
            if node.inbox:
                source, packet = node.inbox.popleft()
                decoded = codec.decode(packet)
                assert not isinstance(decoded, codec.Drop), decoded
                self.delivered += 1
                output = node.machine.receive(self.now, source, decoded)
                cost = self.host.per_datagram
            elif node.tick_due:
                node.tick_due = False
                node.scheduled = float("inf")
                output = node.machine.tick(self.now)
                cost = self.host.per_timer
            else:
                continue
            cost += self.host.per_send * len(output.sends)
            cost /= 1.0 - self.host.busy
            self.cpu_seconds += cost
            node.busy = True
            self._free_cores -= 1
            # Its datagrams leave, and its next timer is set, when the work is done.
            self._push(self.now + cost, "done", node.name)
            self._apply(node, output, at=self.now + cost)

    def _push(self, at: float, kind: str, payload: object) -> None:
        self._counter += 1
        heapq.heappush(self._events, (at, self._counter, kind, payload))

    def _blocked(self, a: str, b: str) -> bool:
        return self.groups is not None and self.groups.get(a, -1) != self.groups.get(b, -2)

    def _apply(self, node: SimNode, output: machine.Output, at: float | None = None) -> None:
        now = self.now if at is None else at
        for change in output.changes:
            node.log.append((self.now, change))
        for send in output.sends:
            assert len(send.packet) + sealing.OVERHEAD <= self.config.max_datagram
            self.sent += 1
            target = self.by_address.get(send.address)
            if target is None or self._blocked(node.name, target):
                continue
            if self.rng.random() < self.loss:
                continue
            receiver = self.nodes[target]
            latency = self.rng.uniform(*self.delay) + receiver.lag + receiver.inbound_lag
            self._push(now + latency, "packet", (node.address, target, send.packet))
        deadline = node.machine.next_deadline()
        if deadline != node.scheduled and deadline != float("inf"):
            node.token += 1
            node.scheduled = deadline
            self._push(max(deadline, now) + node.lag, "tick", (node.name, node.token))

    # --- observing -----------------------------------------------------------------------------

    def state(self, observer: str, subject: str) -> m.State | None:
        return self.nodes[observer].machine.states().get(subject)

    def running(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.running]

    def first_time(self, observer: str, subject: str, states: set[m.State]) -> float | None:
        for at, change in self.nodes[observer].log:
            if change.name == subject and change.state in states:
                return at
        return None

    def all_see(self, subject: str, states: set[m.State], observers: Iterable[str]) -> bool:
        return all(self.state(o, subject) in states for o in observers)

    def ever_dead(self, subject: str) -> list[str]:
        """Observers that ever declared subject dead or gone."""
        gone = {m.State.DEAD, m.State.LEFT}
        return [
            name
            for name, node in self.nodes.items()
            if any(c.name == subject and c.state in gone for _, c in node.log)
        ]


def restart(network: Network, name: str, seeds: Iterable[str]) -> SimNode:
    """A fresh process for an existing member: same name and address, no memory."""
    old = network.nodes[name]
    old.token += 1  # cancel its pending tick
    node = SimNode(
        name,
        old.address,
        machine.Machine(
            network.config,
            name,
            old.address,
            random.Random(network.rng.getrandbits(64)),
            network.now,
        ),
        log=old.log,
        token=old.token,
    )
    network.nodes[name] = node
    network._apply(node, node.machine.join(network.now, [network.nodes[s].address for s in seeds]))
    return node
