"""The lab's kubelet stand-in: runs the Pods bound to one node and reports their status.

    python -m hack.podagent --node node1 --kubeconfig K --state DIR \\
        --pod-cidr 10.244.1.0/24 --pod-cidr fd00:244:1::/64

It runs inside the node's network namespace, as a kubelet runs on its host. For each Pod the
scheduler bound to the node it makes what a container runtime and a CNI bridge plugin would: a
network namespace of its own (`ilb-pod-<uid>`), a veth whose node end joins the node's `cbr0`
bridge, an address of each family from the node's podCIDRs, and one process, `python -m
hack.echo` with the container's `args`. Then it does a kubelet's share of the API:

- status: `Running`, podIP(s), hostIP(s), and the Ready condition from a real probe of the
  process (the container's `readinessProbe.httpGet`, at its `periodSeconds`, with its thresholds),
  so kube-controller-manager turns readiness into EndpointSlice conditions as in a cluster;
- deletion: on a deletionTimestamp the process gets SIGTERM, is probed on while it drains
  (terminating endpoints stay `serving` while it answers), is killed when the grace period ends,
  and the Pod object is then removed with grace 0, as a kubelet confirms a deletion;
- a process that exits on its own is started again (restartPolicy Always), its restartCount kept.

Level-triggered: every tick lists the node's Pods and reconciles the whole set, so a missed
change costs at most one tick. A failure is contained where it happens: a Pod whose sandbox cannot
be made has it removed again (the next attempt starts clean), one Pod's error is logged and holds
back only that Pod (with a bounded backoff), and a failed tick is logged and retried. The agent
itself never stops on an error: a node whose agent died would keep its Pods unready with nothing
in any log saying why. Only what a lab test needs: one container per Pod, no volumes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import traceback
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BRIDGE = "cbr0"
POD_INDEX_FIRST, POD_INDEX_LAST = 2, 249  # host addresses given to Pods in the node's podCIDR
TICK_S = 0.1
PROBE_TIMEOUT_S = 1.0
KILL_WAIT_S = 5.0
BACKOFF_MAX_S = 2.0  # after errors in a row, whether of a whole tick or of one Pod
API_TIMEOUT_S = 10.0
# Pods naming this scheduler are bound by whoever made them, who also runs their processes
# (hack/metallb's stand-ins for MetalLB's speaker Pods): the agent leaves them alone.
RUN_BY_THEIR_MAKER = "ironlb-lab-nobody"


def log(message: str, level: str = "info", **fields: Any) -> None:
    entry = {"ts": time.time(), "level": level, "logger": "podagent", "msg": message, **fields}
    print(json.dumps(entry), flush=True)


def describe(error: BaseException) -> dict[str, str]:
    """Log fields for an error, with what a person needs to act on it."""
    if isinstance(error, subprocess.CalledProcessError):
        stderr = error.stderr.decode() if isinstance(error.stderr, bytes) else error.stderr
        command = " ".join(map(str, error.cmd))
        return {"error": f"{command} exited {error.returncode}: {(stderr or '').strip()[:300]}"}
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, ApiError | OSError | http.client.HTTPException | ValueError):
        return {"error": text}
    # Anything else is a bug in the agent, and where it happened is half of the story.
    return {"error": text, "traceback": "".join(traceback.format_exception(error))}


# --- the API ------------------------------------------------------------------------------------


class ApiError(Exception):
    """The apiserver answered with an error status."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status


