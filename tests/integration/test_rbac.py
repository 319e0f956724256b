"""The chart's RBAC is enough and no more: both components run as its ServiceAccounts.

The chart is installed into a control plane of this module's own; then each component runs as
a process on this machine with a kubeconfig holding a token the apiserver issued for the chart's
ServiceAccount (TokenRequest, as a Pod's projected token is). So the apiserver authenticates it
as `system:serviceaccount:metallb-system:ironlb-<component>` with that account's groups, exactly
as in a Pod, and authorises every request against the chart's roles alone. (A kubeconfig with
`as:` impersonation would need the admin's certificate in the process and a client that sends
impersonation headers; neither the controller's client nor kopf does.)

* the controller allocates an address, writes the annotation, an Event and the pool status,
  holds its Lease, and its webhook lists the configuration and the Secret names;
* the speaker (its agent with an in-memory layer 2 that records what it would answer for: no
  raw sockets on this host) lists and watches everything, writes its ServiceL2Status, an Event,
  and deletes the status when the endpoint goes;
* both write their ConfigurationState (`controller`, `speaker-<node>`);
* neither logs a refused request; every rule the chart grants is in the table of requests
  below and every request in it is granted; what they must not do is refused, both when asked
  (SelfSubjectAccessReview with the account's own token) and when tried.

The metallb.io configuration is written before the chart is installed: afterwards the chart's
webhook is registered, and the apiserver would try to reach it at the Service's cluster IP.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from hack import cluster as local_cluster
from hack import tools
from tests.integration import chart_support as cs
from tests.integration import controller_support as support

pytestmark = pytest.mark.integration

NS = cs.NAMESPACE
APPS = "apps"
NODE = "node-a"
POOL_RANGE = "192.0.2.0/28"  # documentation range; never contacted
SA_PREFIX = f"system:serviceaccount:{NS}:"

# Every request each component makes: (group, resource, subresource, verb, scope, name).
# scope "cluster" is every namespace (or a cluster-scoped kind); "namespace" is NS only.
# The source of each line is listed in charts/ironlb/templates/rbac.yaml.
USED = {
    "controller": {
        ("", "services", "", "list", "cluster", ""),
        ("", "services", "", "watch", "cluster", ""),
        ("", "services", "status", "patch", "cluster", ""),
        ("", "namespaces", "", "list", "cluster", ""),
        ("", "namespaces", "", "watch", "cluster", ""),
        ("", "events", "", "create", "cluster", ""),
        ("", "events", "", "list", "cluster", ""),
        ("metallb.io", "ipaddresspools", "", "list", "cluster", ""),
        ("metallb.io", "ipaddresspools", "", "watch", "cluster", ""),
        *(
            ("metallb.io", kind, "status", "patch", "namespace", "")
            for kind in (
                "ipaddresspools",
                "l2advertisements",
                "bgpadvertisements",
                "bgppeers",
                "bfdprofiles",
                "communities",
            )
        ),
        ("metallb.io", "ipaddresspools", "", "list", "namespace", ""),
        ("metallb.io", "l2advertisements", "", "list", "namespace", ""),
        ("metallb.io", "bgpadvertisements", "", "list", "namespace", ""),
        ("metallb.io", "bgppeers", "", "list", "namespace", ""),
        ("metallb.io", "bfdprofiles", "", "list", "namespace", ""),
        ("metallb.io", "communities", "", "list", "namespace", ""),
        ("", "secrets", "", "list", "namespace", ""),
        ("metallb.io", "configurationstates", "", "create", "namespace", ""),
        ("metallb.io", "configurationstates", "", "get", "namespace", "controller"),
        ("metallb.io", "configurationstates", "status", "patch", "namespace", "controller"),
        ("coordination.k8s.io", "leases", "", "create", "namespace", ""),
        ("coordination.k8s.io", "leases", "", "get", "namespace", "ironlb-controller"),
        ("coordination.k8s.io", "leases", "", "update", "namespace", "ironlb-controller"),
    },
    "speaker": {
        ("", "services", "", "list", "cluster", ""),
        ("", "services", "", "watch", "cluster", ""),
        ("", "nodes", "", "list", "cluster", ""),
        ("", "nodes", "", "watch", "cluster", ""),
        ("discovery.k8s.io", "endpointslices", "", "list", "cluster", ""),
        ("discovery.k8s.io", "endpointslices", "", "watch", "cluster", ""),
        *(
            ("metallb.io", kind, "", verb, "namespace", "")
            for kind in (
                "ipaddresspools",
                "l2advertisements",
                "bgpadvertisements",
                "bgppeers",
                "bfdprofiles",
                "communities",
                "servicel2statuses",
                "servicebgpstatuses",
            )
            for verb in ("list", "watch")
        ),
        ("", "events", "", "create", "cluster", ""),
        ("", "secrets", "", "list", "namespace", ""),
        *(
            ("metallb.io", kind, sub, verb, "namespace", "")
            for kind in ("servicel2statuses", "servicebgpstatuses")
            for sub, verb in (("", "create"), ("", "delete"), ("", "patch"), ("status", "patch"))
        ),
        ("metallb.io", "configurationstates", "", "create", "namespace", ""),
        ("metallb.io", "configurationstates", "", "get", "namespace", ""),
        ("metallb.io", "configurationstates", "status", "patch", "namespace", ""),
        # Its own Pod, the owner of its status objects.
        ("", "pods", "", "get", "namespace", ""),
    },
}

# What each must not be able to do: (group, resource, subresource, verb, namespace, name);
# namespace "" asks across all namespaces (or about a cluster-scoped kind).
CRD = ("apiextensions.k8s.io", "customresourcedefinitions")
BOTH_DENIED = [
    ("", "secrets", "", "list", "", ""),
    ("", "secrets", "", "watch", "", ""),
    ("", "secrets", "", "get", APPS, "app-secret"),
    ("", "secrets", "", "list", APPS, ""),
    ("", "secrets", "", "get", NS, "ironlb-memberlist"),
    ("", "secrets", "", "create", NS, ""),
    ("", "secrets", "", "update", NS, "ironlb-webhook-cert"),
    (*CRD, "", "delete", "", "ipaddresspools.metallb.io"),
    (*CRD, "", "update", "", "ipaddresspools.metallb.io"),
    (*CRD, "", "create", "", ""),
    ("", "services", "", "update", APPS, "web"),
    ("", "services", "", "patch", APPS, "web"),
    ("", "services", "", "create", APPS, ""),
    ("", "services", "", "delete", APPS, "web"),
    ("", "services", "status", "update", APPS, "web"),
    ("", "pods", "", "list", "", ""),
    ("", "configmaps", "", "list", NS, ""),
    ("", "nodes", "", "patch", "", NODE),
    ("", "events", "", "delete", APPS, ""),
    ("metallb.io", "ipaddresspools", "", "create", NS, ""),
    ("metallb.io", "ipaddresspools", "", "patch", NS, "pool"),
    ("metallb.io", "ipaddresspools", "", "delete", NS, "pool"),
    ("metallb.io", "l2advertisements", "", "update", NS, "all"),
    ("metallb.io", "ipaddresspools", "status", "patch", APPS, "pool"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "update", "", ""),
    ("rbac.authorization.k8s.io", "clusterroles", "", "escalate", "", ""),
    ("rbac.authorization.k8s.io", "rolebindings", "", "create", NS, ""),
    ("", "serviceaccounts", "token", "create", NS, "ironlb-controller"),
]
DENIED = {
    "controller": [
        *BOTH_DENIED,
        ("coordination.k8s.io", "leases", "", "update", NS, "someone-elses"),
        ("coordination.k8s.io", "leases", "", "delete", NS, "ironlb-controller"),
        ("coordination.k8s.io", "leases", "", "create", APPS, ""),
        ("metallb.io", "servicel2statuses", "", "create", NS, ""),
        ("metallb.io", "configurationstates", "status", "patch", NS, "speaker-node-a"),
        ("metallb.io", "configurationstates", "", "delete", NS, "controller"),
        ("", "nodes", "", "list", "", ""),
    ],
    "speaker": [
        *BOTH_DENIED,
        ("", "services", "status", "patch", APPS, "web"),
        ("metallb.io", "servicel2statuses", "", "create", APPS, ""),
        ("metallb.io", "servicel2statuses", "", "update", NS, "x"),
        ("metallb.io", "servicel2statuses", "", "patch", APPS, "x"),
        ("metallb.io", "ipaddresspools", "status", "patch", NS, "pool"),
        # Its own Pod only: no other namespace's, no list.
        ("", "pods", "", "get", APPS, "x"),
        ("", "pods", "", "list", NS, ""),
        ("coordination.k8s.io", "leases", "", "create", NS, ""),
        ("", "namespaces", "", "list", "", ""),
        ("metallb.io", "configurationstates", "", "delete", NS, "controller"),
        ("metallb.io", "configurationstates", "status", "patch", APPS, "speaker-node-a"),
        # The configuration is read from its own namespace only.
        ("metallb.io", "ipaddresspools", "", "list", "", ""),
        ("metallb.io", "bgppeers", "", "watch", APPS, ""),
        ("metallb.io", "servicel2statuses", "", "list", APPS, ""),
    ],
}


@dataclass
class Env:
    tools: cs.Tools
    admin: kubernetes.client.ApiClient
    kubeconfigs: dict[str, Path]  # component -> a kubeconfig with its ServiceAccount's token
    clients: dict[str, kubernetes.client.ApiClient]
    cert_dir: Path  # the chart's webhook certificate, as the controller Pod mounts it


def apply(t: cs.Tools, *objects: dict[str, Any]) -> None:
    t.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with (
        cs.own_control_plane() as kubeconfig,
        cs.helm_home() as helm_env,
        tempfile.TemporaryDirectory(prefix="ironlb-rbac-") as scratch,
    ):
        t = cs.Tools(kubeconfig, helm_env)
        for ns in (NS, APPS):
            t.kubectl("create", "namespace", ns)
        t.kubectl("apply", "--server-side", "-f", str(cs.CRDS))
        t.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        apply(
            t,
            {
                "apiVersion": "metallb.io/v1beta1",
                "kind": "IPAddressPool",
                "metadata": {"name": "pool", "namespace": NS},
                "spec": {"addresses": [POOL_RANGE]},
            },
            {
                "apiVersion": "metallb.io/v1beta1",
                "kind": "L2Advertisement",
                "metadata": {"name": "all", "namespace": NS},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "app-secret", "namespace": APPS},
            },
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            },
        )
        t.kubectl(
            "patch",
            "node",
            NODE,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "reason": "KubeletReady",
                                "message": "test node",
                            }
                        ],
                        "addresses": [{"type": "InternalIP", "address": "192.0.2.100"}],
                    }
                }
            ),
        )
        t.helm("install", cs.RELEASE, str(cs.CHART), "-n", NS)
        kubeconfigs = tools.chart_identities(kubeconfig, Path(scratch), install_rbac=False)
        clients = {
            component: kubernetes.config.new_client_from_config(config_file=str(path))
            for component, path in kubeconfigs.items()
        }
        cert_dir = Path(scratch) / "webhook"
        cert_dir.mkdir()
        for name, content in cs.secret_data(t, "ironlb-webhook-cert").items():
            (cert_dir / name).write_bytes(content)
        admin = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        try:
            yield Env(t, admin, kubeconfigs, clients, cert_dir)
        finally:
            for client in (admin, *clients.values()):
                client.close()


# --- the processes ---------------------------------------------------------------------------

# A refusal as the apiserver words it: a 403 status (a whole number, not the milliseconds of a
# timestamp like 16:43:50.403, which once failed this check) or its Forbidden reason.
FORBIDDEN = re.compile(r"(?<![\d.:])403(?![\d.])|[Ff]orbidden")


@pytest.fixture(scope="module")
def webhook_port() -> int:
    (port,) = local_cluster.free_ports(1)
    return port


@pytest.fixture(scope="module")
def controller(env: Env, webhook_port: int) -> Iterator[support.Controller]:
    proc = support.Controller(
        str(env.kubeconfigs["controller"]),
        # The chart's Lease: the Role lets the controller get and update that name only.
        lease_name="ironlb-controller",
        lease_duration=15,
        extra=(f"--webhook-port={webhook_port}", f"--webhook-cert-dir={env.cert_dir}"),
    )
    proc.start().wait_ready()
    try:
        yield proc
    finally:
        proc.stop()


def refused(lines: list[str]) -> list[str]:
    """The log lines that tell of a refusal; a JSON line's timestamp is not read."""
    return [line for line in lines if FORBIDDEN.search(_without_timestamp(line))]


