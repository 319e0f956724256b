"""The switch from MetalLB to ironlb on a live cluster, and back, measured where users feel it.

MetalLB (`hack/metallb.py`, as its chart installs it by default: FRR beside each speaker, or
`--metallb-mode`) serves Services in layer 2 and BGP, dual-stack among them: the two of
`hack.hitless` under load (40 new TCP connections a second over their four addresses and one
long-lived stream to each, from the client namespace), and `--services` more. Then the steps
of docs/migration.md, done as a user does them; in the lab MetalLB's processes and objects
stand for its Helm release, and the lab plays the kubelets' part for its Pods:

1. ironlb's CRDs applied over MetalLB's while MetalLB runs;
2. ironlb's speakers installed beside MetalLB's, taking over from them
   (`--take-over-from`, `ironlb.taking_over`) on a membership port of their own: each stands
   by while MetalLB's speaker Pod on its node is Ready (waited for: every ironlb speaker
   standing by and seeing every member);
3. MetalLB's release uninstalled (`MetalLBDeployment.remove_release`): its Pods marked for
   deletion at once, its processes SIGTERMed, each Pod removed once its process ended; ironlb's
   speakers serve (ARP/NDP answers, BGP sessions) from the moment the Pods are marked;
4. ironlb's controller started (the chart's `controller.enabled`).

And back: ironlb's controller stopped; MetalLB installed and started beside ironlb's speakers,
which stand down on each node once MetalLB's speaker Pod there is Ready (its chart's readiness
probe: 10 s after start, then every 10 s) and remove the status objects they wrote (waited for:
every ironlb speaker standing by); then ironlb's speakers stopped.

`--cut-over` measures the older procedure instead (MetalLB's release out, then ironlb in;
back: ironlb out, its status objects deleted, then MetalLB in).

Per direction (`to_ironlb_*`, `to_metallb_*`):
* `addresses_changed`: Services whose `status.loadBalancer.ingress` differs after the switch;
* `failed_connections` / `connections`: the load's new connections that failed, of all made
  from the first step until the new system serves and 2 s more;
* `streams_broken`: long-lived streams that broke (`streams_broken_at`: by address);
* `l2_owner_changes`: how often the ToR's ARP probe found the L2 address answered by another
  MAC than before;
* `l2_gap_s`: the longest time the ToR's ARP probe of the L2 address (`hack.hitless.Watch`,
  every 0.2 s) got no answer; `bgp_gap_s`: the longest time the ToR's FIB had no route to the
  BGP address;
* `status_s`: from the step that removes the old system until every Service's status objects
  are the new system's (written by its speakers, none of the old one's left) and, towards
  ironlb, each node's ConfigurationState says Valid;
* `serving_s`: from that step until the ToR sees every node announce the BGP addresses and one
  answer for the L2 one, as before;
* `prepare_s`: how long the steps before it took (the new system installed beside the old).

    python -m bench.migrate [--quick] [--services N] [--metallb-mode frr|native] [--cut-over]
                            [--graceful-restart]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.session import Say, Session, say
from hack import deploy, hitless, metallb, objects, processes
from hack import lab as network_lab
from ironlb import taking_over

NAMESPACE = "migrate"
WARMUP_S = 3.0  # the load runs this long before the first step
AFTER_S = 2.0  # and this long after the new system serves
SERVING_TIMEOUT_S = 120.0
STATUS_PLURALS = ("servicel2statuses", "servicebgpstatuses")
IRONLB_MANAGERS = ("ironlb-speaker", "ironlb-controller")
# ironlb's membership port beside MetalLB's memberlist (7946 on the same hosts).
TAKE_OVER_PORT = 7947
STANDING = re.compile(r'^ironlb_speaker_taking_over\{standing="(\w+)"\} 1\.0$', re.MULTILINE)


def extra_services(lab: network_lab.Lab, ns: str, count: int) -> list[str]:
    """`count` Services besides the two under load: every other one in the BGP pool, every
    third dual-stack, each with a backend on one node (neither system announces a Service
    without a ready endpoint)."""
    names = []
    for i in range(count):
        name = f"svc{i}"
        bgp = i % 2 == 1
        objects.create_service(
            lab,
            ns,
            name,
            dual=i % 3 == 0,
            annotations={"metallb.io/address-pool": hitless.BGP_POOL} if bgp else None,
        )
        names.append(name)
    for i, name in enumerate(names):
        objects.set_backends(lab, ns, name, [i % lab.nodes + 1])
        objects.ingress(lab, ns, name, 2 if i % 3 == 0 else 1)
    return names


def ingresses(lab: network_lab.Lab, ns: str) -> dict[str, tuple[str, ...]]:
    listed = objects.get(lab, "services", "-n", ns)
    return {
        s["metadata"]["name"]: tuple(
            e.get("ip", "")
            for e in (s.get("status", {}).get("loadBalancer", {}).get("ingress") or [])
        )
        for s in listed["items"]
        if s.get("spec", {}).get("type") == "LoadBalancer"
    }


def longest_gap(
    first: bool, changes: Sequence[tuple[float, bool]], start: float, end: float
) -> float:
    """The longest stretch within [start, end] with nothing there (no ARP answer, no route),
    from the state at the first observation and its later changes (time, present)."""
    present, since, longest = first, start, 0.0
    for t, now_present in changes:
        if t <= start:
            present = now_present
            continue
        if t > end:
            break
        if not present and now_present:
            longest = max(longest, t - since)
        if present and not now_present:
            since = t
        present = now_present
    if not present:
        longest = max(longest, end - max(since, start))
    return round(longest, 3)


def managers(item: dict[str, Any]) -> set[str]:
    return {m.get("manager", "") for m in item["metadata"].get("managedFields") or []}


def ironlbs(item: dict[str, Any]) -> bool:
    """Written by ironlb alone (its field managers), not by MetalLB's speakers."""
    written = managers(item)
    return bool(written) and written <= set(IRONLB_MANAGERS)