class Api:
    """Just enough of a Kubernetes client: the kubeconfig's client certificate over HTTPS, on one
    kept-alive connection, since a TLS handshake per call (some ten calls a second per node)
    costs both ends CPU that a busy lab machine is short of."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        server = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = server.hostname or "", server.port or 443
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.context.load_cert_chain(user["client-certificate"], user["client-key"])
        self._connection: http.client.HTTPSConnection | None = None

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        status, payload = self._exchange(method, path, data, headers)
        if status >= 400:
            raise ApiError(status, method, path, _status_message(payload))
        return json.loads(payload)

    def _exchange(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        reused = self._connection is not None
        if self._connection is None:
            self._connection = http.client.HTTPSConnection(
                self.host, self.port, timeout=API_TIMEOUT_S, context=self.context
            )
        try:
            self._connection.request(method, path, body=data, headers=headers)
            response = self._connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as e:
            self._connection.close()
            self._connection = None
            if not reused or isinstance(e, TimeoutError):
                raise
        # The server may close a kept-alive connection whenever it likes (idle, restarted):
        # once more on a new one. Every call the agent makes can be repeated (a GET, a merge
        # patch, a DELETE with a uid precondition).
        return self._exchange(method, path, data, headers)


def _status_message(payload: bytes) -> str:
    """The message of a Kubernetes Status body, or the start of whatever came instead."""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return str(json.loads(payload)["message"])
    return payload[:200].decode(errors="replace")


# --- one Pod ------------------------------------------------------------------------------------


@dataclass
class Probe:
    port: int
    path: str
    period_s: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, container: dict[str, Any]) -> Probe | None:
        spec = container.get("readinessProbe") or {}
        http_get = spec.get("httpGet")
        if not http_get:
            return None
        return cls(
            port=int(http_get["port"]),
            path=str(http_get.get("path") or "/"),
            period_s=float(spec.get("periodSeconds") or 10),
            success_threshold=int(spec.get("successThreshold") or 1),
            failure_threshold=int(spec.get("failureThreshold") or 3),
        )


@dataclass
class Running:
    """A Pod this agent started."""

    uid: str
    namespace: str
    name: str
    netns: str
    veth: str
    addresses: list[str]
    args: list[str]
    probe: Probe | None
    process: subprocess.Popen[bytes]
    started: str
    restarts: int = 0
    ready: bool = False
    streak: int = 0
    next_probe: float = 0.0
    terminating_until: float | None = None
    written: dict[str, Any] = field(default_factory=dict)


@dataclass
class Failing:
    """A Pod whose last turn failed: left alone until `retry_at`, `delay_s` after the failure."""

    delay_s: float
    retry_at: float


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def pod_status(pod: Running, host_ips: list[str]) -> dict[str, Any]:
    """The status a kubelet would write for a running single-container Pod."""
    ready = "True" if pod.ready else "False"
    conditions = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "ContainersReady", "status": ready},
        {"type": "Ready", "status": ready},
    ]
    return {
        "phase": "Running",
        "hostIP": host_ips[0],
        "hostIPs": [{"ip": ip} for ip in host_ips],
        "podIP": pod.addresses[0],
        "podIPs": [{"ip": ip} for ip in pod.addresses],
        "startTime": pod.started,
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": "echo",
                "image": "ironlb.local/echo",
                "imageID": "",
                "ready": pod.ready,
                "started": True,
                "restartCount": pod.restarts,
                "state": {"running": {"startedAt": pod.started}},
            }
        ],
    }


class Agent:
    def __init__(
        self, node: str, api: Api, state: Path, pod_cidrs: list[str], host_ips: list[str]
    ) -> None:
        self.node = node
        self.api = api
        self.state = state
        self.networks = [ipaddress.ip_network(c) for c in pod_cidrs]
        self.host_ips = host_ips
        self.pods: dict[str, Running] = {}
        self.failing: dict[str, Failing] = {}  # by Pod uid
        self._last_index = POD_INDEX_LAST  # the first address given is POD_INDEX_FIRST
        self.stopping = False

    # addresses ----------------------------------------------------------------------------------

    def _free_index(self) -> int:
        """The next free address after the last one given, round robin, as CNI's host-local
        IPAM does: an address just released is not given again at once. Reused at once, it
        would reach the node's neighbour cache, which still maps it to the old Pod's MAC, and
        the new Pod would be unreachable until that entry fails (seen with IPv6: "address
        unreachable" answers to clients for seconds after another test's Pods went)."""
        used = {
            int(ipaddress.ip_address(p.addresses[0])) - int(self.networks[0].network_address)
            for p in self.pods.values()
        }
        span = POD_INDEX_LAST - POD_INDEX_FIRST + 1
        for step in range(1, span + 1):
            index = POD_INDEX_FIRST + (self._last_index - POD_INDEX_FIRST + step) % span
            if index not in used:
                self._last_index = index
                return index
        raise RuntimeError("no free pod address on this node")

    # start and stop -----------------------------------------------------------------------------

    def start(self, pod: dict[str, Any]) -> None:
        """Make the Pod's sandbox and start its process. Retry-safe: on any failure what was
        made is removed again, since a half-made sandbox would fail every later attempt at
        `ip netns add` ("File exists")."""
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        container = spec["containers"][0]
        args = [str(a) for a in container.get("args") or []]
        index = self._free_index()
        addresses = [str(net.network_address + index) for net in self.networks]
        netns, veth = f"ilb-pod-{uid[:8]}", f"vp{uid[:8]}"
        try:
            self._make_sandbox(netns, veth, addresses)
            running = Running(
                uid=uid,
                namespace=meta["namespace"],
                name=meta["name"],
                netns=netns,
                veth=veth,
                addresses=addresses,
                args=args,
                probe=Probe.of(container),
                process=self._spawn(netns, meta["name"], args),
                started=_now(),
            )
        except BaseException:
            remove_sandbox(netns, veth)
            raise
        # Without a probe a started container is ready at once, as with a kubelet.
        running.ready = running.probe is None
        self.pods[uid] = running
        log("pod started", pod=f"{running.namespace}/{running.name}", addresses=addresses)

    def _make_sandbox(self, netns: str, veth: str, addresses: list[str]) -> None:
        gateways = [str(net.network_address + 1) for net in self.networks]
        _ip(["netns", "add", netns])
        _ip(["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
        _ip(["link", "set", veth, "master", BRIDGE, "up"])
        for address in addresses:
            # An entry left by an earlier Pod with this address (after the round robin wrapped):
            # its MAC is gone; forget it rather than wait for it to fail.
            _ip(["neigh", "flush", "to", address, "dev", BRIDGE], check=False)
        batch = ["link set lo up", "link set eth0 up"]
        for address, net, gateway in zip(addresses, self.networks, gateways, strict=True):
            nodad = " nodad" if net.version == 6 else ""
            batch += [f"addr add {address}/{net.prefixlen} dev eth0{nodad}"]
            batch += [f"route add default via {gateway}"]
        _ip(["-n", netns, "-batch", "-"], input="\n".join(batch) + "\n")

    def _spawn(self, netns: str, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.state / f"{netns}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                [
                    "ip", "netns", "exec", netns,
                    sys.executable, "-m", "hack.echo", "--pod", name, "--node", self.node, *args,
                ],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
        finally:
            out.close()

    def remove(self, pod: Running) -> None:
        if pod.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.process.wait(KILL_WAIT_S)
        remove_sandbox(pod.netns, pod.veth)
        self.pods.pop(pod.uid, None)
        log("pod removed", pod=f"{pod.namespace}/{pod.name}")

    # the API side -------------------------------------------------------------------------------

    def _path(self, pod: Running) -> str:
        return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"

    def write_status(self, pod: Running) -> None:
        status = pod_status(pod, self.host_ips)
        if status == pod.written:
            return
        self.api.request(
            "PATCH",
            self._path(pod) + "/status",
            {"status": status},
            "application/merge-patch+json",
        )
        pod.written = status

    def confirm_deletion(self, namespace: str, name: str, uid: str) -> None:
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            self.api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    # probing ------------------------------------------------------------------------------------

    def probe(self, pod: Running, now: float) -> None:
        if pod.probe is None or now < pod.next_probe or pod.process.poll() is not None:
            return
        pod.next_probe = now + pod.probe.period_s
        ok = _http_ok(pod.addresses[0], pod.probe.port, pod.probe.path)
        if ok == pod.ready:
            pod.streak = 0
            return
        pod.streak += 1
        needed = pod.probe.success_threshold if ok else pod.probe.failure_threshold
        if pod.streak >= needed:
            pod.ready, pod.streak = ok, 0

    # the loop -----------------------------------------------------------------------------------

    def tick(self) -> None:
        now = time.monotonic()
        listed = self.api.request(
            "GET",
            "/api/v1/pods?fieldSelector="
            + urllib.parse.quote(f"spec.nodeName={self.node}", safe=""),
        )
        seen: set[str] = set()
        for item in listed["items"]:
            if (item.get("spec") or {}).get("schedulerName") == RUN_BY_THEIR_MAKER:
                continue
            meta = item["metadata"]
            seen.add(meta["uid"])
            self.contained(
                meta["uid"],
                f"{meta.get('namespace')}/{meta.get('name')}",
                now,
                functools.partial(self.reconcile, item, now),
            )
        for uid in [u for u in self.pods if u not in seen]:
            # Force-deleted (or gone with its namespace): nothing to confirm any more.
            pod = self.pods[uid]
            self.contained(
                uid, f"{pod.namespace}/{pod.name}", now, functools.partial(self.remove, pod)
            )
        for uid in [u for u in self.failing if u not in seen and u not in self.pods]:
            del self.failing[uid]

    def contained(self, uid: str, pod: str, now: float, turn: Callable[[], None]) -> None:
        """Run one Pod's turn of a tick. An error is logged and holds back only that Pod, for
        a delay that doubles with each failure in a row (bounded): a status PATCH for a Pod
        deleted since the LIST must not keep the node's other Pods from being probed."""
        failing = self.failing.get(uid)
        if failing is not None and now < failing.retry_at:
            return
        try:
            turn()
        except Exception as e:
            delay = min((TICK_S if failing is None else failing.delay_s) * 2, BACKOFF_MAX_S)
            self.failing[uid] = Failing(delay, now + delay)
            log("pod failed, retrying", level="error", pod=pod, retry_s=delay, **describe(e))
        else:
            self.failing.pop(uid, None)

    def reconcile(self, item: dict[str, Any], now: float) -> None:
        """One listed Pod's turn: start it, stop it, restart its process, probe it, report."""
        meta = item["metadata"]
        uid = meta["uid"]
        phase = (item.get("status") or {}).get("phase")
        deleting = meta.get("deletionTimestamp") is not None
        pod = self.pods.get(uid)
        if pod is None:
            if deleting:
                self.confirm_deletion(meta["namespace"], meta["name"], uid)
            elif phase not in ("Succeeded", "Failed"):
                self.start(item)
            return
        if deleting and pod.terminating_until is None:
            grace = meta.get("deletionGracePeriodSeconds")
            pod.terminating_until = now + float(30 if grace is None else grace)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.process.pid, signal.SIGTERM)
            log("pod terminating", pod=f"{pod.namespace}/{pod.name}", grace_s=grace)
        if pod.terminating_until is not None:
            if pod.process.poll() is not None or now >= pod.terminating_until:
                self.remove(pod)
                self.confirm_deletion(pod.namespace, pod.name, pod.uid)
                return
        elif pod.process.poll() is not None:
            # restartPolicy Always: the container comes back in the same sandbox.
            pod.process = self._spawn(pod.netns, pod.name, pod.args)
            pod.restarts += 1
            pod.ready = pod.probe is None
            log("pod restarted", pod=f"{pod.namespace}/{pod.name}", restarts=pod.restarts)
        self.probe(pod, now)
        self.write_status(pod)

    def run(self) -> None:
        backoff = TICK_S
        while not self.stopping:
            try:
                self.tick()
                backoff = TICK_S
            except Exception as e:
                # Whatever it is, the agent goes on: one that died would leave its node's Pods
                # as they were, unready, and nothing would say why.
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                log("tick failed, retrying", level="error", retry_s=backoff, **describe(e))
            time.sleep(backoff)


def _ip(argv: list[str], *, input: str | None = None, check: bool = True) -> str:
    """`ip` with `argv`; its output. With `check`, a failure raises CalledProcessError."""
    result = subprocess.run(["ip", *argv], input=input, check=check, capture_output=True, text=True)
    return result.stdout


def remove_sandbox(netns: str, veth: str) -> None:
    """Remove a Pod's network namespace, its veth and any process left in it. What is missing
    is skipped, so this also clears a sandbox made halfway, or one left by an agent that died."""
    for pid in _ip(["netns", "pids", netns], check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip(["netns", "del", netns], check=False)
    _ip(["link", "del", veth], check=False)


def _http_ok(address: str, port: int, path: str) -> bool:
    conn = http.client.HTTPConnection(address, port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", path)
        return 200 <= conn.getresponse().status < 400
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.podagent", description=__doc__)
    parser.add_argument("--node", required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--state", type=Path, required=True, help="directory for Pod logs")
    parser.add_argument("--pod-cidr", action="append", required=True, help="one per family")
    parser.add_argument("--host-ip", action="append", required=True, help="the node's addresses")
    args = parser.parse_args(argv)
    args.state.mkdir(parents=True, exist_ok=True)
    agent = Agent(args.node, Api(args.kubeconfig), args.state, args.pod_cidr, args.host_ip)

    def stop(signum: int, frame: FrameType | None) -> None:
        agent.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log("running pods", node=args.node, pod_cidrs=args.pod_cidr)
    agent.run()
    # Like a kubelet that stops, the Pods keep running; the lab's `down` removes them.
    return 0


if __name__ == "__main__":
    sys.exit(main())