def _without_timestamp(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict):
        return line
    record.pop("ts", None)
    return json.dumps(record)


def test_refused_reads_refusals_not_timestamps() -> None:
    logged = '{"ts":"2026-12-04T16:43:50.403+00:00","level":"info","msg":"denied: overlaps"}'
    forbidden = '{"ts":"2026-12-04T16:43:50.100+00:00","msg":"list failed","error":"403 Forbidden"}'
    reason = 'services is forbidden: User "system:serviceaccount:x" cannot list'
    assert refused([logged, forbidden, reason, "retry_s 0.403", "code=403"]) == [
        forbidden,
        reason,
        "code=403",
    ]


def test_the_processes_are_their_service_accounts(env: Env) -> None:
    for component, kubeconfig in env.kubeconfigs.items():
        review = env.tools.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
        user = json.loads(review.stdout)["status"]["userInfo"]
        assert user["username"] == f"{SA_PREFIX}ironlb-{component}"
        assert "system:masters" not in user["groups"]


@pytest.fixture(scope="module")
def web(env: Env, controller: support.Controller) -> str:
    """A LoadBalancer Service the controller allocated; its address."""
    k8s = support.Cluster(env.admin)
    k8s.service(APPS, "web")
    (ip,) = k8s.wait_ips(APPS, "web")
    return ip


