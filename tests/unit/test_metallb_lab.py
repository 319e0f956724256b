"""hack.metallb's pure parts: how MetalLB's rendered chart is sorted, and how its processes are
told who and where they are, from a chart shaped like the one it ships (helm is not run here)."""

from __future__ import annotations

import base64
import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from hack import cluster, metallb, podagent
from hack import lab as network_lab

NS = "metallb-system"
SPEAKER_LABELS = {
    "app.kubernetes.io/name": "metallb",
    "app.kubernetes.io/instance": "metallb",
    "app.kubernetes.io/component": "speaker",
}
ML_LABELS = "app.kubernetes.io/name=metallb,app.kubernetes.io/component=speaker"
EXCLUDED = "announcedInterfacesToExclude: []\n"


def obj(kind: str, name: str, namespace: str | None = NS, **rest: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, **rest}


def field_ref(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def workload(kind: str, component: str, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {**SPEAKER_LABELS, "app.kubernetes.io/component": component}
    template = {"metadata": {"labels": labels}, "spec": pod}
    return obj(kind, f"metallb-{component}", spec={"template": template})


def rendered() -> list[dict[str, Any] | None]:
    speaker_pod = {
        "serviceAccountName": "metallb-speaker",
        "hostNetwork": True,
        "volumes": [
            {"name": "memberlist", "secret": {"secretName": "metallb-memberlist"}},
            {"name": "metallb-excludel2", "configMap": {"name": "metallb-excludel2"}},
        ],
        "containers": [
            {
                "name": "speaker",
                "image": "quay.io/metallb/speaker:v0.15.2",
                "args": ["--port=7472", "--log-level=info"],
                "env": [
                    field_ref("METALLB_NODE_NAME", "spec.nodeName"),
                    field_ref("METALLB_HOST", "status.hostIP"),
                    field_ref("METALLB_ML_BIND_ADDR", "status.podIP"),
                    {"name": "METALLB_ML_LABELS", "value": ML_LABELS},
                    {"name": "METALLB_ML_BIND_PORT", "value": "7946"},
                    {"name": "METALLB_ML_SECRET_KEY_PATH", "value": "/etc/ml_secret_key"},
                    field_ref("METALLB_POD_NAME", "metadata.name"),
                ],
                "volumeMounts": [
                    {"name": "memberlist", "mountPath": "/etc/ml_secret_key"},
                    {"name": "metallb-excludel2", "mountPath": "/etc/metallb"},
                ],
            }
        ],
    }
    controller_pod = {
        "serviceAccountName": "metallb-controller",
        "containers": [
            {
                "name": "controller",
                "image": "quay.io/metallb/controller:v0.15.2",
                "args": ["--port=7472", "--log-level=info", "--webhook-mode=disabled"],
                "env": [
                    {"name": "METALLB_ML_SECRET_NAME", "value": "metallb-memberlist"},
                    {"name": "METALLB_DEPLOYMENT", "value": "metallb-controller"},
                ],
            }
        ],
    }
    return [
        obj("RoleBinding", "metallb-pod-lister"),
        obj("CustomResourceDefinition", "ipaddresspools.metallb.io", None),
        None,  # an empty YAML document
        workload("DaemonSet", "speaker", speaker_pod),
        obj("ServiceAccount", "metallb-speaker"),
        obj("ConfigMap", "metallb-excludel2", data={"excludel2.yaml": EXCLUDED}),
        obj("ClusterRole", "metallb:speaker", None),
        workload("Deployment", "controller", controller_pod),
        obj("CustomResourceDefinition", "bgppeers.metallb.io", None),
    ]


@pytest.fixture
def chart() -> metallb.Chart:
    return metallb.split(rendered())


@pytest.fixture
def lab(tmp_path: Path) -> network_lab.Lab:
    return network_lab.Lab(nodes=3, directory=tmp_path / "lab")


def names(objects: tuple[dict[str, Any], ...]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def test_the_chart_is_sorted_into_crds_applied_objects_and_the_two_workloads(
    chart: metallb.Chart,
) -> None:
    assert names(chart.crds) == [
        ("CustomResourceDefinition", "ipaddresspools.metallb.io"),
        ("CustomResourceDefinition", "bgppeers.metallb.io"),
    ]
    # Accounts before the roles, roles before the bindings that name them.
    assert names(chart.applied) == [
        ("ServiceAccount", "metallb-speaker"),
        ("ClusterRole", "metallb:speaker"),
        ("RoleBinding", "metallb-pod-lister"),
        ("ConfigMap", "metallb-excludel2"),
    ]
    assert chart.speaker["kind"] == "DaemonSet" and chart.controller["kind"] == "Deployment"
    assert chart.memberlist_secret == "metallb-memberlist"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda docs: docs.append(obj("MutatingWebhookConfiguration", "x", None)), "not expected"),
        (lambda docs: docs.append(obj("Role", "x", "elsewhere")), "elsewhere"),
        (lambda docs: docs.remove(docs[3]), "no metallb-speaker"),
        (lambda docs: docs.append(workload("Deployment", "webhook", {})), "more workloads"),
    ],
)  # fmt: skip
def test_a_chart_that_changed_shape_is_refused(change: Any, message: str) -> None:
    docs = rendered()
    change(docs)
    with pytest.raises(metallb.MetalLBError, match=message):
        metallb.split(docs)


