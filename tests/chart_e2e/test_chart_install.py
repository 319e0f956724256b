"""ironlb as users install it: `helm install` of charts/ironlb, with the images built from the
project's Dockerfile, onto two nodes that run a real kubelet and containerd.

The tests run in order on one release: install (every Pod Ready through the chart's own probes),
the webhook served from the controller Pod, an L2 VIP answered by a speaker Pod and reached
through kube-proxy, failover when the owner's speaker Pod is deleted, `helm upgrade` rolling the
DaemonSet under a client's connections, `helm uninstall`. The only deviation from the chart's
defaults besides the images: the membership seeds are the nodes' addresses, because the lab has no
cluster DNS to resolve the default seed (the members Service's name).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hack import images, loadgen, objects
from hack import lab as network_lab
from speaker import election
from tests.integration import chart_support

pytestmark = pytest.mark.e2e

NS = objects.METALLB_NAMESPACE
ROOT = network_lab.ROOT
RELEASE = "ironlb"
POOL = "chart-l2"
RANGES = ["10.250.0.200-10.250.0.210"]
APP = "web"
HELM_TIMEOUT = "240s"
HELM_BOUND_S = 300.0
# The client load during `helm upgrade`: new connections a second, and a duration that outlasts
# every bounded wait of the test (helm's, the roll's, the answer's), so it never ends first.
UPGRADE_RATE = 20.0
UPGRADE_LOAD_MAX_S = HELM_BOUND_S + 120.0 + 60.0 + 60.0
UPGRADE_AFTER_ROLL_S = 3.0


class Release:
    """The chart installed in the lab, and what the tests learnt about it on the way."""

    def __init__(self, lab: network_lab.Lab, built: images.Built, env: dict[str, str]) -> None:
        self.lab = lab
        self.built = built
        self.tools = chart_support.Tools(lab.kubeconfig, env)
        self.vip = ""

    def values(self) -> list[str]:
        c, s = self.built.controller, self.built.speaker
        seeds = ",".join(str(network_lab.node_v4(i)) for i in range(1, self.lab.nodes + 1))
        return [
            "--set", f"controller.image.repository={c.repository}",
            "--set", f"controller.image.tag={c.tag}",
            "--set", f"speaker.image.repository={s.repository}",
            "--set", f"speaker.image.tag={s.tag}",
            "--set", f"speaker.memberlist.seeds={{{seeds}}}",
        ]  # fmt: skip

    def helm(self, *args: str, check: bool = True) -> str:
        """helm against the lab; bounded a little beyond helm's own --timeout."""
        argv = [str(chart_support.helm_binary()), f"--kubeconfig={self.lab.kubeconfig}", *args]
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, env=self.tools.env, timeout=HELM_BOUND_S
            )
        except subprocess.TimeoutExpired as e:
            if check:
                raise AssertionError(f"helm {args[0]} did not end in {HELM_BOUND_S:.0f} s") from e
            return ""
        if check and result.returncode != 0:
            raise AssertionError(f"helm {args[0]} failed: {result.stderr.strip()[-1500:]}")
        return result.stdout

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = objects.get(self.lab, "pods", "-n", NS)["items"]
        return items

    def speakers(self) -> dict[str, dict[str, Any]]:
        """Speaker Pods by node name."""
        return {
            p["spec"]["nodeName"]: p
            for p in self.pods()
            if p["metadata"]["labels"].get("app.kubernetes.io/component") == "speaker"
            and not p["metadata"].get("deletionTimestamp")
        }


@pytest.fixture(scope="module")
def release(lab: network_lab.Lab, built: images.Built) -> Iterator[Release]:
    with chart_support.helm_home() as env:
        r = Release(lab, built, env)
        try:
            yield r
        finally:
            r.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "60s", check=False)
            lab.kubectl("delete", "namespace", "chart-app", "--ignore-not-found", "--wait=false")


def _all_ready(pods: list[dict[str, Any]]) -> bool:
    return bool(pods) and all(objects.is_ready(p) for p in pods)