def status_objects(lab: network_lab.Lab, plural: str) -> list[dict[str, Any]]:
    found = objects.get(lab, plural, "-n", objects.METALLB_NAMESPACE, "--show-managed-fields")
    items: list[dict[str, Any]] = found["items"]
    return items


def status_is(lab: network_lab.Lab, ns: str, system: str, services: Sequence[str]) -> bool:
    """Every Service of `ns` has status objects, each written by `system`'s speakers alone."""
    seen: set[str] = set()
    for plural in STATUS_PLURALS:
        for item in status_objects(lab, plural):
            labels = item["metadata"].get("labels") or {}
            if labels.get("metallb.io/service-namespace") != ns:
                continue
            if ironlbs(item) != (system == "ironlb") or not item.get("status"):
                return False
            seen.add(labels.get("metallb.io/service-name", ""))
    return set(services) <= seen


def states_valid(lab: network_lab.Lab) -> bool:
    """Each node's speaker ConfigurationState and the controller's say Valid (ironlb's)."""
    listed = objects.get(lab, "configurationstates", "-n", objects.METALLB_NAMESPACE)["items"]
    names = {i["metadata"]["name"]: (i.get("status") or {}).get("result") for i in listed}
    wanted = ["controller", *(f"speaker-{n}" for n in lab.node_names)]
    return all(names.get(w) == "Valid" for w in wanted)


def delete_ironlb_status(lab: network_lab.Lab) -> None:
    """The doc's way back: the status objects ironlb wrote go (MetalLB's speakers manage only
    those they created)."""
    for plural in STATUS_PLURALS:
        names = [i["metadata"]["name"] for i in status_objects(lab, plural) if ironlbs(i)]
        if names:
            lab.kubectl(
                "delete", plural, *names, "-n", objects.METALLB_NAMESPACE,
                "--ignore-not-found", "--wait=false",
            )  # fmt: skip


def standing(metrics: str | None) -> str | None:
    """What an ironlb speaker taking over does now (`ironlb.taking_over.Standing`), from its
    /metrics (None: no answer, or not taking over)."""
    found = STANDING.search(metrics or "")
    return found.group(1) if found else None


def all_standing_by(lab: network_lab.Lab) -> bool:
    """Every ironlb speaker stands by and counts every node alive."""
    scraped = hitless.speaker_metrics(lab).values()
    return all(
        standing(m) == taking_over.Standing.STANDING_BY.value
        and hitless.alive_members(m) == lab.nodes
        for m in scraped
    )


