"""ironlb and MetalLB itself, side by side: one lab, one run, the same scenarios against each.

MetalLB (`hack/metallb.py`: built from its Go module on first use, installed in place of ironlb,
its memberlist with the timings it ships, its native BGP) and ironlb run in turn on the same
nodes, kube-proxy, Pods and ToR. Every figure is taken for both, and the JSON has
`<figure>_ironlb`, `<figure>_metallb` and `<figure>_ratio` (ironlb / MetalLB: below 1, ironlb
took less time or memory).

Scenarios, in this order (a system's L2 and conformance parts run with its controller; its BGP
part with its speakers alone, as `bench/bgp.py` measures):
1. ironlb: conformance cases, then L2 failover trials.
2. MetalLB: the same; then its controller stops and the BGP part runs with its speakers.
3. ironlb's speakers alone: the BGP part again, on the same objects.

* conformance (`hack/conformance.py`): each case's manifests applied under each system, what a
  user sees compared path by path; `conformance_unexplained` counts differences that no row of
  `DELIBERATE` (docs/compared-with-metallb.md) explains, and must be 0.
* L2 failover (`bench/failover_l2.py`'s trial): the ToR probes the VIP with ARP every 10 ms;
  from the fault of the owner (speaker SIGKILLed, link cut, SIGTERM) to the first answer from the
  successor. Both systems elect with the same hash, so the owner and successor are known.
* what a client pays (`<scenario>_failed_requests`, of `<scenario>_requests`; new connections
  at 40 a second to the L2 Service, `hack/datapath.py`'s load): kube-proxy SIGKILLed on the
  owner for 5 s; a rolling restart of every speaker; the owner drained (autoscaler taint; full
  run: also the exclusion label and cordon) and 5 s later its link cut, as the node goes.
* BGP (`bench/bgp.py`'s FIB watcher, ToR FRR with hold time 3 s): a Service's status PATCHed,
  until its /32 is in the ToR's FIB (`bgp_status_to_fib_median_s`: N Services with addresses
  exist, not advertised); one BGPAdvertisement is created, until all N /32s are in the FIB
  (first route, all, every nexthop); then a Service's status to the FIB again, while the N are
  announced (`bgp_status_to_fib_loaded_median_s`: what one change costs in a cluster of N);
  RSS and CPU of node1's speaker with every process it runs (ironlb: its ExaBGP too) from
  /proc; every speaker SIGTERMed, until the FIB is empty.

    python -m bench.versus [--quick] [--trials N] [--routes N] [--cases quick|all|NAME,...]
                           [--metallb-mode frr|native]

`--metallb-mode`: MetalLB as its 0.15 chart installs it by default (`frr`: FRR's daemons and
MetalLB's reloader beside each speaker, counted in what a node pays), or with its own BGP
(`native`).

`--quick`: 1 trial per fault, 5 status-to-FIB trials each way, 1,000 routes, a few conformance
cases: under 5 minutes once MetalLB is built (its cold build, reported as `metallb_build_s`, is
not counted in that). Progress goes to stderr; the last line is one JSON object (with
`incomplete` set, and what was measured until then, if a part failed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import bgp, failover_l2, figures
from bench.session import Session, say
from hack import (
    conformance,
    conformance_cases,
    datapath,
    deploy,
    metallb,
    objects,
    processes,
    witness,
)
from hack import lab as network_lab

SYSTEMS = ("ironlb", "metallb")
FAULTS = ("kill", "linkcut", "graceful")
NS = objects.METALLB_NAMESPACE
# How long a restarted owner may take to answer again: memberlist takes a node it declared dead
# back when gossip reaches it (GossipToTheDeadTime, 30 s on a LAN), sometimes on its next join.
BACK_TIMEOUT_S = {"ironlb": 60.0, "metallb": 120.0}
BULK_ADVERTISEMENT = "bench-bulk"


class VersusError(Exception):
    pass


# --- figures (pure) -------------------------------------------------------------------------------


def ratio(ironlb: float | None, metallb: float | None) -> float | None:
    """ironlb / MetalLB, or None when either is missing or MetalLB's is 0."""
    if ironlb is None or metallb is None or metallb == 0:
        return None
    return round(ironlb / metallb, 3)


