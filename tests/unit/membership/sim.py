"""A discrete-event network for the membership state machine: simulated clock, loss, delay,
partitions, killed members and slow members.

Every packet goes through the real codec, so a message the machine cannot encode, or that does
not fit a datagram, fails the simulation rather than passing silently.
"""

from __future__ import annotations

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


class Network:
    def __init__(
        self,
        seed: int,
        config: cfg.Config = cfg.DEFAULT,
        *,
        loss: float = 0.0,
        delay: tuple[float, float] = (0.0002, 0.002),
    ) -> None:
        self.rng = random.Random(seed)
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

    def _push(self, at: float, kind: str, payload: object) -> None:
        self._counter += 1
        heapq.heappush(self._events, (at, self._counter, kind, payload))

    def _blocked(self, a: str, b: str) -> bool:
        return self.groups is not None and self.groups.get(a, -1) != self.groups.get(b, -2)

    def _apply(self, node: SimNode, output: machine.Output) -> None:
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
            self._push(self.now + latency, "packet", (node.address, target, send.packet))
        deadline = node.machine.next_deadline()
        if deadline != node.scheduled and deadline != float("inf"):
            node.token += 1
            node.scheduled = deadline
            self._push(max(deadline, self.now) + node.lag, "tick", (node.name, node.token))

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
