"""The webhook behind a real kube-apiserver: registered, called over TLS, and its answers shown.

The server runs in a thread of this test process on 127.0.0.1 (a free port), with a CA it minted
itself; a ValidatingWebhookConfiguration points the apiserver at it with that CA as caBundle. The
configuration only matches this test's namespaces, and is deleted at the end, so that other tests
never meet it, even if this one fails half-way.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import kubernetes
import pytest
import yaml

from controller import webhook
from ironlb import model

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class ServerThread:
    """The aiohttp server on its own event loop, so blocking test code cannot starve it."""

    def __init__(self, server: webhook.WebhookServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="webhook-server", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as e:
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        self._loop.close()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("webhook server did not start within 30s")
        if self._error is not None:
            raise RuntimeError(f"webhook server failed to start: {self._error!r}")

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)


def manifest(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> str:
    version = "v1beta2" if kind == "BGPPeer" else "v1beta1"
    return yaml.safe_dump(
        {
            "apiVersion": f"metallb.io/{version}",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


@pytest.fixture
def other_namespace(test_namespace: str, kube_api: kubernetes.client.ApiClient) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(kube_api)
    name = f"{test_namespace}-x"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise


def kubernetes_lister(api_client: Any, namespace: str) -> webhook.Lister:
    """A Lister over the official (blocking) client, run in a thread per call: the webhook
    served from the test process, reading the apiserver the test drives."""

    custom = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)

    def list_kind(kind: str) -> list[Mapping[str, Any]]:
        if kind == model.SECRET:
            secrets = core.list_namespaced_secret(namespace)
            return [{"metadata": {"name": s.metadata.name}} for s in secrets.items if s.metadata]
        plural, versions = model.RESOURCES[kind]
        listed: Any = custom.list_namespaced_custom_object(
            model.GROUP, versions[-1], namespace, plural
        )
        return list(listed.get("items", []))

    async def lister(kind: str) -> Sequence[Mapping[str, Any]]:
        return await asyncio.to_thread(list_kind, kind)

    return lister


@pytest.fixture
def registered_webhook(
    test_namespace: str,
    other_namespace: str,
    kube_api: kubernetes.client.ApiClient,
    kubectl: Kubectl,
) -> Iterator[webhook.WebhookServer]:
    """Our webhook serving `test_namespace`, registered for it and for `other_namespace`."""
    server = webhook.WebhookServer(
        kubernetes_lister(kube_api, test_namespace),
        test_namespace,
        host="127.0.0.1",
        port=0,
        hosts=["127.0.0.1"],
    )
    thread = ServerThread(server)
    thread.start()
    admission = kubernetes.client.AdmissionregistrationV1Api(kube_api)
    config = webhook.configuration(
        ca_bundle=server.ca_pem,
        url=f"https://127.0.0.1:{server.port}",
        name=f"ironlb-{test_namespace}",
        timeout_seconds=10,
        namespace_selector={
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": [test_namespace, other_namespace],
                }
            ]
        },
    )
    try:
        admission.create_validating_webhook_configuration(config)
        try:
            wait_until_active(kubectl, other_namespace, test_namespace)
            yield server
        finally:
            admission.delete_validating_webhook_configuration(config["metadata"]["name"])
    finally:
        thread.stop()


def wait_until_active(kubectl: Kubectl, other_namespace: str, namespace: str) -> None:
    """The apiserver picks up a new webhook configuration asynchronously: probe with a dry run."""
    probe = manifest("Community", "probe", other_namespace, {})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
        if result.returncode != 0 and f"must be created in {namespace} namespace" in result.stderr:
            return
        time.sleep(0.2)
    raise AssertionError(f"the webhook never answered the probe: {result.stderr.strip()}")


def apply(kubectl: Kubectl, text: str) -> subprocess.CompletedProcess[str]:
    return kubectl("create", "-f", "-", input=text, check=False)


def test_apiserver_rejects_an_overlapping_pool(
    registered_webhook: webhook.WebhookServer, test_namespace: str, kubectl: Kubectl
) -> None:
    first = apply(
        kubectl, manifest("IPAddressPool", "a", test_namespace, {"addresses": ["10.0.0.0/24"]})
    )
    assert first.returncode == 0, first.stderr
    second = apply(
        kubectl,
        manifest(
            "IPAddressPool", "b", test_namespace, {"addresses": ["10.9.0.0/24", "10.0.0.128/25"]}
        ),
    )
    assert second.returncode != 0
    assert (
        'admission webhook "ipaddresspoolvalidationwebhook.metallb.io" denied the request'
        in second.stderr
    )
    assert (
        "IPAddressPool/b: spec.addresses[1]: 10.0.0.128/25 overlaps with 10.0.0.0/24 in "
        "IPAddressPool 'a'" in second.stderr
    )
    missing = kubectl("get", "ipaddresspools.metallb.io", "b", "-n", test_namespace, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_apiserver_accepts_a_dangling_reference_with_a_warning(
    registered_webhook: webhook.WebhookServer, test_namespace: str, kubectl: Kubectl
) -> None:
    result = apply(
        kubectl, manifest("L2Advertisement", "l2", test_namespace, {"ipAddressPools": ["later"]})
    )
    assert result.returncode == 0, result.stderr
    assert (
        "Warning: L2Advertisement/l2: spec.ipAddressPools[0]: IPAddressPool 'later' does not exist"
        in result.stderr
    )
    kubectl("get", "l2advertisements.metallb.io", "l2", "-n", test_namespace)


def test_apiserver_accepts_a_field_not_honoured_with_a_warning(
    registered_webhook: webhook.WebhookServer, test_namespace: str, kubectl: Kubectl
) -> None:
    """`kubectl` prints what ironlb does not honour, one warning per field, and the object is
    created (both BGPPeer versions go through the same webhook)."""
    spec = {"myASN": 64500, "peerASN": 64501, "peerAddress": "192.0.2.1"}
    result = apply(
        kubectl,
        manifest("BGPPeer", "vrf-peer", test_namespace, {**spec, "vrf": "red", "localASN": 65001}),
    )
    assert result.returncode == 0, result.stderr
    assert "spec.localASN" not in result.stderr, "honoured: nothing to warn about"
    assert "Warning: BGPPeer/vrf-peer: spec.vrf: not honoured: " in result.stderr
    old = yaml.safe_load(
        manifest(
            "BGPPeer",
            "old-peer",
            test_namespace,
            {**spec, "routerID": "fd00::7", "ebgpMultiHop": True},
        )
    )
    old["apiVersion"] = "metallb.io/v1beta1"
    result = apply(kubectl, yaml.safe_dump(old))
    assert result.returncode == 0, result.stderr
    assert "Warning: BGPPeer/old-peer: spec.routerID: not honoured: " in result.stderr
    profile = apply(kubectl, manifest("BFDProfile", "echo", test_namespace, {"echoMode": True}))
    assert profile.returncode == 0, profile.stderr
    assert "Warning: BFDProfile/echo: spec.echoMode: not honoured: " in profile.stderr
    honoured = apply(
        kubectl, manifest("BGPPeer", "plain", test_namespace, {**spec, "peerPort": 1179})
    )
    assert honoured.returncode == 0 and "not honoured" not in honoured.stderr, honoured.stderr
    for kind, name in (("bgppeers", "vrf-peer"), ("bgppeers", "old-peer"), ("bgppeers", "plain")):
        kubectl("delete", f"{kind}.metallb.io", name, "-n", test_namespace)
    kubectl("delete", "bfdprofiles.metallb.io", "echo", "-n", test_namespace)


def test_apiserver_rejects_deleting_a_used_bfd_profile(
    registered_webhook: webhook.WebhookServer, test_namespace: str, kubectl: Kubectl
) -> None:
    profile = apply(
        kubectl, manifest("BFDProfile", "fast", test_namespace, {"receiveInterval": 300})
    )
    assert profile.returncode == 0, profile.stderr
    peer = apply(
        kubectl,
        manifest(
            "BGPPeer",
            "tor",
            test_namespace,
            {"myASN": 64500, "peerASN": 64501, "peerAddress": "192.0.2.1", "bfdProfile": "fast"},
        ),
    )
    assert peer.returncode == 0, peer.stderr
    denied = kubectl("delete", "bfdprofiles.metallb.io", "fast", "-n", test_namespace, check=False)
    assert denied.returncode != 0
    assert "failed to delete BFDProfile fast, used by BGPPeer tor" in denied.stderr
    kubectl("delete", "bgppeers.metallb.io", "tor", "-n", test_namespace)
    kubectl("delete", "bfdprofiles.metallb.io", "fast", "-n", test_namespace)


def test_apiserver_rejects_objects_outside_the_namespace(
    registered_webhook: webhook.WebhookServer,
    test_namespace: str,
    other_namespace: str,
    kubectl: Kubectl,
) -> None:
    result = apply(
        kubectl, manifest("IPAddressPool", "p", other_namespace, {"addresses": ["10.1.0.0/24"]})
    )
    assert result.returncode != 0
    assert f"resource must be created in {test_namespace} namespace" in result.stderr