def side_by_side(sides: Mapping[str, Mapping[str, float | None]]) -> dict[str, float | None]:
    """`<figure>_ironlb`, `<figure>_metallb`, `<figure>_ratio` for every figure either side has."""
    out: dict[str, float | None] = {}
    ours, theirs = sides.get("ironlb", {}), sides.get("metallb", {})
    for name in sorted(ours.keys() | theirs.keys()):
        a, b = ours.get(name), theirs.get(name)
        out[f"{name}_ironlb"] = a
        out[f"{name}_metallb"] = b
        out[f"{name}_ratio"] = ratio(a, b)
    return out


def l2_figures(results: Mapping[str, Sequence[float]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for fault in FAULTS:
        d = figures.distribution(results.get(fault, []))
        out[f"l2_{fault}_median_s"] = _number(d["median"])
        out[f"l2_{fault}_max_s"] = _number(d["max"])
    return out


def cost_figures(costs: Mapping[str, Mapping[str, int]]) -> dict[str, float | None]:
    """`<scenario>_failed_requests` (and the requests made) for each load scenario."""
    out: dict[str, float | None] = {}
    for name, cost in costs.items():
        out[f"{name}_failed_requests"] = cost["failed"]
        out[f"{name}_requests"] = cost["total"]
    return out


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def pick_cases(spec: str, quick: bool) -> tuple[conformance.Case, ...]:
    """`quick` (conformance_cases.QUICK), `all` or case names (a,b); by default as --quick."""
    if spec == "all" or (spec == "" and not quick):
        return conformance_cases.CASES
    if spec in ("", "quick"):
        return conformance_cases.QUICK
    try:
        return tuple(conformance_cases.by_name(n) for n in spec.split(",") if n)
    except KeyError as e:
        raise VersusError(f"no conformance case {e}") from None


@dataclass
class Run:
    """What was measured so far (printed even if a later part fails)."""

    sides: dict[str, dict[str, float | None]] = field(
        default_factory=lambda: {s: {} for s in SYSTEMS}
    )
    detail: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: {} for s in SYSTEMS})
    runs: dict[str, list[conformance.CaseRun]] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)


# --- the scenarios ------------------------------------------------------------------------------


def l2_side(
    lab: network_lab.Lab,
    system: str,
    deployment: deploy.Speakers,
    trials: int,
    drains: Sequence[str],
) -> tuple[dict[str, list[float]], dict[str, dict[str, int]]]:
    """One L2 Service with a backend on every node: the failover trials, then what a client
    pays (failed requests) through kube-proxy killed on the owner, a rolling restart of every
    speaker, and each drain of the owner followed by the node's loss."""
    vip = failover_l2.setup_service(lab)
    results: dict[str, list[float]] = {f: [] for f in FAULTS}
    costs: dict[str, dict[str, int]] = {}
    try:
        for fault in FAULTS:
            for n in range(trials):
                took = failover_l2.trial(
                    lab, deployment, vip, fault, back_timeout=BACK_TIMEOUT_S[system]
                )
                say(f"{system} L2 {fault} #{n + 1}: {'lost' if took is None else f'{took:.3f} s'}")
                if took is not None:
                    results[fault].append(took)
        back = BACK_TIMEOUT_S[system]
        scenarios: list[tuple[str, Callable[[], None]]] = [
            ("kube_proxy_kill", lambda: kube_proxy_kill(lab, vip)),
            ("rolling_restart", lambda: rolling_restart(lab, deployment, vip, back)),
        ]
        for how in drains:
            name = f"drain_{how.replace('-', '_')}_then_loss"
            scenarios.append((name, functools.partial(drain_then_loss, lab, vip, how, back)))
        for name, act in scenarios:
            costs[name] = under_load(lab, vip, act)
            say(f"{system} {name}: {costs[name]['failed']} of {costs[name]['total']} failed")
    finally:
        lab.kubectl("delete", "service", "bench", "-n", "default", "--ignore-not-found")
        lab.kubectl(
            "delete", "l2advertisement/bench", "ipaddresspool/bench", "-n", NS,
            "--ignore-not-found",
        )  # fmt: skip
        objects.set_backends(lab, "default", "bench", [], wait=False)
    return results, costs


# Client load for the scenarios that count failed requests: new connections at the rate the
# datapath bench uses, from the lab's client, for as long as the longest scenario may take.
LOAD_BOUND_S = 240.0
DRAIN_GRACE_S = 5.0  # a drain's time before the node goes (kubectl drain, an autoscaler)


