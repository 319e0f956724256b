"""Problems that slip past admission are reported on the offending objects (condition + Event),
against the real apiserver. No webhook is registered here, so overlapping pools get in, as they
would when created in a race."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from controller import config_reporting
from ironlb_io import kube
from tests.conftest import METALLB_NAMESPACE, api_object

pytestmark = pytest.mark.integration

GROUP, VERSION = "metallb.io", "v1beta1"


def condition(custom: kubernetes.client.CustomObjectsApi, plural: str, name: str) -> dict[str, Any]:
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, METALLB_NAMESPACE, plural, name)
    (found,) = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Valid"]
    return dict(found)


@pytest.fixture
def custom(kube_api: kubernetes.client.ApiClient) -> Iterator[kubernetes.client.CustomObjectsApi]:
    api = kubernetes.client.CustomObjectsApi(kube_api)
    made: list[tuple[str, str]] = []

    def create(plural: str, body: dict[str, Any]) -> None:
        api.create_namespaced_custom_object(GROUP, VERSION, METALLB_NAMESPACE, plural, body)
        made.append((plural, body["metadata"]["name"]))

    api.create = create  # type: ignore[attr-defined]
    yield api
    for plural, name in made:
        try:
            api.delete_namespaced_custom_object(GROUP, VERSION, METALLB_NAMESPACE, plural, name)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise


def round_once(kubeconfig: str) -> int:
    async def go() -> int:
        async with kube.Client(kube.load(kubeconfig)) as client:
            reporter = config_reporting.Reporter(client, METALLB_NAMESPACE, "test")
            return await reporter.round()

    return asyncio.run(go())


def test_conflicts_and_dangling_references_are_reported_and_heal(
    kubeconfig: str,
    custom: kubernetes.client.CustomObjectsApi,
    kube_api: kubernetes.client.ApiClient,
) -> None:
    create = custom.create  # type: ignore[attr-defined]
    create("ipaddresspools", api_object("IPAddressPool", "report-a", addresses=["198.18.200.0/24"]))
    create(
        "ipaddresspools", api_object("IPAddressPool", "report-b", addresses=["198.18.200.128/25"])
    )
    create(
        "ipaddresspools", api_object("IPAddressPool", "report-ok", addresses=["198.18.201.0/24"])
    )
    create(
        "l2advertisements",
        api_object("L2Advertisement", "report-l2", ipAddressPools=["report-later"]),
    )

    assert round_once(kubeconfig) > 0
    for name in ("report-a", "report-b"):
        found = condition(custom, "ipaddresspools", name)
        assert (found["status"], found["reason"]) == ("False", "InvalidConfiguration")
        assert "spec.addresses" in found["message"] and "overlap" in found["message"]
    ok = condition(custom, "ipaddresspools", "report-ok")
    assert (ok["status"], ok["reason"]) == ("True", "Valid")
    dangling = condition(custom, "l2advertisements", "report-l2")
    assert (dangling["status"], dangling["reason"]) == ("False", "DanglingReference")
    assert "report-later" in dangling["message"]
    warnings = kubernetes.client.CoreV1Api(kube_api).list_namespaced_event(
        METALLB_NAMESPACE, field_selector="involvedObject.name=report-a"
    )
    assert [e.reason for e in warnings.items] == ["InvalidConfiguration"]
    assert warnings.items[0].type == "Warning"

    # A settled configuration is checked again without a single write.
    assert round_once(kubeconfig) == 0

    # The referent appears and the conflict is resolved: both heal.
    create(
        "ipaddresspools", api_object("IPAddressPool", "report-later", addresses=["198.18.202.0/24"])
    )
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, METALLB_NAMESPACE, "ipaddresspools", "report-b"
    )
    round_once(kubeconfig)
    assert condition(custom, "ipaddresspools", "report-a")["status"] == "True"
    assert condition(custom, "l2advertisements", "report-l2")["status"] == "True"


def test_a_field_not_honoured_is_reported_on_the_object_once(
    kubeconfig: str,
    custom: kubernetes.client.CustomObjectsApi,
    kube_api: kubernetes.client.ApiClient,
) -> None:
    """A BGPPeer with a VRF: Valid False / NotHonoured naming the field, one Warning Event
    NotHonoured, nothing written again while nothing changes; the field gone, Valid again."""
    body = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "report-vrf", "namespace": METALLB_NAMESPACE},
        "spec": {"myASN": 64500, "peerASN": 64501, "peerAddress": "198.18.203.1", "vrf": "red"},
    }
    custom.create_namespaced_custom_object(GROUP, "v1beta2", METALLB_NAMESPACE, "bgppeers", body)
    try:
        assert round_once(kubeconfig) > 0
        found = condition(custom, "bgppeers", "report-vrf")
        assert (found["status"], found["reason"]) == ("False", "NotHonoured")
        assert found["message"].startswith("spec.vrf: not honoured: "), found["message"]
        core = kubernetes.client.CoreV1Api(kube_api)

        def events() -> list[Any]:
            listed = core.list_namespaced_event(
                METALLB_NAMESPACE, field_selector="involvedObject.name=report-vrf"
            )
            return list(listed.items)

        (event,) = events()
        assert (event.type, event.reason) == ("Warning", "NotHonoured")
        assert event.involved_object.kind == "BGPPeer" and "spec.vrf" in event.message

        # Settled: no write, no second Event.
        assert round_once(kubeconfig) == 0
        assert len(events()) == 1

        # The field removed: honoured, Valid again.
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1beta2",
            METALLB_NAMESPACE,
            "bgppeers",
            "report-vrf",
            {"spec": {"vrf": None}},  # a merge patch: null removes the field
        )
        round_once(kubeconfig)
        healed = condition(custom, "bgppeers", "report-vrf")
        assert (healed["status"], healed["reason"]) == ("True", "Valid")
    finally:
        custom.delete_namespaced_custom_object(
            GROUP, "v1beta2", METALLB_NAMESPACE, "bgppeers", "report-vrf"
        )
