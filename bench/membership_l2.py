"""What a membership fault costs in layer 2: which addresses move, witnessed at the ToR.

`bench.membership`'s group of member processes, each in its own namespace on one bridge, gets a
layer-2 data plane: beside every member runs `python -m speaker.layer2 serve` (the speaker's ARP
responder and gratuitous ARP), told which of `count` Service addresses it owns. Ownership is the
speaker's layer-2 election (`speaker.election.order`, MetalLB's hash of node and address) over
that member's own view of who is alive, as its events report it: what a speaker decides when
membership speaks for the cluster and every Node is Ready. The ToR is the bridge's namespace,
where `tcpdump` reads every ARP reply on the bridge; an address *moves* when a reply gives it a
MAC other than the last one seen for it.

One cut: cut one member's link, wait until every other member has it dead and the group is quiet,
restore it, wait until the group has converged again. The victim's addresses are expected to move
twice (away, back). Any other address that moves moved because some member's view changed
without a fault of its own: a false death, or, after the restore, the victim claiming what it
thought it owned while it was alone (it sees every other member dead while cut off, so it owns
every address until it has rejoined). Both are counted apart.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.membership import GONE, LIVE, Group, Member, wait
from speaker import election

_REPLY = re.compile(r"Reply (\d+\.\d+\.\d+\.\d+) is-at ([0-9a-f:]{17})")


def service_addresses(count: int) -> list[str]:
    """Addresses outside the members' subnet: only the layer-2 servers answer for them."""
    return [f"10.240.{i // 250}.{i % 250 + 1}" for i in range(count)]


def owned(member: str, view: Iterable[str], orders: dict[str, list[str]]) -> list[str]:
    """The addresses `member` announces when it sees `view` alive (itself included)."""
    alive = set(view) | {member}
    return [a for a, ranked in orders.items() if next(n for n in ranked if n in alive) == member]


@dataclass
class Moves:
    """Address moves seen at the ToR, per trial."""

    victim: int = 0  # the cut member's own addresses (expected: each away and back)
    collateral_while_cut: int = 0  # any other address, from the cut to the victim's restore
    collateral_after_restore: int = 0  # any other address, from the restore to convergence
    cuts: int = 0
    victim_addresses: int = 0  # summed over cuts
    unanswered: list[str] = field(default_factory=list)  # addresses nobody announced at the end


