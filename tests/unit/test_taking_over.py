"""ironlb.taking_over: what a node does while the load balancer it replaces may still run there,
from that load balancer's speaker Pods on the node alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironlb import taking_over
from ironlb.taking_over import Predecessor, Standing

BY, L2, SERVING = Standing.STANDING_BY, Standing.LAYER2_ONLY, Standing.SERVING


def pod(
    *, ready: bool = True, deleting: bool = False, finished: bool = False, name: str = "p"
) -> Predecessor:
    return Predecessor(name, deleting=deleting, ready=ready, finished=finished)


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([], SERVING),  # none on this node (or gone)
        ([pod()], BY),  # MetalLB's speaker serves here
        ([pod(deleting=True)], SERVING),  # it is stopping: ours serves from now
        ([pod(ready=False)], L2),  # starting: its BGP must be able to connect
        ([pod(ready=False, deleting=True)], SERVING),
        ([pod(finished=True)], SERVING),  # its containers have ended
        ([pod(ready=False, finished=True)], SERVING),
        ([pod(name="old", deleting=True), pod(name="new")], BY),  # replaced; the new one Ready
        ([pod(name="old", deleting=True), pod(name="new", ready=False)], L2),
        ([pod(name="a", finished=True), pod(name="b")], BY),
    ],
)
def test_standing_table(pods: list[Predecessor], expected: Standing) -> None:
    assert taking_over.standing(pods) is expected


def test_what_each_standing_allows() -> None:
    assert (BY.layer2, BY.bgp, BY.writes) == (False, False, False)
    assert (L2.layer2, L2.bgp, L2.writes) == (True, False, True)
    assert (SERVING.layer2, SERVING.bgp, SERVING.writes) == (True, True, True)


pods = st.builds(
    Predecessor,
    name=st.sampled_from(["a", "b", "c"]),
    deleting=st.booleans(),
    ready=st.booleans(),
    finished=st.booleans(),
)


@given(st.lists(pods, max_size=5), st.randoms())
def test_only_pods_not_deleted_nor_finished_count(found: list[Predecessor], rnd: Any) -> None:
    shuffled = list(found)
    rnd.shuffle(shuffled)
    assert taking_over.standing(shuffled) is taking_over.standing(found)
    alive = [p for p in found if not p.deleting and not p.finished]
    assert taking_over.standing(alive) is taking_over.standing(found)
    # Standing by exactly while one of them is Ready; BGP only while there is none at all.
    assert (taking_over.standing(found) is BY) == any(p.ready for p in alive)
    assert taking_over.standing(found).bgp == (not alive)
    # One Pod that serves is enough, whatever else is there.
    assert taking_over.standing([*found, pod()]) is BY


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            {
                "metadata": {"name": "s", "deletionTimestamp": "2026-12-06T00:00:00Z"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
            Predecessor("s", deleting=True, ready=True, finished=False),
        ),
        (
            {"metadata": {"name": "s"}, "status": {"phase": "Succeeded"}},
            Predecessor("s", deleting=False, ready=False, finished=True),
        ),
        (
            {
                "metadata": {"name": "s"},
                "status": {"conditions": [{"type": "Ready", "status": "False"}]},
            },
            Predecessor("s", deleting=False, ready=False, finished=False),
        ),
        # Malformed parts read as absent, never as an error.
        (
            {"metadata": [], "status": "x"},
            Predecessor("", deleting=False, ready=False, finished=False),
        ),
        (
            {"status": {"conditions": ["Ready", None, {"type": "Ready"}]}},
            Predecessor("", False, False, False),
        ),
    ],
)
def test_a_pod_as_the_rule_reads_it(obj: dict[str, Any], expected: Predecessor) -> None:
    assert Predecessor.of(obj) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        (taking_over.METALLB_SPEAKER_SELECTOR, taking_over.METALLB_SPEAKER_SELECTOR),
        ("app=metallb, component=speaker", "app=metallb,component=speaker"),
        ("app==metallb,tier!=x", "app==metallb,tier!=x"),
        ("example.com/role=", "example.com/role="),
    ],
)
def test_selectors_taken(text: str, expected: str) -> None:
    assert taking_over.selector(text) == expected


@pytest.mark.parametrize(
    "text", ["app", "app in (a,b)", "!app", "app=metallb,", "a=b=c", "-bad=x", "app=-x", "a b=c"]
)
def test_selectors_refused_with_the_part_that_is_wrong(text: str) -> None:
    with pytest.raises(ValueError, match="--take-over-from"):
        taking_over.selector(text)