def wait_for(what: str, check: Callable[[], bool], started: float) -> float:
    """Seconds from `started` until `check` holds (`objects.wait_until`, every 0.1 s, bounded);
    a check that fails (an object kind being replaced mid-switch) counts as not yet."""

    def holds() -> bool:
        with contextlib.suppress(Exception):
            return check()
        return False

    objects.wait_until(what, holds, SERVING_TIMEOUT_S, every=0.1)
    return round(time.monotonic() - started, 3)


def direction(
    lab: network_lab.Lab,
    vips: hitless.Vips,
    services: Sequence[str],
    prepare: Callable[[], None],
    switch: Callable[[], None],
    system: str,
    say: Say,
) -> dict[str, Any]:
    """The steps under load, the ToR watched; the figures of one direction. `prepare`: the
    steps before the old system goes; `switch`: from there on (the clocks start here)."""
    before = ingresses(lab, vips.namespace)
    with hitless.watching(lab, vips) as watch, hitless.load(lab, vips, 600.0) as running:
        time.sleep(WARMUP_S)
        began = time.monotonic()
        prepare()
        prepared = round(time.monotonic() - began, 3)
        started = time.monotonic()
        switch()
        say(f"steps done in {time.monotonic() - started:.1f} s; waiting for {system} to serve")
        serving = wait_for(f"{system} serving", lambda: hitless.settled(lab, vips), started)
        status = wait_for(
            f"{system}'s status objects",
            lambda: (
                status_is(lab, vips.namespace, system, services)
                and (system != "ironlb" or states_valid(lab))
            ),
            started,
        )
        time.sleep(AFTER_S)
        ended = time.monotonic()
        report = running.stop()
        watch.poll()
    after = ingresses(lab, vips.namespace)
    arp = [(t, bool(m)) for t, m in zip(watch.arp_change_times, watch.arp_changes, strict=True)]
    fib = [(float(c["t"]), bool(c["v"])) for c in watch.fib_changes]
    return {
        "services": len(before),
        "addresses_changed": sum(1 for n, ips in before.items() if after.get(n) != ips),
        "failed_connections": hitless.failed(report, vips.all),
        "connections": report["requests_total"],
        "streams_broken": report["streams_broken"],
        "streams": report["streams_total"],
        "streams_broken_at": {
            stream["target"]: stream["broken"] for stream in report["streams"] if stream["broken"]
        },
        "l2_owner_changes": watch.arp_owner_changes(),
        "l2_gap_s": longest_gap(bool(watch.first_macs), arp, began, ended),
        "bgp_gap_s": longest_gap(bool(watch.first_fib), fib, began, ended),
        "serving_s": serving,
        "status_s": status,
        "prepare_s": prepared,
    }


def apply_our_crds(lab: network_lab.Lab) -> None:
    """The doc's step: our CRDs over MetalLB's, while it runs."""
    lab.kubectl(
        "apply", "--server-side", "--force-conflicts",
        f"--field-manager={metallb.CRD_MANAGER}", "-f", str(network_lab.CRDS),
    )  # fmt: skip


def ironlb_taking_over(lab: network_lab.Lab) -> deploy.Deployment:
    """ironlb as the doc installs it beside MetalLB: speakers taking over from MetalLB's, on a
    membership port of their own."""
    selector = taking_over.METALLB_SPEAKER_SELECTOR
    return deploy.Deployment(
        lab,
        speaker_flags=(f"--take-over-from={selector}",),
        chart_values={"speaker": {"takeOverFrom": selector}},
        membership_port=TAKE_OVER_PORT,
    )