def test_helm_install_makes_every_pod_ready(release: Release, lab: network_lab.Lab) -> None:
    started = time.monotonic()
    release.helm(
        "install", RELEASE, str(chart_support.CHART), "-n", NS, *release.values(),
        "--wait", "--timeout", HELM_TIMEOUT,
    )  # fmt: skip
    print(f"helm install --wait: {time.monotonic() - started:.1f} s")
    pods = objects.wait_until("every chart Pod Ready", lambda: _all_ready(release.pods()) or None)
    print(lab.kubectl("get", "pods", "-n", NS, "-o", "wide"))
    controllers = [p for p in release.pods() if "controller" in p["metadata"]["name"]]
    assert len(controllers) == 1
    speakers = release.speakers()
    assert set(speakers) == set(lab.node_names)
    for node, pod in speakers.items():
        # Host network: the speaker's Pod IP is its node's address.
        assert pod["status"]["podIP"] == str(lab.node_v4(lab.node_names.index(node) + 1))
    controller = controllers[0]
    assert controller["status"]["podIP"].startswith("10.244.")
    for pod in [controller, *speakers.values()]:
        container = pod["spec"]["containers"][0]
        # Ready through the chart's own probes, with the images from our Dockerfile.
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        status = pod["status"]["containerStatuses"][0]
        assert status["ready"] and status["restartCount"] == 0
        assert status["image"].startswith(images.REGISTRY + "/")
    assert pods
    assert controller["spec"]["securityContext"]["runAsUser"] == 65534


def test_the_webhook_in_the_controller_pod_refuses_a_bad_pool(
    release: Release, lab: network_lab.Lab
) -> None:
    objects.apply(
        lab,
        objects.metallb("IPAddressPool", POOL, {"addresses": RANGES}),
        objects.metallb("L2Advertisement", POOL, {"ipAddressPools": [POOL]}),
    )
    overlapping = objects.metallb("IPAddressPool", "overlap", {"addresses": ["10.250.0.205/32"]})
    result = release.tools.kubectl("apply", "-f", "-", input=json.dumps(overlapping), check=False)
    assert result.returncode != 0
    assert (
        'admission webhook "ipaddresspoolvalidationwebhook.metallb.io" denied the request'
        in result.stderr
    ), result.stderr
    assert "overlaps with 10.250.0.200-10.250.0.210" in result.stderr
    # The webhook's Service leads to the controller Pod and nothing else.
    controller_ip = next(
        p["status"]["podIP"] for p in release.pods() if "controller" in p["metadata"]["name"]
    )
    slices = objects.get(lab, "endpointslices", "-n", NS)["items"]
    webhook = [s for s in slices if "webhook" in s["metadata"]["name"]]
    assert webhook, [s["metadata"]["name"] for s in slices]
    addresses = {a for s in webhook for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert addresses == {controller_ip}


def _neighbour_mac(lab: network_lab.Lab, vip: str) -> str | None:
    out = lab.exec("tor", "ip", "-j", "neigh", "show", vip).stdout
    entries = json.loads(out or "[]")
    macs = [e.get("lladdr") for e in entries if e.get("lladdr")]
    return str(macs[0]).lower() if macs else None


def _owner(lab: network_lab.Lab) -> str | None:
    nodes = objects.status_nodes(lab, "servicel2statuses", "chart-app")
    return next(iter(nodes)) if nodes and len(nodes) == 1 else None


def test_an_l2_vip_answered_by_a_speaker_pod_reaches_a_pod_through_kube_proxy(
    release: Release, lab: network_lab.Lab
) -> None:
    objects.apply(lab, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "chart-app"}})
    objects.create_service(lab, "chart-app", APP, local=True)
    objects.set_backends(lab, "chart-app", APP, [1, 2])
    release.vip = vip = objects.ingress(lab, "chart-app", APP, 1)[0]
    # Each node announces a Local Service only once its own kube-proxy confirmed the endpoint:
    # the first node to confirm may own it for a moment before the elected one takes over.
    elected = election.owner(vip, lab.node_names[:2])
    owner = objects.wait_until(
        f"{elected} to own the VIP", lambda: _owner(lab) if _owner(lab) == elected else None
    )
    answer = objects.wait_until("an answer", lambda: objects.request(lab, vip), timeout=30)
    pod, node, client = answer.split()
    # Local policy: the owner's own endpoint answers, and it saw the client's address.
    assert (pod, node, client) == (objects.pod_name(APP, int(owner[4:])), owner, "10.251.0.2")
    assert _neighbour_mac(lab, vip) == lab.node_mac(int(owner[4:]))