def test_controller_allocates_as_its_service_account(
    env: Env, controller: support.Controller, web: str
) -> None:
    k8s = support.Cluster(env.admin)
    ip = web
    assert ip.startswith("192.0.2.")
    assert k8s.pool_of(APPS, "web") == "pool"
    k8s.wait_event(APPS, "web", "IPAllocated", ip)
    support.wait_for(
        "the pool status to count the address",
        lambda: (k8s.get_pool("pool").get("status") or {}).get("assignedIPv4") == 1,
    )
    lease = env.tools.get_json("lease", "ironlb-controller", "-n", NS)
    assert lease["spec"]["holderIdentity"]
    assert refused(controller.log_lines()) == []


def admission(kind: str, version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    obj = {
        "apiVersion": f"metallb.io/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "metallb.io", "version": version, "kind": kind},
            "resource": {"group": "metallb.io", "version": version, "resource": kind.lower() + "s"},
            "name": name,
            "namespace": NS,
            "operation": "CREATE",
            "object": obj,
        },
    }


def call_webhook(env: Env, port: int, path: str, review: dict[str, Any]) -> dict[str, Any]:
    """POST over TLS to the local port, trusting only the chart's CA and checking the Service's
    DNS name, as the apiserver does."""
    context = ssl.create_default_context(cafile=str(env.cert_dir / "ca.crt"))
    host = f"ironlb-webhook-service.{NS}.svc"

    class Pinned(http.client.HTTPSConnection):
        def connect(self) -> None:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            self.sock = context.wrap_socket(raw, server_hostname=host)

    connection = Pinned(host, port, timeout=10)
    try:
        connection.request("POST", path, json.dumps(review), {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        reply: dict[str, Any] = json.loads(response.read())
    finally:
        connection.close()
    return dict(reply["response"])


def test_controller_webhook_reads_configuration_and_secret_names(
    env: Env, controller: support.Controller, webhook_port: int
) -> None:
    port = webhook_port
    pools = "/validate-metallb-io-v1beta1-ipaddresspool"
    overlapping = call_webhook(
        env,
        port,
        pools,
        admission("IPAddressPool", "v1beta1", "other", {"addresses": ["192.0.2.8/29"]}),
    )
    assert overlapping["allowed"] is False
    assert "pool" in overlapping["status"]["message"]
    assert "internal error" not in overlapping["status"]["message"]
    separate = call_webhook(
        env,
        port,
        pools,
        admission("IPAddressPool", "v1beta1", "other", {"addresses": ["198.51.100.0/28"]}),
    )
    assert separate["allowed"] is True
    peers = "/validate-metallb-io-v1beta2-bgppeer"
    peer = {"myASN": 64500, "peerASN": 64501, "peerAddress": "192.0.2.200"}
    dangling = call_webhook(
        env,
        port,
        peers,
        admission(
            "BGPPeer",
            "v1beta2",
            "p",
            {**peer, "passwordSecret": {"name": "no-such-secret", "namespace": NS}},
        ),
    )
    present = call_webhook(
        env,
        port,
        peers,
        admission(
            "BGPPeer",
            "v1beta2",
            "p",
            {**peer, "passwordSecret": {"name": "ironlb-memberlist", "namespace": NS}},
        ),
    )
    assert dangling["allowed"] is True and present["allowed"] is True
    assert any("no-such-secret" in w for w in dangling.get("warnings") or [])
    assert not any("ironlb-memberlist" in w for w in present.get("warnings") or [])
    assert refused(controller.log_lines()) == []


SPEAKER = """
import asyncio, json, sys
from ironlb_io import logs
from speaker import agent, running

class Layer2:
    '''Records what this node would answer ARP/NDP for; opens no socket.'''
    def set_owned(self, owned):
        print(json.dumps({"owned": sorted(str(a) for a in owned)}), flush=True)
    def announce_again(self, owned):
        pass
    def interfaces(self):
        return None
    def conflicts(self):
        return {}
    async def close(self):
        pass

class Alone:
    '''Membership of one node that never changes.'''
    def __init__(self, node):
        self.node = node
        self.changed = asyncio.Event()
    def members(self):
        return frozenset({self.node})
    def metadata(self):
        return {}
    def returns(self):
        return 0
    def set_metadata(self, data):
        pass
    async def leave(self):
        pass

async def main(node, namespace, kubeconfig, pod_name):
    options = agent.Options(
        node_name=node,
        namespace=namespace,
        kubeconfig=kubeconfig,
        metrics_port=0,
        pod_name=pod_name,
    )
    return await running.run(options, layer2=Layer2(), membership=Alone(node))

logs.configure_logging("info")
sys.exit(asyncio.run(main(*sys.argv[1:5])))
"""
# The speaker's own Pod, as the chart's DaemonSet would make it (nothing runs it here): the
# owner of the speaker's status objects.
SPEAKER_POD = "ironlb-speaker-test"


@pytest.fixture(scope="module")
def speaker(env: Env, controller: support.Controller) -> Iterator[Path]:
    """The speaker agent as the speaker ServiceAccount; yields its log file."""
    log = Path(tempfile.mkdtemp(prefix="ironlb-speaker-")) / "speaker.log"
    apply(
        env.tools,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": SPEAKER_POD, "namespace": NS},
            "spec": {"nodeName": NODE, "containers": [{"name": "speaker", "image": "speaker"}]},
        },
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SPEAKER,
                NODE,
                NS,
                str(env.kubeconfigs["speaker"]),
                SPEAKER_POD,
            ],
            cwd=cs.ROOT,
            env=dict(os.environ, PYTHONPATH=str(cs.ROOT), PYTHONUNBUFFERED="1"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def l2_statuses(env: Env) -> list[dict[str, Any]]:
    listed = env.tools.get_json("servicel2statuses.metallb.io", "-n", NS)
    return [
        s
        for s in listed["items"]
        if (s.get("metadata", {}).get("labels") or {}).get("metallb.io/node") == NODE
    ]


def test_speaker_announces_and_writes_its_status_as_its_service_account(
    env: Env, controller: support.Controller, web: str, speaker: Path
) -> None:
    k8s = support.Cluster(env.admin)
    ip = web
    apply(
        env.tools,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "web-1",
                "namespace": APPS,
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.0.5"], "nodeName": NODE, "conditions": {"ready": True}}
            ],
            "ports": [{"name": "p0", "port": 80, "protocol": "TCP"}],
        },
    )
    try:
        # The object is created first and its status written right after (status subresource).
        status = support.wait_for(
            "the speaker's ServiceL2Status",
            lambda: [s for s in l2_statuses(env) if s.get("status")],
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\nspeaker log:\n{tail(speaker)}") from None
    assert len(status) == 1
    assert status[0]["status"]["node"] == NODE
    # Owned by the speaker's Pod (read as the speaker's ServiceAccount), as MetalLB's are: set
    # at creation, or adopted right after when the Pod was read later.
    uid = env.tools.get_json("pod", SPEAKER_POD, "-n", NS)["metadata"]["uid"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": SPEAKER_POD, "uid": uid}
    support.wait_for(
        "the ServiceL2Status owned by the speaker's Pod",
        lambda: [s["metadata"].get("ownerReferences") for s in l2_statuses(env)] == [[owner]],
    )
    assert status[0]["status"]["serviceName"] == "web"
    assert status[0]["status"]["serviceNamespace"] == APPS
    event = k8s.wait_event(APPS, "web", "nodeAssigned", NODE)
    assert event["source"]["component"] == "metallb-speaker"
    owned = [
        json.loads(line)["owned"]
        for line in speaker.read_text().splitlines()
        if line.startswith('{"owned"')
    ]
    assert owned and owned[-1] == [ip]

    # No ready endpoint left: nobody announces, and the speaker deletes its status object.
    env.tools.kubectl("delete", "endpointslice", "web-1", "-n", APPS)
    support.wait_for("the ServiceL2Status to be deleted", lambda: l2_statuses(env) == [])

    # Both ConfigurationStates, written as the ServiceAccounts (create, then the status).
    def results() -> dict[str, str]:
        listed = env.tools.get_json("configurationstates.metallb.io", "-n", NS)
        return {
            o["metadata"]["name"]: (o.get("status") or {}).get("result") for o in listed["items"]
        }

    support.wait_for(
        "both ConfigurationStates Valid",
        lambda: results() == {"controller": "Valid", f"speaker-{NODE}": "Valid"},
    )
    lines = speaker.read_text().splitlines()
    assert refused(lines) == [], "\n".join(lines[-20:])
    assert refused(controller.log_lines()) == []


# --- the rules -------------------------------------------------------------------------------


def granted(env: Env) -> dict[str, set[tuple[str, str, str, str, str, str]]]:
    """Every (group, resource, subresource, verb, scope, name) the installed roles grant."""
    out: dict[str, set[tuple[str, str, str, str, str, str]]] = {
        "controller": set(),
        "speaker": set(),
    }
    for component in out:
        for kind, name, scope, extra in (
            ("clusterrole", f"ironlb:{component}", "cluster", []),
            ("role", f"ironlb-{component}", "namespace", ["-n", NS]),
        ):
            role = env.tools.get_json(kind, name, *extra)
            for rule in role["rules"]:
                for group in rule.get("apiGroups", [""]):
                    for resource in rule["resources"]:
                        base, _, sub = resource.partition("/")
                        for verb in rule["verbs"]:
                            for rname in rule.get("resourceNames") or [""]:
                                out[component].add((group, base, sub, verb, scope, rname))
    return out


def test_roles_grant_exactly_the_requests_the_code_makes(env: Env) -> None:
    assert granted(env) == USED
    # And the bindings give each account its own roles, no other.
    for component in ("controller", "speaker"):
        subjects = [
            env.tools.get_json(kind, name, *extra)["subjects"]
            for kind, name, extra in (
                ("clusterrolebinding", f"ironlb:{component}", []),
                ("rolebinding", f"ironlb-{component}", ["-n", NS]),
            )
        ]
        for s in subjects:
            assert s == [{"kind": "ServiceAccount", "name": f"ironlb-{component}", "namespace": NS}]


def can(
    env: Env,
    component: str,
    group: str,
    resource: str,
    sub: str,
    verb: str,
    namespace: str,
    name: str,
) -> bool:
    """SelfSubjectAccessReview with the component's own token."""
    api = kubernetes.client.AuthorizationV1Api(env.clients[component])
    review = api.create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "group": group,
                    "resource": resource,
                    "subresource": sub,
                    "verb": verb,
                    "namespace": namespace,
                    "name": name,
                }
            }
        }
    )
    return bool(review.status.allowed)


