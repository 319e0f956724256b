"""Kubernetes objects in the lab, built and applied one way for tests, benches and the demo.

Backends are real Pods: `set_backends` makes one Pod per named node, bound by kube-scheduler
(through a hostname nodeSelector), run by that node's `hack/podagent`, made Ready by a real
probe, and turned into EndpointSlices by kube-controller-manager. Nothing here writes a slice.

A wait that gives up says what was missing, not just that something was: a check answers "not
yet" with a `Missing` that names it (for backends: each node's Pod, its phase and Ready condition,
the nodes the EndpointSlices have ready endpoints on, and the end of the concerned nodes' pod
agent logs), since a timeout that reads `(last: False)` leaves a flaky run undiagnosable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar

from hack import lab as network_lab
from hack import logtails
from ironlb import model

ECHO_PORT = 8080
HEALTH_PORT = 8081
SERVICE_PORT = 80
STREAM_PORT = 8082  # the echo's long-lived streams (`pod(..., stream=True)`), same on the Service
METALLB_NAMESPACE = "metallb-system"
NODE_ASN = 64512  # the nodes' AS in every lab BGP configuration (the ToR's: network_lab.TOR_ASN)
WAIT_S = 60.0
AGENT_LOG_LINES = 20  # of each concerned node's pod agent log, when backends are not settled
MESSAGE_CHARS = 200  # of a condition's or a container state's message

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Missing:
    """A check's "not yet", saying what is missing in words a person can act on. Always false,
    so a check may return it where it returned False or None."""

    reason: str

    def __bool__(self) -> Literal[False]:
        return False


def wait_until(
    what: str,
    check: Callable[[], T | Missing | None],
    timeout: float = WAIT_S,
    every: float = 0.05,
) -> T:
    """Poll `check()` until it returns something truthy; bounded in time, says what it waited
    for when it gives up, and what was missing if the check's last answer was a `Missing`."""
    deadline = time.monotonic() + timeout
    last: T | Missing | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    if isinstance(last, Missing):
        raise AssertionError(
            f"timed out after {timeout:.0f} s waiting for {what}:\n"
            + textwrap.indent(last.reason, "  ")
        )
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def wait_equal(
    what: str,
    read: Callable[[], Any],
    want: Any,
    timeout: float = WAIT_S,
    every: float = 0.05,
) -> None:
    """Poll until `read()` equals `want`; when it gives up, it says what it read last."""

    def check() -> bool | Missing:
        got = read()
        return True if got == want else Missing(f"wanted {want!r}, last read {got!r}")

    wait_until(what, check, timeout, every)


def apply(lab: network_lab.Lab, *objects: dict[str, Any]) -> None:
    lab.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def get(lab: network_lab.Lab, *args: str) -> Any:
    return json.loads(lab.kubectl("get", *args, "-o", "json"))


# --- namespaces --------------------------------------------------------------------------------


@contextlib.contextmanager
def namespace(lab: network_lab.Lab, name: str) -> Iterator[str]:
    """A namespace for the block; deleted afterwards, with everything in it, by
    kube-controller-manager's namespace controller (Pods are confirmed gone by their agents)."""
    apply(lab, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        lab.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


# --- MetalLB's configuration -------------------------------------------------------------------


def metallb(
    kind: str,
    name: str,
    spec: dict[str, Any],
    version: str = "v1beta1",
    *,
    namespace: str = METALLB_NAMESPACE,
) -> dict[str, Any]:
    """A metallb.io object, in metallb-system unless told (BGPPeer is v1beta2)."""
    return {
        "apiVersion": f"metallb.io/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def tor_peer(
    name: str = "tor",
    *,
    my_asn: int = NODE_ASN,
    peer_asn: int = network_lab.TOR_ASN,
    peer_address: str | ipaddress.IPv4Address | ipaddress.IPv6Address = network_lab.TOR_LAN_V4,
    hold_time: str | None = None,
    namespace: str = METALLB_NAMESPACE,
    **spec: Any,
) -> dict[str, Any]:
    """A v1beta2 BGPPeer pointing the nodes at the lab's ToR (its IPv4 address unless told):
    myASN, peerASN, peerAddress, holdTime when given (MetalLB's default otherwise), then any
    other field of `spec` by its MetalLB name (enableGracefulRestart, bfdProfile, ebgpMultiHop,
    nodeSelectors, ...), which may also replace the ones before it."""
    body: dict[str, Any] = {
        "myASN": my_asn,
        "peerASN": peer_asn,
        "peerAddress": str(peer_address),
        **({} if hold_time is None else {"holdTime": hold_time}),
        **spec,
    }
    return metallb("BGPPeer", name, body, version="v1beta2", namespace=namespace)


def clear_configuration(lab: network_lab.Lab) -> None:
    """Delete every metallb.io configuration object (the status kinds are outputs: they stay).
    Modules that share a lab start from this, since overlapping pools make a config invalid."""
    plurals = ",".join(model.RESOURCES[kind][0] for kind in model.CONFIG_KINDS)
    lab.kubectl("delete", plurals, "--all", "-n", METALLB_NAMESPACE)


# --- Services ----------------------------------------------------------------------------------


def service(
    namespace: str,
    name: str,
    *,
    local: bool = False,
    dual: bool = False,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    stream: bool = False,
) -> dict[str, Any]:
    """A LoadBalancer Service selecting the Pods of app `name` (port 80 -> the echo's 8080;
    with `stream`, also STREAM_PORT -> the echo's streams)."""
    ports: list[dict[str, Any]] = [
        {"port": SERVICE_PORT, "protocol": "TCP", "targetPort": ECHO_PORT}
    ]
    if stream:
        ports[0]["name"] = "echo"
        ports.append(
            {"name": "stream", "port": STREAM_PORT, "protocol": "TCP", "targetPort": STREAM_PORT}
        )
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": {"app": name},
        "ports": ports,
        "externalTrafficPolicy": "Local" if local else "Cluster",
    }
    if dual:
        spec["ipFamilyPolicy"] = "RequireDualStack"
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def create_service(lab: network_lab.Lab, namespace: str, name: str, **options: Any) -> None:
    apply(lab, service(namespace, name, **options))