def test_our_crds_that_metallb_lacks_are_the_ones_install_deletes() -> None:
    ours = ["configurationstates.metallb.io", "ipaddresspools.metallb.io"]
    theirs = ["ipaddresspools.metallb.io", "bgppeers.metallb.io"]
    assert metallb.surplus_crds(ours, theirs) == ["configurationstates.metallb.io"]
    assert metallb.surplus_crds(theirs, theirs) == []


def test_a_speaker_runs_as_its_daemonset_would_run_it_on_that_node(
    chart: metallb.Chart, lab: network_lab.Lab, tmp_path: Path
) -> None:
    argv, env = metallb.speaker_command(
        chart,
        lab,
        2,
        binary=tmp_path / "bin" / "speaker",
        kubeconfig=tmp_path / "kc",
        etc=tmp_path / "etc",
    )
    # The /etc overlay first, then the speaker exec'd with the chart's arguments and the three
    # a process outside a Pod needs.
    assert argv[:6] == ["sh", "-c", metallb.ETC_OVERLAY, "sh", str(tmp_path / "etc"), "-"]
    assert argv[6:] == [
        str(tmp_path / "bin" / "speaker"),
        "--port=7472",
        "--log-level=info",
        f"--kubeconfig={tmp_path / 'kc'}",
        "--namespace=metallb-system",
        "--node-name=node2",
    ]
    node2 = str(lab.node_v4(2))
    assert env["METALLB_NODE_NAME"] == "node2"
    assert env["METALLB_HOST"] == env["METALLB_ML_BIND_ADDR"] == node2  # hostNetwork
    assert env["METALLB_POD_NAME"] == "metallb-speaker-node2"  # its stand-in Pod
    assert (
        env["METALLB_ML_LABELS"]
        == "app.kubernetes.io/name=metallb,app.kubernetes.io/component=speaker"
    )
    assert env["METALLB_ML_BIND_PORT"] == "7946"
    assert env["METALLB_ML_SECRET_KEY_PATH"] == "/etc/ml_secret_key"  # where the overlay puts it
    assert env["METALLB_BGP_TYPE"] == "native"
    assert "PATH" in env and "KUBECONFIG" not in env


def test_the_overlay_mounts_the_files_and_keeps_the_pid() -> None:
    script = metallb.ETC_OVERLAY
    assert script.startswith("set -e\n")  # a failed mount must not start a speaker without them
    assert "lowerdir=/etc," in script
    assert script.rstrip().endswith('exec "$@"')


def test_an_etc_directory_that_overlayfs_cannot_name_is_refused(
    chart: metallb.Chart, lab: network_lab.Lab
) -> None:
    with pytest.raises(metallb.MetalLBError, match="overlayfs"):
        metallb.speaker_command(
            chart, lab, 1, binary=Path("/s"), kubeconfig=Path("/k"), etc=Path("/a,b")
        )


