"""The switch from MetalLB to ironlb on a live cluster, and back, measured where users feel it.

MetalLB (`hack/metallb.py`, as its chart installs it by default: FRR beside each speaker, or
`--metallb-mode`) serves Services in layer 2 and BGP, dual-stack among them: the two of
`hack.hitless` under load (40 new TCP connections a second over their four addresses and one
long-lived stream to each, from the client namespace), and `--services` more. Then the steps
of docs/migration.md, done as a user does them; in the lab MetalLB's processes and objects
stand for its Helm release:

1. ironlb's CRDs applied over MetalLB's while MetalLB runs (step 3);
2. MetalLB's release uninstalled: its speakers and controller stopped (SIGTERM, as deleting
   their Pods does), its accounts, ConfigMaps and stand-in Pods deleted (step 4);
3. ironlb started: controller and a speaker per node (step 4).

And back: ironlb stopped, the status objects it wrote deleted (the doc's last paragraph),
MetalLB installed and started.

Per direction (`to_ironlb_*`, `to_metallb_*`):
* `addresses_changed`: Services whose `status.loadBalancer.ingress` differs after the switch;
* `failed_connections` / `connections`: the load's new connections that failed, of all made
  from the first step until the new system serves and 2 s more;
* `streams_broken`: long-lived streams that broke;
* `l2_gap_s`: the longest time the ToR's ARP probe of the L2 address (`hack.hitless.Watch`,
  every 0.2 s) got no answer; `bgp_gap_s`: the longest time the ToR's FIB had no route to the
  BGP address;
* `status_s`: from the first step until every Service's status objects are the new system's
  (written by its speakers, none of the old one's left) and, towards ironlb, each node's
  ConfigurationState says Valid;
* `serving_s`: until the ToR sees every node announce the BGP addresses and one answer for the
  L2 one, as before.

    python -m bench.migrate [--quick] [--services N] [--metallb-mode frr|native]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.session import Say, Session, say
from hack import deploy, hitless, metallb, objects, processes
from hack import lab as network_lab

NAMESPACE = "migrate"
WARMUP_S = 3.0  # the load runs this long before the first step
AFTER_S = 2.0  # and this long after the new system serves
SERVING_TIMEOUT_S = 120.0
STATUS_PLURALS = ("servicel2statuses", "servicebgpstatuses")
IRONLB_MANAGERS = ("ironlb-speaker", "ironlb-controller")


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
    steps: Callable[[], None],
    system: str,
    say: Say,
) -> dict[str, Any]:
    """The steps under load, the ToR watched; the figures of one direction."""
    before = ingresses(lab, vips.namespace)
    with hitless.watching(lab, vips) as watch, hitless.load(lab, vips, 600.0) as running:
        time.sleep(WARMUP_S)
        started = time.monotonic()
        steps()
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
        "l2_gap_s": longest_gap(bool(watch.first_macs), arp, started, ended),
        "bgp_gap_s": longest_gap(bool(watch.first_fib), fib, started, ended),
        "serving_s": serving,
        "status_s": status,
    }


def measure(lab: network_lab.Lab, args: argparse.Namespace, say: Say) -> dict[str, Any]:
    out: dict[str, Any] = {}
    objects.clear_configuration(lab)
    mode = args.metallb_mode
    metallb.ensure_built()
    chart = metallb.render(metallb.VERSION, mode)
    metallb.install(lab, metallb.VERSION, chart)
    theirs = metallb.MetalLBDeployment(lab, metallb.VERSION, mode, _chart=chart)
    ours = deploy.Deployment(lab)
    try:
        theirs.start()
        objects.apply(lab, *hitless.configuration())
        with objects.namespace(lab, NAMESPACE) as ns:
            vips = hitless.serve(lab, ns)
            services = ["l2", "bgp", *extra_services(lab, ns, args.services)]
            wait_for("MetalLB's status objects", lambda: status_is(lab, ns, "metallb", services),
                     time.monotonic())  # fmt: skip
            say(f"MetalLB ({mode}) serves {len(services)} Services; to ironlb")

            def to_ironlb() -> None:
                # Step 3: our CRDs over MetalLB's, while it runs.
                lab.kubectl(
                    "apply", "--server-side", "--force-conflicts",
                    f"--field-manager={metallb.CRD_MANAGER}", "-f", str(network_lab.CRDS),
                )  # fmt: skip
                # Step 4: its release uninstalled (processes first, as Pod deletion), ours in.
                theirs.stop()
                metallb.uninstall(lab, metallb.VERSION, chart)
                ours.start_controller()
                for index in range(1, lab.nodes + 1):
                    ours.start_speaker(index)

            there = direction(lab, vips, services, to_ironlb, "ironlb", say)
            out |= {f"to_ironlb_{k}": v for k, v in there.items()}
            say(f"to ironlb: {there}")

            def to_metallb() -> None:
                nonlocal theirs
                ours.stop()
                delete_ironlb_status(lab)
                metallb.install(lab, metallb.VERSION, chart)
                # A new release: new ServiceAccounts (their tokens), a new memberlist key.
                theirs = metallb.MetalLBDeployment(lab, metallb.VERSION, mode, _chart=chart)
                theirs.start()

            back = direction(lab, vips, services, to_metallb, "metallb", say)
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
            **figures,
            "elapsed_s": round(time.monotonic() - session.started, 1),
        }
    )


if __name__ == "__main__":
    sys.exit(main())
