"""Membership failover benchmark: real member processes, real kills, real link cuts.

Each member is `python -m speaker.membership` in its own network namespace (`ilbm-<run>-<i>`),
joined to the others by a veth into a bridge namespace (`ilbm-<run>-sw`); addresses are in
10.231.0.0/16 and exist only inside those namespaces. Measured, for each N:

- kill: SIGKILL a member; time until every other member has reported it dead;
- linkcut: `ip link set eth0 down` inside the member's namespace (the process keeps running but
  is cut off); time until every other member has reported it dead;
- leave: SIGTERM (graceful leave); time until every other member has reported it left;
- soak: a separate group with 2% loss on every datagram for a while; any member reported dead is
  a false positive; CPU per member over the soak from /proc/<pid>/stat.

Loss injection: this kernel has no `sch_netem` (nor the `gact` action), so `tc netem` cannot be
used; the members are started with the transport's test hook `--drop-rate 0.02`, which discards
that fraction of received datagrams before they are opened (each datagram has exactly one
receiver, so this is 2% loss per datagram).

Times are taken from CLOCK_MONOTONIC, which every process on the host shares: the benchmark
stamps the fault just before injecting it, members stamp their verdicts when they reach them.

`--quick`: N = 8, 3 trials each (2 leaves), a 30 s soak run alongside the trials; under a minute.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import figures  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
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
    ) -> None:
        self.run = run
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

    # --- processes -----------------------------------------------------------------------------

    def start(self, member: Member) -> None:
        seeds = [f"--seed={m.address}:7946" for m in self.members[:2] if m is not member]
        argv = [
            "ip", "netns", "exec", member.namespace,
            PYTHON, "-m", "speaker.membership",
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

    def false_deaths(self, since: float) -> list[dict[str, Any]]:
        """Members declared dead or left since a time, one entry per member and incarnation."""
        incidents: dict[tuple[str, int], dict[str, Any]] = {}
        with self.lock:
            for observer in self.members:
                for t, subject, state, incarnation in observer.events:
                    if state in GONE and t >= since:
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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


@contextlib.contextmanager
def group(
    run: str, n: int, subnet: int, key_file: Path, extra: list[str], drop: float = 0.0
) -> Iterator[Group]:
    g = Group(run, n, subnet, key_file, extra, drop)
    try:
        g.build()
        for member in g.members:
            g.start(member)
        wait(g.converged, 30 + n, f"{n} members to converge")
        g.settle()
        yield g
    finally:
        g.destroy()


def trials(g: Group, kind: str, count: int, budget: float) -> list[float]:
    """Detection times for count faults of one kind, rotating the victim."""
    times: list[float] = []
    for t in range(count):
        victim = g.members[(t * 3 + 2) % len(g.members)]
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
        done = wait(functools.partial(g.all_report, victim, states, start), budget, kind)
        times.append(done - start)
        if os.environ.get("ILBM_BENCH_DEBUG"):
            first = g.first_report(victim, {"suspect"}, start)
            suspected = first - start if first else -1.0
            print(f"    {kind} {victim.name}: suspect {suspected:.3f}s, all {done - start:.3f}s")
        if kind == "linkcut":
            g.restore(victim)
        else:
            g.stop(victim, signal.SIGKILL)
            g.start(victim)
        wait(g.converged, budget + 30, f"recovery after {kind}")
        g.settle()
    return times


def soak(g: Group, seconds: float) -> dict[str, Any]:
    since = time.monotonic()
    before = g.cpu_seconds()
    time.sleep(seconds)
    elapsed = time.monotonic() - since
    after = g.cpu_seconds()
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
    }


def line(label: str, s: dict[str, float | int]) -> str:
    if not s:
        return f"  {label:<24} -"
    return (
        f"  {label:<24} n={s['n']:<3} min={s['min']:.3f}s median={s['median']:.3f}s "
        f"p99={s['p99']:.3f}s max={s['max']:.3f}s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default="3,8,32")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--soak-seconds", type=float, default=300.0)
    parser.add_argument("--soak-size", type=int, default=32)
    parser.add_argument("--baseline-trials", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], help="timing override for ours")
    args = parser.parse_args()
    # A SIGTERM unwinds through the finally blocks that delete the namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("needs root and iproute2 (network namespaces)", file=sys.stderr)
        return 2
    if args.quick:
        sizes, count, leave_count = [8], 3, 2
        soak_seconds, soak_size, baseline_trials = 30.0, 8, 0
    else:
        sizes = [int(x) for x in args.sizes.split(",")]
        count, leave_count = args.trials, 5
        soak_seconds, soak_size, baseline_trials = (
            args.soak_seconds,
            args.soak_size,
            args.baseline_trials,
        )
    ours = [f"--set={s}" for s in args.set]
    run = f"{os.getpid() % 10000}"
    tmp = Path(tempfile.mkdtemp(prefix="ilbm-bench-"))
    key_file = tmp / "key"
    key_file.write_text("benchmark-shared-secret\n")
    result: dict[str, Any] = {"sizes": {}, "loss_injection": "transport hook (no sch_netem)"}
    began = time.monotonic()
    print(f"membership benchmark ({'quick' if args.quick else 'full'}), timings: default {ours}")
    try:
        soak_thread: threading.Thread | None = None
        soak_result: dict[str, Any] = {}

        def run_soak() -> None:
            with group(run + "s", soak_size, 200, key_file, ours, drop=0.02) as g:
                soak_result.update(soak(g, soak_seconds))

        if args.quick:  # alongside the trials, to fit in a minute
            soak_thread = threading.Thread(target=run_soak)
            soak_thread.start()
        for subnet, n in enumerate(sizes):
            with group(run + f"n{n}", n, subnet, key_file, ours) as g:
                by_kind = {
                    kind: figures.distribution(
                        trials(g, kind, count if kind != "leave" else leave_count, 30)
                    )
                    for kind in ("kill", "linkcut", "leave")
                }
            result["sizes"][str(n)] = by_kind
            print(f"N={n}")
            for kind, s in by_kind.items():
                print(line(kind, s))
        if baseline_trials:
            extra = ["--profile=memberlist-lan", "--set=reconnect_interval=2.0"]
            with group(run + "b", 8, 100, key_file, extra) as g:
                base = figures.distribution(trials(g, "linkcut", baseline_trials, 60))
            ours8 = result["sizes"].get("8", {}).get("linkcut", {})
            result["baseline_memberlist_lan_linkcut_n8"] = base
            print("N=8 link cut, side by side")
            print(line("ours (default)", ours8))
            print(line("memberlist-LAN timings", base))
            if ours8:
                ratio = base["median"] / ours8["median"]
                result["baseline_ratio_median"] = round(ratio, 2)
                print(f"  median ratio memberlist-LAN / ours = {ratio:.1f}x")
        if soak_thread is None:
            run_soak()
        else:
            soak_thread.join()
        result["soak"] = soak_result
        print(
            f"soak N={soak_result.get('members')} {soak_result.get('seconds')}s at 2% loss: "
            f"false positives {soak_result.get('false_positives')}, CPU per member mean "
            f"{100 * (soak_result.get('cpu_core_fraction_mean') or 0):.2f}% "
            f"max {100 * (soak_result.get('cpu_core_fraction_max') or 0):.2f}% of a core"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    headline = result["sizes"].get("8") or next(iter(result["sizes"].values()))
    result.update(
        {
            "detect_linkcut_median_s": headline["linkcut"]["median"],
            "detect_linkcut_p99_s": headline["linkcut"]["p99"],
            "detect_kill_median_s": headline["kill"]["median"],
            "false_positives": result["soak"]["false_positives"],
            "leave_s": headline["leave"]["median"],
            "cpu_per_member": result["soak"]["cpu_core_fraction_mean"],
            "wall_seconds": round(time.monotonic() - began, 1),
        }
    )
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