def ingress(lab: network_lab.Lab, namespace: str, name: str, count: int) -> list[str]:
    """The Service's addresses once it has `count` of them (bounded wait)."""

    def read() -> list[str] | Missing:
        svc = get(lab, "service", name, "-n", namespace)
        entries = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        ips = [e["ip"] for e in entries]
        return ips if len(ips) == count else Missing(f"status.loadBalancer.ingress has {ips}")

    return wait_until(f"{namespace}/{name} to get {count} address(es)", read)


def status_nodes(lab: network_lab.Lab, plural: str, namespace: str) -> set[str] | None:
    """Nodes named by the speakers' status objects for a namespace's Services; None while one
    has been created but its status not written yet (two requests: object, then status)."""
    listed = get(lab, plural, "-n", METALLB_NAMESPACE)
    mine = [
        s
        for s in listed["items"]
        if (s["metadata"].get("labels") or {}).get("metallb.io/service-namespace") == namespace
    ]
    if any(not s.get("status") for s in mine):
        return None
    return {s["status"]["node"] for s in mine}


# --- Pods --------------------------------------------------------------------------------------


def pod_name(app: str, node: int) -> str:
    return f"{app}-{network_lab.node_name(node)}"


def pod(
    namespace: str,
    app: str,
    node: int,
    *,
    drain_s: float = 0.0,
    grace_s: int = 30,
    stream: bool = False,
) -> dict[str, Any]:
    """One echo Pod of `app` for node `node`, placed there by the scheduler. It keeps serving
    `drain_s` seconds after SIGTERM (the window of a terminating-but-serving endpoint); with
    `stream` it also serves long-lived streams on STREAM_PORT."""
    args = [f"--port={ECHO_PORT}", f"--health-port={HEALTH_PORT}", f"--drain={drain_s}"]
    ports = [{"containerPort": ECHO_PORT, "protocol": "TCP"}]
    if stream:
        args.append(f"--stream-port={STREAM_PORT}")
        ports.append({"containerPort": STREAM_PORT, "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(app, node),
            "namespace": namespace,
            "labels": {"app": app},
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": network_lab.node_name(node)},
            "terminationGracePeriodSeconds": grace_s,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": "echo",
                    # hack/podagent runs hack.echo with the args; a kubelet node runs the image
                    # hack/images.py builds, which names itself from the downward API.
                    "image": "ironlb.local/echo:latest",
                    "imagePullPolicy": "IfNotPresent",
                    "env": [
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                    ],
                    "args": args,
                    "ports": ports,
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": HEALTH_PORT},
                        "periodSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 1,
                    },
                }
            ],
        },
    }


