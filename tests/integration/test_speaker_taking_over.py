"""The real speaker process taking its node over from MetalLB's speaker (`--take-over-from`,
`ironlb.taking_over`), against the session's apiserver: it stands by while a Ready Pod of that
speaker is bound to its node (no ConfigurationState written: MetalLB's has the same name),
serves from the moment that Pod is being deleted; the way back, a new Pod not Ready yet takes
its BGP sessions (layer 2 only) and, Ready, stands it down.

Two speakers run side by side with membership on 127.0.0.1 and without layer 2 or BGP: one
on a node with a MetalLB speaker Pod, one (the control) on a node without, so that "nothing
written" is judged against a speaker that did write, not against a clock. No kubelet runs: a
graceful deletion of the bound Pod stays pending (deletionTimestamp set) until the test forces
it, as a kubelet would confirm it once the containers have stopped. Every object and process is
removed at the end, even on failure.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator

import pytest

from bench import migrate
from ironlb import taking_over
from tests.conftest import Kubectl
from tests.integration.test_speaker_startup import Speaker, eventually, speakers

pytestmark = pytest.mark.integration

__all__ = ["speakers"]  # the fixture, used below
LABELS = {"app.kubernetes.io/name": "metallb", "app.kubernetes.io/component": "speaker"}


def standing(speaker: Speaker) -> str | None:
    code, metrics = speaker.get("/metrics")
    return migrate.standing(metrics) if code == 200 else None


@pytest.fixture
def nodes(kubectl: Kubectl) -> Iterator[tuple[str, str]]:
    suffix = secrets.token_hex(3)
    names = (f"take-over-{suffix}", f"control-{suffix}")
    for name in names:
        kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        ))  # fmt: skip
    try:
        yield names
    finally:
        kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false")


def metallb_speaker_pod(
    kubectl: Kubectl, namespace: str, node: str, name: str, *, ready: bool = True
) -> None:
    """A MetalLB speaker Pod bound to `node`, as its DaemonSet and a kubelet make it."""
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "speaker", "image": "quay.io/metallb/speaker:v0.15.2"}],
        },
    }))  # fmt: skip
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    status = {"phase": "Running", "conditions": [condition]}
    kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))  # fmt: skip


def configuration_state(kubectl: Kubectl, namespace: str, node: str) -> bool:
    found = kubectl(
        "get", "configurationstate", f"speaker-{node}", "-n", namespace, "--ignore-not-found",
        "-o", "name",
    )  # fmt: skip
    return bool(found.stdout.strip())


def test_a_speaker_stands_by_while_metallbs_runs_on_its_node_and_takes_over_as_it_goes(
    speakers: Callable[..., Speaker],
    kubeconfig: str,
    kubectl: Kubectl,
    test_namespace: str,
    nodes: tuple[str, str],
) -> None:
    node, control_node = nodes
    ns = test_namespace
    metallb_speaker_pod(kubectl, ns, node, "metallb-speaker-a")
    flag = f"--take-over-from={taking_over.METALLB_SPEAKER_SELECTOR}"
    try:
        control = speakers(control_node, kubeconfig, ns, flag)
        ours = speakers(node, kubeconfig, ns, flag, f"--ml-seeds=127.0.0.1:{control.ml_port}")
        eventually(lambda: standing(ours) == "standingBy", "standing by for MetalLB's speaker")
        eventually(lambda: standing(control) == "serving", "the control node serves")
        eventually(
            lambda: configuration_state(kubectl, ns, control_node),
            "the control node's ConfigurationState written",
        )
        # Both listed the same objects and passed; only the one standing by wrote nothing.
        assert not configuration_state(kubectl, ns, node), ours.output()
        assert ours.logged("taking over")[-1]["standing"] == "standingBy", ours.output()

        # `helm uninstall metallb`: the Pod is marked for deletion (no kubelet confirms it).
        kubectl("delete", "pod", "metallb-speaker-a", "-n", ns, "--wait=false")
        eventually(lambda: standing(ours) == "serving", "serving as MetalLB's speaker stops")
        eventually(lambda: configuration_state(kubectl, ns, node), "our ConfigurationState")
        # The kubelet's confirmation: the Pod is gone; nothing changes.
        kubectl("delete", "pod", "metallb-speaker-a", "-n", ns, "--grace-period=0", "--force")

        # The way back: a new MetalLB speaker Pod, starting, then Ready.
        metallb_speaker_pod(kubectl, ns, node, "metallb-speaker-b", ready=False)
        eventually(lambda: standing(ours) == "layer2Only", "BGP given up to MetalLB's speaker")
        metallb_speaker_pod(kubectl, ns, node, "metallb-speaker-b")
        eventually(lambda: standing(ours) == "standingBy", "standing down for MetalLB again")
        assert standing(control) == "serving"
        assert ours.running() and control.running(), ours.output()
    finally:
        kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force",
                "--ignore-not-found")  # fmt: skip
