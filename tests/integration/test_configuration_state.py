"""MetalLB's ConfigurationState objects, written by the real controller and speaker processes.

Both run against the session's apiserver with a namespace of the test's own as their MetalLB
namespace, so their configuration and their ConfigurationStates are the test's alone. No webhook
is registered here, so overlapping pools get in, as they would when created in a race: the
controller's `controller` and the speaker's `speaker-<node>` turn Invalid and say why, and
Valid again once fixed; a community alias nobody defines is the speaker's error only (the
controller parses pools and communities, not advertisements). While nothing changes, neither
object is written (its resourceVersion stays).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from tests.integration import controller_support as support
from tests.integration.test_speaker_startup import Speaker

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "metallb.io", "v1beta1", "configurationstates"
NODE = "cfgstate-node"
# The controller checks its configuration every 5 s (controller.config_reporting.INTERVAL_S):
# watching for longer than that sees at least one check that must not write.
QUIET_S = 7.0


@pytest.fixture
def custom(kube_api: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(kube_api)


@pytest.fixture
def processes(kubeconfig: str, test_namespace: str) -> Iterator[tuple[Any, Speaker]]:
    controller = support.Controller(
        kubeconfig,
        lease_name="ironlb-test-configuration-state",
        extra=(f"--namespace={test_namespace}",),
    )
    speaker: Speaker | None = None
    try:
        controller.start().wait_ready()
        speaker = Speaker(NODE, kubeconfig, test_namespace)
        yield controller, speaker
    finally:
        if speaker is not None:
            speaker.stop()
        controller.stop()
        controller.discard_logs()


def state(custom: kubernetes.client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name
        )
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return found


def wait_result(
    custom: kubernetes.client.CustomObjectsApi,
    ns: str,
    name: str,
    result: str,
    diagnose: Callable[[], str],
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = state(custom, ns, name)
        if found is None or (found.get("status") or {}).get("result") != result:
            return None
        return found

    try:
        return support.wait_for(f"{name} to be {result}", probe, timeout=60.0)
    except AssertionError as e:
        raise AssertionError(f"{e}\nnow: {state(custom, ns, name)}\n{diagnose()}") from None


def pool(custom: kubernetes.client.CustomObjectsApi, ns: str, name: str, cidr: str) -> None:
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        "ipaddresspools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "IPAddressPool",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"addresses": [cidr]},
        },
    )


def versions(custom: kubernetes.client.CustomObjectsApi, ns: str) -> dict[str, str]:
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed["items"]}


def of_type(state: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in state["status"]["conditions"] if c["type"] == kind]
    return found


def test_valid_invalid_and_back_written_only_on_change(
    processes: tuple[support.Controller, Speaker],
    custom: kubernetes.client.CustomObjectsApi,
    test_namespace: str,
) -> None:
    controller, speaker = processes
    ns = test_namespace
    me = f"speaker-{NODE}"

    def logs() -> str:
        return f"controller log:\n{controller.tail()}\nspeaker log:\n{speaker.output()}"

    b = support.block()
    pool(custom, ns, "first", support.v4_block(b))

    # A valid configuration: both say Valid, labelled as MetalLB labels them.
    ctl = wait_result(custom, ns, "controller", "Valid", logs)
    assert ctl["metadata"]["labels"] == {"metallb.io/component-type": "controller"}
    (condition,) = ctl["status"]["conditions"]
    assert condition["type"] == "poolReconcilerValid"
    assert (condition["status"], condition["reason"]) == ("True", "Reconciled")
    assert ctl["status"].get("errorSummary", "") == ""
    spk = wait_result(custom, ns, me, "Valid", logs)
    assert spk["metadata"]["labels"] == {
        "metallb.io/component-type": "speaker",
        "metallb.io/node-name": NODE,
    }
    condition = of_type(spk, "configReconcilerValid")
    assert (condition["status"], condition["reason"]) == ("True", "Reconciled")
    valid_since = condition["lastTransitionTime"]
    # Ours beside MetalLB's: no kube-proxy runs here, and the speaker says so without making
    # the configuration Invalid.
    path = of_type(spk, "DataPathReady")
    assert (path["status"], path["reason"]) == ("False", "kubeProxyNotReady"), path
    assert [c["type"] for c in spk["status"]["conditions"]].count("DataPathReady") == 1

    # Nothing changes: nothing is written.
    before = versions(custom, ns)
    time.sleep(QUIET_S)
    assert versions(custom, ns) == before

    # Two pools overlap: both components refuse the configuration and say why.
    pool(custom, ns, "second", support.v4_block(b))
    for name in ("controller", me):
        found = wait_result(custom, ns, name, "Invalid", logs)
        condition = of_type(
            found, "poolReconcilerValid" if name == "controller" else "configReconcilerValid"
        )
        assert (condition["status"], condition["reason"]) == ("False", "ConfigurationError")
        summary = found["status"]["errorSummary"]
        assert "IPAddressPool/" in summary and "overlap" in summary, summary
        assert condition["message"] == summary

    # Fixed: Valid again, the transition time moved.
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "ipaddresspools", "second")
    wait_result(custom, ns, "controller", "Valid", logs)
    spk = wait_result(custom, ns, me, "Valid", logs)
    assert of_type(spk, "configReconcilerValid")["lastTransitionTime"] >= valid_since
    assert spk["status"].get("errorSummary", "") == ""

    # An advertisement using a community alias nobody defines: the speaker's error only.
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        "bgpadvertisements",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "BGPAdvertisement",
            "metadata": {"name": "ads", "namespace": ns},
            "spec": {"ipAddressPools": ["first"], "communities": ["no-such-alias"]},
        },
    )
    spk = wait_result(custom, ns, me, "Invalid", logs)
    assert "BGPAdvertisement/ads" in spk["status"]["errorSummary"]
    assert "no-such-alias" in spk["status"]["errorSummary"]
    time.sleep(QUIET_S)
    assert state(custom, ns, "controller")["status"]["result"] == "Valid"  # type: ignore[index]
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "bgpadvertisements", "ads")
    wait_result(custom, ns, me, "Valid", logs)

    # Settled again: nothing is written.
    before = versions(custom, ns)
    time.sleep(QUIET_S)
    assert versions(custom, ns) == before

    # Deleted by someone: the controller puts its object back.
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "controller")
    wait_result(custom, ns, "controller", "Valid", logs)


def test_a_field_not_honoured_is_the_speakers_honoured_condition_not_invalid(
    processes: tuple[support.Controller, Speaker],
    custom: kubernetes.client.CustomObjectsApi,
    test_namespace: str,
) -> None:
    """A BGPPeer with a VRF: `speaker-<node>` says so in its `Honoured` condition, naming the
    object and the field, while `result` stays Valid (the configuration is in use without it);
    the field gone, Honoured again."""
    controller, speaker = processes
    ns = test_namespace
    me = f"speaker-{NODE}"

    def logs() -> str:
        return f"controller log:\n{controller.tail()}\nspeaker log:\n{speaker.output()}"

    def honoured(status: str) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            found = state(custom, ns, me)
            conditions = ((found or {}).get("status") or {}).get("conditions") or []
            mine = [c for c in conditions if c.get("type") == "Honoured"]
            return found if mine and mine[0]["status"] == status else None

        return probe

    wait_result(custom, ns, me, "Valid", logs)
    custom.create_namespaced_custom_object(
        GROUP,
        "v1beta2",
        ns,
        "bgppeers",
        {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "BGPPeer",
            "metadata": {"name": "red", "namespace": ns},
            "spec": {"myASN": 64500, "peerASN": 64501, "peerAddress": "192.0.2.1", "vrf": "red"},
        },
    )
    try:
        found = support.wait_for("Honoured False", honoured("False"), timeout=60.0)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{logs()}") from None
    condition = of_type(found, "Honoured")
    assert condition["reason"] == "NotHonoured"
    assert condition["message"].startswith("BGPPeer/red: spec.vrf: not honoured: ")
    assert found["status"]["result"] == "Valid" and found["status"].get("errorSummary", "") == ""
    assert of_type(found, "configReconcilerValid")["status"] == "True"
    assert speaker.logged("configuration not honoured"), "and the log says it too"

    custom.delete_namespaced_custom_object(GROUP, "v1beta2", ns, "bgppeers", "red")
    healed = support.wait_for("Honoured True", honoured("True"), timeout=60.0)
    assert of_type(healed, "Honoured")["reason"] == "Honoured"
