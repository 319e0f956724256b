"""Membership failover benchmark: real member processes, real kills, real link cuts, ours beside
hashicorp/memberlist as MetalLB's speaker runs it.

Each member is a process in its own network namespace (`ilbm-<run>-<i>`), joined to the others
by a veth into a bridge namespace (`ilbm-<run>-sw`); addresses are in 10.231.0.0/16 and exist
only inside those namespaces. The member is ours (`python -m speaker.membership`) or
memberlist's (`hack.memberlist_peer`: hashicorp/memberlist at the version MetalLB's go.mod
selects, with MetalLB's configuration), which takes the same command line and prints the same
events, so both are run and judged by the same code. Measured:

- kill: SIGKILL a member; time until every other member has reported it dead;
- linkcut: `ip link set eth0 down` inside the member's namespace (the process keeps running but
  is cut off); time until every other member has reported it dead;
- leave (ours only: memberlist's events do not tell a leave from a death): SIGTERM; time until
  every other member has reported it left;
- the large group (N = 100, `--soak-size`) at 2% loss on every datagram, for each
  implementation: a soak (any member reported dead is a false positive; CPU per member from
  /proc/<pid>/stat, and how busy the whole host was), then link cuts, then members stopped
  (SIGSTOP) for two seconds, each watched for false positives until the group has recovered;
- ours at N = 100 in simulation (`simulate`): the real state machine and codec on a simulated
  clock, network and host (CPU per event, two shared cores, bounded sockets).

A false positive is a member other than the fault's victim that some member reported dead or
left, counted once per member and incarnation; a cut-off victim's own reports are not counted
(it is alone), a stopped member's are (they would move addresses when it resumes).

Loss injection: this kernel has no `sch_netem` (nor the `gact` action), so `tc netem` cannot be
used; the members discard 2% of the datagrams they receive before opening them (ours with its
`--drop-rate` hook, memberlist's in a transport wrapper; each datagram has exactly one receiver,
so this is 2% loss per datagram).

Times are taken from CLOCK_MONOTONIC, which every process on the host shares: the benchmark
stamps the fault just before injecting it, members stamp their verdicts when they reach them.

`--quick`: ours at N = 8 (3 kills, 3 link cuts, 2 leaves), memberlist at N = 8 (3 kills, 3 link
cuts); at N = 100 and 2% loss, ours (10 s soak, 10 link cuts, 3 stopped members) and
memberlist's (10 s soak, 5 link cuts, 2 stopped); 200 simulated link cuts. One group at a time.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import figures

ROOT = Path(__file__).resolve().parent.parent

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
# The member process: ours, or hashicorp/memberlist as MetalLB configures it (hack.memberlist_peer),
# which takes the same command line and prints the same events.
OURS = (PYTHON, "-m", "speaker.membership")
GONE = {"dead", "left"}
LIVE = {"alive", "suspect"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Member:
    index: int
    name: str
    namespace: str
    address: str
    process: subprocess.Popen[str] | None = None
    # Latest state of every other member as this member reported it.
    view: dict[str, str] = field(default_factory=dict)
    # (t, member, state, incarnation)
    events: list[tuple[float, str, str, int]] = field(default_factory=list)
    started: bool = False
    health: int = 0  # Lifeguard local-health score last reported (0 = healthy)
    returns: int = 0  # verdicts of its own death it refuted ("returned" events)


class Group:
    """N member processes, each in its own namespace on one bridge."""

    def __init__(
        self,
        run: str,
        n: int,
        subnet: int,
        key_file: Path,
        extra: list[str],
        drop_rate: float = 0.0,
        command: tuple[str, ...] = OURS,
    ) -> None:
        self.run = run
        self.command = command
        self.switch = f"ilbm-{run}-sw"
        self.key_file = key_file
        self.extra = extra
        self.drop_rate = drop_rate
        self.lock = threading.Lock()
        self.subnet = subnet
        self.members = [
            Member(i, f"m{i}", f"ilbm-{run}-{i}", f"10.231.{subnet}.{i + 1}") for i in range(n)
        ]
        self.namespaces: list[str] = []

    # --- network -------------------------------------------------------------------------------

    def build(self) -> None:
        self._netns("add", self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for member in self.members:
            ns = member.namespace
            self._netns("add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            port = f"p{member.index}"
            sh(
                "ip", "-n", ns,
                "link", "add", "eth0", "address", self.mac(member), "type", "veth",
                "peer", port, "netns", self.switch,
            )  # fmt: skip
            sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{member.address}/16", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        # The kernel's ARP table is one for all network namespaces, and so is its limit
        # (net.ipv4.neigh.default.gc_thresh3, 1024 entries here): N members learning each other
        # by ARP need N * (N - 1) entries, 9,900 at N = 100, and past the limit the kernel
        # refuses new ones ("neighbor table overflow") and drops the datagrams waiting on them:
        # a flood of false suspicions that real nodes, each with its own kernel, never see.
        # Permanent entries are not counted against that limit, so every member gets the others'
        # addresses up front, and no ARP happens at all.
        for member in self.members:
            self.pin_neighbours(member)

    def pin_neighbours(self, member: Member) -> None:
        """Permanent neighbour entries in member's namespace for every other member."""
        entries = "".join(
            f"neigh replace {other.address} lladdr {self.mac(other)} dev eth0 nud permanent\n"
            for other in self.members
            if other is not member
        )
        subprocess.run(
            ["ip", "-n", member.namespace, "-batch", "-"],
            input=entries,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )

    def mac(self, member: Member) -> str:
        # Locally administered, and unique per group and member (subnets are 0..255).
        return f"02:00:0a:e7:{self.subnet:02x}:{member.index + 1:02x}"

    def _netns(self, verb: str, name: str) -> None:
        sh("ip", "netns", verb, name)
        self.namespaces.append(name)

    def destroy(self) -> None:
        for member in self.members:
            self.stop(member, signal.SIGKILL)
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces.clear()

    def cut(self, member: Member) -> None:
        sh("ip", "-n", member.namespace, "link", "set", "eth0", "down")

    def restore(self, member: Member) -> None:
        sh("ip", "-n", member.namespace, "link", "set", "eth0", "up")
        # Taking the link down flushed the namespace's neighbour entries, permanent ones too:
        # without them the member back from the cut resolves its 99 peers by ARP, into the
        # kernel's one table for all namespaces, and after ten cuts at N = 100 that table is
        # full ("neighbor table overflow": datagrams dropped, members declared dead). Seen in
        # a full run: 99 false positives from the 14th cut on. A real node has a table of its own.
        self.pin_neighbours(member)

    # --- processes -----------------------------------------------------------------------------

    def start(self, member: Member) -> None:
        seeds = [f"--seed={m.address}:7946" for m in self.members[:2] if m is not member]
        argv = [
            "ip", "netns", "exec", member.namespace,
            *self.command,
            f"--name={member.name}",
            f"--bind={member.address}:7946",
            f"--key-file={self.key_file}",
            f"--drop-rate={self.drop_rate}",
            *seeds,
            *self.extra,
        ]  # fmt: skip
        with self.lock:
            member.view = {}
            member.started = False
            member.health = 0
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        member.process = process
        threading.Thread(target=self._read, args=(member, process), daemon=True).start()

    def start_all(self, batch: int = 10) -> None:
        """Start every member, batch by batch, each batch once the previous one is up.

        A hundred interpreters started at once on two cores starve each other for tens of
        seconds, long enough for the first ones up to suspect the rest; the group would spend
        its first minute refuting instead of forming. Real nodes do not all boot in the same
        second either.
        """
        for first in range(0, len(self.members), batch):
            for member in self.members[first : first + batch]:
                self.start(member)
            wait(functools.partial(self._started, first + batch), 60, "members to start")

    def _started(self, count: int) -> bool:
        with self.lock:
            return all(m.started for m in self.members[:count])

    def _read(self, member: Member, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if member.process is not process:
                    return
                if event.get("event") == "started":
                    member.started = True
                elif event.get("event") == "health":
                    member.health = int(event["score"])
                elif event.get("event") == "returned":
                    member.returns += 1
                elif event.get("event") == "member":
                    member.view[event["member"]] = event["state"]
                    member.events.append(
                        (event["t"], event["member"], event["state"], event["incarnation"])
                    )

    def stop(self, member: Member, sig: int) -> None:
        process = member.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(sig)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        member.process = None

    def running(self) -> list[Member]:
        return [m for m in self.members if m.process is not None and m.process.poll() is None]

    # --- observing -----------------------------------------------------------------------------

    def converged(self) -> bool:
        with self.lock:
            members = self.running()
            if len(members) != len(self.members):
                return False
            return all(
                o.started and all(o.view.get(x.name) in LIVE for x in members if x is not o)
                for o in members
            )

    def all_report(self, subject: Member, states: set[str], since: float) -> float | None:
        """The time by which every other running member reported subject in states."""
        latest = since
        with self.lock:
            for observer in self.running():
                if observer is subject:
                    continue
                times = [t for t, x, s, _ in observer.events if x == subject.name and s in states]
                times = [t for t in times if t >= since]
                if not times:
                    return None
                latest = max(latest, min(times))
        return latest

    def settle(self, quiet: float = 1.0, limit: float = 20.0) -> None:
        """Wait until every member reports local health 0 and none has reported a change for
        `quiet` seconds: each trial starts from a steady group, not from the ripples of the
        previous one (a member back from a cut link probes slowly until its health recovers)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with self.lock:
                last = max((e[0] for m in self.members for e in m.events[-1:]), default=0.0)
                healthy = all(m.health == 0 for m in self.members)
            if healthy and time.monotonic() - last >= quiet:
                return
            time.sleep(0.05)

    def first_report(self, subject: Member, states: set[str], since: float) -> float | None:
        with self.lock:
            times = [
                t
                for o in self.members
                for t, x, s, _ in o.events
                if x == subject.name and s in states and t >= since
            ]
        return min(times, default=None)

    def false_deaths(
        self,
        since: float,
        until: float = math.inf,
        victim: str | None = None,
        subject_excluded: str | None = None,
    ) -> list[dict[str, Any]]:
        """Members declared dead or left in a window, one entry per member and incarnation.

        With a victim (a member whose link was cut in that window), its own death and what it
        said about the others while cut off are the fault, not false positives. With
        subject_excluded (a member stopped in that window), only its own death is.
        """
        incidents: dict[tuple[str, int], dict[str, Any]] = {}
        excluded = victim or subject_excluded
        with self.lock:
            for observer in self.members:
                if observer.name == victim:
                    continue
                for t, subject, state, incarnation in observer.events:
                    if state in GONE and since <= t < until and subject != excluded:
                        entry = incidents.setdefault(
                            (subject, incarnation),
                            {
                                "member": subject,
                                "incarnation": incarnation,
                                "at": t - since,
                                "observers": 0,
                            },
                        )
                        entry["at"] = min(entry["at"], t - since)
                        entry["observers"] += 1
        return sorted(incidents.values(), key=lambda e: e["at"])

    def cpu_seconds(self) -> dict[str, float]:
        out = {}
        for member in self.running():
            assert member.process is not None
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{member.process.pid}/stat").read_text().rsplit(")", 1)[1]
                parts = fields.split()
                out[member.name] = (int(parts[11]) + int(parts[12])) / CLOCK_TICKS
        return out


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    # Polled every 50 ms: the times measured are the members' own stamps, so polling faster
    # would only spend CPU the members need (the predicates scan every member's events: at
    # N = 100, several milliseconds each).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


@contextlib.contextmanager
def group(
    run: str,
    n: int,
    subnet: int,
    key_file: Path,
    extra: list[str],
    drop: float = 0.0,
    command: tuple[str, ...] = OURS,
) -> Iterator[Group]:
    g = Group(run, n, subnet, key_file, extra, drop, command)
    try:
        g.build()
        g.start_all()
        wait(g.converged, 30 + n, f"{n} members to converge")
        g.settle()
        yield g
    finally:
        g.destroy()


# A fault whose injection took longer than this is tried again: the cut happens somewhere in
# the `ip` command, which waits for the kernel's RTNL lock, and other benchmarks on the host
# creating or deleting namespaces can hold that lock for seconds (seen: 14 s). Measuring from
# before the command would then time the lock, not the membership.
INJECTION_LIMIT_S = 0.1


@dataclass
class Trials:
    times: list[float] = field(default_factory=list)
    # Fault to the first member's suspicion: how much of `times` is waiting for a probe.
    first_suspect: list[float] = field(default_factory=list)
    redone: int = 0  # faults injected too slowly, not counted (INJECTION_LIMIT_S)
    # Why the trials stopped early (a verdict or a recovery that never came), if they did.
    aborted: str | None = None
    # Members other than the victim declared dead from the fault to the group's recovery.
    false_positives: list[dict[str, Any]] = field(default_factory=list)
    # (victim, monotonic time of the fault): what the false positives' times are relative to.
    faults: list[tuple[str, float]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            **figures.distribution(self.times),
            "first_suspect": figures.distribution(self.first_suspect),
            "faults_injected": len(self.faults),
            "redone_slow_injection": self.redone,
            "aborted": self.aborted,
            "false_positives": len(self.false_positives),
            "false_positive_incidents": self.false_positives,
            # Only needed to trace false positives; the JSON line stays short without them.
            "faults": [[v, round(at, 3)] for v, at in self.faults] if self.false_positives else [],
        }


STARVED_S = 2.0  # how long a starved member is stopped (SIGSTOP ... SIGCONT)


def starved(g: Group, count: int, budget: float) -> Trials:
    """Members stopped for STARVED_S, one at a time: nobody else may be declared dead because
    of it. The stopped member's own verdicts count too (after SIGCONT it judges with stale
    timers: a death it declares would move another node's addresses in layer 2); whether it
    is itself declared dead is its own business (two seconds is longer than detection).
    `times` are the moments, from the stop, at which every other member had it dead, if they
    did."""
    out = Trials()
    for attempt in range(count):
        victim = g.members[(attempt * 7 + 5) % len(g.members)]
        assert victim.process is not None
        start = time.monotonic()
        victim.process.send_signal(signal.SIGSTOP)
        out.faults.append((victim.name, start))
        time.sleep(STARVED_S)
        victim.process.send_signal(signal.SIGCONT)
        done = g.all_report(victim, GONE, start)
        if done is not None:
            out.times.append(done - start)
        try:
            wait(g.converged, budget, "recovery after a stopped member")
        except TimeoutError as e:
            out.aborted = str(e)
            break
        finally:
            out.false_positives.extend(
                g.false_deaths(start, time.monotonic(), subject_excluded=victim.name)
            )
        g.settle()
    return out


def trials(g: Group, kind: str, count: int, budget: float) -> Trials:
    """Detection times for count faults of one kind, rotating the victim."""
    out = Trials()
    for attempt in range(2 * count):  # bounded: at most count faults redone
        if len(out.times) == count:
            break
        victim = g.members[(attempt * 3 + 2) % len(g.members)]
        states = {"left"} if kind == "leave" else GONE
        start = time.monotonic()
        if kind == "kill":
            assert victim.process is not None
            victim.process.send_signal(signal.SIGKILL)
        elif kind == "leave":
            assert victim.process is not None
            victim.process.send_signal(signal.SIGTERM)
        else:
            g.cut(victim)
        injected = time.monotonic() - start
        out.faults.append((victim.name, start))
        try:
            done = wait(functools.partial(g.all_report, victim, states, start), budget, kind)
        except TimeoutError as e:
            # Reported, not raised: the figures of the trials before it still stand.
            out.aborted = str(e)
            if kind == "linkcut":
                g.restore(victim)
            break
        first = g.first_report(victim, {"suspect"}, start)
        if injected <= INJECTION_LIMIT_S:
            out.times.append(done - start)
            if first is not None:
                out.first_suspect.append(first - start)
        else:
            out.redone += 1
        if os.environ.get("ILBM_BENCH_DEBUG"):
            suspected = first - start if first else -1.0
            print(
                f"    {kind} {victim.name}: injected in {injected:.3f}s, "
                f"suspect {suspected:.3f}s, all {done - start:.3f}s"
            )
        if kind == "linkcut":
            g.restore(victim)
        else:
            g.stop(victim, signal.SIGKILL)
            g.start(victim)
        try:
            wait(g.converged, budget + 30, f"recovery after {kind}")
        except TimeoutError as e:
            out.aborted = str(e)
            break
        finally:
            out.false_positives.extend(g.false_deaths(start, time.monotonic(), victim.name))
        g.settle()
    return out


def host_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of every core since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def soak(g: Group, seconds: float) -> dict[str, Any]:
    since = time.monotonic()
    before = g.cpu_seconds()
    host_before = host_cpu()
    time.sleep(seconds)
    elapsed = time.monotonic() - since
    after = g.cpu_seconds()
    host_after = host_cpu()
    busy = (host_after[0] - host_before[0]) / max(host_after[1] - host_before[1], 1)
    incidents = g.false_deaths(since)
    cpu = [(after[k] - before[k]) / elapsed for k in after if k in before]
    return {
        "members": len(g.members),
        "seconds": round(elapsed, 1),
        "loss": g.drop_rate,
        "false_positives": len(incidents),
        "false_positive_incidents": incidents,
        "cpu_core_fraction_mean": round(statistics.mean(cpu), 5) if cpu else None,
        "cpu_core_fraction_max": round(max(cpu), 5) if cpu else None,
        # How busy the whole host was meanwhile (all cores, every process, ours included):
        # near 1 the members were competing for CPU, and late timers look like lost packets.
        "host_cpu_busy_fraction": round(busy, 3),
        "members_cpu_cores": round(sum(cpu), 3),
        "host_cores": os.cpu_count(),
    }


def simulate(
    n: int, loss: float, soak_seconds: float, count: int, seed: int, busy_host: bool = True
) -> dict[str, Any]:
    """The N-member group at `loss`, on a simulated clock: a soak, then `count` link cuts.

    Real: the whole protocol, i.e. every member is a `machine.Machine` at the default timings,
    fed and ticked as the asyncio transport feeds and ticks it, every datagram encoded and
    decoded by the real codec and checked to fit `max_datagram` with its seal. Simulated
    (tests/unit/membership/sim.py): the clock; the network (0.2-2 ms of delay, each datagram
    lost independently with probability `loss`, a link cut as the member's traffic dropped both
    ways); with `busy_host`, the host (`sim.BUSY_TWO_CORES`: each datagram and timer costs the
    CPU time the real member process spends on it, the members share two cores a fifth busy with
    other work, a member handles one event at a time and its socket holds 200 datagrams; without
    it, every event is handled the instant it is due). Members start ten at a time, as the real
    ones do. A false positive is a member other than the victim that anyone but the victim
    declared dead, counted once per cut.
    """
    from speaker.membership import messages as msg
    from tests.unit.membership import sim

    began = time.process_time()
    rng = random.Random(seed)
    net = sim.Network(seed, loss=loss, host=sim.BUSY_TWO_CORES if busy_host else None)
    names = net.start_in_batches(n)
    everyone = frozenset(names)

    def converged() -> bool:
        return all(net.nodes[o].machine.alive() == everyone for o in names)

    def run_until_true(predicate: Callable[[], bool], limit: float) -> bool:
        # Checked every 50 simulated ms; the times reported come from the members' logs.
        end = net.now + limit
        while net.now < end:
            if predicate():
                return True
            net.run_for(0.05)
        return predicate()

    def harmed(since: float, exclude: str | None = None) -> set[str]:
        return {
            change.name
            for observer, node in net.nodes.items()
            if observer != exclude
            for at, change in node.log
            if at >= since and change.name != exclude and change.state >= msg.State.DEAD
        }

    formed = run_until_true(converged, 30.0)
    soak_start = net.now
    net.run_for(soak_seconds)
    soak_harmed = harmed(soak_start)
    times: list[float] = []
    first_suspect: list[float] = []
    trial_false_positives = 0
    aborted = None if formed else "the group did not form"
    for t in range(count if formed else 0):
        net.run_for(rng.uniform(0, 1.0))  # the cut lands anywhere in the probe cycles
        victim = names[(t * 3 + 2) % n]
        others = [x for x in names if x != victim]
        start = net.now
        net.partition(others)  # the victim alone on its side: its link is cut
        gone = {msg.State.DEAD, msg.State.LEFT}
        if not run_until_true(lambda: net.all_see(victim, gone, others), 30.0):  # noqa: B023
            aborted = f"link cut {t}: not detected in 30 simulated seconds"
            break
        verdicts: list[float] = []
        suspicions: list[float] = []
        for observer in others:
            log = net.nodes[observer].log
            verdicts.append(
                min(at for at, c in log if at >= start and c.name == victim and c.state in gone)
            )
            suspicions.extend(
                at
                for at, c in log
                if at >= start and c.name == victim and c.state == msg.State.SUSPECT
            )
        times.append(max(verdicts) - start)
        if suspicions:
            first_suspect.append(min(suspicions) - start)
        net.heal()
        if not run_until_true(converged, 60.0):
            aborted = f"link cut {t}: the group did not recover in 60 simulated seconds"
            break
        net.run_for(2.0)  # as the real bench settles, let the ripples of the rejoin pass
        trial_false_positives += len(harmed(start, exclude=victim))
    return {
        "members": n,
        "loss": loss,
        "seed": seed,
        "busy_host": busy_host,
        "soak_simulated_seconds": soak_seconds,
        "soak_false_positives": len(soak_harmed),
        "linkcut_times": times,
        "linkcut_first_suspect_times": first_suspect,
        "linkcut_false_positives": trial_false_positives,
        "socket_overflows": net.overflows,
        "aborted": aborted,
        "cpu_seconds": round(time.process_time() - began, 1),
    }


def simulate_many(n: int, loss: float, soak_seconds: float, count: int) -> dict[str, Any]:
    """`count` simulated link cuts split over two independent groups (seeds 1 and 2), one per
    core: the real groups are gone by then, and the simulated clock does not care how busy the
    host is."""
    from concurrent.futures import ProcessPoolExecutor

    shares = [count - count // 2, count // 2]
    with ProcessPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(simulate, [n, n], [loss, loss], [soak_seconds] * 2, shares, [1, 2]))
    times = [t for r in runs for t in r.pop("linkcut_times")]
    first = [t for r in runs for t in r.pop("linkcut_first_suspect_times")]
    return {
        "members": n,
        "loss": loss,
        "busy_host": True,
        "soak_simulated_seconds": soak_seconds,
        "soak_false_positives": sum(r["soak_false_positives"] for r in runs),
        "linkcut": figures.distribution(times),
        "linkcut_first_suspect": figures.distribution(first),
        "linkcut_false_positives": sum(r["linkcut_false_positives"] for r in runs),
        "socket_overflows": sum(r["socket_overflows"] for r in runs),
        "aborted": "; ".join(r["aborted"] for r in runs if r["aborted"]) or None,
        "runs": runs,
    }


def line(label: str, s: dict[str, float | int]) -> str:
    if not s or not s.get("n"):
        return f"  {label:<24} -"
    return (
        f"  {label:<24} n={s['n']:<3} min={s['min']:.3f}s median={s['median']:.3f}s "
        f"p99={s['p99']:.3f}s max={s['max']:.3f}s"
    )


@dataclass(frozen=True)
class Plan:
    sizes: list[int]  # ours, no loss: kill, link cut and leave at each N
    count: int
    leave_count: int
    memberlist_small: int  # memberlist at N = 8, no loss: kills and link cuts
    big: int  # the large group, at 2% loss, ours and memberlist's
    soak_s: float
    big_cuts: int
    big_starved: int
    memberlist_soak_s: float
    memberlist_big_cuts: int
    memberlist_big_starved: int
    sim_cuts: int
    sim_soak_s: float
    l2_addresses: int = 200  # ours at N = 100: Service addresses on the layer-2 plane
    l2_cuts: int = 3  # ... and link cuts whose address moves are counted at the ToR


QUICK = Plan([8], 3, 2, 3, 100, 10.0, 10, 3, 10.0, 5, 2, 200, 10.0)


def full_plan(args: argparse.Namespace) -> Plan:
    return Plan(
        sizes=[int(x) for x in args.sizes.split(",") if x],  # --sizes= : only the large group
        count=args.trials,
        leave_count=5,
        memberlist_small=args.memberlist_trials,
        big=args.soak_size,
        soak_s=args.soak_seconds,
        big_cuts=args.soak_trials,
        big_starved=args.starved_trials,
        memberlist_soak_s=args.memberlist_soak_seconds,
        memberlist_big_cuts=args.memberlist_trials * 2,
        memberlist_big_starved=args.starved_trials // 2,
        sim_cuts=args.sim_trials,
        sim_soak_s=args.sim_soak_seconds,
        l2_addresses=args.l2_addresses,
        l2_cuts=args.l2_cuts,
    )


def large_group(
    run: str,
    plan: Plan,
    key_file: Path,
    extra: list[str],
    command: tuple[str, ...],
    detect_s: float = 30.0,
    events: Path | None = None,
) -> dict[str, Any]:
    """The large group at 2% loss: a soak (false positives, CPU), link cuts and stopped
    members, each watched for false positives until the group has recovered."""
    memberlist = command != OURS
    soak_s = plan.memberlist_soak_s if memberlist else plan.soak_s
    cuts = plan.memberlist_big_cuts if memberlist else plan.big_cuts
    stops = plan.memberlist_big_starved if memberlist else plan.big_starved
    out: dict[str, Any] = {}
    try:
        subnet = 201 if memberlist else 200
        with group(run, plan.big, subnet, key_file, extra, drop=0.02, command=command) as g:
            try:
                out["soak"] = soak(g, soak_s)
                out["linkcut"] = trials(g, "linkcut", cuts, detect_s).summary()
                out["starved"] = starved(g, stops, detect_s + 30).summary()
                if not memberlist and plan.l2_cuts:
                    out["l2"] = layer2_moves(g, plan.l2_addresses, plan.l2_cuts, detect_s)
            finally:
                if events is not None:
                    with g.lock:
                        dump = {m.name: m.events for m in g.members}
                    events.write_text(json.dumps(dump))
    except TimeoutError as e:
        # A host too busy for the group to form (seen: load average 100 from other jobs):
        # said in the JSON, and the rest still runs.
        out["aborted"] = str(e)
    return out


def layer2_moves(g: Group, addresses: int, count: int, budget: float) -> dict[str, Any]:
    """Layer-2 servers beside the members, then link cuts whose address moves the ToR counts
    (bench/membership_l2.py). Starting a hundred more interpreters loads the host: members
    declared dead meanwhile are counted too."""
    from bench import membership_l2

    since = time.monotonic()
    plane = membership_l2.Plane(g, addresses, PYTHON, str(ROOT))
    try:
        plane.start()
        g.settle()
        started = g.false_deaths(since)
        # Half the cuts restored a second after the group has the victim dead, half held
        # LONG_HOLD_S more: long enough for the victim to declare some members dead and claim
        # their addresses in its own view (its link is down: nobody hears it).
        moves, aborted = membership_l2.cuts(plane, count - count // 2, budget)
        if aborted is None and count // 2:
            held, aborted = membership_l2.cuts(plane, count // 2, budget, hold=LONG_HOLD_S)
            moves = membership_l2.added(moves, held)
    finally:
        plane.stop()
    result = membership_l2.summary(moves, addresses, len(g.members), aborted)
    result["false_positives_while_starting"] = len(started)
    result["unanswered"] = len(moves.unanswered)
    result["long_hold_s"] = LONG_HOLD_S
    return result


LONG_HOLD_S = 8.0


def print_large(label: str, big: dict[str, Any]) -> None:
    soaked = big.get("soak", {})
    print(
        f"{label}: soak {soaked.get('seconds')}s at 2% loss, false positives "
        f"{soaked.get('false_positives')}, CPU per member "
        f"{100 * (soaked.get('cpu_core_fraction_mean') or 0):.2f}% of a core"
    )
    for kind in ("linkcut", "starved"):
        if kind in big:
            print(line(kind, big[kind]))
            print(f"    false positives: {big[kind]['false_positives']}")
    if "l2" in big:
        l2 = big["l2"]
        print(
            f"  layer 2: {l2['addresses']} addresses, {l2['cuts']} cuts: the victims' "
            f"{l2['victim_addresses']} addresses moved {l2['victim_moves']} times; others "
            f"{l2['collateral_moves_while_cut']} while cut, "
            f"{l2['collateral_moves_after_restore']} after the restore"
        )
    if big.get("aborted"):
        print(f"  aborted: {big['aborted']}")


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / memberlist's: below 1, ours is faster."""
    return round(ours / theirs, 3) if ours is not None and theirs else None


def keys(prefix: str, big: dict[str, Any]) -> dict[str, Any]:
    """The large group's headline figures under `prefix` (n100_, n100_memberlist_)."""
    empty = Trials().summary()
    cut, stop, soaked = big.get("linkcut", empty), big.get("starved", empty), big.get("soak", {})
    soak_fp = soaked.get("false_positives")
    return {
        f"{prefix}linkcut_trials": cut["n"],
        f"{prefix}linkcut_p50_s": cut["median"],
        f"{prefix}linkcut_p99_s": cut["p99"],
        # Every cut and the soak before them, every observer (but a cut-off victim's own view).
        f"{prefix}false_positives": None if soak_fp is None else soak_fp + cut["false_positives"],
        f"{prefix}starved_trials": stop["faults_injected"],
        f"{prefix}starved_false_positives": stop["false_positives"] if "starved" in big else None,
        f"{prefix}cpu_per_member": soaked.get("cpu_core_fraction_mean"),
        f"{prefix}host_cpu_busy": soaked.get("host_cpu_busy_fraction"),
        f"{prefix}aborted": big.get("aborted") or cut["aborted"] or stop["aborted"],
    }


def l2_keys(prefix: str, big: dict[str, Any]) -> dict[str, Any]:
    l2 = big.get("l2", {})
    return {
        f"{prefix}l2_cuts": l2.get("cuts"),
        f"{prefix}l2_victim_addresses": l2.get("victim_addresses"),
        f"{prefix}l2_victim_moves": l2.get("victim_moves"),
        f"{prefix}l2_collateral_moves_while_cut": l2.get("collateral_moves_while_cut"),
        f"{prefix}l2_collateral_moves_after_restore": l2.get("collateral_moves_after_restore"),
        f"{prefix}l2_aborted": l2.get("aborted"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default="3,8,32")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--soak-seconds", type=float, default=300.0)
    parser.add_argument("--soak-size", type=int, default=100)
    parser.add_argument(
        "--soak-trials", type=int, default=40, help="link cuts in the lossy group after its soak"
    )
    parser.add_argument("--starved-trials", type=int, default=10, help="members stopped 2 s")
    parser.add_argument(
        "--memberlist-trials", type=int, default=10, help="memberlist's link cuts at N = 8"
    )
    parser.add_argument("--memberlist-soak-seconds", type=float, default=60.0)
    parser.add_argument("--sim-trials", type=int, default=1000, help="simulated link cuts")
    parser.add_argument("--sim-soak-seconds", type=float, default=300.0)
    parser.add_argument("--l2-addresses", type=int, default=500, help="layer-2 plane at N = 100")
    parser.add_argument("--l2-cuts", type=int, default=10, help="cuts counted at the ToR")
    parser.add_argument(
        "--events", type=Path, help="write every event of the lossy group here (JSON), to study"
    )
    parser.add_argument("--set", action="append", default=[], help="timing override for ours")
    args = parser.parse_args()
    # A SIGTERM unwinds through the finally blocks that delete the namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("needs root and iproute2 (network namespaces)", file=sys.stderr)
        return 2
    plan = QUICK if args.quick else full_plan(args)
    from hack import memberlist_peer

    memberlist = (str(memberlist_peer.ensure_built()),)
    ours = [f"--set={s}" for s in args.set]
    run = f"{os.getpid() % 10000}"
    tmp = Path(tempfile.mkdtemp(prefix="ilbm-bench-"))
    key_file = tmp / "key"
    key_file.write_text("benchmark-shared-secret\n")
    result: dict[str, Any] = {
        "sizes": {},
        "memberlist_sizes": {},
        "loss_injection": "receive hook (no sch_netem): ours --drop-rate, memberlist's transport",
    }
    began = time.monotonic()
    print(f"membership benchmark ({'quick' if args.quick else 'full'}), timings: default {ours}")
    try:
        # One group at a time: a second group's processes would take the first one's CPU.
        for subnet, n in enumerate(plan.sizes):
            with group(run + f"n{n}", n, subnet, key_file, ours) as g:
                by_kind = {
                    kind: trials(
                        g, kind, plan.count if kind != "leave" else plan.leave_count, 30
                    ).summary()
                    for kind in ("kill", "linkcut", "leave")
                }
            result["sizes"][str(n)] = by_kind
            print(f"ours, N={n}")
            for kind, summary in by_kind.items():
                print(line(kind, summary))
        if plan.memberlist_small:
            # memberlist does not tell a leave from a death: kills and link cuts only.
            with group(run + "m8", 8, 100, key_file, [], command=memberlist) as g:
                by_kind = {
                    kind: trials(g, kind, plan.memberlist_small, 60).summary()
                    for kind in ("kill", "linkcut")
                }
            result["memberlist_sizes"]["8"] = by_kind
            print("memberlist (MetalLB's configuration), N=8")
            for kind, summary in by_kind.items():
                print(line(kind, summary))
        big = large_group(run + "s", plan, key_file, ours, OURS, events=args.events)
        result["large"] = big
        print_large(f"ours, N={plan.big}", big)
        mbig = large_group(run + "ms", plan, key_file, [], memberlist, detect_s=60.0)
        result["memberlist_large"] = mbig
        print_large(f"memberlist, N={plan.big}", mbig)
        # Last, alone: the simulation's CPU would otherwise slow the real members.
        simulated = simulate_many(plan.big, 0.02, plan.sim_soak_s, plan.sim_cuts)
        result["simulated"] = simulated
        print(f"ours, N={plan.big} at 2% loss, simulated on a busy two-core host")
        print(line("linkcut", simulated["linkcut"]))
        print(
            f"    false positives: soak {simulated['soak_false_positives']}, "
            f"link cuts {simulated['linkcut_false_positives']}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    empty = Trials().summary()
    headline = result["sizes"].get("8") or next(
        iter(result["sizes"].values()), {"kill": empty, "linkcut": empty, "leave": empty}
    )
    small_ml = result["memberlist_sizes"].get("8", {"kill": empty, "linkcut": empty})
    big_soak = result["large"].get("soak", {})
    n = plan.big
    result.update(
        {
            "detect_linkcut_median_s": headline["linkcut"]["median"],
            "detect_linkcut_p99_s": headline["linkcut"]["p99"],
            "detect_kill_median_s": headline["kill"]["median"],
            "false_positives": big_soak.get("false_positives"),
            "leave_s": headline["leave"]["median"],
            "cpu_per_member": big_soak.get("cpu_core_fraction_mean"),
            "n8_linkcut_p50_s": headline["linkcut"]["median"],
            "n8_linkcut_p99_s": headline["linkcut"]["p99"],
            "n8_memberlist_linkcut_p50_s": small_ml["linkcut"]["median"],
            "n8_memberlist_linkcut_p99_s": small_ml["linkcut"]["p99"],
            "n8_memberlist_kill_p50_s": small_ml["kill"]["median"],
            **keys(f"n{n}_", result["large"]),
            **keys(f"n{n}_memberlist_", result["memberlist_large"]),
            **l2_keys(f"n{n}_", result["large"]),
            "n8_linkcut_p50_ratio_vs_memberlist": ratio(
                headline["linkcut"]["median"], small_ml["linkcut"]["median"]
            ),
            f"n{n}_linkcut_p50_ratio_vs_memberlist": ratio(
                result["large"].get("linkcut", empty)["median"],
                result["memberlist_large"].get("linkcut", empty)["median"],
            ),
            f"n{n}_sim_linkcut_trials": result["simulated"]["linkcut"]["n"],
            f"n{n}_sim_linkcut_p50_s": result["simulated"]["linkcut"]["median"],
            f"n{n}_sim_linkcut_p99_s": result["simulated"]["linkcut"]["p99"],
            f"n{n}_sim_false_positives": result["simulated"]["soak_false_positives"]
            + result["simulated"]["linkcut_false_positives"],
            "wall_seconds": round(time.monotonic() - began, 1),
        }
    )
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
