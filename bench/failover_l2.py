"""L2 failover, measured in the lab: how long the ToR cannot reach a VIP when its owner dies.

For each trial the ToR probes the VIP with an ARP request every 10 ms (a raw-socket watcher in
`ilb-tor`, timestamps on CLOCK_MONOTONIC, which every namespace shares) and the bench records
the time from the fault (SIGKILL of the owner's speaker, its link cut, or a graceful SIGTERM) to
the first answer from the successor's MAC. The same trials run with ironlb's membership timings
and with memberlist's LAN timings (MetalLB's), side by side, so the ratio is measured, not
claimed. A second part measures ARP reply latency from a speaker owning 1,000 addresses against
the kernel answering for the node's own address.

    python -m bench.failover_l2 [--quick] [--trials N]

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.figures import distribution
from bench.session import Session
from hack import deploy, objects, witness
from hack import lab as network_lab
from speaker import election

ROOT = Path(__file__).resolve().parent.parent

NS = "metallb-system"
WATCH_EVERY_S = 0.01


def setup_service(lab: network_lab.Lab) -> str:
    low, high = network_lab.L2_POOL_V4
    objects.apply(
        lab,
        objects.metallb("IPAddressPool", "bench", {"addresses": [f"{low}-{high}"]}),
        objects.metallb("L2Advertisement", "bench", {}),
        objects.service("default", "bench"),
    )
    # A backend on every node: the failover is the speakers', not the endpoints'.
    objects.set_backends(lab, "default", "bench", range(1, lab.nodes + 1))
    (vip,) = objects.ingress(lab, "default", "bench", 1)
    return vip


def owner_of(lab: network_lab.Lab, vip: str, alive: Sequence[int]) -> int:
    name = election.owner(vip, [lab.node_names[i - 1] for i in alive])
    assert name is not None
    return lab.node_names.index(name) + 1


def trial(
    lab: network_lab.Lab,
    deployment: deploy.Speakers,
    vip: str,
    fault: str,
    back_timeout: float = 60.0,
) -> float | None:
    """One fault of the current owner; returns seconds until the successor answers.
    `back_timeout`: how long the owner may take to answer again before the next trial (a
    memberlist that declared it dead takes longer than ours to take it back)."""
    everyone = list(range(1, lab.nodes + 1))
    owner = owner_of(lab, vip, everyone)
    successor = owner_of(lab, vip, [i for i in everyone if i != owner])
    watcher = witness.ArpWatcher(lab, vip, WATCH_EVERY_S)
    try:
        if watcher.until(lambda macs: macs == [lab.node_mac(owner)], timeout=30) is None:
            return None
        start = time.monotonic()
        if fault == "kill":
            deployment.signal_speaker(owner, signal.SIGKILL)
        elif fault == "linkcut":
            deploy.cut_link(lab, owner)
        else:
            deployment.signal_speaker(owner, signal.SIGTERM)
        seen = watcher.until(lambda macs: macs == [lab.node_mac(successor)], timeout=30)
        return None if seen is None else seen[0] - start
    finally:
        watcher.close()
        if fault == "linkcut":
            deploy.restore_link(lab, owner)
        else:
            deployment.stop_speaker(owner, signal.SIGKILL)
            deployment.start_speaker(owner)
        # Wait for the owner to be back (it wins the hash again) before the next trial.
        back = witness.ArpWatcher(lab, vip, WATCH_EVERY_S)
        try:
            back.until(lambda macs: macs == [lab.node_mac(owner)], timeout=back_timeout)
        finally:
            back.close()


def failovers(
    lab: network_lab.Lab, profile: str, faults: dict[str, int], say: Callable[[str], None]
) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {f: [] for f in faults}
    with deploy.deployed(lab, membership_profile=profile) as deployment:
        vip = setup_service(lab)
        for fault, count in faults.items():
            for n in range(count):
                took = trial(lab, deployment, vip, fault)
                say(f"{profile} {fault} #{n + 1}: {'timeout' if took is None else f'{took:.3f} s'}")
                if took is not None:
                    results[fault].append(took)
    return results


def arp_latency(lab: network_lab.Lab, probes: int) -> dict[str, Any]:
    """Reply latency from a layer-2 announcer owning 1,000 addresses, and from the kernel."""
    owned = [f"10.254.{i // 250}.{i % 250 + 1}" for i in range(1000)]
    node = network_lab.node_namespace(1)
    runner = lab.popen(
        node,
        "env",
        f"PYTHONPATH={ROOT}",
        sys.executable,
        "-m",
        "speaker.layer2",
        "serve",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdin is not None and runner.stdout is not None
        runner.stdout.readline()  # ready line
        runner.stdin.write(json.dumps({"owned": {a: [] for a in owned}}) + "\n")
        runner.stdin.flush()
        runner.stdout.readline()

        def probe(addresses: list[str], count: int) -> dict[str, Any]:
            out = lab.exec(
                "tor",
                "env",
                f"PYTHONPATH={ROOT}",
                sys.executable,
                "-m",
                "speaker.layer2",
                "probe",
                "-i",
                "br0",
                "--first",
                "--window",
                "0.05",
                "--count",
                str(count),
                *addresses,
                timeout=600,
            )
            result: dict[str, Any] = json.loads(out.stdout)["summary"]
            return result

        ours = probe(owned, probes)
        kernel = probe([str(lab.node_v4(1))], probes)
    finally:
        runner.kill()
        runner.wait(5)
    return {"ironlb": ours, "kernel": kernel}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few trials, under a minute")
    parser.add_argument("--trials", type=int, default=None, help="trials per fault (default 20)")
    args = parser.parse_args(argv)
    trials = args.trials or (2 if args.quick else 20)
    baseline_trials = 1 if args.quick else max(5, trials // 4)
    session = Session()
    with session.lab() as lab:
        faults = {"kill": trials, "linkcut": trials, "graceful": trials}
        ours = failovers(lab, "default", faults, session.say)
        lab.kubectl("delete", "service", "bench", "-n", "default")
        baseline = {"kill": baseline_trials, "linkcut": baseline_trials}
        theirs = failovers(lab, "memberlist-lan", baseline, session.say)
        latency = arp_latency(lab, 200 if args.quick else 1000)
    kill = distribution(ours["kill"])
    linkcut = distribution(ours["linkcut"])
    graceful = distribution(ours["graceful"])
    baseline_kill = distribution(theirs["kill"])
    baseline_linkcut = distribution(theirs["linkcut"])

    def ratio(ours: dict[str, Any], theirs: dict[str, Any]) -> float | None:
        if not ours["median"] or not theirs["median"]:
            return None
        return round(float(theirs["median"]) / float(ours["median"]), 2)

    figures = {
        "bench": "failover_l2",
        "quick": args.quick,
        "trials": trials,
        "failover_kill_median_s": kill["median"],
        "failover_kill_p99_s": kill["p99"],
        "failover_linkcut_median_s": linkcut["median"],
        "failover_linkcut_p99_s": linkcut["p99"],
        "failover_graceful_s": graceful["median"],
        "arp_reply_median_ms": latency["ironlb"]["median_ms"],
        "arp_reply_p99_ms": latency["ironlb"]["p99_ms"],
        "kernel_arp_reply_p99_ms": latency["kernel"]["p99_ms"],
        "kill": kill,
        "linkcut": linkcut,
        "graceful": graceful,
        "memberlist_lan_kill": baseline_kill,
        "memberlist_lan_linkcut": baseline_linkcut,
        "kill_speedup_vs_memberlist_lan": ratio(kill, baseline_kill),
        "linkcut_speedup_vs_memberlist_lan": ratio(linkcut, baseline_linkcut),
        "lost_trials": sum(
            n - len(ours[f])
            for f, n in (("kill", trials), ("linkcut", trials), ("graceful", trials))
        ),
        "elapsed_s": session.elapsed_s(),
    }
    return session.report(figures)


if __name__ == "__main__":
    sys.exit(main())
