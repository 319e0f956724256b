"""Hitless operations, measured in the lab: what a rolling restart of ironlb and an apiserver
outage cost clients that keep connecting, and whether a flapping link leaves anything stuck.

The load (hack/loadgen in the client namespace): 40 new TCP connections a second spread over an
L2 and a BGP Service, both dual-stack, plus one long-lived stream to each of the four addresses;
backends on every node (hack/hitless.py). Two scenarios, each under its own load, then a third:

* every speaker, then the controller, SIGTERMed and started again one at a time;
* kube-apiserver stopped (60 s; 20 s with --quick) and started again on the same etcd, the ToR's
  FIB and ARP answers watched throughout, then a new Service as proof of convergence;
* without load, the link of the node answering for the L2 address pulled and plugged back 20
  times (0.1-1 s each way, seeded), then what stayed stuck (`linkflap_stuck`: how many of the
  recovery checks of `hack.hitless.link_flap` still failed after 60 s) and how long recovery took.

    python -m bench.hitless [--quick] [--outage S]

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hack import deploy, hitless, objects  # noqa: E402
from hack import lab as network_lab  # noqa: E402

LOAD_BOUND_S = 600.0  # the load generator's own limit; each scenario stops it when done
LINK_FLAPS = 20


def streams(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "total": report["streams_total"],
        "broken": report["streams_broken"],
        "breaks": report["stream_breaks"],
        "by_stream": report["streams"],
    }


def measure(lab: network_lab.Lab, outage_s: float, say: Any) -> dict[str, Any]:
    hitless.clear_configuration(lab)
    objects.apply(lab, *hitless.configuration())
    with deploy.deployed(lab) as deployment, objects.namespace(lab, "hitless") as ns:
        vips = hitless.serve(lab, ns)
        started = time.monotonic()
        with hitless.load(lab, vips, LOAD_BOUND_S) as running:
            hitless.rolling_restart(lab, deployment, vips, say)
            rolling = running.stop()
        rolling_s = time.monotonic() - started
        started = time.monotonic()
        with hitless.load(lab, vips, LOAD_BOUND_S) as running:
            outage = hitless.apiserver_outage(lab, deployment, vips, outage_s, say)
            during = running.stop()
        outage_total_s = time.monotonic() - started
        # No load: what counts here is whether everything comes back, not what clients lost
        # while a node was unreachable.
        flap = hitless.link_flap(
            lab, deployment, vips, hitless.l2_owner(lab, vips), LINK_FLAPS, say, seed=20
        )
    return {
        "rolling_failed_requests_l2": hitless.failed(rolling, vips.l2),
        "rolling_failed_requests_bgp": hitless.failed(rolling, vips.bgp),
        "rolling_slow_requests": rolling["requests_slow"],
        "rolling_requests": rolling["requests_total"],
        "rolling_streams_broken": rolling["streams_broken"],
        "rolling_s": round(rolling_s, 1),
        "apiserver_outage_s": outage_s,
        "apiserver_outage_withdrawals": outage["withdrawals"],
        "apiserver_outage_arp_owner_changes": outage["arp_owner_changes"],
        "apiserver_outage_failed_requests": during["requests_failed"],
        "apiserver_outage_streams_broken": during["streams_broken"],
        "apiserver_outage_rewritten_objects": len(outage["rewritten"]),
        "apiserver_outage_objects_compared": outage["objects_compared"],
        "apiserver_outage_controller_exits": outage["controller_exits"],
        "apiserver_outage_converged": not outage["unconverged"],
        "apiserver_outage_rewritten": outage["rewritten"],
        "apiserver_outage_total_s": round(outage_total_s, 1),
        "linkflap_flaps": flap["flaps"],
        "linkflap_stuck": len(flap["stuck"]),
        "linkflap_recovered_s": flap["recovered_s"],
        "linkflap_stuck_checks": flap["stuck"],
        "requests_total": rolling["requests_total"] + during["requests_total"],
        "rolling_streams": streams(rolling),
        "outage_streams": streams(during),
        "rolling_failures": rolling["first_failures"],
        "outage_failures": during["first_failures"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 20 s outage: under a minute")
    parser.add_argument("--outage", type=float, default=None, help="seconds without apiserver")
    args = parser.parse_args(argv)
    outage_s = args.outage or (20.0 if args.quick else 60.0)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with network_lab.exclusive(waiting=say):
        started = time.monotonic()
        with network_lab.running(nodes=3) as lab:
            say(f"lab up in {time.monotonic() - started:.1f} s")
            measured = time.monotonic()
            figures = measure(lab, outage_s, say)
    print(
        json.dumps(
            {
                "bench": "hitless",
                "quick": args.quick,
                "rate_per_s": hitless.RATE,
                "streams_per_address": hitless.STREAMS,
                **figures,
                "measured_s": round(time.monotonic() - measured, 1),
                "elapsed_s": round(time.monotonic() - started, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