@pytest.mark.parametrize("component", ["controller", "speaker"])
def test_every_request_in_the_table_is_allowed(env: Env, component: str) -> None:
    refused_ = [
        entry
        for entry in sorted(USED[component])
        if not can(env, component, *entry[:4], NS if entry[4] == "namespace" else "", entry[5])
    ]
    assert refused_ == []


@pytest.mark.parametrize("component", ["controller", "speaker"])
def test_what_each_must_not_do_is_refused_when_asked(env: Env, component: str) -> None:
    allowed = [entry for entry in DENIED[component] if can(env, component, *entry)]
    assert allowed == []
    # Namespaced grants stay in the namespace: the same requests elsewhere are refused
    # (unless the table also grants them cluster-wide, like a list the watches need).
    cluster_wide = {e[:4] for e in USED[component] if e[4] == "cluster"}
    leaks = [
        entry
        for entry in sorted(USED[component])
        if entry[4] == "namespace"
        and entry[:4] not in cluster_wide
        and can(env, component, *entry[:4], APPS, entry[5])
    ]
    assert leaks == []


def forbidden(call: Any, *args: Any, **kwargs: Any) -> bool:
    try:
        call(*args, **kwargs)
    except kubernetes.client.ApiException as e:
        return e.status == 403
    return False