def test_ironlb_status_explain_asks_every_speaker_pod_without_being_told_where(
    release: Release, lab: network_lab.Lab
) -> None:
    """`ironlb status --explain` with nothing but a kubeconfig: the speakers are the chart's
    Pods, asked through the apiserver's Pod proxy, and every node's verdict is its speaker's."""
    owner = objects.wait_until("a speaker to own the VIP", lambda: _owner(lab))
    result = subprocess.run(
        [sys.executable, "-m", "ironlb_cli", "status", f"--kubeconfig={lab.kubeconfig}",
         "--namespace", NS, "--explain", f"chart-app/{APP}", "-o", "json"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    nodes = {n["name"]: n for n in view["nodes"]}
    assert set(nodes) == set(lab.node_names), view
    for name, node in nodes.items():
        assert (node["speaker"], node["source"], node["error"]) == ("answered", "speaker", None), (
            name,
            node,
        )
        assert node["url"].startswith(f"pod {NS}/"), node["url"]
        layer2 = [v for v in node["verdicts"] if v["protocol"] == "layer2"]
        assert [v["announcing"] for v in layer2] == [name == owner], (name, layer2)
    assert view["problems"] == []


def test_deleting_the_owners_speaker_pod_moves_the_vip(
    release: Release, lab: network_lab.Lab
) -> None:
    vip = release.vip
    owner = objects.wait_until("a speaker to own the VIP", lambda: _owner(lab))
    other = next(n for n in lab.node_names if n != owner)
    pod = release.speakers()[owner]["metadata"]["name"]
    started = time.monotonic()
    lab.kubectl("delete", "pod", pod, "-n", NS, "--wait=false")
    other_mac = lab.node_mac(int(other[4:]))
    objects.wait_equal(
        f"the ToR's neighbour entry for {vip} to move to {other}",
        lambda: _neighbour_mac(lab, vip),
        other_mac,
    )
    moved = time.monotonic() - started
    answer = objects.wait_until(
        f"an answer from {other}",
        lambda: (a := objects.request(lab, vip)) and a.split()[1] == other and a,
        timeout=30,
    )
    served = time.monotonic() - started
    print(f"VIP moved to {other} {moved:.2f} s after the delete; served by it after {served:.2f} s")
    assert answer.split()[2] == "10.251.0.2"
    # The DaemonSet puts a new speaker on the node; wait for it before the next test.
    objects.wait_until(
        "the replaced speaker Pod Ready",
        lambda: (
            set(s := release.speakers()) == set(lab.node_names)
            and pod not in {p["metadata"]["name"] for p in s.values()}
            and _all_ready(list(s.values()))
        ),
        timeout=120,
    )


def test_helm_upgrade_rolls_the_speakers_while_a_client_keeps_connecting(
    release: Release, lab: network_lab.Lab
) -> None:
    """A roll of every speaker Pod costs the client nothing. The client is the lab's load
    generator (its own process, paced, bounded by a duration longer than every wait below), so
    the verdict is about the VIP: a client that stopped early can not pass for a VIP that went
    quiet, and a VIP that went quiet shows up as failed or missing answers after the roll."""
    vip = release.vip
    before = {n: p["metadata"]["uid"] for n, p in release.speakers().items()}
    log = lab.directory / "logs" / "loadgen-upgrade.log"
    with loadgen.LoadGen(
        lab, [(vip, objects.SERVICE_PORT)], duration=UPGRADE_LOAD_MAX_S, rate=UPGRADE_RATE, log=log
    ) as load:
        objects.wait_until("an answer before the upgrade", lambda: objects.request(lab, vip))
        release.helm(
            "upgrade", RELEASE, str(chart_support.CHART), "-n", NS, *release.values(),
            "--set", "speaker.logLevel=debug", "--wait", "--timeout", HELM_TIMEOUT,
        )  # fmt: skip

        def replaced() -> objects.Missing | bool:
            speakers = release.speakers()
            waiting = [
                f"{node}: " + (
                    "no speaker Pod" if node not in speakers
                    else "still the old Pod" if speakers[node]["metadata"]["uid"] == before[node]
                    else "new Pod not Ready"
                )
                for node in lab.node_names
                if node not in speakers
                or speakers[node]["metadata"]["uid"] == before[node]
                or not objects.is_ready(speakers[node])
            ]  # fmt: skip
            return objects.Missing("; ".join(waiting)) if waiting else True

        objects.wait_until("every speaker replaced and Ready", replaced, timeout=120)
        rolled_at = time.monotonic()
        after = objects.wait_until(
            "a new connection's answer after the roll", lambda: objects.request(lab, vip)
        )
        # Keep the load on a little longer, so that its own answers after the roll are counted.
        time.sleep(UPGRADE_AFTER_ROLL_S)
        if load.process is not None and load.process.poll() is not None:
            pytest.fail(f"the load generator ended before the roll did ({load.result()})")
        report = load.stop()
    target = report["targets"][loadgen.target_text(vip, objects.SERVICE_PORT)]
    print(f"helm upgrade: {target['total']} connections during the roll: {json.dumps(target)}")
    daemonset = objects.get(lab, "daemonset", "-n", NS, f"{RELEASE}-speaker")
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=debug" in args
    assert daemonset["status"]["updatedNumberScheduled"] == len(lab.node_names)
    assert target["failed"] == 0, report["first_failures"]
    last_ok = target["last_ok_monotonic"]
    assert last_ok is not None and last_ok > rolled_at, (
        f"no answer of the load after the roll ended (last answer {last_ok}, roll {rolled_at})"
    )
    # Local policy: every backend saw the client's own address, during the roll and after it.
    assert set(target["sources"]) == {"10.251.0.2"}, target["sources"]
    assert after.split()[2] == "10.251.0.2", after


def test_helm_upgrade_of_a_controller_value_rolls_the_controller_under_load(
    release: Release, lab: network_lab.Lab
) -> None:
    """Changing a controller value rolls the controller's Deployment: the new Pod is Ready as a
    standby while the old one still holds the Lease, so `helm upgrade --wait` completes; the
    Service keeps its address and the client notices nothing."""
    vip = release.vip
    before = objects.ingress(lab, "chart-app", APP, 1)
    (old,) = [p["metadata"]["uid"] for p in release.pods() if "controller" in p["metadata"]["name"]]
    log = lab.directory / "logs" / "loadgen-controller-upgrade.log"
    with loadgen.LoadGen(
        lab, [(vip, objects.SERVICE_PORT)], duration=UPGRADE_LOAD_MAX_S, rate=UPGRADE_RATE, log=log
    ) as load:
        release.helm(
            "upgrade", RELEASE, str(chart_support.CHART), "-n", NS, *release.values(),
            "--set", "speaker.logLevel=debug", "--set", "controller.logLevel=debug",
            "--wait", "--timeout", HELM_TIMEOUT,
        )  # fmt: skip

        def one_new_controller() -> objects.Missing | bool:
            controllers = [p for p in release.pods() if "controller" in p["metadata"]["name"]]
            uids = [p["metadata"]["uid"] for p in controllers]
            if len(controllers) != 1 or uids == [old] or not objects.is_ready(controllers[0]):
                states = [(p["metadata"]["name"], objects.is_ready(p)) for p in controllers]
                return objects.Missing(f"controller Pods (name, Ready): {states}")
            return True

        objects.wait_until("one new controller Pod, Ready", one_new_controller, timeout=120)
        # The new controller leads: a Service created now gets an address.
        objects.create_service(lab, "chart-app", "after-roll", local=True)
        objects.ingress(lab, "chart-app", "after-roll", 1)
        report = load.stop()
    target = report["targets"][loadgen.target_text(vip, objects.SERVICE_PORT)]
    print(f"controller upgrade: {json.dumps(target)}")
    assert target["failed"] == 0, report["first_failures"]
    assert objects.ingress(lab, "chart-app", APP, 1) == before
    deployment = objects.get(lab, "deployment", "-n", NS, f"{RELEASE}-controller")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=debug" in args


def test_helm_uninstall_leaves_no_pod_and_keeps_crds_and_pools(
    release: Release, lab: network_lab.Lab
) -> None:
    # The speakers' status objects are owned by their Pods (as MetalLB's are): the garbage
    # collector removes them with the Pods, the VIP's Service still being there.
    speaker_pods = {p["metadata"]["uid"] for p in release.speakers().values()}
    statuses = objects.get(lab, "servicel2statuses", "-n", NS)["items"]
    assert statuses, "no ServiceL2Status for the VIP's Service before the uninstall"
    for item in statuses:
        owners = {ref["uid"] for ref in item["metadata"].get("ownerReferences") or []}
        assert owners & speaker_pods, f"{item['metadata']['name']} is owned by no speaker Pod"
    release.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", HELM_TIMEOUT)
    objects.wait_until("no Pod left in metallb-system", lambda: not release.pods() or None)
    objects.wait_until(
        "the garbage collector to delete the gone speaker Pods' ServiceL2Statuses",
        lambda: not objects.get(lab, "servicel2statuses", "-n", NS)["items"] or None,
        timeout=120,
    )
    crds = lab.kubectl("get", "crd", "-o", "name")
    assert "customresourcedefinition.apiextensions.k8s.io/ipaddresspools.metallb.io" in crds
    pools = objects.get(lab, "ipaddresspools", "-n", NS)["items"]
    assert [p["metadata"]["name"] for p in pools] == [POOL]