def measure(lab: network_lab.Lab, args: argparse.Namespace, say: Say) -> dict[str, Any]:
    out: dict[str, Any] = {}
    objects.clear_configuration(lab)
    mode = args.metallb_mode
    metallb.ensure_built()
    chart = metallb.render(metallb.VERSION, mode)
    metallb.install(lab, metallb.VERSION, chart)
    theirs = metallb.MetalLBDeployment(lab, metallb.VERSION, mode, _chart=chart)
    ours = deploy.Deployment(lab) if args.cut_over else ironlb_taking_over(lab)
    speakers = range(1, lab.nodes + 1)
    try:
        theirs.start()
        objects.apply(lab, *hitless.configuration(graceful_restart=args.graceful_restart))
        with objects.namespace(lab, NAMESPACE) as ns:
            vips = hitless.serve(lab, ns)
            services = ["l2", "bgp", *extra_services(lab, ns, args.services)]
            wait_for("MetalLB's status objects", lambda: status_is(lab, ns, "metallb", services),
                     time.monotonic())  # fmt: skip
            say(f"MetalLB ({mode}) serves {len(services)} Services; to ironlb")

            def beside_metallb() -> None:
                apply_our_crds(lab)
                if args.cut_over:
                    return
                for index in speakers:
                    ours.start_speaker(index)
                wait_for("ironlb's speakers standing by", lambda: all_standing_by(lab),
                         time.monotonic())  # fmt: skip

            def metallb_out() -> None:
                if args.cut_over:
                    theirs.stop()
                    metallb.uninstall(lab, metallb.VERSION, chart)
                    for index in speakers:
                        ours.start_speaker(index)
                else:
                    theirs.remove_release()
                ours.start_controller()

            there = direction(lab, vips, services, beside_metallb, metallb_out, "ironlb", say)
            out |= {f"to_ironlb_{k}": v for k, v in there.items()}
            say(f"to ironlb: {there}")

            def metallb_beside() -> None:
                nonlocal theirs
                ours.stop_controller()
                if args.cut_over:
                    return
                metallb.install(lab, metallb.VERSION, chart)
                # A new release: new ServiceAccounts (their tokens), a new memberlist key.
                theirs = metallb.MetalLBDeployment(lab, metallb.VERSION, mode, _chart=chart)
                theirs.start()
                wait_for("ironlb's speakers standing by", lambda: all_standing_by(lab),
                         time.monotonic())  # fmt: skip

            def ironlb_out() -> None:
                nonlocal theirs
                ours.stop()
                if not args.cut_over:
                    return
                delete_ironlb_status(lab)
                metallb.install(lab, metallb.VERSION, chart)
                theirs = metallb.MetalLBDeployment(lab, metallb.VERSION, mode, _chart=chart)
                theirs.start()

            back = direction(lab, vips, services, metallb_beside, ironlb_out, "metallb", say)
            out |= {f"to_metallb_{k}": v for k, v in back.items()}
            say(f"to MetalLB: {back}")
    finally:
        ours.stop()
        theirs.stop()
        with contextlib.suppress(Exception):
            metallb.uninstall(lab, metallb.VERSION, chart)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--services", type=int, default=None, help="besides the two under load")
    parser.add_argument("--metallb-mode", choices=metallb.MODES, default=metallb.DEFAULT_MODE)
    parser.add_argument(
        "--cut-over", action="store_true", help="the older procedure: one system out, then in"
    )
    parser.add_argument(
        "--graceful-restart",
        action="store_true",
        help="the BGPPeers with enableGracefulRestart (the ToR, FRR, helps either way)",
    )
    args = parser.parse_args(argv)
    args.services = args.services if args.services is not None else (6 if args.quick else 16)
    if not 0 <= args.services <= 16:
        parser.error("--services must be 0..16 (the lab's pools)")
    signal.signal(signal.SIGTERM, processes.interrupt)
    phases: dict[str, float] = {}
    session = Session(say, phases)
    figures: dict[str, Any] = {}
    with (
        session.incomplete_on(
            metallb.MetalLBError,
            network_lab.LabError,
            AssertionError,
            KeyboardInterrupt,
        ),
        session.lab() as lab,
    ):
        figures = measure(lab, args, say)
    return session.report(
        {
            "bench": "migrate",
            "quick": args.quick,
            "incomplete": session.incomplete,
            "metallb_version": metallb.VERSION,
            "metallb_mode": args.metallb_mode,
            "procedure": "cut-over" if args.cut_over else "take-over",
            "graceful_restart": args.graceful_restart,
            **figures,
            "elapsed_s": round(time.monotonic() - session.started, 1),
        }
    )


if __name__ == "__main__":
    sys.exit(main())