@pytest.mark.parametrize("component", ["controller", "speaker"])
def test_what_each_must_not_do_is_refused_when_tried(env: Env, component: str) -> None:
    client = env.clients[component]
    core = kubernetes.client.CoreV1Api(client)
    ext = kubernetes.client.ApiextensionsV1Api(client)
    label = {"metadata": {"labels": {"touched": component}}}
    attempts = {
        "list Secrets in every namespace": (core.list_secret_for_all_namespaces,),
        "read a Secret of another namespace": (core.read_namespaced_secret, "app-secret", APPS),
        "read the memberlist key by name": (core.read_namespaced_secret, "ironlb-memberlist", NS),
        "patch a Service": (core.patch_namespaced_service, "web", APPS, label),
        "delete a CRD": (ext.delete_custom_resource_definition, "ipaddresspools.metallb.io"),
    }
    if component == "speaker":
        attempts["patch a Service's status"] = (
            core.patch_namespaced_service_status,
            "web",
            APPS,
            {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}},
        )
    failed = [what for what, (call, *args) in attempts.items() if not forbidden(call, *args)]
    assert failed == []
    assert env.tools.get_json("crd", "ipaddresspools.metallb.io")["metadata"]["name"]
    assert "touched" not in (
        env.tools.get_json("service", "web", "-n", APPS)["metadata"].get("labels") or {}
    )
