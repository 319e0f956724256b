"""What this node announces, pass after pass: a log line and an Event for each Service announced
or withdrawn, or elected here but not announceable (none of its interfaces is here), and the
metrics `metallb_speaker_announced` and `ironlb_speaker_services_not_announced`."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ironlb import model
from speaker import desired, metrics
from speaker.event_posting import EventPoster

log = logging.getLogger(__name__)

# Withdrawals in one pass beyond this are one Event on the Node, not one per Service; and
# announcements or withdrawals beyond this are one log line at info level (each Service's own
# line is then at debug level): 10,000 lines cost a pass ~0.6 s.
SERVICE_EVENTS_PER_PASS = 50

Label = tuple[str, str, str, str]  # service, protocol, node, ip


class Accounting:
    def __init__(self, node_name: str, poster: EventPoster) -> None:
        self.node_name = node_name
        self.poster = poster
        self.announced: dict[str, frozenset[str]] = {}  # service -> protocols
        self._metric_labels: set[Label] = set()
        self._not_announced_labels: set[tuple[str, str]] = set()
        # (Service, address) elected here but with none of its advertisements' interfaces, as
        # reported so far (an announceFailed Event when a pair appears).
        self._unannounceable: frozenset[tuple[str, str]] = frozenset()
        # The metric's series of each announcement, kept while it is the same object (the plans'
        # memo and the store keep them until they change): an address's text costs more than
        # the rest of the series.
        self._series: _Series = {}

    def account(
        self,
        l2: desired.L2Plan,
        bgp_plan: desired.BGPPlan,
        reached: Mapping[str, tuple[model.PeerName, ...]],
        snap: desired.Snapshot,
        *,
        layer2: bool,
        bgp: bool,
    ) -> None:
        """One pass's plans; `layer2` and `bgp` say whether this node runs each data plane."""
        now, labels, self._series = _announcing(
            self.node_name, l2 if layer2 else None, reached, snap, self._series
        )
        if labels != self._metric_labels:
            metrics.ANNOUNCED.series = frozenset(labels)
        self._metric_labels = labels
        self._announce(now)
        self._withdraw(now, l2, bgp_plan)
        self.announced = {k: frozenset(v) for k, v in now.items()}
        self._count_not_announced(l2 if layer2 else None, bgp_plan if bgp else None)

    def _announce(self, now: Mapping[str, set[str]]) -> None:
        announced = [
            (service, protocol)
            for service, protocols in sorted(now.items())
            for protocol in sorted(protocols - self.announced.get(service, frozenset()))
        ]
        each = logging.INFO if len(announced) <= SERVICE_EVENTS_PER_PASS else logging.DEBUG
        for service, protocol in announced:
            log.log(
                each,
                "service announced",
                extra={"event": "serviceAnnounced", "service": service, "protocol": protocol},
            )
            self.poster.post_assigned(service, protocol)
        if each != logging.INFO:
            log.info(
                "services announced",
                extra={"event": "servicesAnnounced", "count": len(announced)},
            )

    def _withdraw(
        self, now: Mapping[str, set[str]], l2: desired.L2Plan, bgp_plan: desired.BGPPlan
    ) -> None:
        withdrawn = [
            (service, protocol)
            for service, before in sorted(self.announced.items())
            for protocol in sorted(before - now.get(service, set()))
        ]
        each = logging.INFO if len(withdrawn) <= SERVICE_EVENTS_PER_PASS else logging.DEBUG
        for service, protocol in withdrawn:
            plan_reasons = l2.reasons if protocol == "layer2" else bgp_plan.reasons
            why = str(plan_reasons.get(service, "notAnnounced"))
            log.log(
                each,
                "service withdrawn",
                extra={
                    "event": "serviceWithdrawn",
                    "service": service,
                    "protocol": protocol,
                    "reason": why,
                },
            )
            if len(withdrawn) <= SERVICE_EVENTS_PER_PASS:
                detail = l2.messages.get(service, "") if protocol == "layer2" else ""
                self._post_withdrawn(service, protocol, why, detail)
        if len(withdrawn) > SERVICE_EVENTS_PER_PASS:
            log.info(
                "services withdrawn",
                extra={"event": "servicesWithdrawn", "count": len(withdrawn)},
            )
            self.poster.post_node_event(
                "ServicesWithdrawn",
                f"{len(withdrawn)} announcements withdrawn from this node in one pass",
                warning=False,
            )

    def _post_withdrawn(self, service: str, protocol: str, why: str, detail: str) -> None:
        message = (
            f'not announcing from node "{self.node_name}" with protocol "{protocol}": '
            f"{why}{': ' + detail if detail else ''}"
        )
        self.poster.post_service_event(service, "nodeWithdrawn", message, warning=False)

    def report_unannounceable(self, l2: desired.L2Plan) -> None:
        """MetalLB's announceFailed Warning on a Service when this node is elected for one of
        its addresses but none of the interfaces its L2Advertisements name is here: once when
        that starts (MetalLB posts one on every reconcile of the Service)."""
        now = frozenset(
            (key, str(entry.address)) for entry in l2.unannounceable for key in entry.services
        )
        for key, address in sorted(now - self._unannounceable):
            log.warning(
                "the interfaces to announce an address on are not on this node",
                extra={"event": "announceFailed", "service": key, "ip": address},
            )
            message = (
                f'the interfaces specified by LB IP "{address}" doesn\'t exist in assigned node '
                f'"{self.node_name}" with protocol "layer2"'
            )
            self.poster.post_service_event(key, "announceFailed", message, warning=True)
        self._unannounceable = now

    def _count_not_announced(
        self, l2: desired.L2Plan | None, bgp_plan: desired.BGPPlan | None
    ) -> None:
        """The plans of the data planes this node runs (None: it does not run that one)."""
        counts: dict[tuple[str, str], int] = {}
        plans = (("layer2", l2), ("bgp", bgp_plan))
        for protocol, plan in plans:
            if plan is None:
                continue
            for why in plan.reasons.values():
                label = (protocol, str(why))
                counts[label] = counts.get(label, 0) + 1
        for gone in self._not_announced_labels - set(counts):
            metrics.NOT_ANNOUNCED.remove(*gone)
        for label, count in counts.items():
            metrics.NOT_ANNOUNCED.labels(*label).set(count)
        self._not_announced_labels = set(counts)


