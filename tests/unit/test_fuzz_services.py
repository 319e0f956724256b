"""Fuzzing what is read off Services: the `metallb.io/*` annotations and the fields beside them.

Anyone who may edit a Service can write any string into an annotation, and objects reach us
from old apiservers, fixtures and tests as plain dicts. The contract on both sides: a Service
never raises. The controller reads it into a `ServiceView` (`controller.snapshot.service_view`,
run by the watch handler for every event) and the allocator decides on it; an unusable request
is an error on the decision, which the controller reports as a Warning Event on the Service
(MetalLB's AllocationFailed): that Event, not a metric, is how a bad annotation is surfaced.
The speaker reads the same Service into its own view (`speaker.snapshot.service_view`); one
whose status does not parse is left out of its passes.

Inputs: annotation values drawn from random text and from near-miss address lists; random JSON
in place of a whole Service; mutations of valid Services. Valid Services round-trip: their
requested addresses are read back exactly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller import allocator, converging, requests
from controller import snapshot as controller_snapshot
from ironlb import annotations as keys
from ironlb import services
from speaker import snapshot as speaker_snapshot
from tests.unit import fuzzing

AREA = "service objects"
POOLS = [
    {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "v4", "namespace": "metallb-system"},
        "spec": {"addresses": ["10.0.0.0/28", "10.0.1.1-10.0.1.3"]},
    },
    {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "v6", "namespace": "metallb-system"},
        "spec": {"addresses": ["fd00::/124"], "autoAssign": False},
    },
]
RESOLVED = controller_snapshot.pools(POOLS, {"default": {"team": "a"}}).pools
assert RESOLVED is not None


def service(annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "0b6b9b2f",
            "resourceVersion": "12",
            "labels": {"app": "web"},
            "annotations": annotations or {},
        },
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "selector": {"app": "web"},
            "externalTrafficPolicy": "Cluster",
            "ports": [{"port": 80, "protocol": "TCP"}],
            **spec,
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
    }


def read(obj: Any) -> None:
    """Everything the controller and the speaker do with one Service, checked."""
    view = fuzzing.feed(AREA, controller_snapshot.service_view, obj)
    controller_snapshot.relevant(view, "")
    allocations = allocator.Allocator()
    allocations.set_pools(RESOLVED)
    decision = converging.converge(allocations, view.request)
    if view.request.requested.error is not None and view.load_balancer:
        assert decision.error is not None  # an unusable request is reported, never dropped
    desired = controller_snapshot.desired_of(decision)
    if desired is not None:
        controller_snapshot.status_patch(view, desired)
    for event in (*decision.events, *controller_snapshot.deprecation_events(view)):
        controller_snapshot.event_body(
            view, event, now="2026-01-01T00:00:00Z", name_suffix="x", instance="i"
        )
    slim = speaker_snapshot.slim("Service", obj)
    services.ours(slim, "")
    speaker_snapshot.service_view(slim, [])
    speaker_snapshot.service_view(obj, [])


addresses_text = st.lists(
    st.one_of(
        st.ip_addresses().map(str),
        st.sampled_from(
            (
                " 10.0.0.3",
                "10.0.0.3 ",
                "::ffff:10.0.0.3",
                "fe80::1%eth0",
                "10.0.0.300",
                "",
                "fd00::2",
            )
        ),
        st.text(max_size=12),
    ),
    max_size=4,
).map(",".join)
values = st.one_of(addresses_text, st.text(max_size=40), st.sampled_from(("v4", "v6", "nope")))
annotation_keys = st.sampled_from(
    [
        *(k.name for k in keys.INPUT_KEYS),
        *(k.legacy for k in keys.INPUT_KEYS),
        keys.IP_ALLOCATED_FROM_POOL,
        "metallb.io/other",
    ]
)


@fuzzing.fuzz_settings(300)
@given(
    st.dictionaries(annotation_keys, values, max_size=5),
    st.one_of(st.none(), addresses_text, st.text(max_size=16)),
)
def test_annotations(annotations: dict[str, str], load_balancer_ip: str | None) -> None:
    obj = service(annotations, loadBalancerIP=load_balancer_ip)
    read(obj)
    requested = fuzzing.feed(AREA, requests.requested_ips, annotations, load_balancer_ip)
    assert requested.error is None or requested.ips == ()


@fuzzing.fuzz_settings(200)
@given(fuzzing.json_values())
def test_random_json_services(value: Any) -> None:
    read(value if isinstance(value, dict) else {"spec": value, "metadata": value})


@fuzzing.fuzz_settings(300)
@given(st.data())
def test_mutated_services(data: st.DataObject) -> None:
    valid = service({keys.LOAD_BALANCER_IPS.name: "10.0.0.3", keys.ALLOW_SHARED_IP.name: "k"})
    read(fuzzing.mutate_json(valid, data.draw))


@fuzzing.fuzz_settings(150)
@given(
    st.lists(
        st.one_of(
            st.ip_addresses(network="10.0.0.0/28"),
            st.ip_addresses(network="fd00::/124"),
        ),
        min_size=1,
        max_size=2,
        unique_by=lambda ip: ip.version,
    ),
    st.booleans(),
)
def test_valid_requests_round_trip(ips: list[Any], legacy: bool) -> None:
    key = keys.LOAD_BALANCER_IPS.legacy if legacy else keys.LOAD_BALANCER_IPS.name
    text = ",".join(str(ip) for ip in ips)
    view = fuzzing.feed(AREA, controller_snapshot.service_view, service({key: text}))
    assert view.request.requested.ips == tuple(ips)
    assert view.request.requested.error is None
    read(service({key: text}))
