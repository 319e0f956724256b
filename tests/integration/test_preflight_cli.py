"""`ironlb preflight` against the session's apiserver (ironlb's CRDs applied): a MetalLB speaker
Pod in the namespace, bound to a Node of its own; the check fails while ironlb's membership port
would be MetalLB's, and passes with another one. The CLI process is run as a user runs it."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ironlb import taking_over
from tests.conftest import Kubectl

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def preflight(kubeconfig: str, namespace: str, *flags: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "ironlb_cli", "preflight", f"--kubeconfig={kubeconfig}",
         f"--namespace={namespace}", "-o", "json", *flags],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_preflight_finds_metallbs_speaker_and_its_memberlist_port(
    kubeconfig: str, kubectl: Kubectl, test_namespace: str
) -> None:
    node = f"preflight-{secrets.token_hex(3)}"
    kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    ))  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "metallb-speaker-x",
            "namespace": test_namespace,
            "labels": dict(p.split("=") for p in taking_over.METALLB_SPEAKER_SELECTOR.split(",")),
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "speaker", "image": "quay.io/metallb/speaker:v0.15.2",
                "ports": [{"name": "memberlist-udp", "containerPort": 7946, "protocol": "UDP"}],
            }],
        },
    }  # fmt: skip
    try:
        kubectl("apply", "-f", "-", input=json.dumps(pod))
        code, report = preflight(kubeconfig, test_namespace)
        by_check = {f["check"]: f for f in report["findings"]}
        assert code == 1 and report["passed"] is False, report
        assert by_check["crds"]["level"] == "ok", report
        assert by_check["membership-port"]["level"] == "fail", report
        assert node in by_check["membership-port"]["message"]

        code, report = preflight(kubeconfig, test_namespace, "--ml-bind-port=7947")
        by_check = {f["check"]: f for f in report["findings"]}
        assert code == 0 and report["passed"] is True, report
        assert by_check["membership-port"]["level"] == "ok", report
    finally:
        kubectl("delete", "pod", "metallb-speaker-x", "-n", test_namespace, "--grace-period=0",
                "--force", "--ignore-not-found")  # fmt: skip
        kubectl("delete", "node", node, "--ignore-not-found", "--wait=false")