# id(announcement) -> (the announcement, its series): an L2Address, or a Service announced by BGP.
_Series = dict[int, tuple[object, tuple[Label, ...]]]


def _announcing(
    me: str,
    l2: desired.L2Plan | None,
    reached: Mapping[str, tuple[model.PeerName, ...]],
    snap: desired.Snapshot,
    kept: _Series,
) -> tuple[dict[str, set[str]], set[Label], _Series]:
    """Service -> the protocols announcing it from here, the metric's series, and the series
    to keep for the next pass (`kept`: the last pass's)."""
    now: dict[str, set[str]] = {}
    labels: set[Label] = set()
    series: _Series = {}
    if l2 is not None:
        for entry in l2.mine:
            got = kept.get(id(entry))
            if got is None or got[0] is not entry:
                address = str(entry.address)
                got = (entry, tuple((key, "layer2", me, address) for key in entry.services))
            series[id(entry)] = got
            labels.update(got[1])
            for key in entry.services:
                now.setdefault(key, set()).add("layer2")
    by_key = desired.services_by_key(snap.services)
    for key in reached:
        now.setdefault(key, set()).add("bgp")
        service = by_key.get(key)
        if service is None:
            continue
        got = kept.get(id(service))
        if got is None or got[0] is not service:
            got = (service, tuple((key, "bgp", me, str(ip)) for ip in service.ips))
        series[id(service)] = got
        labels.update(got[1])
    return now, labels, series
