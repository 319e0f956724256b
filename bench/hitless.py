"""Hitless operations, measured in the lab: what rolling restarts of ironlb, faults of the BGP
path and an apiserver outage cost clients that keep connecting.

The load (hack/loadgen in the client namespace): 40 new TCP connections a second spread over an
L2 and a BGP Service, both dual-stack, plus one long-lived stream to each of the four addresses;
backends on every node (hack/hitless.py). Scenarios, each under its own load:

* rolling restart: every speaker, then the controller (not with --quick), SIGTERMed and started
  again one at a time; BGP peers without graceful restart (withdraw first);
* the same with `enableGracefulRestart` peers (the ToR keeps the routes; not with --quick);
* faults: every ExaBGP of one speaker SIGKILLed (`exabgp_kill_recovery_s`: until the ToR has
  the node as next hop again); one node's link flapped 20 times (3 with --quick;
  `linkflap_stuck`: what did not come back); the ToR's bgpd restarted (not with --quick);
* kube-apiserver stopped (60 s; 5 s with --quick) and started again on the same etcd, the
  ToR's FIB and ARP answers watched throughout, then proof of convergence.

    python -m bench.hitless [--quick] [--outage S]

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.session import Say, Session, say_since
from hack import deploy, hitless, objects
from hack import lab as network_lab


def streams(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "total": report["streams_total"],
        "broken": report["streams_broken"],
        "breaks": report["stream_breaks"],
        "by_stream": report["streams"],
    }


def measure(lab: network_lab.Lab, outage_s: float, quick: bool, say: Say) -> dict[str, Any]:
    hitless.clear_configuration(lab)
    objects.apply(lab, *hitless.configuration())
    figures: dict[str, Any] = {}
    with deploy.deployed(lab) as deployment, objects.namespace(lab, "hitless") as ns:
        vips = hitless.serve(lab, ns)
        say("serving: the scenarios start")
        scenarios = started = time.monotonic()
        rolling, watch = hitless.rolling_restart_under_load(
            lab, deployment, vips, say, controller=not quick
        )
        moved = {
            "l2": watch.arp_change_times,
            "bgp": [c["t"] for c in watch.fib_changes],
        }
        figures |= {
            "rolling_failed_requests_l2": hitless.failed(rolling, vips.l2),
            "rolling_failed_requests_bgp": hitless.failed(rolling, vips.bgp),
            # Failures that are not a handshake caught by a move of traffic (hitless.py).
            "rolling_unexplained_failures": len(
                hitless.unexplained_failures(rolling, vips.l2, moved["l2"])
                + hitless.unexplained_failures(rolling, vips.bgp, moved["bgp"])
            ),
            "rolling_slow_requests": rolling["requests_slow"],
            "rolling_requests": rolling["requests_total"],
            "rolling_streams_broken": rolling["streams_broken"],
            "rolling_s": round(time.monotonic() - started, 1),
        }
        with hitless.load(lab, vips, hitless.LOAD_BOUND_S) as running:
            killed = hitless.exabgp_kill(lab, deployment, vips, 2, say)
            flapped = hitless.link_flap(lab, deployment, vips, 3, 3 if quick else 20, say)
            bgpd = None if quick else hitless.bgpd_restart(lab, vips, say)
            faults = running.stop()
        figures |= {
            "exabgp_kill_recovery_s": killed["recovery_s"],
            "exabgp_kill_recovered": killed["recovered"],
            "linkflap_flaps": flapped["flaps"],
            "linkflap_stuck": len(flapped["stuck"]),
            "linkflap_recovered_s": flapped["recovered_s"],
            "bgpd_restart_recovery_s": None if bgpd is None else bgpd["recovery_s"],
            "faults_failed_requests_l2": hitless.failed(faults, vips.l2),
            "faults_failed_requests_bgp": hitless.failed(faults, vips.bgp),
            "faults_requests": faults["requests_total"],
        }
        requests = rolling["requests_total"] + faults["requests_total"]
        if not quick:
            hitless.set_graceful_restart(lab, vips, True, say)
            graceful, watch = hitless.rolling_restart_under_load(lab, deployment, vips, say)
            requests += graceful["requests_total"]
            figures |= {
                "rolling_gr_unexplained_failures": len(
                    hitless.unexplained_failures(graceful, vips.l2, watch.arp_change_times)
                    + hitless.unexplained_failures(graceful, vips.bgp, [])
                ),
                "rolling_gr_failed_requests_l2": hitless.failed(graceful, vips.l2),
                "rolling_gr_failed_requests_bgp": hitless.failed(graceful, vips.bgp),
                "rolling_gr_nexthop_changes": len(watch.fib_changes) + len(watch.v6_changes),
                "rolling_gr_streams_broken": graceful["streams_broken"],
                "rolling_gr_requests": graceful["requests_total"],
            }
            hitless.set_graceful_restart(lab, vips, False, say)
        started = time.monotonic()
        with hitless.load(lab, vips, hitless.LOAD_BOUND_S) as running:
            outage = hitless.apiserver_outage(
                lab, deployment, vips, outage_s, say, new_service=not quick
            )
            during = running.stop()
        requests += during["requests_total"]
        figures |= {
            "apiserver_outage_s": outage_s,
            "apiserver_outage_withdrawals": outage["withdrawals"],
            "apiserver_outage_arp_owner_changes": outage["arp_owner_changes"],
            "apiserver_outage_failed_requests": during["requests_failed"],
            "apiserver_outage_streams_broken": during["streams_broken"],
            "apiserver_outage_rewritten_objects": len(outage["rewritten"]),
            "apiserver_outage_objects_compared": outage["objects_compared"],
            "apiserver_outage_controller_exits": outage["controller_exits"],
            "apiserver_outage_converged_s": outage["converged_s"],
            "apiserver_outage_new_service_s": outage["new_service_s"],
            "apiserver_outage_endpoints_s": outage["endpoints_s"],
            "apiserver_outage_total_s": round(time.monotonic() - started, 1),
            "requests_total": requests,
            "scenarios_s": round(time.monotonic() - scenarios, 1),
            "apiserver_outage_rewritten": outage["rewritten"],
            "rolling_streams": streams(rolling),
            "outage_streams": streams(during),
            "rolling_failures": rolling["first_failures"],
            "faults_failures": faults["first_failures"],
            "outage_failures": during["first_failures"],
            "linkflap_stuck_what": flapped["stuck"],
        }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer scenarios: under a minute")
    parser.add_argument("--outage", type=float, default=None, help="seconds without apiserver")
    args = parser.parse_args(argv)
    outage_s = args.outage or (5.0 if args.quick else 60.0)

    session = Session(say_since(time.monotonic()))
    with session.lab() as lab:
        measured = time.monotonic()
        figures = measure(lab, outage_s, args.quick, session.say)
    return session.report(
        {
            "bench": "hitless",
            "quick": args.quick,
            "rate_per_s": hitless.RATE,
            "streams_per_address": hitless.STREAMS,
            **figures,
            "measured_s": round(time.monotonic() - measured, 1),
            "elapsed_s": session.elapsed_s(),
        }
    )


if __name__ == "__main__":
    sys.exit(main())