def test_the_speakers_files_are_its_pods_mounts_relative_to_etc(chart: metallb.Chart) -> None:
    assert metallb.speaker_files(chart, "k3y") == {
        "ml_secret_key/secretkey": "k3y",
        "metallb/excludel2.yaml": EXCLUDED,
    }


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ({"name": "metallb-excludel2", "mountPath": "/var/lib/x"}, "not under /etc"),
        ({"name": "nowhere", "mountPath": "/etc/nowhere"}, "cannot give"),
    ],
)
def test_a_mount_the_lab_cannot_give_is_refused(mount: dict[str, str], message: str) -> None:
    docs = rendered()
    speaker = copy.deepcopy(docs[3])
    assert speaker is not None
    speaker["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].append(mount)
    docs[3] = speaker
    with pytest.raises(metallb.MetalLBError, match=message):
        metallb.speaker_files(metallb.split(docs), "k3y")


def test_an_env_source_the_lab_cannot_answer_is_refused() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    with pytest.raises(metallb.MetalLBError, match="X"):
        metallb.resolve_env(container, {})


def test_the_controller_runs_with_the_charts_arguments_and_environment(
    chart: metallb.Chart,
) -> None:
    argv, env = metallb.controller_command(
        chart, binary=Path("/b/controller"), kubeconfig=Path("/k")
    )
    assert argv == [
        "/b/controller",
        "--port=7472",
        "--log-level=info",
        "--webhook-mode=disabled",
        "--kubeconfig=/k",
        "--namespace=metallb-system",
    ]
    assert env["METALLB_ML_SECRET_NAME"] == "metallb-memberlist"
    assert env["METALLB_BGP_TYPE"] == "native"


def test_stand_in_pods_carry_the_speakers_labels_and_address_and_are_run_by_the_lab(
    chart: metallb.Chart, lab: network_lab.Lab
) -> None:
    pod, status = metallb.stand_in(chart, lab, 3)
    assert pod["metadata"] == {
        "name": "metallb-speaker-node3",
        "namespace": NS,
        "labels": SPEAKER_LABELS,
    }
    # Bound to its node, as the DaemonSet's Pod (ironlb's --take-over-from looks there), and
    # named for a scheduler that the node's pod agent leaves to the lab.
    assert pod["spec"]["nodeName"] == "node3"
    assert pod["spec"]["schedulerName"] == metallb.UNSCHEDULED == podagent.RUN_BY_THEIR_MAKER
    # Running, not Ready until its speaker answers the chart's readiness probe.
    assert status["status"]["phase"] == "Running"
    assert status["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    # A node with a real kubelet would try to run it: there it is bound to none.
    kubelet_lab = dataclasses.replace(lab, kubelet_nodes=(3,))
    assert "nodeName" not in metallb.stand_in(chart, kubelet_lab, 3)[0]["spec"]
    assert pod["spec"]["serviceAccountName"] == "metallb-speaker"
    assert pod["spec"]["containers"] == [
        {"name": "speaker", "image": "quay.io/metallb/speaker:v0.15.2"}
    ]
    node3 = str(lab.node_v4(3))
    assert status["status"]["podIP"] == status["status"]["hostIP"] == node3
    assert status["status"]["podIPs"] == [{"ip": node3}]
    # The selector the speakers list their memberlist peers by matches the stand-ins.
    _, env = metallb.speaker_command(
        chart, lab, 1, binary=Path("/s"), kubeconfig=Path("/k"), etc=Path("/e")
    )
    selector = dict(p.split("=") for p in env["METALLB_ML_LABELS"].split(","))
    assert selector.items() <= pod["metadata"]["labels"].items()


def test_the_build_module_requires_metallb_alone_and_names_both_commands() -> None:
    files = metallb.main_module("v0.15.2", "1.24.0")
    assert files["go.mod"] == (
        "module ironlb.local/metallbbuild\n\ngo 1.24.0\n\nrequire go.universe.tf/metallb v0.15.2\n"
    )
    assert files["tools.go"].startswith("//go:build tools\n")
    imports = re.findall(r'_ "([^"]+)"', files["tools.go"])
    assert imports == ["go.universe.tf/metallb/controller", "go.universe.tf/metallb/speaker"]
    assert metallb.go_directive("module x\n\ngo 1.24.0\n\ntoolchain go1.24.3\n") == "1.24.0"
    with pytest.raises(metallb.MetalLBError):
        metallb.go_directive("module x\n")


def test_the_cache_directory_is_per_version() -> None:
    assert metallb.bin_dir("v0.15.2").name == "metallb-v0.15.2"
    assert metallb.bin_dir("v0.15.2").parent == cluster.CACHE


def test_a_memberlist_key_is_shaped_like_the_one_metallbs_controller_makes() -> None:
    key = metallb.new_memberlist_key()
    assert len(key) == 22 and "=" not in key  # 16 bytes, base64 without padding
    assert len(base64.b64decode(key + "==")) == 16
    assert key != metallb.new_memberlist_key()


def test_int32_fields_with_a_larger_maximum_are_widened_and_nothing_else() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "myASN": {"type": "integer", "format": "int32", "maximum": 4294967295},
                    "port": {"type": "integer", "format": "int32", "maximum": 16384},
                    "count": {"type": "integer", "format": "int32"},
                    "list": {
                        "type": "array",
                        "items": {"type": "integer", "format": "int32", "maximum": 2**31},
                    },
                },
            }
        },
    }
    before = copy.deepcopy(schema)
    changed = metallb.widen_int32_bounds(schema)
    assert changed == ["properties.spec.properties.myASN", "properties.spec.properties.list.items"]
    spec = schema["properties"]["spec"]["properties"]
    assert spec["myASN"]["format"] == "int64" and spec["list"]["items"]["format"] == "int64"
    # The rest as it was.
    for untouched in ("port", "count"):
        assert spec[untouched] == before["properties"]["spec"]["properties"][untouched]
    assert metallb.widen_int32_bounds(schema) == []


