"""The raw Service reader (`ironlb.services`): one table of Services, read the same way by the
controller, the speaker and `ironlb status`.

Each row: a Service's type and class, the class we run with, and whether it is ours. The
controller must also see non-LoadBalancer Services of our class (to clear status they still carry),
so it is checked for the class rule alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller import snapshot as controller_snapshot
from ironlb import services
from ironlb_cli import status_view
from speaker import snapshot as speaker_snapshot

NS = "metallb-system"


def service(kind: str = "LoadBalancer", lb_class: Any = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind, "clusterIPs": ["10.96.0.10"]}
    if lb_class is not None:
        spec["loadBalancerClass"] = lb_class
    return {
        "metadata": {"namespace": "app", "name": "web", "resourceVersion": "7"},
        "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
        **extra,
    }


OURS: list[tuple[str, Any, str, bool]] = [
    # type, spec.loadBalancerClass, our --lb-class, ours?
    ("LoadBalancer", None, "", True),
    ("LoadBalancer", "", "", True),  # an empty class is no class
    ("LoadBalancer", "example.com/lb", "", False),  # another implementation's
    ("LoadBalancer", None, "ironlb", False),  # with a class we take only that class
    ("LoadBalancer", "ironlb", "ironlb", True),
    ("LoadBalancer", "IRONLB", "ironlb", False),  # exact, as Go's string compare
    ("LoadBalancer", 7, "", True),  # not a string: read as absent
    ("ClusterIP", None, "", False),
    ("NodePort", "ironlb", "ironlb", False),
]


@pytest.mark.parametrize(("kind", "lb_class", "our_class", "ours"), OURS)
def test_ours(kind: str, lb_class: Any, our_class: str, ours: bool) -> None:
    assert services.ours(service(kind, lb_class), our_class) is ours


@pytest.mark.parametrize(("kind", "lb_class", "our_class", "ours"), OURS)
def test_the_controller_takes_our_class_of_any_type(
    kind: str, lb_class: Any, our_class: str, ours: bool
) -> None:
    obj = service(kind, lb_class)
    view = controller_snapshot.service_view(obj)
    assert controller_snapshot.handled(view, our_class) is services.class_matches(obj, our_class)
    assert view.load_balancer is (kind == "LoadBalancer")


@pytest.mark.parametrize(("kind", "lb_class", "our_class", "ours"), OURS)
def test_the_speaker_announces_only_ours(
    kind: str, lb_class: Any, our_class: str, ours: bool
) -> None:
    store = speaker_snapshot.Store()
    store.put("Service", "ADDED", {"kind": "Service", **service(kind, lb_class)})
    snap, _ = speaker_snapshot.build(store, namespace=NS, alive=frozenset(), lb_class=our_class)
    assert [s.key for s in snap.services] == (["app/web"] if ours else [])


@pytest.mark.parametrize(("kind", "lb_class", "our_class", "ours"), OURS)
def test_the_status_command_shows_only_ours(
    kind: str, lb_class: Any, our_class: str, ours: bool
) -> None:
    view = status_view.build(
        status_view.Inputs(services=[service(kind, lb_class)], lb_class=our_class)
    )
    assert [(s.namespace, s.name) for s in view.services] == ([("app", "web")] if ours else [])


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({"namespace": "app", "name": "web"}, "app/web"),
        ({"name": "cluster-scoped"}, "/cluster-scoped"),
        ({"namespace": None, "name": 3}, "/"),
        ("not a mapping", "/"),
    ],
)
def test_key(metadata: Any, key: str) -> None:
    assert services.key({"metadata": metadata}) == key


def test_ingress_keeps_entries_as_written_and_addresses_by_the_rule() -> None:
    entries = [{"hostname": "lb.example"}, {"ip": "10.0.0.1"}, {"ip": "x"}, "junk", {"ip": ""}]
    ingress = services.ingress({"status": {"loadBalancer": {"ingress": entries}}})
    assert ingress.entries == (
        (None, "lb.example"),
        ("10.0.0.1", None),
        ("x", None),
        (None, None),
    )
    assert tuple(map(str, ingress.ips)) == ("10.0.0.1",)
    assert ingress.invalid == ("x",)
    assert ingress.texts == ("10.0.0.1", "x")


@pytest.mark.parametrize(
    "status", [None, "junk", {"loadBalancer": None}, {"loadBalancer": {"ingress": "x"}}]
)
def test_ingress_of_any_shape_reads_as_empty(status: Any) -> None:
    assert services.ingress({"status": status}) == services.Ingress()
