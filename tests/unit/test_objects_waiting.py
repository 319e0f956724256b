"""What a lab wait says when it gives up (hack/objects.py): `Missing` answers, and for backends
each node's Pod, the EndpointSlices' ready nodes and the concerned pod agents' logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from hack import lab as network_lab
from hack import objects


class Clock:
    """Stands in for `time` in hack.objects: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(objects, "time", fake)
    return fake


def pod(
    node: int,
    *,
    app: str = "web",
    phase: str | None = "Running",
    ready: str | None = "True",
    bound: bool = True,
    deleting: bool = False,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Pod as the apiserver lists it, with the status a node would have written."""
    metadata: dict[str, Any] = {"name": objects.pod_name(app, node), "labels": {"app": app}}
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    status: dict[str, Any] = {"conditions": list(conditions or [])}
    if phase is not None:
        status["phase"] = phase
    if ready is not None:
        status["conditions"].append({"type": "Ready", "status": ready})
    spec = {"nodeName": network_lab.node_name(node)} if bound else {}
    return {"kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def service(name: str = "web") -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": name}}


def endpoint_slice(ready_on: dict[int, bool], service_name: str = "web") -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {"labels": {"kubernetes.io/service-name": service_name}},
        "endpoints": [
            {"nodeName": network_lab.node_name(n), "conditions": {"ready": ready}}
            for n, ready in ready_on.items()
        ],
    }


# --- wait_until and Missing ----------------------------------------------------------------------


def test_missing_is_false_and_its_reason_ends_the_timeout_message() -> None:
    assert not objects.Missing("anything")
    with pytest.raises(AssertionError) as raised:
        objects.wait_until("the thing", lambda: objects.Missing("node2: no Pod web-node2"))
    assert str(raised.value) == (
        "timed out after 60 s waiting for the thing:\n  node2: no Pod web-node2"
    )


def test_wait_until_returns_the_first_true_answer_after_missing_ones() -> None:
    answers: list[objects.Missing | str] = [objects.Missing("a"), objects.Missing("b"), "done"]
    assert objects.wait_until("it", lambda: answers.pop(0)) == "done"


def test_a_plain_false_answer_keeps_the_old_message() -> None:
    with pytest.raises(AssertionError, match=r"waiting for it \(last: None\)$"):
        objects.wait_until("it", lambda: None, timeout=1)


def test_wait_equal_says_what_it_read_last() -> None:
    reads = iter([{"aa:01"}, {"aa:01", "aa:02"}] + [{"aa:02", "aa:03"}] * 2000)
    with pytest.raises(AssertionError) as raised:
        objects.wait_equal("node2 to answer", lambda: next(reads), {"aa:02"}, timeout=5)
    assert str(raised.value).endswith("wanted {'aa:02'}, last read {'aa:02', 'aa:03'}") or str(
        raised.value
    ).endswith("wanted {'aa:02'}, last read {'aa:03', 'aa:02'}")


def test_wait_equal_returns_once_equal() -> None:
    reads = iter([set(), {"aa:02"}])
    objects.wait_equal("node2 to answer", lambda: next(reads), {"aa:02"})


# --- what keeps backends from being settled ------------------------------------------------------


@pytest.mark.parametrize(
    "listed",
    [
        pytest.param([pod(1), pod(2)], id="ready Pods, no Service"),
        pytest.param(
            [pod(1), pod(2), service(), endpoint_slice({1: True, 2: True})],
            id="ready Pods and slices",
        ),
        pytest.param(
            [
                pod(1),
                pod(2),
                pod(3, app="other", ready="False"),
                service(),
                endpoint_slice({1: True, 2: True}),
                endpoint_slice({3: True}, service_name="other"),
            ],
            id="other apps' Pods and slices are not ours",
        ),
    ],
)
def test_settled(listed: list[dict[str, Any]]) -> None:
    assert objects.unsettled("web", [1, 2], listed) is None


def test_each_node_says_which_pod_is_missing_or_its_phase_and_ready_condition() -> None:
    listed = [
        pod(1),
        pod(2, phase="Pending", ready=None),
        service(),
        endpoint_slice({1: True, 2: False}),
    ]
    gap = objects.unsettled("web", [1, 2, 3], listed)
    assert gap == objects.Unsettled(
        lines=(
            "node1: Pod web-node1 Running, Ready=True",
            "node2: Pod web-node2 Pending, no Ready condition (no status from its node)",
            "node3: no Pod web-node3",
            "EndpointSlices: ready endpoints on node1, wanted on node1, node2, node3;"
            " none ready on node2, node3",
        ),
        nodes=("node2", "node3"),
    )


def test_slices_lagging_behind_settled_pods_blame_no_node() -> None:
    listed = [pod(1), pod(2), service(), endpoint_slice({1: True, 3: True})]
    gap = objects.unsettled("web", [1, 2], listed)
    assert gap is not None
    assert gap.nodes == ()
    assert gap.lines[-1] == (
        "EndpointSlices: ready endpoints on node1, node3, wanted on node1, node2;"
        " none ready on node2; ready on unwanted node3"
        " (the Pods are settled: kube-controller-manager has not caught up)"
    )


def test_a_service_without_slices_says_so() -> None:
    gap = objects.unsettled("web", [1], [pod(1), service()])
    assert gap is not None
    assert gap.lines[-1] == "EndpointSlices: none yet for Service web (kube-controller-manager)"


def test_a_pod_not_wanted_any_more_is_named_with_its_node() -> None:
    listed = [pod(1), pod(4, deleting=True)]
    gap = objects.unsettled("web", [1], listed)
    assert gap is not None
    assert gap.lines == (
        "node1: Pod web-node1 Running, Ready=True",
        "node4: Pod web-node4 Running, terminating, Ready=True, not wanted",
        "EndpointSlices: not checked, no Service web",
    )
    assert gap.nodes == ("node4",)


def test_an_unschedulable_pod_carries_the_schedulers_reason() -> None:
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
    }
    state = objects.pod_state(
        pod(2, phase="Pending", ready=None, bound=False, conditions=[scheduled])
    )
    assert state == (
        "Pending, not bound to a node, no Ready condition (no status from its node),"
        " PodScheduled=False (Unschedulable: 0/3 nodes are available: 3 node(s) didn't match"
        " Pod's node affinity/selector.)"
    )


def test_a_waiting_container_says_why() -> None:
    item = pod(1, ready="False", phase="Pending")
    item["status"]["containerStatuses"] = [
        {
            "name": "echo",
            "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
        }
    ]
    assert objects.pod_state(item) == (
        "Pending, Ready=False, container echo restarted 2 times,"
        " container echo waiting (CrashLoopBackOff: back-off 20s)"
    )


# --- wait_backends' message, end to end ----------------------------------------------------------


class FakeLab:
    """What wait_backends uses of a Lab: kubectl's answer and where pod agents log."""

    def __init__(self, listed: list[dict[str, Any]], log_dir: Path) -> None:
        self.listed = listed
        self.log_dir = log_dir
        self.calls: list[tuple[str, ...]] = []

    def kubectl(self, *args: str, input: str | None = None) -> str:
        self.calls.append(args)
        return json.dumps({"kind": "List", "items": self.listed})

    def pod_agent_log(self, node: str) -> Path:
        return self.log_dir / f"podagent-{node}.log"


def test_wait_backends_gives_up_saying_what_is_missing_and_how_the_agent_fared(
    tmp_path: Path,
) -> None:
    (tmp_path / "podagent-node2.log").write_text(
        "".join(f'{{"msg": "line {i}"}}\n' for i in range(30))
        + '{"msg": "pod failed, retrying", "error": "ip netns add ilb-pod-1: File exists"}\n'
    )
    (tmp_path / "podagent-node1.log").write_text('{"msg": "pod started"}\n')
    fake = FakeLab(
        [pod(1), pod(2, phase="Pending", ready=None), service(), endpoint_slice({1: True})],
        tmp_path,
    )
    with pytest.raises(AssertionError) as raised:
        objects.wait_backends(cast(network_lab.Lab, fake), "ns", "web", [1, 2, 3])
    message = str(raised.value)
    head, agent_log = message.split("\n  pod agent log of node2 ")
    assert head == (
        "timed out after 60 s waiting for ns/web backends ready on ['node1', 'node2', 'node3']:\n"
        "  node1: Pod web-node1 Running, Ready=True\n"
        "  node2: Pod web-node2 Pending, no Ready condition (no status from its node)\n"
        "  node3: no Pod web-node3\n"
        "  EndpointSlices: ready endpoints on node1, wanted on node1, node2, node3;"
        " none ready on node2, node3"
    )
    # node3 has no log (a kubelet node, say): nothing to show; node1 is fine: not shown.
    lines = agent_log.splitlines()
    assert lines[0] == f"({tmp_path / 'podagent-node2.log'}), last lines:"
    assert len(lines) == 1 + objects.AGENT_LOG_LINES
    assert lines[1] == '    {"msg": "line 11"}'
    assert lines[-1].endswith('File exists"}')
    assert all(args[:2] == ("get", "pods,services,endpointslices") for args in fake.calls)
