"""Differential conformance against MetalLB itself: a handful of the corpus's cases applied under
ironlb and then under MetalLB (built from its Go module by hack/setup, pinned), in the same lab.
What a user sees is compared path by path; every difference must be one that
docs/compared-with-metallb.md explains (`hack.conformance.DELIBERATE`), so a change that makes
ironlb differ from MetalLB fails here. The whole corpus runs in `python -m bench.versus`.

Last of the tier (MetalLB's CRDs replace ours while it runs; `metallb.deployed` puts ours back).
"""

from __future__ import annotations

from hack import conformance, conformance_cases, deploy, metallb, objects
from hack import lab as network_lab


def test_a_user_sees_what_metallb_shows_them_or_a_difference_the_docs_explain(
    lab: network_lab.Lab,
) -> None:
    cases = conformance_cases.QUICK
    # A fresh cluster for both, as the bench has: earlier modules' pools would overlap the
    # cases' (an invalid configuration), their Services would count in the pools' status.
    objects.clear_configuration(lab)
    objects.wait_until(
        "no LoadBalancer Service left by earlier tests", lambda: no_services(lab), timeout=180
    )
    with deploy.deployed(lab):
        ours = conformance.run_in_lab(lab, cases)
    with metallb.deployed(lab):
        theirs = conformance.run_in_lab(lab, cases)
    assert [r.case for r in ours] == [r.case for r in theirs] == [c.name for c in cases]
    # MetalLB as its chart installs it by default (FRR beside its speaker).
    differences = conformance.compare_all(
        ours, theirs, conformance.deliberate_for(metallb.DEFAULT_MODE)
    )
    unexplained = [d.line() for d in differences if not d.explained]
    assert unexplained == [], "\n".join(unexplained)
    # The comparison saw something: each case observed Services under both systems.
    for run in (*ours, *theirs):
        assert any(o.services for o in run.observations), run.case
    print(f"{len(cases)} cases, {len(differences)} differences, all explained")


def no_services(lab: network_lab.Lab) -> objects.Missing | bool:
    listed = objects.get(lab, "services", "--all-namespaces")
    left = [
        f"{s['metadata']['namespace']}/{s['metadata']['name']}"
        for s in listed.get("items", [])
        if s.get("spec", {}).get("type") == "LoadBalancer"
    ]
    return objects.Missing("still there: " + ", ".join(left)) if left else True
