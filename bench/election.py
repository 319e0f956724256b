"""The speaker's L2 plan at scale: one pass over N Nodes and M Services, next to the election
done Service by Service over every Node (how a pass computed it before the per-pass electorate).

All compute the same owners (checked here; tests/unit/test_desired.py checks the candidates and
scores): `per_service` is `desired.candidates` (`desired.node_verdict` node by node) and
`election.scores` for every Service over every Node; `before` is the same with every Node's
labels read before its liveness was checked (the code until this change); the plan reads the
labels once per pass and shares the nodes an advertisement set selects between the Services
using it. Measured with few live speakers (most Nodes are kwok-like, as in bench/scale.py) and
with every Node live.

Times are CPU time of this process (best of 3), in seconds per pass: `plan_first` with the
owners remembered between passes forgotten (every candidate set changed), `plan` a pass after an
unchanged one (the owners come from the memo).
Usage: python -m bench.election [--quick]; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import time
from collections.abc import Callable

from ironlb import addresses, model, selectors
from speaker import desired, election

POOL = model.IPAddressPool(
    name=model.PoolName("bench"),
    addresses=(
        addresses.AddressRange(
            4, int(ipaddress.IPv4Address("10.0.0.0")), int(ipaddress.IPv4Address("10.0.255.255"))
        ),
    ),
)
ZONES = ("a", "b", "c")


def snapshot(nodes: int, services: int, alive: int) -> desired.Snapshot:
    """Nodes in three zones, two advertisements (every node; zone a preferred), Cluster
    Services with an endpoint each."""
    names = [f"node-{i:05d}" for i in range(nodes)]
    node_map = {
        n: desired.Node(model.NodeName(n), (("zone", ZONES[i % 3]),)) for i, n in enumerate(names)
    }
    everywhere = model.L2Advertisement(name=model.L2AdvertisementName("all"))
    prefer_a = model.L2Advertisement(
        name=model.L2AdvertisementName("prefer-a"),
        preferred_node_selectors=(
            model.PreferredNodeSelector(50, selectors.LabelSelector(match_labels=(("zone", "a"),))),
        ),
    )
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    svcs = tuple(
        desired.Service(
            namespace="bench",
            name=f"svc-{i}",
            ips=(ipaddress.IPv4Address(base + i),),
            endpoints=(desired.Endpoint(model.NodeName(names[i % nodes]), True, True),),
        )
        for i in range(services)
    )
    return desired.Snapshot(
        config=model.Config(pools=(POOL,), l2_advertisements=(everywhere, prefer_a)),
        services=svcs,
        nodes=node_map,
        alive=frozenset(names[:alive]),
    )


Eligible = Callable[
    [desired.Snapshot, desired.Service, tuple[model.L2Advertisement, ...], frozenset[str]],
    frozenset[str],
]


def definitional_eligible(
    snap: desired.Snapshot,
    service: desired.Service,
    ads: tuple[model.L2Advertisement, ...],
    not_ready: frozenset[str],
) -> frozenset[str]:
    """`desired.candidates` over every Node (the definition the plan must agree with); it reads
    the data path's readiness from the snapshot itself, so `not_ready` goes unused."""
    return desired.candidates(snap, service, ads)


def per_service(snap: desired.Snapshot, eligible: Eligible) -> int:
    """The baseline: each Service's advertisements, candidates and scores over every Node,
    then its owner."""
    owners = 0
    not_ready = snap.not_ready()
    for service in snap.services:
        ads = tuple(
            ad
            for ad in snap.config.l2_advertisements
            if ad.selects(POOL) and selectors.any_matches(ad.service_selectors, {})
        )
        candidates = eligible(snap, service, ads, not_ready.for_service(service))
        scores = election.scores((snap.nodes[n] for n in candidates), ads)
        owners += election.owner(str(service.ips[0]), candidates, scores) is not None
    return owners


def naive_eligible(
    snap: desired.Snapshot,
    service: desired.Service,
    ads: tuple[model.L2Advertisement, ...],
    not_ready: frozenset[str],
) -> frozenset[str]:
    """The election before this round's change, kept as the baseline: every Node's labels read
    before anything else is checked, for every Service."""
    out = set()
    for node in snap.nodes.values():
        labels = model.label_map(node.labels)
        if node.name not in snap.alive or node.network_unavailable:
            continue
        if desired.excluded(node, snap.ignore_exclude_lb) or node.drain is not None:
            continue
        if node.name in not_ready:
            continue
        if not any(
            not ad.node_selectors or any(s.matches(labels) for s in ad.node_selectors) for ad in ads
        ):
            continue
        out.add(node.name)
    return frozenset(out)


def plan(snap: desired.Snapshot, forget: bool = False) -> int:
    """One pass; `forget`: with the owners remembered from the last pass forgotten first (a
    pass after every candidate set changed)."""
    if forget:
        desired._owner.cache_clear()
    found = desired.l2_plan(snap, model.NodeName("node-00000"))
    return sum(owner is not None for owner in found.owners.values())


def best_of(runs: int, work: Callable[[], int]) -> tuple[float, int]:
    times, result = [], 0
    for _ in range(runs):
        began = time.process_time()
        result = work()
        times.append(time.process_time() - began)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 Nodes, 1,000 Services")
    args = parser.parse_args()
    nodes, services = (100, 1000) if args.quick else (1003, 5000)
    out: dict[str, object] = {"bench": "election", "quick": args.quick, "nodes": nodes}
    out["services"] = services
    for label, alive in (("few_alive", 3), ("all_alive", nodes)):
        snap = snapshot(nodes, services, alive)
        first_s, _ = best_of(3, functools.partial(plan, snap, forget=True))
        plan_s, planned = best_of(3, functools.partial(plan, snap))
        base_s, based = best_of(3, functools.partial(per_service, snap, definitional_eligible))
        before_s, before = best_of(3, functools.partial(per_service, snap, naive_eligible))
        if not planned == based == before:
            raise SystemExit(f"{label}: owned addresses differ: {planned}, {based}, {before}")
        line = {
            f"{label}_plan_first_s": round(first_s, 4),
            f"{label}_plan_s": round(plan_s, 4),
            f"{label}_per_service_s": round(base_s, 4),
            f"{label}_before_s": round(before_s, 4),
            f"{label}_vs_per_service": round(plan_s / base_s, 3) if base_s else None,
            f"{label}_vs_before": round(plan_s / before_s, 3) if before_s else None,
            f"{label}_first_vs_before": round(first_s / before_s, 3) if before_s else None,
            f"{label}_owned": planned,
        }
        print(json.dumps({"scenario": label, "alive": alive, **line}), flush=True)
        out.update(line)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
