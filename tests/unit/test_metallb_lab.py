"""hack.metallb's pure parts: which of MetalLB's manifests a lab install takes, and how its
processes are told who and where they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hack import lab as network_lab
from hack import metallb


def doc(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta}


def test_select_takes_crds_then_accounts_and_rbac_and_nothing_that_runs() -> None:
    released = [
        doc("Namespace", "metallb-system"),
        doc("RoleBinding", "pod-lister", "metallb-system"),
        doc("CustomResourceDefinition", "ipaddresspools.metallb.io"),
        None,  # an empty YAML document
        doc("Deployment", "controller", "metallb-system"),
        doc("ServiceAccount", "speaker", "metallb-system"),
        doc("ClusterRole", "metallb-system:speaker"),
        doc("DaemonSet", "speaker", "metallb-system"),
        doc("ValidatingWebhookConfiguration", "metallb-webhook-configuration"),
    ]
    chosen = [(d["kind"], d["metadata"]["name"]) for d in metallb.select(released)]
    assert chosen == [
        ("CustomResourceDefinition", "ipaddresspools.metallb.io"),
        ("ServiceAccount", "speaker"),
        ("ClusterRole", "metallb-system:speaker"),
        ("RoleBinding", "pod-lister"),
    ]


def test_select_refuses_objects_of_another_namespace() -> None:
    with pytest.raises(metallb.MetalLBError, match="elsewhere"):
        metallb.select([doc("Role", "x", "elsewhere")])


def test_speakers_are_told_their_node_address_labels_key_and_native_bgp(tmp_path: Path) -> None:
    lab = network_lab.Lab(nodes=3, directory=tmp_path)
    env = metallb.speaker_env(lab, 2, tmp_path / "kc", tmp_path / "key")
    assert env["METALLB_NODE_NAME"] == "node2"
    assert env["METALLB_ML_BIND_ADDR"] == env["METALLB_HOST"] == str(lab.node_v4(2))
    assert env["METALLB_ML_LABELS"] == "app=metallb,component=speaker"
    assert env["METALLB_ML_SECRET_KEY_PATH"] == str(tmp_path / "key")
    assert env["METALLB_BGP_TYPE"] == "native"
    argv = metallb.speaker_argv(tmp_path, lab, 2)
    assert argv[0] == str(tmp_path / "speaker") and "-node-name=node2" in argv


def test_stand_in_pods_carry_the_labels_and_are_run_by_nobody(tmp_path: Path) -> None:
    lab = network_lab.Lab(nodes=2, directory=tmp_path)
    pods = metallb.speaker_stand_ins(lab)
    assert [p["metadata"]["name"] for p in pods] == [
        "metallb-speaker-node1",
        "metallb-speaker-node2",
    ]
    for pod in pods:
        assert pod["metadata"]["labels"] == metallb.SPEAKER_LABELS
        assert "nodeName" not in pod["spec"]
        assert pod["spec"]["schedulerName"] == metallb.UNSCHEDULED
    assert metallb.stand_in_status(lab, 2)["status"]["podIP"] == str(lab.node_v4(2))


def test_the_controller_runs_without_its_webhook() -> None:
    argv = metallb.controller_argv(Path("/bin-dir"))
    assert argv[0] == "/bin-dir/controller"
    assert "-webhook-mode=disabled" in argv and "-namespace=metallb-system" in argv