def under_load(lab: network_lab.Lab, vip: str, act: Callable[[], None]) -> dict[str, int]:
    with datapath.loaded(lab, [vip], duration=LOAD_BOUND_S) as load:
        time.sleep(1.0)  # requests flow before anything happens
        act()
        time.sleep(2.0)  # and after: connections through whatever path is left
        report = load.stop()
    return {"failed": int(report["requests_failed"]), "total": int(report["requests_total"])}


def _answers(lab: network_lab.Lab, vip: str, index: int, timeout: float) -> bool:
    watcher = witness.ArpWatcher(lab, vip, failover_l2.WATCH_EVERY_S)
    try:
        return watcher.until(lambda macs: macs == [lab.node_mac(index)], timeout) is not None
    finally:
        watcher.close()


def kube_proxy_kill(lab: network_lab.Lab, vip: str) -> None:
    """kube-proxy SIGKILLed on the owner, 5 s without it, started again until healthy."""
    owner = failover_l2.owner_of(lab, vip, range(1, lab.nodes + 1))
    lab.stop_kube_proxy(owner, signal.SIGKILL)
    time.sleep(5.0)
    lab.start_kube_proxy(owner)
    lab.wait_kube_proxies()
    _answers(lab, vip, owner, 30.0)


def rolling_restart(
    lab: network_lab.Lab, deployment: deploy.Speakers, vip: str, back_timeout: float
) -> None:
    """Each speaker in turn SIGTERMed and started again, the next once the VIP's owner answers
    again (as a DaemonSet rollout waits for the new Pod)."""
    owner = failover_l2.owner_of(lab, vip, range(1, lab.nodes + 1))
    for index in range(1, lab.nodes + 1):
        deployment.stop_speaker(index, signal.SIGTERM)
        deployment.start_speaker(index)
        if not _answers(lab, vip, owner, back_timeout):
            say(f"node{owner} did not answer again after node{index}'s restart")


def drain_then_loss(lab: network_lab.Lab, vip: str, how: str, back_timeout: float) -> None:
    """The owner drained (`how`), then, DRAIN_GRACE_S later, its link cut (the node gone),
    until another node answers; then the link back, the drain undone, the owner back."""
    owner = failover_l2.owner_of(lab, vip, range(1, lab.nodes + 1))
    successor = failover_l2.owner_of(lab, vip, [i for i in range(1, lab.nodes + 1) if i != owner])
    datapath.start_drain(lab, owner, how)
    try:
        time.sleep(DRAIN_GRACE_S)
        deploy.cut_link(lab, owner)
        try:
            _answers(lab, vip, successor, 30.0)
        finally:
            deploy.restore_link(lab, owner)
    finally:
        datapath.end_drain(lab, owner)
    _answers(lab, vip, owner, back_timeout)


def clear_small_ingress(api: bgp.Api, trials: int) -> None:
    """Status back to no address, so that the next system's PATCH is a change it sees."""
    for i in range(trials):
        api.request(
            "PATCH",
            f"/api/v1/namespaces/{bgp.APP_NS}/services/s{i:03d}/status",
            {"status": {"loadBalancer": {"ingress": None}}},
            "application/merge-patch+json",
        )


