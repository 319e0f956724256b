"""speaker.accounting: what a pass announces and withdraws becomes log lines, Events (one on the
Node for a mass withdrawal) and the metrics, unchanged in names and labels."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ironlb import model
from speaker import accounting, desired, metrics

VIP = ipaddress.ip_address("10.250.0.200")
VIP2 = ipaddress.ip_address("10.250.0.201")
WEB = desired.Service("app", "web", (VIP,))
API = desired.Service("app", "api", (VIP2,))
NOTHING_L2 = desired.L2Plan((), {})
NOTHING_BGP = desired.BGPPlan(())


class RecordingPoster:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def post_assigned(self, service: str, protocol: str) -> None:
        self.calls.append(("assigned", service, protocol))

    def post_service_event(self, key: str, reason: str, message: str, *, warning: bool) -> None:
        self.calls.append(("service", key, reason, message, warning))

    def post_node_event(self, reason: str, message: str, *, warning: bool) -> None:
        self.calls.append(("node", reason, message, warning))


def snap(*services: desired.Service) -> desired.Snapshot:
    return desired.Snapshot(model.Config(), services, {}, frozenset({"n1"}))


def reached(*services: desired.Service) -> dict[str, tuple[model.PeerName, ...]]:
    return {s.key: (model.PeerName("tor"),) for s in services}


def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in metrics.REGISTRY.collect()
        for s in family.samples
        if s.name == name
    }


@pytest.fixture
def books() -> Iterator[tuple[accounting.Accounting, RecordingPoster]]:
    poster = RecordingPoster()
    books = accounting.Accounting("n1", poster)  # type: ignore[arg-type]
    yield books, poster
    # The metrics are the process's: leave no series behind for other tests.
    books.account(NOTHING_L2, NOTHING_BGP, {}, snap(), layer2=True, bgp=True)


def test_announced_services_get_an_assigned_event_and_a_series_each(
    books: tuple[accounting.Accounting, RecordingPoster],
) -> None:
    a, poster = books
    l2 = desired.L2Plan((desired.L2Address(VIP, (), (WEB.key,)),), {VIP: "n1"})
    a.account(l2, NOTHING_BGP, reached(API), snap(WEB, API), layer2=True, bgp=True)
    assert poster.calls == [("assigned", "app/api", "bgp"), ("assigned", "app/web", "layer2")]
    assert a.announced == {"app/web": frozenset({"layer2"}), "app/api": frozenset({"bgp"})}
    assert samples("metallb_speaker_announced") == {
        (("ip", "10.250.0.200"), ("node", "n1"), ("protocol", "layer2"), ("service", "app/web")): 1,
        (("ip", "10.250.0.201"), ("node", "n1"), ("protocol", "bgp"), ("service", "app/api")): 1,
    }
    # The same again: nothing new to say.
    a.account(l2, NOTHING_BGP, reached(API), snap(WEB, API), layer2=True, bgp=True)
    assert len(poster.calls) == 2


def test_a_withdrawal_says_why_on_the_service(
    books: tuple[accounting.Accounting, RecordingPoster],
) -> None:
    a, poster = books
    l2 = desired.L2Plan((desired.L2Address(VIP, (), (WEB.key,)),), {VIP: "n1"})
    a.account(l2, NOTHING_BGP, reached(API), snap(WEB, API), layer2=True, bgp=True)
    poster.calls.clear()
    gone = desired.L2Plan(
        (), {VIP: "n2"}, {WEB.key: desired.Reason.NOT_OWNER}, {WEB.key: "n2 is elected"}
    )
    a.account(gone, NOTHING_BGP, {}, snap(WEB, API), layer2=True, bgp=True)
    assert poster.calls == [
        (
            "service",
            "app/api",
            "nodeWithdrawn",
            'not announcing from node "n1" with protocol "bgp": notAnnounced',
            False,
        ),
        (
            "service",
            "app/web",
            "nodeWithdrawn",
            'not announcing from node "n1" with protocol "layer2": notOwner: n2 is elected',
            False,
        ),
    ]
    assert a.announced == {}
    assert samples("metallb_speaker_announced") == {}
    assert samples("ironlb_speaker_services_not_announced") == {
        (("protocol", "layer2"), ("reason", "notOwner")): 1
    }


def test_a_mass_withdrawal_is_one_event_on_the_node_and_one_info_line(
    books: tuple[accounting.Accounting, RecordingPoster], caplog: pytest.LogCaptureFixture
) -> None:
    a, poster = books
    many = [
        desired.Service("app", f"s{i}", (ipaddress.ip_address(f"10.250.1.{i}"),))
        for i in range(accounting.SERVICE_EVENTS_PER_PASS + 1)
    ]
    a.account(NOTHING_L2, NOTHING_BGP, reached(*many), snap(*many), layer2=True, bgp=True)
    poster.calls.clear()
    with caplog.at_level(logging.INFO, logger=accounting.__name__):
        a.account(NOTHING_L2, NOTHING_BGP, {}, snap(*many), layer2=True, bgp=True)
    count = accounting.SERVICE_EVENTS_PER_PASS + 1
    assert poster.calls == [
        (
            "node",
            "ServicesWithdrawn",
            f"{count} announcements withdrawn from this node in one pass",
            False,
        )
    ]
    assert [(r.getMessage(), getattr(r, "count", None)) for r in caplog.records] == [
        ("services withdrawn", count)
    ]


def test_the_not_announced_counts_leave_out_a_plane_this_node_does_not_run(
    books: tuple[accounting.Accounting, RecordingPoster],
) -> None:
    a, _ = books
    l2 = desired.L2Plan((), {}, {WEB.key: desired.Reason.NOT_OWNER})
    bgp = desired.BGPPlan((), {WEB.key: desired.Reason.NO_LOCAL_ENDPOINTS})
    a.account(l2, bgp, {}, snap(WEB), layer2=False, bgp=True)
    assert samples("ironlb_speaker_services_not_announced") == {
        (("protocol", "bgp"), ("reason", "noLocalEndpoints")): 1
    }


def test_an_address_elected_here_without_its_interfaces_is_reported_once(
    books: tuple[accounting.Accounting, RecordingPoster],
) -> None:
    a, poster = books
    stuck = desired.L2Plan(
        (), {VIP: "n1"}, unannounceable=(desired.L2Address(VIP, ("eth9",), (WEB.key,)),)
    )
    a.report_unannounceable(stuck)
    a.report_unannounceable(stuck)
    message = (
        'the interfaces specified by LB IP "10.250.0.200" doesn\'t exist in assigned node "n1" '
        'with protocol "layer2"'
    )
    assert poster.calls == [("service", "app/web", "announceFailed", message, True)]


def test_the_metric_names_are_those_dashboards_read() -> None:
    text = metrics.REGISTRY.exposition().decode()
    for name in (
        "metallb_speaker_announced",
        "metallb_k8s_client_config_stale_bool",
        "ironlb_speaker_pass_seconds",
        "metallb_k8s_client_config_loaded_bool",
        "ironlb_speaker_services_not_announced",
    ):
        assert f"# HELP {name} " in text