class Plane:
    """Layer-2 servers beside the group's members, fed from each member's own view."""

    def __init__(self, group: Group, count: int, python: str, root: str) -> None:
        self.group = group
        self.addresses = service_addresses(count)
        names = [m.name for m in group.members]
        # The election's order of every member per address, once: a view's owner is then the
        # first live member in it (the same as election.owner over the view).
        self.orders = {a: election.order(a, names) for a in self.addresses}
        self.python = python
        self.root = root
        self.servers: dict[str, subprocess.Popen[str]] = {}
        self.applied: dict[str, list[str]] = {}
        # Per member: the live members its previous update saw, its returns by then, and every
        # member it has seen live (the speaker's agent keeps the same, `Agent._returns`).
        self._seen: dict[str, tuple[frozenset[str], int, frozenset[str]]] = {}
        self._later: dict[str, election.Deferred[str]] = {}  # per member, as the agent keeps
        self.announced_again = 0  # addresses sent to be announced again, over the run
        self.mac_owner = {group.mac(m): m.name for m in group.members}
        self.replies: list[tuple[float, str, str]] = []  # (monotonic, address, member)
        self._capture: subprocess.Popen[str] | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, batch: int = 10) -> None:
        self._capture = subprocess.Popen(
            ["ip", "netns", "exec", self.group.switch, "tcpdump", "-i", "br0", "-l", "-n", "-e",
             "arp"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self._spawn(self._read_capture)
        members = list(self.group.members)
        for first in range(0, len(members), batch):
            started = [self._start_server(m) for m in members[first : first + batch]]
            for server in started:
                assert server.stdout is not None
                server.stdout.readline()  # {"ready": ...}: its sockets are open
                # Its answers ({"applied": N}) are not needed; unread, they would fill the pipe.
                self._spawn(lambda out=server.stdout: all(True for _ in out))
        self._spawn(self._feed)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for process in [*self.servers.values(), self._capture]:
            if process is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self.servers.clear()

    def _spawn(self, target: Any) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_server(self, member: Member) -> subprocess.Popen[str]:
        server = subprocess.Popen(
            ["ip", "netns", "exec", member.namespace, "env", f"PYTHONPATH={self.root}",
             self.python, "-m", "speaker.layer2", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=self.root,
        )  # fmt: skip
        self.servers[member.name] = server
        return server

    # --- the speaker's part: each member's view to its owned addresses --------------------------

    def _feed(self) -> None:
        """Every 20 ms, each member whose owned set changed gets it, and the addresses it
        kept but must announce again when members came back (`election.Deferred.decide`, the
        speaker's rule, as `Agent._announce_again` applies it), bounded by the stop."""
        while not self._stop.wait(0.02):
            with self.group.lock:
                views = {
                    m.name: (
                        frozenset(x for x, state in m.view.items() if state in LIVE) | {m.name},
                        m.returns,
                    )
                    for m in self.members()
                }
            now = time.monotonic()
            for name, (alive, returns) in views.items():
                mine = owned(name, alive, self.orders)
                before, returns_before, seen = self._seen.get(name, (alive, returns, alive))
                self._seen[name] = (alive, returns, seen | alive)
                returned, we_returned = (alive - before) & seen, returns > returns_before
                ours_with_all = (
                    owned(name, alive | seen, self.orders) if returned or we_returned else []
                )
                deferred = self._later.setdefault(name, election.Deferred())
                again, _, _ = deferred.decide(
                    mine, ours_with_all, returned, we_returned, alive, now
                )
                lines: list[dict[str, Any]] = []
                if mine != self.applied.get(name):
                    lines.append({"owned": {a: [] for a in mine}})
                if again:
                    lines.append({"announce": sorted(again)})
                if lines and self._send(name, lines):
                    self.applied[name] = mine
                    self.announced_again += len(again)

    def _send(self, name: str, lines: list[dict[str, Any]]) -> bool:
        server = self.servers.get(name)
        if server is None or server.stdin is None or server.poll() is not None:
            return False
        try:
            server.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
            server.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def members(self) -> list[Member]:
        return [m for m in self.group.members if m.name in self.servers]

    # --- the ToR's part ------------------------------------------------------------------------

    def _read_capture(self) -> None:
        assert self._capture is not None and self._capture.stdout is not None
        for line in self._capture.stdout:
            match = _REPLY.search(line)
            if match is None:
                continue
            member = self.mac_owner.get(match.group(2))
            if member is not None:
                with self.group.lock:
                    self.replies.append((time.monotonic(), match.group(1), member))

    def holders(self, until: float) -> dict[str, str]:
        """The member each address was last announced by, as of `until`."""
        last: dict[str, str] = {}
        with self.group.lock:
            for t, address, member in self.replies:
                if t <= until:
                    last[address] = member
        return last

    def moves(self, since: float, until: float) -> dict[str, int]:
        """How many times each address changed hands at the ToR in [since, until)."""
        last = self.holders(since)
        out: dict[str, int] = {}
        with self.group.lock:
            window = [(t, a, m) for t, a, m in self.replies if since < t < until]
        for _, address, member in window:
            if last.get(address) not in (None, member):
                out[address] = out.get(address, 0) + 1
            last[address] = member
        return out


def alone(g: Group, victim: Member) -> bool:
    """Whether the victim has every other member dead in its own view."""
    with g.lock:
        return all(victim.view.get(m.name) in GONE for m in g.members if m is not victim)


def cuts(
    plane: Plane, count: int, budget: float, hold: float = 1.0, long: bool = False
) -> tuple[Moves, str | None]:
    """`count` link cuts, each held until every other member has the victim dead and then
    `hold` seconds more, then restored; moves counted per phase. A `long` cut is held until the
    victim has declared every other member dead too (it then owns every address in its own
    view), and `hold` seconds more. Returns (moves, aborted)."""
    g = plane.group
    out = Moves()
    aborted = None
    wait(lambda: all(plane.holders(time.monotonic()).get(a) for a in plane.addresses), budget,
         "every address announced")  # fmt: skip
    for attempt in range(count):
        victim = g.members[(attempt * 7 + 3) % len(g.members)]
        mine = set(plane.applied.get(victim.name, []))
        start = time.monotonic()
        g.cut(victim)
        try:
            wait(lambda: g.all_report(victim, GONE, start), budget, "the cut victim declared dead")  # noqa: B023
            if long:
                wait(lambda: alone(g, victim), budget, "the cut victim alone in its view")  # noqa: B023
            time.sleep(hold)
        finally:
            restored = time.monotonic()
            g.restore(victim)
        try:
            wait(g.converged, budget + 30, "recovery after the cut")
            g.settle()
            # The victim's addresses are back with it once its own server answered again.
            wait(lambda: all(plane.holders(time.monotonic()).get(a) == victim.name for a in mine),  # noqa: B023
                 budget, "the victim's addresses back with it")  # fmt: skip
        except TimeoutError as e:
            aborted = str(e)
        end = time.monotonic()
        while_cut = plane.moves(start, restored)
        after = plane.moves(restored, end)
        out.cuts += 1
        out.victim_addresses += len(mine)
        out.victim += sum(n for a, n in {**while_cut}.items() if a in mine)
        out.victim += sum(n for a, n in after.items() if a in mine)
        out.collateral_while_cut += sum(n for a, n in while_cut.items() if a not in mine)
        out.collateral_after_restore += sum(n for a, n in after.items() if a not in mine)
        if aborted:
            break
    last = plane.holders(time.monotonic())
    out.unanswered = [a for a in plane.addresses if a not in last]
    return out, aborted


def added(a: Moves, b: Moves) -> Moves:
    """Two runs of cuts counted as one (the later one's unanswered addresses)."""
    return Moves(
        victim=a.victim + b.victim,
        collateral_while_cut=a.collateral_while_cut + b.collateral_while_cut,
        collateral_after_restore=a.collateral_after_restore + b.collateral_after_restore,
        cuts=a.cuts + b.cuts,
        victim_addresses=a.victim_addresses + b.victim_addresses,
        unanswered=b.unanswered,
    )


def summary(moves: Moves, addresses: int, members: int, aborted: str | None) -> dict[str, Any]:
    return {
        "members": members,
        "addresses": addresses,
        "cuts": moves.cuts,
        "victim_addresses": moves.victim_addresses,
        # Expected: each of the victim's addresses moved away and back, 2 per address.
        "victim_moves": moves.victim,
        "collateral_moves_while_cut": moves.collateral_while_cut,
        "collateral_moves_after_restore": moves.collateral_after_restore,
        "aborted": aborted,
    }