def bgp_side(
    lab: network_lab.Lab,
    system: str,
    deployment: deploy.Speakers,
    fib: bgp.Fib,
    api: bgp.Api,
    count: int,
    trials: int,
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Speakers started with the N Services there and their pool not advertised; status to FIB,
    then the advertisement of all N, then every speaker stopped."""
    bgp.start_speakers(lab, deployment)
    first, full, _ = bgp.status_to_fib(lab, api, fib, trials)
    idle, quiet, _ = bgp.wait_idle(lab, deployment, timeout=30)
    say(f"{system} speakers {'idle' if quiet else 'NOT idle'} after {idle:.1f} s")
    before = bgp.Usage.take(lab, deployment)
    api.warm()
    started = time.monotonic()
    api.request(
        "POST",
        f"/apis/metallb.io/v1beta1/namespaces/{NS}/bgpadvertisements",
        bgp.advertisement(BULK_ADVERTISEMENT, "bench-bulk"),
    )
    done = fib.wait(lambda: fib.full_count >= count, timeout=max(120.0, count / 50))
    at_fib = bgp.Usage.take(lab, deployment)
    one = fib.reached(started, 1, full=False)
    every_route = fib.reached(started, count, full=False)
    every_hop = fib.reached(started, count, full=True)
    in_fib = fib.any_count
    if not done:
        say(f"{system}: only {in_fib} / {count} routes ({fib.full_count} with every hop)")
    # One Service's change while the N are announced; the speakers settle first, as above.
    bgp.wait_idle(lab, deployment, timeout=30)
    loaded, _, _ = bgp.status_to_fib(lab, api, fib, trials, first_service=trials)
    stop = bgp.graceful_stop(lab, deployment, fib)
    lab.kubectl(
        "delete", "bgpadvertisement", BULK_ADVERTISEMENT, "-n", NS, "--ignore-not-found"
    )  # fmt: skip
    clear_small_ingress(api, 2 * trials)
    memory = at_fib.memory()["nodes"].get("node1", {})
    cpu = at_fib.cpu_since(before)["nodes"].get("node1", {})

    def since(t: float | None) -> float | None:
        return None if t is None else round(t - started, 3)

    status = figures.distribution(first)
    out = {
        "bgp_status_to_fib_median_s": _number(status["median"]),
        "bgp_status_to_fib_ecmp_median_s": _number(figures.distribution(full)["median"]),
        "bgp_status_to_fib_loaded_median_s": _number(figures.distribution(loaded)["median"]),
        "bgp_routes_first_s": since(one),
        "bgp_routes_all_s": since(every_route),
        "bgp_routes_ecmp_s": since(every_hop),
        "bgp_stop_empty_fib_s": stop["stop_to_empty_fib_s"],
        # What one node pays: the speaker's whole process tree (ironlb's speaker with its
        # ExaBGP; MetalLB's one process), in detail by role.
        "speaker_rss_mb_at_fib": round(sum(m["rss_mb"] for m in memory.values()), 1),
        "speaker_cpu_s_to_fib": round(sum(cpu.values()), 2),
    }
    detail = {
        "routes_in_fib": in_fib,
        "speakers_idle_before": quiet,
        "memory_node1": memory,
        "cpu_node1_to_fib": cpu,
        "status_to_fib": status,
        "status_to_fib_loaded": figures.distribution(loaded),
        "stop": stop,
    }
    return out, detail


def conformance_side(
    lab: network_lab.Lab, system: str, cases: Sequence[conformance.Case]
) -> list[conformance.CaseRun]:
    began = time.monotonic()
    runs = conformance.run_in_lab(lab, cases)
    say(f"{system}: {len(runs)} conformance cases in {time.monotonic() - began:.1f} s")
    return runs


def create_bulk(lab: network_lab.Lab, count: int) -> None:
    began = time.monotonic()
    asyncio.run(bgp.create_bulk(lab, count))
    say(f"{count} Services with addresses and EndpointSlices in {time.monotonic() - began:.1f} s")


def run(
    lab: network_lab.Lab,
    args: argparse.Namespace,
    cases: Sequence[conformance.Case],
    result: Run,
    phase: Callable[[str], contextlib.AbstractContextManager[None]],
) -> None:
    trials, count, status_trials = args.trials, args.routes, args.status_trials
    with phase("ironlb_l2_conformance"), deploy.deployed(lab) as ours:
        result.runs["ironlb"] = conformance_side(lab, "ironlb", cases)
        l2, costs = l2_side(lab, "ironlb", ours, trials, args.drains)
        result.sides["ironlb"].update({**l2_figures(l2), **cost_figures(costs)})
        result.detail["ironlb"]["l2"] = l2
    fib = bgp.Fib(lab, [str(bgp.SMALL_POOL), str(bgp.BULK_NET)], str(bgp.BULK_NET), lab.nodes)
    api = bgp.Api(lab)
    try:
        with phase("metallb"), metallb.deployed(lab, mode=args.metallb_mode) as theirs:
            with phase("metallb_l2_conformance"):
                result.runs["metallb"] = conformance_side(lab, "metallb", cases)
                l2, costs = l2_side(lab, "metallb", theirs, trials, args.drains)
                result.sides["metallb"].update({**l2_figures(l2), **cost_figures(costs)})
                result.detail["metallb"]["l2"] = l2
            with phase("metallb_bgp"):
                theirs.stop_controller()
                bgp.stop_speakers(lab, theirs)
                # Twice the trials' Services: before the N routes are announced, and after.
                bgp.configure(lab, 2 * status_trials, bfd_profile=False)
                create_bulk(lab, count)
                side, detail = bgp_side(lab, "metallb", theirs, fib, api, count, status_trials)
                result.sides["metallb"].update(side)
                result.detail["metallb"]["bgp"] = detail
        with phase("ironlb_bgp"):
            ours = deploy.Deployment(lab)
            try:
                side, detail = bgp_side(lab, "ironlb", ours, fib, api, count, status_trials)
            finally:
                ours.stop()
            result.sides["ironlb"].update(side)
            result.detail["ironlb"]["bgp"] = detail
    finally:
        api.close()
        fib.close()


def summarise(
    args: argparse.Namespace,
    result: Run,
    cases: Sequence[conformance.Case],
    build_s: float,
    incomplete: str | None,
    started: float,
) -> dict[str, Any]:
    differences = conformance.compare_all(
        result.runs.get("ironlb", []),
        result.runs.get("metallb", []),
        conformance.deliberate_for(args.metallb_mode),
    )
    compared = len(result.runs.get("ironlb", [])) if "metallb" in result.runs else 0
    return {
        "bench": "versus",
        "quick": args.quick,
        "incomplete": incomplete,
        "metallb_version": metallb.VERSION,
        "metallb_mode": args.metallb_mode,
        "metallb_build_s": round(build_s, 1),
        "nodes": 3,
        "l2_trials_per_fault": args.trials,
        "routes_n": args.routes,
        **side_by_side(result.sides),
        **conformance.summary(compared, differences),
        "conformance_case_names": [c.name for c in cases],
        "conformance_unexplained_lines": [d.line() for d in differences if not d.explained],
        "conformance_explained_lines": [d.line() for d in differences if d.explained],
        "detail": result.detail,
        "phases_s": result.phases,
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="under 5 minutes once built")
    parser.add_argument("--trials", type=int, default=None, help="L2 trials per fault (10)")
    parser.add_argument("--status-trials", type=int, default=None, help="status-to-FIB (10)")
    parser.add_argument("--routes", type=int, default=None, help="routes (10,000)")
    parser.add_argument("--cases", default="", help="quick, all, or case names (a,b)")
    parser.add_argument(
        "--metallb-mode",
        choices=metallb.MODES,
        default=metallb.DEFAULT_MODE,
        help=f"how MetalLB speaks BGP: FRR beside its speaker or its own ({metallb.DEFAULT_MODE},"
        " its chart's default)",
    )
    args = parser.parse_args(argv)
    args.trials = args.trials or (1 if args.quick else 10)
    args.status_trials = args.status_trials or (5 if args.quick else 10)
    args.routes = args.routes or (1000 if args.quick else 10000)
    # Drains (datapath.DRAINS) followed by the node's loss; ironlb runs with its defaults, so
    # `cordon` drains nobody in either system (ironlb's --drain-on-cordon is off).
    args.drains = datapath.DRAINS[:1] if args.quick else datapath.DRAINS
    if not 1 <= args.trials <= 100 or not 1 <= args.routes <= 40000:
        parser.error("--trials must be 1..100 and --routes 1..40000")
    signal.signal(signal.SIGTERM, processes.interrupt)
    result = Run()
    session = Session(say, result.phases)
    phase = functools.partial(figures.phase, result.phases)
    build_s = 0.0
    cases: tuple[conformance.Case, ...] = ()
    with session.incomplete_on(
        VersusError,
        metallb.MetalLBError,
        bgp.BenchError,
        network_lab.LabError,
        AssertionError,
        KeyboardInterrupt,
    ):
        cases = pick_cases(args.cases, args.quick)
        began = time.monotonic()
        metallb.ensure_built()  # before the lab: a cold build is not part of the quick run
        build_s = time.monotonic() - began
        with session.lab() as lab:
            run(lab, args, cases, result, phase)
    return session.report(
        summarise(args, result, cases, build_s, session.incomplete, session.started)
    )


if __name__ == "__main__":
    sys.exit(main())
