"""Raw Kubernetes objects -> allocator inputs, and desired state -> the smallest write (pure).

The reconciler keeps the last object it has seen of every Service, pool and Namespace. This
module is everything it needs to know about those dicts, with no I/O and no clock:

* `service_view` reads a Service once into a frozen `ServiceView` (the allocator's
  `ServiceRequest` plus what is applied: ingress, the pool annotation). Two views compare equal
  when nothing the controller reads has changed, so a status write echoed back by the watch, or a
  change to a field we ignore, wakes nothing up.
* `pools` parses and validates the IPAddressPools with `ironlb.parsing`/`ironlb.validation`
  and resolves namespace selectors against the Namespaces' labels. An invalid set is refused
  whole (MetalLB keeps running on its last good configuration rather than evict Services
  because one object is wrong).
* `status_patch`, `pool_status_patch` compare what is wanted with what the object says and
  return the merge patch that makes them equal, or None. The controller writes only these, so a
  restart of a settled cluster, where everything already matches, writes nothing.
* `event_body` renders a core/v1 Event for a Service, time passed in.

The status subresource of a Service accepts `metadata.annotations` (checked against
kube-apiserver 1.37: both setting and removing an annotation through `services/status` work),
so the ingress and `metallb.io/ip-allocated-from-pool` travel in one PATCH, as in MetalLB's
UpdateStatus, and the controller never needs write access to Services themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller import allocator, converging, requests

# Aliased: `annotations` is also the name of the __future__ feature imported above.
from ironlb import addresses, model, parsing, services, validation
from ironlb import annotations as keys
from ironlb.problems import Problem

COMPONENT = "metallb-controller"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    # A list field holding a number or an object (only a hand-made or fuzzed object can) must
    # read as empty, not raise out of the watch handler and leave the Service unhandled.
    return value if isinstance(value, list) else []


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value).items()}


def newer(candidate: str, current: str) -> bool:
    """Whether `candidate` is a later resourceVersion of one object than `current`.

    resourceVersions are opaque by contract, but every etcd-backed apiserver issues them from
    one increasing revision; when both parse as integers that order is used, so that a watch
    event older than a PATCH response we already hold cannot roll the snapshot back. Otherwise
    the newcomer wins (the watch delivers one object's events in order).
    """
    if not current:
        return True
    try:
        return int(candidate) > int(current)
    except ValueError:
        return candidate != current


# --- Services ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceView:
    """What the controller reads from one Service; equal views need no new decision."""

    key: str
    namespace: str
    name: str
    uid: str
    request: allocator.ServiceRequest
    lb_class: str | None
    ingress: services.Entries  # status.loadBalancer.ingress as applied
    allocated_pool: str | None  # the metallb.io/ip-allocated-from-pool annotation as applied
    deprecated: tuple[str, ...]  # metallb.universe.tf/* annotation keys present
    resource_version: str = dataclasses.field(default="", compare=False)

    @property
    def load_balancer(self) -> bool:
        return self.request.load_balancer

    @property
    def holds_status(self) -> bool:
        """Carries something this controller writes (so a non-LoadBalancer one needs clearing)."""
        return bool(self.ingress) or self.allocated_pool is not None


def _ports(spec: Mapping[str, Any]) -> tuple[allocator.Port, ...]:
    ports: list[allocator.Port] = []
    for entry in _list(spec.get("ports")):
        if isinstance(entry, Mapping) and isinstance(entry.get("port"), int):
            ports.append((str(entry.get("protocol") or "TCP"), int(entry["port"])))
    return tuple(ports)


def service_view(obj: Mapping[str, Any]) -> ServiceView:
    """Read a Service dict (as the API returns it) once."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    notes = _strings(meta.get("annotations"))
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    key = services.key(obj)
    ingress = services.ingress(obj)
    cluster_ips = [str(ip) for ip in _list(spec.get("clusterIPs")) if ip]
    cluster_ip = spec.get("clusterIP")
    if cluster_ip == "None":  # headless: no cluster IP at all
        cluster_ip, cluster_ips = None, []
    lb_ip = spec.get("loadBalancerIP")
    request = allocator.ServiceRequest(
        key=key,
        namespace=namespace,
        labels=allocator.labels_of(_strings(meta.get("labels"))),
        family=requests.cluster_family(cluster_ips, str(cluster_ip) if cluster_ip else None),
        primary_family=requests.primary_family([str(f) for f in _list(spec.get("ipFamilies"))]),
        policy=requests.FamilyPolicy.parse(spec.get("ipFamilyPolicy")),
        requested=requests.requested_ips(notes, str(lb_ip) if lb_ip else None),
        requested_pool=requests.requested_pool(notes),
        sharing_key=requests.sharing_key(notes),
        backend_key=requests.backend_key(
            _strings(spec.get("selector")), spec.get("externalTrafficPolicy")
        ),
        ports=_ports(spec),
        # An ingress address that does not parse is dropped here rather than cleared with the
        # rest (MetalLB clears): it cannot be re-asserted, and the other family's can.
        current_ips=ingress.ips,
        load_balancer=services.is_load_balancer(obj),
    )
    return ServiceView(
        key=key,
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        request=request,
        lb_class=services.lb_class(obj),
        ingress=ingress.entries,
        allocated_pool=notes.get(keys.IP_ALLOCATED_FROM_POOL),
        deprecated=tuple(keys.deprecated_keys(notes)),
        resource_version=services.resource_version(obj),
    )


def handled(view: ServiceView, lb_class: str) -> bool:
    return services.is_our_class(view.lb_class, lb_class)


def relevant(view: ServiceView, lb_class: str) -> bool:
    """Needs a decision: ours, and a LoadBalancer or carrying status we would have to clear."""
    return handled(view, lb_class) and (view.load_balancer or view.holds_status)


# --- desired state and the diff ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Desired:
    """What status.loadBalancer.ingress and the pool annotation should say; () / None = clear."""

    ips: tuple[addresses.IPAddress, ...] = ()
    pool: str | None = None

    @property
    def ingress(self) -> services.Entries:
        return tuple((str(ip), None) for ip in self.ips)


CLEARED = Desired()


def desired_of(decision: converging.Decision) -> Desired | None:
    """None when the decision is to leave the Service as it is."""
    if decision.status is converging.Status.SET:
        return Desired(decision.ips, decision.pool)
    if decision.status is converging.Status.CLEAR:
        return CLEARED
    return None


def applied(view: ServiceView, desired: Desired) -> bool:
    """The Service shows the decision: the ingress and the pool annotation, both."""
    return view.ingress == desired.ingress and view.allocated_pool == desired.pool


def status_patch(view: ServiceView, desired: Desired) -> dict[str, Any] | None:
    """The merge patch for `services/<name>/status`, or None when nothing differs.

    Lists are replaced whole by a merge patch, so the ingress is always written entire; a
    clear is `ingress: null` (an empty `loadBalancer: {}` would merge into nothing).
    """
    body: dict[str, Any] = {}
    if view.ingress != desired.ingress:
        ingress = [{"ip": str(ip)} for ip in desired.ips] or None
        body["status"] = {"loadBalancer": {"ingress": ingress}}
    # An address is always written with its pool: the view may be out of date about the
    # annotation (the apiserver keeps it when it clears status on a type change), and an
    # address without its annotation is what a user would see until the next write.
    if view.allocated_pool != desired.pool or (desired.ips and "status" in body):
        body["metadata"] = {"annotations": {keys.IP_ALLOCATED_FROM_POOL: desired.pool}}
    return body or None


# --- pools ---------------------------------------------------------------------------------------

NamespaceLabels = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class PoolSet:
    """The outcome of reading every pool: the allocator's pools, or None if any is invalid."""

    pools: tuple[allocator.Pool, ...] | None
    problems: tuple[Problem, ...] = ()
    # Whether any pool's admission depends on Namespace labels (so relabels matter).
    uses_namespace_labels: bool = False


def to_pool(pool: model.IPAddressPool, namespaces: NamespaceLabels) -> allocator.Pool:
    """One parsed pool with its namespace selectors resolved against the current Namespaces."""
    sa = pool.service_allocation
    if sa is None:
        return allocator.Pool(
            name=pool.name,
            ranges=pool.addresses,
            auto_assign=pool.auto_assign,
            avoid_buggy_ips=pool.avoid_buggy_ips,
        )
    allowed: frozenset[str] | None = None
    if sa.namespaces or sa.namespace_selectors:
        # Not selectors.any_matches: there an empty list selects everything, here nothing.
        matching = {
            name
            for name, labels in namespaces.items()
            if any(s.matches(labels) for s in sa.namespace_selectors)
        }
        allowed = frozenset(sa.namespaces) | frozenset(matching)
    return allocator.Pool(
        name=pool.name,
        ranges=pool.addresses,
        auto_assign=pool.auto_assign,
        avoid_buggy_ips=pool.avoid_buggy_ips,
        priority=sa.priority,
        namespaces=allowed,
        service_selectors=sa.service_selectors,
        has_service_allocation=True,
    )


def pools(raw: Iterable[Mapping[str, Any]], namespaces: NamespaceLabels) -> PoolSet:
    """Parse, validate and resolve every IPAddressPool of the MetalLB namespace."""
    config, problems = parsing.parse_config({model.IP_ADDRESS_POOL: list(raw)})
    problems = validation.order([*problems, *validation.validate(config)])
    uses_labels = any(
        p.service_allocation is not None and bool(p.service_allocation.namespace_selectors)
        for p in config.pools
    )
    if validation.invalid_objects(problems):
        return PoolSet(None, tuple(problems), uses_labels)
    resolved = tuple(to_pool(p, namespaces) for p in config.pools)
    return PoolSet(resolved, tuple(problems), uses_labels)


def pool_status(counters: allocator.PoolCounters) -> dict[str, int]:
    return {
        "assignedIPv4": counters.assigned_ipv4,
        "assignedIPv6": counters.assigned_ipv6,
        "availableIPv4": counters.available_ipv4,
        "availableIPv6": counters.available_ipv6,
    }


def pool_status_patch(
    raw_pool: Mapping[str, Any], counters: allocator.PoolCounters
) -> dict[str, Any] | None:
    """The merge patch for `ipaddresspools/<name>/status`, or None (manual edits are reverted)."""
    want = pool_status(counters)
    have = _mapping(raw_pool.get("status"))
    if all(have.get(k) == v for k, v in want.items()):
        return None
    return {"status": want}


# --- Events --------------------------------------------------------------------------------------


def event_body(
    view: ServiceView,
    event: converging.Event,
    *,
    now: str,
    name_suffix: str,
    instance: str,
) -> dict[str, Any]:
    """A core/v1 Event about `view`, reported as MetalLB's controller reports them.

    `now` is an RFC 3339 timestamp and `name_suffix` makes the name unique (client-go uses the
    time in hex); both come from the caller so this stays pure.
    """
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{view.name}.{name_suffix}", "namespace": view.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Service",
            "namespace": view.namespace,
            "name": view.name,
            "uid": view.uid,
            "resourceVersion": view.resource_version,
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def deprecation_events(view: ServiceView) -> tuple[converging.Event, ...]:
    """MetalLB warns about each legacy annotation when it is about to write the Service."""
    return tuple(
        converging.Event(
            "Warning", "deprecatedAnnotation", f"Service uses deprecated annotation {k}"
        )
        for k in view.deprecated
    )
