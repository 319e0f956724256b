"""End-to-end allocation benchmark: the controller process against a real kube-apiserver.

For each count N (1,000 and 10,000; `--quick`: 1,000 only) it measures, in one run:

* backlog: N LoadBalancer Services exist, none has an address, and the controller is started:
  `assign_s` is the time from spawning `python -m controller` until the last of them carries an
  address (seen through a watch). It includes process start, the LISTs, every decision and
  every status PATCH; Events and pool status are written too but at lower priority, so they
  are in `settle_s` (until the controller's write counter stops moving), not in `assign_s`.
* writes: the controller's own count of write requests, per Service (leases excluded).
* controller CPU seconds (user + system, from /proc) and peak RSS (VmHWM) at the end of that.
* restart: the controller is stopped (SIGTERM, which releases the Lease) and started again
  over the N settled Services: `restart_ready_s` is spawn -> /readyz answering 200, and
  `restart_writes` the writes it made by then plus a short settling period (must be 0).
* floor (measured first, before any controller runs, so the cluster holds the same objects as
  in the backlog phase; its Services are deleted again before the controller starts): a bare
  client loop over the same `ironlb_io.kube.Client`, with the
  same number of requests in flight (`ironlb_io.kube.CONCURRENCY`), PATCHes the status of N
  other pending Services (of a loadBalancerClass the controller ignores; one merge patch
  each, the body the controller sends), observed through the same watch. `ratio_to_floor` is
  `assign_s / floor_s`: the controller's whole pipeline against the bare minimum of writes.
* live (1,000 only, not with `--quick`): the restarted controller runs while N more
  Services are created (by this script, at the same concurrency); `live_assign_s` is from the
  first create request until all have addresses, `create_s` how long the creates alone took.

Every phase is bounded in time. The cluster is a temporary one (hack/cluster) unless
`--kubeconfig` or IRONLB_KUBECONFIG names one. Output: readable lines, then one JSON object on
the last line (the figures of the largest N at top level, every N under "runs").
Usage: python -m bench.allocate [--quick] [--kubeconfig PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hack import cluster as local_cluster
from hack import processes
from ironlb_io import kube

ROOT = Path(__file__).resolve().parent.parent

NAMESPACE = "metallb-system"
POOL = "bench"
POOL_RANGE = "100.64.0.0/14"  # room for every Service of every phase
FLOOR_PREFIX = "198.18."  # addresses the floor writes: outside the pool, easy to tell apart
FLOOR_CLASS = "bench.ironlb.io/floor"  # the controller ignores the floor's Services
LIVE_MAX = 1000  # the live phase's Services per count, at most
SETUP_CONCURRENCY = 32  # creating and deleting fixtures is not measured
PHASE_TIMEOUT_S = 900.0
TICK = os.sysconf("SC_CLK_TCK")


BEGAN = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - BEGAN:6.1f} s] {text}", flush=True)


# --- the controller process ------------------------------------------------------------------


class Controller:
    def __init__(self, kubeconfig: str, log_dir: Path) -> None:
        self.kubeconfig, self.log_dir = kubeconfig, log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.runs = 0

    def start(self) -> float:
        (self.port,) = local_cluster.free_ports(1)
        self.runs += 1
        out = open(self.log_dir / f"controller-{self.runs}.log", "wb")  # noqa: SIM115
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller",
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-port={self.port}",
                "--lease-name=ironlb-bench",
                "--log-level=warn",
            ],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        return started

    def _get(self, path: str) -> tuple[int, str]:
        try:
            url = f"http://127.0.0.1:{self.port}{path}"
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def ready(self) -> bool:
        return self._get("/readyz")[0] == 200

    def writes(self) -> int:
        """Object writes (the Lease's renewals excluded)."""
        status, text = self._get("/metrics")
        if status != 200:
            raise RuntimeError("controller metrics unavailable")
        total = 0.0
        for line in text.splitlines():
            if line.startswith("ironlb_controller_api_writes_total") and "leases" not in line:
                total += float(line.rpartition(" ")[2])
        return int(total)

    def cpu_s(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    def peak_rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


async def wait_until(what: str, probe: Any, timeout: float = PHASE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# --- fixtures --------------------------------------------------------------------------------


def service(name: str, lb_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        # A nodePort each would exhaust the node-port range (2,768) long before 10,000.
        "allocateLoadBalancerNodePorts": False,
        "ports": [{"port": 80, "protocol": "TCP"}],
    }
    if lb_class:
        spec["loadBalancerClass"] = lb_class
    return {"metadata": {"name": name}, "spec": spec}


async def bounded(concurrency: int, jobs: list[Any]) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def create_services(
    client: kube.Client, namespace: str, n: int, concurrency: int, lb_class: str | None = None
) -> None:
    path = kube.core_path("services", namespace)
    jobs = [client.create(path, service(f"s{i:05d}", lb_class)) for i in range(n)]
    await bounded(concurrency, jobs)


async def ensure_namespace(client: kube.Client, name: str) -> None:
    with contextlib.suppress(kube.ApiError):
        await client.create(kube.core_path("namespaces"), {"metadata": {"name": name}})


async def delete_services(client: kube.Client, namespace: str) -> None:
    items, _ = await client.list(kube.core_path("services", namespace))
    paths = [kube.core_path("services", namespace, s["metadata"]["name"]) for s in items]
    await bounded(SETUP_CONCURRENCY, [client.delete(p) for p in paths])


class Addressed:
    """Counts Services of one namespace that carry an address (with `prefix`), from a watch."""

    def __init__(self, client: kube.Client, namespace: str, prefix: str = "") -> None:
        self.client, self.namespace, self.prefix = client, namespace, prefix
        self.done: set[str] = set()
        self.last_at = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        path = kube.core_path("services", self.namespace)
        while True:
            try:
                async for event in self.client.watch(path, {"allowWatchBookmarks": "false"}):
                    obj = event.get("object") or {}
                    name = (obj.get("metadata") or {}).get("name")
                    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")
                    ip = str((ingress or [{}])[0].get("ip", ""))
                    if name and ip.startswith(self.prefix) and ingress and name not in self.done:
                        self.done.add(name)
                        self.last_at = time.monotonic()
            except kube.ApiError:
                await asyncio.sleep(0.2)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def settle(ctl: Controller, quiet_s: float = 2.0) -> float:
    """Wait until the controller's write count has not moved for `quiet_s`; when it last moved."""
    last, last_change = ctl.writes(), time.monotonic()
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while time.monotonic() - last_change < quiet_s:
        if time.monotonic() > deadline:
            raise TimeoutError("the controller never stopped writing")
        await asyncio.sleep(0.2)
        now = ctl.writes()
        if now != last:
            last, last_change = now, time.monotonic()
    return last_change


# --- one count -------------------------------------------------------------------------------


async def run_count(
    n: int,
    kubeconfig: str,
    creds: kube.Credentials,
    *,
    live: bool,
    cleanup: bool,
    log_dir: Path,
) -> dict[str, Any]:
    concurrency = kube.CONCURRENCY
    setup = kube.Client(creds, concurrency=SETUP_CONCURRENCY)
    watcher = kube.Client(creds, concurrency=2)
    floor = kube.Client(creds, concurrency=concurrency)
    ctl = Controller(kubeconfig, log_dir)
    backlog_ns, floor_ns, live_ns = f"backlog-{n}", f"floor-{n}", f"live-{n}"
    result: dict[str, Any] = {"services": n, "concurrency": concurrency}
    try:
        for ns in (backlog_ns, floor_ns, live_ns):
            await ensure_namespace(setup, ns)

        await create_services(setup, backlog_ns, n, SETUP_CONCURRENCY)
        await create_services(setup, floor_ns, n, SETUP_CONCURRENCY, lb_class=FLOOR_CLASS)

        # Floor first, before the controller ever runs, with the cluster holding exactly what it
        # holds for the backlog phase: N status PATCHes of N pending Services (of a class the
        # controller ignores), same client, same number in flight, seen through the same watch.
        seen = Addressed(watcher, floor_ns, prefix=FLOOR_PREFIX)
        seen.start()
        base = kube.core_path("services", floor_ns)
        bodies = [
            (
                f"{base}/s{i:05d}/status",
                {
                    "metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": POOL}},
                    "status": {
                        "loadBalancer": {"ingress": [{"ip": f"{FLOOR_PREFIX}{i // 256}.{i % 256}"}]}
                    },
                },
            )
            for i in range(n)
        ]
        await asyncio.sleep(0.5)  # the watch is open before the clock starts, as for the controller
        started = time.monotonic()
        await bounded(concurrency, [floor.merge_patch(p, b) for p, b in bodies])
        await wait_until("the floor's writes to be seen", _count(seen, n))
        result["floor_s"] = round(seen.last_at - started, 3)
        await seen.stop()
        say(f"N={n}: floor (bare status PATCH loop, {concurrency} in flight) {result['floor_s']} s")
        # Gone before the controller starts, so it sees exactly N Services (not timed).
        await delete_services(setup, floor_ns)

        # Backlog: N pending Services, then the controller starts.
        seen = Addressed(watcher, backlog_ns)
        seen.start()
        started = ctl.start()
        await wait_until("every backlog Service to have an address", _count(seen, n))
        result["assign_s"] = round(seen.last_at - started, 3)
        result["ratio_to_floor"] = round(result["assign_s"] / result["floor_s"], 3)
        settled_at = await settle(ctl)
        result["settle_s"] = round(settled_at - started, 3)
        writes = ctl.writes()
        result["writes"] = writes
        result["writes_per_service"] = round(writes / n, 3)
        result["controller_cpu_s"] = round(ctl.cpu_s(), 2)
        result["controller_peak_rss_mib"] = round(ctl.peak_rss_mib(), 1)
        await seen.stop()
        say(
            f"N={n}: backlog addressed in {result['assign_s']} s "
            f"({result['ratio_to_floor']} x floor; settled {result['settle_s']} s), "
            f"{result['writes_per_service']} writes/Service, CPU {result['controller_cpu_s']} s, "
            f"peak RSS {result['controller_peak_rss_mib']} MiB"
        )

        # Restart over N settled Services.
        ctl.stop()
        started = ctl.start()

        async def ready() -> bool:
            return ctl.ready()

        await wait_until("the restarted controller to be ready", ready, timeout=120)
        result["restart_ready_s"] = round(time.monotonic() - started, 3)
        await asyncio.sleep(2.0)  # anything it was going to write, it would have by now
        result["restart_writes"] = ctl.writes()
        result["restart_cpu_s"] = round(ctl.cpu_s(), 2)
        say(
            f"N={n}: restart ready in {result['restart_ready_s']} s, "
            f"{result['restart_writes']} writes"
        )

        if live:
            seen = Addressed(watcher, live_ns)
            seen.start()
            cpu_before = ctl.cpu_s()
            started = time.monotonic()
            await create_services(floor, live_ns, n, concurrency)
            result["create_s"] = round(time.monotonic() - started, 3)
            await wait_until("every live Service to have an address", _count(seen, n))
            result["live_assign_s"] = round(seen.last_at - started, 3)
            await settle(ctl)
            result["live_controller_cpu_s"] = round(ctl.cpu_s() - cpu_before, 2)
            await seen.stop()
            say(
                f"N={n}: live: created in {result['create_s']} s, all addressed "
                f"{result['live_assign_s']} s after the first create"
            )

    finally:
        ctl.stop()
        # A temporary cluster is thrown away whole; a borrowed one gets its Services back off.
        for ns in (backlog_ns, live_ns) if cleanup else ():
            with contextlib.suppress(kube.ApiError):
                await delete_services(setup, ns)
        for c in (setup, watcher, floor):
            await c.close()
    return result


def _count(seen: Addressed, n: int) -> Any:
    async def probe() -> bool:
        return len(seen.done) >= n

    return probe


# --- main ------------------------------------------------------------------------------------


async def bench(kubeconfig: str, counts: list[int], *, live: bool, cleanup: bool) -> dict[str, Any]:
    creds = kube.load(kubeconfig)
    async with kube.Client(creds) as client:
        await ensure_namespace(client, NAMESPACE)
        pool_path = kube.group_path("metallb.io", "v1beta1", "ipaddresspools", NAMESPACE)
        with contextlib.suppress(kube.ApiError):
            await client.delete(f"{pool_path}/{POOL}")
        await client.create(
            pool_path,
            {
                "apiVersion": "metallb.io/v1beta1",
                "kind": "IPAddressPool",
                "metadata": {"name": POOL, "namespace": NAMESPACE},
                "spec": {"addresses": [POOL_RANGE]},
            },
        )
    runs = []
    with tempfile.TemporaryDirectory(prefix="ironlb-bench-") as logs:
        for n in counts:
            runs.append(
                await run_count(
                    n,
                    kubeconfig,
                    creds,
                    live=live and n <= LIVE_MAX,
                    cleanup=cleanup or n != counts[-1],
                    log_dir=Path(logs),
                )
            )
    async with kube.Client(creds) as client:
        with contextlib.suppress(kube.ApiError):
            await client.delete(f"{pool_path}/{POOL}")
    return {**runs[-1], "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 Services, no live phase")
    parser.add_argument("--kubeconfig", default=os.environ.get("IRONLB_KUBECONFIG"))
    args = parser.parse_args(argv)
    # A SIGTERM (a `timeout` around the run) unwinds like Ctrl-C, so the temporary cluster is
    # stopped rather than left running.
    signal.signal(signal.SIGTERM, processes.interrupt)
    counts = [1000] if args.quick else [1000, 10000]
    cluster = None
    kubeconfig = args.kubeconfig
    started = time.monotonic()
    if not kubeconfig:
        cluster = local_cluster.temporary_cluster()
        cluster.up()
        kubeconfig = str(cluster.kubeconfig)
        crds = sorted((ROOT / "crds").glob("*.yaml"))
        subprocess.run(
            [
                str(local_cluster.binary("kubectl")),
                f"--kubeconfig={kubeconfig}",
                "apply",
                "--server-side",
                *[f"-f={c}" for c in crds],
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                str(local_cluster.binary("kubectl")),
                f"--kubeconfig={kubeconfig}",
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                *[f"-f={c}" for c in crds],
            ],
            check=True,
            capture_output=True,
        )
    try:
        result = asyncio.run(
            bench(kubeconfig, counts, live=not args.quick, cleanup=cluster is None)
        )
    finally:
        if cluster is not None:
            cluster.down()
    result["total_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
