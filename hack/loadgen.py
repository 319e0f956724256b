"""Client load through the load balancer, counted: what an operation costs the clients.

    python -m hack.loadgen --duration S --rate R [--streams N --stream-port P] ADDRESS:PORT ...

Run in the lab's client namespace (`LoadGen` does that). Two kinds of load, for at most
`--duration` seconds (SIGINT or SIGTERM ends it earlier) and at most `rate * duration` requests:

* requests: `--rate` new TCP connections per second, spread round-robin over the targets; each
  must bring back one whole line (hack/echo's `<pod> <node> <source>`) within `--timeout`.
  A failure is counted by kind: `refused`, `reset`, `unreachable`, `timeout`, `closed` (the
  connection ended before a line), `error`. A request that took longer than `--slow` seconds
  succeeded but most likely after a lost SYN was sent again: counted as `slow`.
* streams: `--streams` long-lived connections to each target's address on `--stream-port`
  (hack/echo's `--stream-port`: a line every 50 ms). A stream that breaks (reset, closed, or
  silent for `--stall` seconds) is counted by kind and opened again, so what follows is measured.

Standard output: one line `{"started": true}` once the load runs, then one JSON object at the
end: totals, failures by kind, the longest gap between two answered requests of a target and
between two lines of a stream, the nodes that answered, and the first failures with their time
(seconds since the start).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
KEPT_FAILURES = 50
STREAM_RETRY_S = 0.1


def parse_target(text: str) -> tuple[str, int]:
    """`10.0.0.1:80` or `[fd00::1]:80`."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"not ADDRESS:PORT: {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def target_text(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def failure_kind(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ConnectionResetError | BrokenPipeError):
        return "reset"
    if isinstance(e, OSError) and e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable"
    return "error"


@dataclass
class Target:
    name: str
    total: int = 0
    ok: int = 0
    slow: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    nodes: Counter[str] = field(default_factory=Counter)
    sources: Counter[str] = field(default_factory=Counter)  # the client address each backend saw
    last_ok: float | None = None
    max_gap_s: float = 0.0
    max_latency_s: float = 0.0

    def answered(self, now: float, latency: float) -> None:
        if self.last_ok is not None:
            self.max_gap_s = max(self.max_gap_s, now - self.last_ok)
        self.last_ok = now
        self.max_latency_s = max(self.max_latency_s, latency)

    def report(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "ok": self.ok,
            "failed": sum(self.failures.values()),
            "slow": self.slow,
            "failures": dict(self.failures),
            "nodes": dict(self.nodes),
            "sources": dict(self.sources),
            "max_gap_s": round(self.max_gap_s, 3),
            "max_latency_s": round(self.max_latency_s, 3),
            # When the last answer came, on the machine's monotonic clock: a caller can tell
            # whether the load still got answers after an event it timed itself.
            "last_ok_monotonic": None if self.last_ok is None else round(self.last_ok, 6),
        }


@dataclass
class Stream:
    name: str
    opened: int = 0
    lines: int = 0
    breaks: Counter[str] = field(default_factory=Counter)
    nodes: list[str] = field(default_factory=list)
    max_gap_s: float = 0.0

    def report(self) -> dict[str, Any]:
        return {
            "target": self.name,
            "opened": self.opened,
            "lines": self.lines,
            "broken": sum(self.breaks.values()),
            "breaks": dict(self.breaks),
            "nodes": self.nodes,
            "max_gap_s": round(self.max_gap_s, 3),
        }


class Load:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.targets: list[tuple[str, int]] = args.targets
        self.stats = {target_text(*t): Target(target_text(*t)) for t in self.targets}
        self.streams: list[Stream] = []
        self.failures: list[dict[str, Any]] = []
        self.stop = asyncio.Event()
        self.started = time.monotonic()

    def failed(self, what: str, kind: str, node: str | None = None) -> None:
        if len(self.failures) < KEPT_FAILURES:
            entry = {"t": round(time.monotonic() - self.started, 3), "target": what, "kind": kind}
            if node:
                entry["node"] = node
            self.failures.append(entry)

    async def request(self, address: str, port: int) -> None:
        stats = self.stats[target_text(address, port)]
        stats.total += 1
        began = time.monotonic()
        timeout = self.args.timeout
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(address, port)
                line = await reader.readline()
            if not line.endswith(b"\n"):
                raise EOFError
        except (OSError, TimeoutError, EOFError) as e:
            kind = "closed" if isinstance(e, EOFError) else failure_kind(e)
            stats.failures[kind] += 1
            self.failed(stats.name, kind)
            return
        finally:
            if writer is not None:
                writer.close()
        now = time.monotonic()
        stats.ok += 1
        if now - began > self.args.slow:
            stats.slow += 1
        stats.answered(now, now - began)
        fields = line.decode(errors="replace").split()
        stats.nodes[fields[1] if len(fields) > 1 else "?"] += 1
        stats.sources[fields[2] if len(fields) > 2 else "?"] += 1

    async def requests(self) -> None:
        count = int(self.args.rate * self.args.duration)
        pending: set[asyncio.Task[None]] = set()
        for i in range(count):
            at = self.started + i / self.args.rate
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(0.0, at - time.monotonic()))
            if self.stop.is_set():
                break
            task = asyncio.create_task(self.request(*self.targets[i % len(self.targets)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
        self.stop.set()  # streams end with the requests
        if pending:
            await asyncio.wait(pending)

    async def stream(self, stream: Stream, address: str, port: int) -> None:
        while not self.stop.is_set():
            writer: asyncio.StreamWriter | None = None
            node = ""
            try:
                async with asyncio.timeout(self.args.timeout):
                    reader, writer = await asyncio.open_connection(address, port)
                stream.opened += 1
                last = time.monotonic()
                while not self.stop.is_set():
                    async with asyncio.timeout(self.args.stall):
                        line = await reader.readline()
                    if not line.endswith(b"\n"):
                        raise EOFError
                    now = time.monotonic()
                    stream.max_gap_s = max(stream.max_gap_s, now - last)
                    last = now
                    stream.lines += 1
                    fields = line.decode(errors="replace").split()
                    if len(fields) > 1 and fields[1] != node:
                        node = fields[1]
                        stream.nodes.append(node)
            except (OSError, TimeoutError, EOFError) as e:
                if self.stop.is_set():
                    break
                kind = "closed" if isinstance(e, EOFError) else failure_kind(e)
                if kind == "timeout" and stream.opened and writer is not None:
                    kind = "stalled"
                stream.breaks[kind] += 1
                self.failed(stream.name, kind, node)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), STREAM_RETRY_S)
            finally:
                if writer is not None:
                    writer.close()

    async def run(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        tasks = []
        if self.args.streams and self.args.stream_port:
            for address in dict.fromkeys(a for a, _ in self.targets):
                for _ in range(self.args.streams):
                    stream = Stream(target_text(address, self.args.stream_port))
                    self.streams.append(stream)
                    tasks.append(self.stream(stream, address, self.args.stream_port))
        print(json.dumps({"started": True}), flush=True)
        await asyncio.gather(self.requests(), *tasks)
        return self.report()

    def report(self) -> dict[str, Any]:
        targets = {name: t.report() for name, t in self.stats.items()}
        failures: Counter[str] = Counter()
        for t in self.stats.values():
            failures.update(t.failures)
        breaks: Counter[str] = Counter()
        for s in self.streams:
            breaks.update(s.breaks)
        return {
            "duration_s": round(time.monotonic() - self.started, 3),
            # CLOCK_MONOTONIC is the machine's: failures' `t` + this = the witnesses' times.
            "started_monotonic": round(self.started, 6),
            "requests_total": sum(t.total for t in self.stats.values()),
            "requests_ok": sum(t.ok for t in self.stats.values()),
            "requests_failed": sum(failures.values()),
            "requests_slow": sum(t.slow for t in self.stats.values()),
            "failures": dict(failures),
            "max_gap_s": max((t.max_gap_s for t in self.stats.values()), default=0.0),
            "targets": targets,
            "streams_total": len(self.streams),
            "streams_broken": sum(breaks.values()),
            "stream_breaks": dict(breaks),
            "streams": [s.report() for s in self.streams],
            "first_failures": self.failures,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.loadgen", description=__doc__)
    parser.add_argument("--duration", type=float, required=True, help="seconds at most")
    parser.add_argument("--rate", type=float, default=50.0, help="new connections per second")
    parser.add_argument("--streams", type=int, default=0, help="streams per address")
    parser.add_argument("--stream-port", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for one request")
    parser.add_argument("--slow", type=float, default=0.9, help="a request this long is slow")
    parser.add_argument("--stall", type=float, default=2.0, help="a silent stream is broken")
    parser.add_argument("targets", nargs="+", type=parse_target, metavar="ADDRESS:PORT")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.rate <= 0:
        parser.error("--duration and --rate must be positive")
    result = asyncio.run(Load(args).run())
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


# --- the harness's side ---------------------------------------------------------------------------


class LoadGenError(Exception):
    pass


class LoadGen:
    """The load generator running in a lab namespace (the client's by default).

    `with LoadGen(lab, targets, ...) as load:` starts it and returns once the load runs; `stop()`
    ends it early and returns its final report (also what `result()` returns when it ended by
    itself). Leaving the block stops it whatever happened."""

    def __init__(
        self,
        lab: Any,
        targets: Sequence[tuple[str, int]],
        *,
        duration: float,
        rate: float = 50.0,
        streams: int = 0,
        stream_port: int = 0,
        ns: str = "ilb-client",
        log: Path | None = None,
    ) -> None:
        self.argv = [
            "env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "hack.loadgen",
            f"--duration={duration}", f"--rate={rate}", f"--streams={streams}",
            f"--stream-port={stream_port}", *(target_text(a, p) for a, p in targets),
        ]  # fmt: skip
        self.lab, self.ns, self.duration = lab, ns, duration
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._stderr: IO[bytes] | None = None
        self._report: dict[str, Any] | None = None

    def start(self, timeout: float = 30.0) -> None:
        self._stderr = open(self.log, "ab") if self.log else None  # noqa: SIM115 - closed in stop
        self.process = self.lab.popen(
            self.ns,
            *self.argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr if self._stderr else subprocess.DEVNULL,
            bufsize=0,
        )
        line = self._readline(timeout)
        if json.loads(line or "{}").get("started") is not True:
            self.close()
            raise LoadGenError(f"the load generator did not start (said {line!r})")

    def _readline(self, timeout: float) -> str:
        """One line of its output within `timeout` ("" if none): read unbuffered, so that what
        `select` says is all there is."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.process.stdout], [], [], left)[0]:
                return ""
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Its final report, once it has ended (bounded wait: its duration plus `timeout`)."""
        if self._report is not None:
            return self._report
        if self.process is None:
            raise LoadGenError("not started")
        line = self._readline(self.duration + (timeout or 30.0))
        self.close()
        try:
            report: dict[str, Any] = json.loads(line)
        except ValueError:
            raise LoadGenError(f"no report from the load generator (read {line!r})") from None
        self._report = report
        return report

    def stop(self) -> dict[str, Any]:
        """End the load now and return the report."""
        if self.process is not None and self.process.poll() is None and self._report is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
        return self.result(timeout=30.0)

    def close(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5.0)
            if self.process.stdout is not None:
                self.process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> LoadGen:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