DAEMONS = """bgpd=yes
ospfd=no
bfdd=yes

vtysh_enable=yes
zebra_options="  -A 127.0.0.1 -s 90000000 --limit-fds 100000"
bgpd_options="   -A 127.0.0.1 -p 0 --limit-fds 100000"
ospfd_options="  -A 127.0.0.1"
staticd_options="-A 127.0.0.1 --limit-fds 100000"
bfdd_options="   -A 127.0.0.1 --limit-fds 100000"
"""


def frr_chart() -> metallb.Chart:
    """The chart as `speaker.frr.enabled=true` renders it (v0.15.2), reduced to what the lab
    reads: the speaker's FRR environment and reloader volume, the frr-startup ConfigMap."""
    docs = rendered()
    speaker = copy.deepcopy(docs[3])
    assert speaker is not None
    pod = speaker["spec"]["template"]["spec"]
    pod["volumes"].append({"name": "reloader", "emptyDir": {}})
    c = pod["containers"][0]
    c["env"] += [
        {"name": "FRR_CONFIG_FILE", "value": "/etc/frr_reloader/frr.conf"},
        {"name": "FRR_RELOADER_PID_FILE", "value": "/etc/frr_reloader/reloader.pid"},
        {"name": "METALLB_BGP_TYPE", "value": "frr"},
    ]
    c["volumeMounts"].append({"name": "reloader", "mountPath": "/etc/frr_reloader"})
    docs[3] = speaker
    startup = obj(
        "ConfigMap",
        "metallb-frr-startup",
        data={"daemons": DAEMONS, "vtysh.conf": "service integrated-vtysh-config\n"},
    )
    return metallb.split([*docs, startup])


def test_frr_mode_starts_the_charts_daemons_with_its_options() -> None:
    chart = frr_chart()
    assert chart.mode == "frr"
    assert metallb.frr_daemons(chart) == [
        ("zebra", "-A 127.0.0.1 -s 90000000 --limit-fds 100000"),
        ("staticd", "-A 127.0.0.1 --limit-fds 100000"),  # always, though the file omits it
        ("bgpd", "-A 127.0.0.1 -p 0 --limit-fds 100000"),
        ("bfdd", "-A 127.0.0.1 --limit-fds 100000"),
    ]


def test_an_frr_speaker_shares_its_reloader_directory_with_the_nodes_frr(
    lab: network_lab.Lab, tmp_path: Path
) -> None:
    chart = frr_chart()
    # The reloader emptyDir is not a file the lab writes: it is bound from the node's FRR.
    assert metallb.speaker_files(chart, "k3y") == {
        "ml_secret_key/secretkey": "k3y",
        "metallb/excludel2.yaml": EXCLUDED,
    }
    argv, env = metallb.speaker_command(
        chart, lab, 1, binary=Path("/s"), kubeconfig=Path("/k"), etc=Path("/e"), frr=tmp_path
    )
    assert argv[4:7] == ["/e", str(tmp_path), "/s"]
    assert env["METALLB_BGP_TYPE"] == "frr"
    assert env["FRR_CONFIG_FILE"] == "/etc/frr_reloader/frr.conf"
    assert env["FRR_RELOADER_PID_FILE"] == "/etc/frr_reloader/reloader.pid"
    with pytest.raises(metallb.MetalLBError, match="needs FRR"):
        metallb.speaker_command(
            chart, lab, 1, binary=Path("/s"), kubeconfig=Path("/k"), etc=Path("/e")
        )
    script = metallb.ETC_OVERLAY
    for bound in ("/etc/frr_reloader", "/etc/frr", "/run/frr"):
        assert 'mount --bind "$n/' in script and f" {bound}\n" in script


def test_a_mode_the_lab_does_not_know_is_refused() -> None:
    assert metallb.values("native")[0] == "speaker.frr.enabled=false"
    assert metallb.values("frr")[0] == "speaker.frr.enabled=true"
    with pytest.raises(metallb.MetalLBError, match="frr-k8s"):
        metallb.values("frr-k8s")