def _pods(lab: network_lab.Lab, namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(lab, "pods", "-n", namespace, "-l", f"app={app}")["items"]
    return items


def is_ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _create(lab: network_lab.Lab, objects: Sequence[dict[str, Any]]) -> None:
    # A namespace's `default` ServiceAccount, which Pod admission requires, comes from
    # kube-controller-manager a moment after the namespace: retry for that, nothing else.
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            apply(lab, *objects)
            return
        except network_lab.LabError as e:
            if "serviceaccount" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def set_backends(
    lab: network_lab.Lab,
    namespace: str,
    app: str,
    nodes: Sequence[int],
    *,
    drain_s: float = 0.0,
    grace_s: int = 0,
    wait: bool = True,
    stream: bool = False,
) -> None:
    """One ready Pod of `app` on each of `nodes`, and none elsewhere.

    Pods on other nodes are deleted with `grace_s` (0: at once). With `wait`, returns once the
    Pods are Ready, the others gone, and the Service's EndpointSlices say the same (when the
    Service exists), so a caller observes ironlb reacting to a settled state."""
    wanted = {pod_name(app, n) for n in nodes}
    existing = {p["metadata"]["name"] for p in _pods(lab, namespace, app)}
    extra = sorted(existing - wanted)
    if extra:
        lab.kubectl(
            "delete", "pod", *extra, "-n", namespace, f"--grace-period={grace_s}", "--wait=false",
            *(["--force"] if grace_s == 0 else []),
        )  # fmt: skip
    missing = [n for n in nodes if pod_name(app, n) not in existing]
    if missing:
        _create(lab, [pod(namespace, app, n, drain_s=drain_s, stream=stream) for n in missing])
    if wait:
        wait_backends(lab, namespace, app, nodes)


def wait_backends(lab: network_lab.Lab, namespace: str, app: str, nodes: Sequence[int]) -> None:
    """Until `app` has a Ready Pod on each of `nodes` and none elsewhere, and the Service's
    EndpointSlices (when the Service exists) have ready endpoints on exactly those nodes."""

    def settled() -> bool | Missing:
        # The three kinds in one kubectl process (it took up to three a poll).
        listed = get(lab, "pods,services,endpointslices", "-n", namespace)["items"]
        gap = unsettled(app, nodes, listed)
        if gap is None:
            return True
        tails = [_agent_log_tail(lab, node) for node in gap.nodes]
        return Missing("\n".join([*gap.lines, *filter(None, tails)]))

    wanted = [network_lab.node_name(n) for n in nodes]
    wait_until(f"{namespace}/{app} backends ready on {sorted(wanted)}", settled)


@dataclasses.dataclass(frozen=True)
class Unsettled:
    """What keeps an app's backends from being settled: a line per node and one for the
    EndpointSlices, and the nodes whose Pod is missing, not Ready or not wanted there (their
    pod agents' logs may say why)."""

    lines: tuple[str, ...]
    nodes: tuple[str, ...]


def unsettled(app: str, nodes: Sequence[int], listed: Sequence[dict[str, Any]]) -> Unsettled | None:
    """Whether `app`'s backends are settled on `nodes`, from a namespace's Pods, Services and
    EndpointSlices: None if so, else what is missing."""
    wanted = {network_lab.node_name(n): pod_name(app, n) for n in nodes}
    pods = {
        p["metadata"]["name"]: p
        for p in listed
        if p.get("kind") == "Pod" and (p["metadata"].get("labels") or {}).get("app") == app
    }
    lines: list[str] = []
    concerned: list[str] = []
    for node, name in wanted.items():
        pod = pods.get(name)
        if pod is None:
            lines.append(f"{node}: no Pod {name}")
        else:
            lines.append(f"{node}: Pod {name} {pod_state(pod)}")
        if pod is None or not is_ready(pod):
            concerned.append(node)
    for name in sorted(set(pods) - set(wanted.values())):
        bound_to = str((pods[name].get("spec") or {}).get("nodeName") or "")
        lines.append(f"{bound_to or 'no node'}: Pod {name} {pod_state(pods[name])}, not wanted")
        if bound_to and bound_to not in concerned:
            concerned.append(bound_to)
    pods_settled = set(pods) == set(wanted.values()) and all(map(is_ready, pods.values()))
    slices_settled = True
    if any(o.get("kind") == "Service" and o["metadata"]["name"] == app for o in listed):
        slices = [
            s
            for s in listed
            if s.get("kind") == "EndpointSlice"
            and (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name") == app
        ]
        ready = ready_nodes(slices)
        slices_settled = ready == set(wanted)
        if slices:
            lines.append(_slices_line(ready, set(wanted), pods_settled))
        else:
            lines.append(f"EndpointSlices: none yet for Service {app} (kube-controller-manager)")
    else:
        lines.append(f"EndpointSlices: not checked, no Service {app}")
    if pods_settled and slices_settled:
        return None
    return Unsettled(tuple(lines), tuple(concerned))


def ready_nodes(slices: Iterable[dict[str, Any]]) -> set[str]:
    """The nodes of the ready endpoints in EndpointSlices ("" for an endpoint without one)."""
    return {
        e.get("nodeName", "")
        for s in slices
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready")
    }


def _slices_line(ready: set[str], wanted: set[str], pods_settled: bool) -> str:
    line = f"EndpointSlices: ready endpoints on {_names(ready)}, wanted on {_names(wanted)}"
    if ready == wanted:
        return line
    if wanted - ready:
        line += f"; none ready on {_names(wanted - ready)}"
    if ready - wanted:
        line += f"; ready on unwanted {_names(ready - wanted)}"
    if pods_settled:
        line += " (the Pods are settled: kube-controller-manager has not caught up)"
    return line


def _names(nodes: set[str]) -> str:
    return ", ".join(sorted(n or "(no nodeName)" for n in nodes)) or "no node"


def pod_state(pod: dict[str, Any]) -> str:
    """A Pod's phase, Ready condition and what else is wrong with it, in a few words."""
    status = pod.get("status") or {}
    words = [status.get("phase") or "without a phase"]
    if pod["metadata"].get("deletionTimestamp"):
        words.append("terminating")
    if not (pod.get("spec") or {}).get("nodeName"):
        words.append("not bound to a node")
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    ready = conditions.pop("Ready", None)
    # Nothing but the node writes a Pod's Ready condition (here: its pod agent).
    words.append(_condition(ready) if ready else "no Ready condition (no status from its node)")
    words += [_condition(c) for c in conditions.values() if c.get("status") != "True"]
    for container in status.get("containerStatuses") or []:
        restarts = container.get("restartCount") or 0
        if restarts:
            words.append(f"container {container.get('name')} restarted {restarts} times")
        for state, detail in (container.get("state") or {}).items():
            if state != "running" and detail:
                words.append(f"container {container.get('name')} {state}{_why(detail)}")
    return ", ".join(words)


def _condition(condition: dict[str, Any]) -> str:
    return f"{condition['type']}={condition.get('status')}{_why(condition)}"


def _why(detail: dict[str, Any]) -> str:
    """` (reason: message)` from a condition or a container state, if it gives either."""
    reason, message = detail.get("reason"), str(detail.get("message") or "")[:MESSAGE_CHARS]
    if reason and message:
        return f" ({reason}: {message})"
    return f" ({reason or message})" if reason or message else ""


def _agent_log_tail(lab: network_lab.Lab, node: str) -> str:
    """The end of a node's pod agent log; "" for a node without one (a kubelet node)."""
    path = lab.pod_agent_log(node)
    if not path.exists():
        return ""
    text = logtails.tail(path, AGENT_LOG_LINES)
    return f"pod agent log of {node} ({path}), last lines:\n" + textwrap.indent(text, "  ")


def _slices(lab: network_lab.Lab, namespace: str, service_name: str) -> list[dict[str, Any]]:
    listed = get(
        lab, "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service_name}"
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


def endpoints(lab: network_lab.Lab, namespace: str, service_name: str) -> list[dict[str, Any]]:
    """Every endpoint of the Service's EndpointSlices (both families)."""
    return [e for s in _slices(lab, namespace, service_name) for e in s.get("endpoints") or []]


def ready_endpoint_nodes(lab: network_lab.Lab, namespace: str, service_name: str) -> set[str]:
    return ready_nodes(_slices(lab, namespace, service_name))


def pod_processes(lab: network_lab.Lab, namespace: str, name: str) -> list[int]:
    """The pids running in a Pod's sandbox (its network namespace, named after its uid)."""
    uid = get(lab, "pod", name, "-n", namespace)["metadata"]["uid"]
    result = subprocess.run(
        ["ip", "netns", "pids", f"ilb-pod-{uid[:8]}"], capture_output=True, text=True
    )
    return [int(p) for p in result.stdout.split()]


def set_ready(lab: network_lab.Lab, namespace: str, name: str, ready: bool) -> None:
    """Make a Pod's process pass or fail its readiness probe (the probe itself is real)."""
    pids = pod_processes(lab, namespace, name)
    if not pids:
        raise AssertionError(f"pod {namespace}/{name} has no running process")
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR2 if ready else signal.SIGUSR1)


# --- the client's side ---------------------------------------------------------------------------


def requests(
    lab: network_lab.Lab,
    targets: Sequence[tuple[str, int]],
    *,
    timeout: float = 2.0,
    ns: str = network_lab.NS_CLIENT,
) -> list[str | None]:
    """One new connection to each (address, port) from the client namespace; each answer's line
    (`<pod> <node> <source address seen>`) or None."""
    argv = [arg for address, port in targets for arg in (address, str(port))]
    result = lab.exec(
        ns,
        sys.executable,
        "-m",
        "hack.client",
        f"--timeout={timeout}",
        *argv,
        env={"PYTHONPATH": str(network_lab.ROOT)},
        check=True,
        timeout=30 + timeout * len(targets),
    )
    answers: list[str | None] = json.loads(result.stdout)
    return answers


def request(lab: network_lab.Lab, address: str, port: int = SERVICE_PORT) -> str | None:
    return requests(lab, [(address, port)])[0]
