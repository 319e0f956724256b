"""Conformance, differentially: the same manifests under ironlb and under MetalLB, compared as a
user sees them.

A case (`hack/conformance_cases.py`) is a few steps of manifests. `run_case` applies each step to
a cluster, waits until what a user can see stops changing, observes it, and deletes what it made.
`observe` reads that view through an injected getter (kubectl arguments in, parsed JSON out) and
reduces it to plain data: each Service's addresses, the annotations the controller writes, the
reasons of the Events on Services and on metallb.io objects, the pools' counters, the speakers'
ServiceL2Status / ServiceBGPStatus by Service and node, the ConfigurationState results, and which
objects the apiserver refused (by class, since the two systems word refusals differently).
`compare` diffs two such observations path by path; a difference is *explained* only when it
matches a row of `DELIBERATE`, the table of differences we keep on purpose, which also renders
the section of `docs/compared-with-metallb.md` that lists them (`render_deliberate`).

Choices:
* Observations are flattened to `path -> value` (`flatten`) before comparing, so a difference
  names one field (`service/ns/web/ingress`, `IPAddressPool/p/status/availableIPv4`,
  `service/ns/web/event/AllocationFailed`) and a deliberate difference can be matched by a glob
  on that path, restricted to cases and to the values each side shows.
* What is compared is what a user reads, not how it is stored: status objects are keyed by
  (Service, node), not by object name (MetalLB generates names, ironlb derives them); Events by
  reason, not message or count (MetalLB's speaker posts `nodeAssigned` on every reconcile,
  ironlb once per announcement); ingress addresses sorted; Events only for objects that exist
  now (by uid), so objects of an earlier case with the same name do not leak in.
* "Settled" is the observation unchanged over three reads about a second apart, after the
  backends a step declares are ready (Pods are started by the lab, not by the system under
  test), bounded by a timeout; an observation that never settles is compared anyway and says so
  (`settled: false` is itself a difference when the other side settled).
* Which allocation outcomes must agree: inside one pool both systems take the lowest address
  that is free or shareable, entries in `spec.addresses` order (MetalLB: `getIPFromCIDR` walks
  each CIDR of `pool.CIDR` from its first address; ironlb: `controller/allocator.py`), and
  restricted pools go first by priority; so any difference there is a real one. What may
  legitimately differ is the choice between pools MetalLB leaves to Go map order: several
  unrestricted auto-assign pools (`Allocate` ranges over `pools.ByName`) and restricted pools of
  equal priority (`ByNamespace` comes from a map, `sortPools` is not stable); ironlb orders both
  by name. The corpus avoids equal priorities and holds one case of the first kind, explained by
  its own row; a case where the order cannot matter (one pool of each family) stays strict.
* The pure parts (normalising, flattening, comparing, settling with an injected clock) are
  unit-tested without a cluster; `lab_getter`, `lab_applier` and `lab_deleter` are the thin
  kubectl shell for a lab.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import ipaddress
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hack import lab as network_lab
from hack import objects
from hack.metallb import MODES as METALLB_MODES

METALLB_NAMESPACE = objects.METALLB_NAMESPACE
GROUP = "metallb.io"
SETTLE_READS = 3
SETTLE_INTERVAL_S = 1.0
SETTLE_TIMEOUT_S = 60.0
# How long a settled read with an IPAddressPool whose counters are not written yet is read again
# for them (see `settle`): a controller that has just started writes them a little later.
COUNTERS_GRACE_S = 10.0
DELETE_TIMEOUT_S = 55  # below the lab's 60 s bound on one kubectl process

# The metallb.io kinds a user writes, and the ones the speakers write.
CONFIG_KINDS = (
    "IPAddressPool",
    "L2Advertisement",
    "BGPAdvertisement",
    "BGPPeer",
    "Community",
    "BFDProfile",
)
STATUS_KINDS = ("ServiceL2Status", "ServiceBGPStatus")
CONFIGURATION_STATE = "ConfigurationState"
POOL_STATUS_FIELDS = ("assignedIPv4", "assignedIPv6", "availableIPv4", "availableIPv6")

# Annotations a user writes on a Service (both spellings); any other metallb.io annotation on a
# Service was written by the controller (today: metallb.io/ip-allocated-from-pool).
INPUT_ANNOTATIONS = frozenset(
    f"{prefix}/{name}"
    for prefix in ("metallb.io", "metallb.universe.tf")
    for name in ("loadBalancerIPs", "address-pool", "allow-shared-ip")
)
ANNOTATION_PREFIXES = ("metallb.io/", "metallb.universe.tf/")

# kubectl's names for what `observe` lists: one kubectl process per case namespace, one for the
# MetalLB namespace, one for the ConfigurationStates (a kind MetalLB v0.15.2 does not serve).
SERVICE_NAMESPACE_KINDS = "services,endpointslices,events"
SYSTEM_KINDS = ",".join(
    [
        "ipaddresspools",
        "l2advertisements",
        "bgpadvertisements",
        "bgppeers",
        "communities",
        "bfdprofiles",
        "servicel2statuses",
        "servicebgpstatuses",
        "events",
    ]
)

Manifest = Mapping[str, Any]
Value = str | int | bool | tuple[str, ...] | None
Getter = Callable[[Sequence[str]], Any]  # kubectl arguments -> parsed JSON
Apply = Callable[[Manifest], None]  # raises Refused when the apiserver (or a webhook) says no
Delete = Callable[[Sequence[Manifest]], None]  # deletes, ignoring what is gone, and waits
Observe = Callable[[Sequence[str]], "Observation"]  # the case's namespaces -> what a user sees


class NotServed(Exception):
    """The apiserver does not serve a kind (MetalLB v0.15.2 has no ConfigurationState)."""


class Refused(Exception):
    """The apiserver refused an object at apply time; `refusal` is its class."""

    def __init__(self, refusal: str, text: str) -> None:
        super().__init__(f"{refusal}: {text}")
        self.refusal = refusal
        self.text = text


# --- the corpus' shape ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """Manifests to delete, then manifests to apply (in order; kubectl apply, so applying a
    changed manifest of an existing object changes it)."""

    title: str
    apply: tuple[Manifest, ...] = ()
    delete: tuple[Manifest, ...] = ()


@dataclass(frozen=True)
class Case:
    name: str
    about: str  # one line: what it checks and where in MetalLB's tests it comes from
    steps: tuple[Step, ...]
    quick: bool = False  # part of the small set a quick run or a CI tier uses
    invalid: bool = False  # holds deliberately malformed objects, refused at apply time

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces the case makes (its Services live there)."""
        names = [
            str(m["metadata"]["name"])
            for step in self.steps
            for m in step.apply
            if m.get("kind") == "Namespace"
        ]
        return tuple(dict.fromkeys(names))


def ref(manifest: Manifest) -> str:
    """`Kind/namespace/name` of a manifest (namespace empty for cluster-scoped kinds)."""
    meta = manifest.get("metadata") or {}
    return f"{manifest.get('kind')}/{meta.get('namespace') or ''}/{meta.get('name')}"


def live_manifests(case: Case, step: int) -> dict[str, Manifest]:
    """What the case has applied and not deleted once step `step` (0-based) is done, by ref."""
    live: dict[str, Manifest] = {}
    for current in case.steps[: step + 1]:
        for manifest in current.delete:
            live.pop(ref(manifest), None)
        for manifest in current.apply:
            live[ref(manifest)] = manifest
    return live


def expected_endpoints(manifests: Iterable[Manifest]) -> dict[str, tuple[str, ...]]:
    """For each Service among `manifests`: the nodes its ready endpoints should be on, from the
    Pods among them (each pinned to a node by a hostname nodeSelector, as `objects.pod` does)."""
    live = list(manifests)
    pods = [m for m in live if m.get("kind") == "Pod"]
    out: dict[str, tuple[str, ...]] = {}
    for svc in live:
        if svc.get("kind") != "Service":
            continue
        namespace = svc["metadata"]["namespace"]
        selector: Mapping[str, str] = (svc.get("spec") or {}).get("selector") or {}
        nodes = set()
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"].get("namespace") != namespace or not selector:
                continue
            if all(labels.get(k) == v for k, v in selector.items()):
                node = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(
                    "kubernetes.io/hostname", ""
                )
                nodes.add(str(node))
        out[f"{namespace}/{svc['metadata']['name']}"] = tuple(sorted(nodes))
    return out


# --- what a user sees ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceView:
    """One Service as a user sees it. `exists` is False for a Service known only from status
    objects that outlived it."""

    exists: bool = True
    type: str = ""
    ingress: tuple[str, ...] = ()  # sorted: IPv4 before IPv6, numerically
    annotations: tuple[tuple[str, str], ...] = ()  # metallb.io ones the controller wrote
    events: frozenset[str] = frozenset()  # reasons
    endpoints: tuple[str, ...] = ()  # nodes with a ready endpoint (an input; checked anyway)
    l2: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (node, interfaces) per ServiceL2Status
    bgp: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (node, peers) per ServiceBGPStatus


@dataclass(frozen=True)
class ObjectView:
    """One metallb.io configuration object: its status counters (IPAddressPool) and Events."""

    status: tuple[tuple[str, int | None], ...] = ()
    events: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Observation:
    services: Mapping[str, ServiceView] = field(default_factory=dict)  # "namespace/name"
    objects: Mapping[str, ObjectView] = field(default_factory=dict)  # "Kind/name"
    # ConfigurationState name -> status.result; None when the kind is not served.
    configuration: Mapping[str, str] | None = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)  # ref -> refusal class
    case: str = ""
    step: int = 0
    settled: bool = True


def _items(listed: Any) -> list[Mapping[str, Any]]:
    if not isinstance(listed, Mapping):
        return []
    return [i for i in listed.get("items") or [] if isinstance(i, Mapping)]


def _meta(item: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = item.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _address_key(text: str) -> tuple[int, int, int, str]:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return (1, 0, 0, text)
    return (0, ip.version, int(ip), "")


def normal_address(text: str) -> str:
    """An address in its canonical spelling (IPv6 compressed); anything else as it is."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return text


def ingress(service: Mapping[str, Any]) -> tuple[str, ...]:
    """`status.loadBalancer.ingress[].ip`, canonical and sorted (hostname entries ignored)."""
    status = service.get("status") or {}
    entries = (status.get("loadBalancer") or {}).get("ingress") or []
    ips = [normal_address(str(e["ip"])) for e in entries if isinstance(e, Mapping) and e.get("ip")]
    return tuple(sorted(ips, key=_address_key))


def written_annotations(service: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    annotations: Mapping[str, str] = _meta(service).get("annotations") or {}
    return tuple(
        sorted(
            (k, str(v))
            for k, v in annotations.items()
            if k.startswith(ANNOTATION_PREFIXES) and k not in INPUT_ANNOTATIONS
        )
    )


def _involved_uid(event: Mapping[str, Any]) -> str:
    # core/v1 Events say involvedObject; events.k8s.io/v1 say regarding.
    about = event.get("involvedObject") or event.get("regarding") or {}
    return str(about.get("uid") or "") if isinstance(about, Mapping) else ""


def _status_target(item: Mapping[str, Any]) -> tuple[str, str, str]:
    """(service namespace, service name, node) of a ServiceL2Status / ServiceBGPStatus, from its
    status, else from MetalLB's labels (a status not written yet)."""
    status = item.get("status") or {}
    labels = _meta(item).get("labels") or {}
    namespace = status.get("serviceNamespace") or labels.get("metallb.io/service-namespace") or ""
    name = status.get("serviceName") or labels.get("metallb.io/service-name") or ""
    node = status.get("node") or labels.get("metallb.io/node") or ""
    return str(namespace), str(name), str(node)


def normalise(
    listed: Iterable[Mapping[str, Any]],
    configuration_states: Iterable[Mapping[str, Any]] | None,
    namespaces: Sequence[str],
) -> Observation:
    """What a user sees, from the items `observe` listed (any kinds, any order); Services and
    status objects only for `namespaces`, configuration objects from the MetalLB namespace."""
    wanted = set(namespaces)
    items = list(listed)
    services = {
        f"{_meta(i).get('namespace')}/{_meta(i).get('name')}": i
        for i in items
        if i.get("kind") == "Service" and _meta(i).get("namespace") in wanted
    }
    config = {
        f"{i.get('kind')}/{_meta(i).get('name')}": i
        for i in items
        if i.get("kind") in CONFIG_KINDS and _meta(i).get("namespace") == METALLB_NAMESPACE
    }
    by_uid: dict[str, str] = {}
    for key, item in services.items():
        by_uid[str(_meta(item).get("uid") or "")] = f"service:{key}"
    for key, item in config.items():
        by_uid[str(_meta(item).get("uid") or "")] = f"object:{key}"
    by_uid.pop("", None)
    reasons: dict[str, set[str]] = {}
    for event in items:
        if event.get("kind") != "Event":
            continue
        owner = by_uid.get(_involved_uid(event))
        if owner is not None and event.get("reason"):
            reasons.setdefault(owner, set()).add(str(event["reason"]))

    slices: dict[str, list[Mapping[str, Any]]] = {}
    for item in items:
        if item.get("kind") != "EndpointSlice":
            continue
        labels = _meta(item).get("labels") or {}
        owner_name = labels.get("kubernetes.io/service-name")
        if owner_name:
            key = f"{_meta(item).get('namespace')}/{owner_name}"
            slices.setdefault(key, []).append(item)

    status_objects: dict[str, dict[str, list[tuple[str, tuple[str, ...]]]]] = {}
    for item in items:
        kind = item.get("kind")
        if kind not in STATUS_KINDS:
            continue
        namespace, name, node = _status_target(item)
        if namespace not in wanted:
            continue
        status = item.get("status") or {}
        if kind == "ServiceL2Status":
            detail = tuple(sorted(str(i.get("name")) for i in status.get("interfaces") or [] if i))
        else:
            detail = tuple(sorted(str(p) for p in status.get("peers") or []))
        per_kind = status_objects.setdefault(f"{namespace}/{name}", {})
        per_kind.setdefault(str(kind), []).append((node, detail))

    views: dict[str, ServiceView] = {}
    for key in sorted(set(services) | set(status_objects)):
        svc = services.get(key)
        found = status_objects.get(key, {})
        l2 = tuple(sorted(found.get("ServiceL2Status", [])))
        bgp = tuple(sorted(found.get("ServiceBGPStatus", [])))
        if svc is None:
            views[key] = ServiceView(exists=False, l2=l2, bgp=bgp)
            continue
        views[key] = ServiceView(
            exists=True,
            type=str((svc.get("spec") or {}).get("type") or ""),
            ingress=ingress(svc),
            annotations=written_annotations(svc),
            events=frozenset(reasons.get(f"service:{key}", ())),
            endpoints=tuple(sorted(objects.ready_nodes(dict(s) for s in slices.get(key, [])))),
            l2=l2,
            bgp=bgp,
        )

    object_views: dict[str, ObjectView] = {}
    for key, item in sorted(config.items()):
        status_fields: tuple[tuple[str, int | None], ...] = ()
        if item.get("kind") == "IPAddressPool":
            status = item.get("status") or {}
            status_fields = tuple((f, _int_or_none(status.get(f))) for f in POOL_STATUS_FIELDS)
        object_views[key] = ObjectView(
            status=status_fields, events=frozenset(reasons.get(f"object:{key}", ()))
        )

    configuration: dict[str, str] | None = None
    if configuration_states is not None:
        configuration = {
            str(_meta(s).get("name")): str((s.get("status") or {}).get("result") or "(none)")
            for s in configuration_states
            if _meta(s).get("namespace") in (None, METALLB_NAMESPACE)
        }
    return Observation(services=views, objects=object_views, configuration=configuration)


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def observe(get: Getter, namespaces: Sequence[str]) -> Observation:
    """What a user sees now, read through `get` (kubectl arguments -> parsed JSON)."""
    listed: list[Mapping[str, Any]] = []
    for namespace in namespaces:
        listed += _items(get(["get", SERVICE_NAMESPACE_KINDS, "-n", namespace, "-o", "json"]))
    listed += _items(get(["get", SYSTEM_KINDS, "-n", METALLB_NAMESPACE, "-o", "json"]))
    states: list[Mapping[str, Any]] | None
    try:
        states = _items(get(["get", "configurationstates", "-n", METALLB_NAMESPACE, "-o", "json"]))
    except NotServed:
        states = None
    return normalise(listed, states, namespaces)


NOT_SERVED = "not served"


def flatten(observation: Observation) -> dict[str, Value]:
    """`path -> value`, the form `compare` diffs. Paths:

    settled                                          bool
    refused/<Kind>/<namespace>/<name>                refusal class
    service/<ns>/<name>/type                         spec.type
    service/<ns>/<name>/ingress                      sorted addresses (always there)
    service/<ns>/<name>/annotation/<key>             a metallb.io annotation the controller wrote
    service/<ns>/<name>/event/<reason>               True
    service/<ns>/<name>/endpoints                    nodes with a ready endpoint
    service/<ns>/<name>/l2                           nodes of its ServiceL2Statuses
    service/<ns>/<name>/l2/<node>/interfaces         that status' interfaces
    service/<ns>/<name>/bgp                          nodes of its ServiceBGPStatuses
    service/<ns>/<name>/bgp/<node>/peers             that status' peers
    <Kind>/<name>/status/<field>                     IPAddressPool counters
    <Kind>/<name>/event/<reason>                     True
    ConfigurationState/<name>/result                 Valid | Invalid | Unknown
    ConfigurationState                               "not served" (the kind is not served)
    """
    out: dict[str, Value] = {"settled": observation.settled}
    for key, refusal in observation.refused.items():
        out[f"refused/{key}"] = refusal
    for key, svc in observation.services.items():
        base = f"service/{key}"
        if svc.exists:
            out[f"{base}/type"] = svc.type
            out[f"{base}/ingress"] = svc.ingress
            out[f"{base}/endpoints"] = svc.endpoints
        for name, value in svc.annotations:
            out[f"{base}/annotation/{name}"] = value
        for reason in svc.events:
            out[f"{base}/event/{reason}"] = True
        for protocol, entries, detail in (
            ("l2", svc.l2, "interfaces"),
            ("bgp", svc.bgp, "peers"),
        ):
            if not entries:
                continue
            out[f"{base}/{protocol}"] = tuple(node for node, _ in entries)
            for node, values in entries:
                out[f"{base}/{protocol}/{node}/{detail}"] = values
    for key, obj in observation.objects.items():
        for name, count in obj.status:
            out[f"{key}/status/{name}"] = count
        for reason in obj.events:
            out[f"{key}/event/{reason}"] = True
    if observation.configuration is None:
        out[CONFIGURATION_STATE] = NOT_SERVED
    else:
        for name, result in observation.configuration.items():
            out[f"{CONFIGURATION_STATE}/{name}/result"] = result
    return out


# --- refusals -----------------------------------------------------------------------------------

SCHEMA = "schema"
WEBHOOK_OVERLAP = "webhook-overlap"
WEBHOOK_OTHER = "webhook-other"
REFUSAL_CLASSES = (SCHEMA, WEBHOOK_OVERLAP, WEBHOOK_OTHER)

# Not a refusal of the object but a failure to judge it: raised, never classified.
_NOT_A_VERDICT = re.compile(
    r"failed calling webhook|InternalError|internal error|connection refused|"
    r"context deadline exceeded|timed out|Unable to connect|is forbidden: User",
    re.IGNORECASE,
)
_WEBHOOK = re.compile(r"admission webhook .* denied the request", re.IGNORECASE)
_OVERLAP = re.compile(r"overlap", re.IGNORECASE)
_SCHEMA = re.compile(
    r"\bis invalid\b|Invalid value|Unsupported value|Required value|Duplicate value|"
    r"Too long|Too many|must be of type|should be (greater|less) than|strict decoding error|"
    r"unknown field|error validating data|ValidationError",
    re.IGNORECASE,
)


def refusal_class(text: str) -> str | None:
    """The class of an apiserver refusal message, or None when the text is not a verdict on the
    object (a webhook that could not be called, a timeout, RBAC): that must fail the run, not be
    compared."""
    if _NOT_A_VERDICT.search(text):
        return None
    if _WEBHOOK.search(text):
        return WEBHOOK_OVERLAP if _OVERLAP.search(text) else WEBHOOK_OTHER
    if _SCHEMA.search(text):
        return SCHEMA
    return None


# --- comparing ----------------------------------------------------------------------------------


class _Any(enum.Enum):
    ANY = "any"


ANY = _Any.ANY


@dataclass(frozen=True)
class Deliberate:
    """A difference we keep on purpose: paths (globs), optionally only in some cases (globs)
    and only with these values on each side (None: the path is absent there)."""

    paths: tuple[str, ...]
    reason: str
    cases: tuple[str, ...] = ("*",)
    ironlb: tuple[Value, ...] | _Any = ANY
    metallb: tuple[Value, ...] | _Any = ANY
    # The MetalLB modes (`hack.metallb.MODES`) in which it differs so: how MetalLB speaks BGP
    # changes what its webhook accepts.
    modes: tuple[str, ...] = METALLB_MODES

    def matches(self, case: str, path: str, ironlb: Value, metallb: Value) -> bool:
        return (
            any(fnmatch.fnmatchcase(case, c) for c in self.cases)
            and any(fnmatch.fnmatchcase(path, p) for p in self.paths)
            and (self.ironlb is ANY or ironlb in self.ironlb)
            and (self.metallb is ANY or metallb in self.metallb)
        )


DELIBERATE: dict[str, Deliberate] = {
    "configuration-state-v0.15.2": Deliberate(
        paths=("ConfigurationState", "ConfigurationState/*"),
        metallb=(None, NOT_SERVED),
        reason=(
            "MetalLB writes ConfigurationState objects from v0.15.3 on; v0.15.2, the version "
            "compared, has no such kind. ironlb writes MetalLB's (`controller`, "
            "`speaker-<node>`). Drop this row when the pinned MetalLB moves past v0.15.2."
        ),
    ),
    "schema-before-webhook": Deliberate(
        paths=("refused/*",),
        ironlb=(SCHEMA,),
        metallb=(WEBHOOK_OTHER, WEBHOOK_OVERLAP),
        reason=(
            "ironlb checks what one object alone can tell (address syntax, ranges, communities) "
            "in the CRD schema and CEL rules, so kubectl is answered even without the webhook "
            "and the message names the field; MetalLB checks it in its webhook "
            "(docs/validation.md)."
        ),
    ),
    "node-withdrawn-event": Deliberate(
        paths=("service/*/event/nodeWithdrawn",),
        ironlb=(True,),
        metallb=(None,),
        reason=(
            "ironlb's speaker posts a Normal `nodeWithdrawn` Event, with the reason, when a node "
            "stops announcing a Service; MetalLB's only logs it."
        ),
    ),
    "invalid-configuration-event": Deliberate(
        paths=("*/event/InvalidConfiguration",),
        ironlb=(True,),
        metallb=(None,),
        reason=(
            "ironlb reports a configuration problem on the object at fault (a Warning Event "
            "`InvalidConfiguration` and a `Valid` condition); MetalLB logs it and keeps the last "
            "good configuration without a word on the object."
        ),
    ),
    "malformed-without-metallb-webhook": Deliberate(
        cases=("malformed-objects",),
        paths=(
            "refused/*",
            "IPAddressPool/good/status/*",
            "service/*/web/ingress",
            "service/*/web/annotation/*",
            "service/*/web/event/*",
        ),
        metallb=(None, ()),
        reason=(
            "Objects wrong on their own (a CIDR that is no address, a reversed range, a "
            "community over 65535) are refused by ironlb's CRD schema, so the valid pool beside "
            "them serves. MetalLB's CRD schema lets them in and its webhook refuses them; the "
            "lab runs MetalLB with its webhook off (the lab's apiserver reaches no Service), so "
            "there they exist, and MetalLB's controller takes the whole configuration as "
            "invalid and allocates nothing. With MetalLB's webhook on, both refuse the three "
            "and serve from the good pool."
        ),
    ),
    "buggy-single-address-count": Deliberate(
        cases=("avoid-buggy-single-address",),
        paths=("IPAddressPool/edge/status/*",),
        reason=(
            "MetalLB's `poolCount` takes a /32 that is a .0 or .255 address off twice with "
            "avoidBuggyIPs (it is both the first and the last address of its CIDR), so the pool "
            "counts 0 usable addresses though its .1 is handed out: an all-zero status, which "
            "MetalLB does not write, then -1 available once the .1 is taken. ironlb counts the "
            "one address it can hand out: 1 available, then 0."
        ),
    ),
    "pool-tie-break": Deliberate(
        cases=("two-unrestricted-pools",),
        paths=(
            "service/*/ingress",
            "service/*/annotation/metallb.io/ip-allocated-from-pool",
            "IPAddressPool/*/status/*",
        ),
        reason=(
            "Among several unrestricted auto-assign pools MetalLB takes them in Go map order "
            "(`Allocator.Allocate` ranges over `pools.ByName`), so which pool a Service draws "
            "from changes from run to run; ironlb takes them by name, so the same inputs give "
            "the same address."
        ),
    ),
    "empty-namespace-selection": Deliberate(
        cases=("namespace-selector-matches-nothing", "namespace-selector-priority"),
        paths=(
            "service/*/requested/ingress",
            "service/*/requested/annotation/metallb.io/ip-allocated-from-pool",
            "service/*/requested/event/*",
            "IPAddressPool/nobody/status/*",
            # The gold namespace loses its label: no namespace is gold any more.
            "service/*-gold/web/ingress",
            "service/*-gold/web/annotation/metallb.io/ip-allocated-from-pool",
            "service/*-gold/web/event/ClearAssignment",
            "IPAddressPool/high/status/*",
            "IPAddressPool/general/status/*",
        ),
        reason=(
            "A pool whose namespaceSelectors match no namespace admits no Service in ironlb. "
            "MetalLB's `isPoolCompatibleWithService` skips an empty namespace set and so admits "
            "every namespace: to an explicit request for one of its addresses, and to the "
            "address a Service holds when its namespace loses the label the pool selected it "
            "by (the last such namespace: MetalLB keeps the Service in that pool; ironlb moves "
            "it to a pool that admits it, with MetalLB's `ClearAssignment` Event)."
        ),
    ),
    "no-node-assigned-when-announce-failed": Deliberate(
        cases=("l2-missing-interface",),
        paths=("service/*/event/nodeAssigned",),
        ironlb=(None,),
        metallb=(True,),
        reason=(
            "When the elected node has none of the interfaces an L2Advertisement names, MetalLB "
            "posts announceFailed and then nodeAssigned ('announcing from node ...'), since its "
            "layer2 SetBalancer returns no error; it answers nothing. ironlb posts the same "
            "announceFailed and no nodeAssigned: it says announcing only when it answers."
        ),
    ),
    "native-bgp-limits": Deliberate(
        cases=("bgp-beyond-native",),
        paths=(
            "refused/BGPAdvertisement/*",
            "service/*/bgp",
            "service/*/bgp/*",
            "service/*/event/nodeAssigned",
        ),
        reason=(
            "MetalLB's native BGP mode refuses IPv6 pools in BGP advertisements and large "
            "communities (`DiscardFRROnly`, internal/config/validation.go); ironlb's BGP "
            "(ExaBGP) announces both, as MetalLB's FRR mode does."
        ),
        modes=("native",),
    ),
}


def deliberate_for(
    mode: str, table: Mapping[str, Deliberate] = DELIBERATE
) -> dict[str, Deliberate]:
    """The rows that explain differences from MetalLB run in `mode`."""
    return {name: row for name, row in table.items() if mode in row.modes}


@dataclass(frozen=True)
class Difference:
    case: str
    step: int
    path: str
    ironlb: Value
    metallb: Value
    explained_by: str | None = None  # the DELIBERATE row's id

    @property
    def explained(self) -> bool:
        return self.explained_by is not None

    def line(self) -> str:
        why = f" (deliberate: {self.explained_by})" if self.explained_by else ""
        return (
            f"{self.case} step {self.step}: {self.path}: ironlb {self.ironlb!r}, "
            f"MetalLB {self.metallb!r}{why}"
        )


def explain(
    case: str, path: str, ironlb: Value, metallb: Value, explained: Mapping[str, Deliberate]
) -> str | None:
    for name, entry in explained.items():
        if entry.matches(case, path, ironlb, metallb):
            return name
    return None


def compare(
    ironlb: Observation, metallb: Observation, explained: Mapping[str, Deliberate] = DELIBERATE
) -> list[Difference]:
    """Every path whose value differs, explained where a row of `explained` matches it."""
    if (ironlb.case, ironlb.step) != (metallb.case, metallb.step):
        raise ValueError(
            f"comparing {ironlb.case} step {ironlb.step} with {metallb.case} step {metallb.step}"
        )
    a, b = flatten(ironlb), flatten(metallb)
    out = []
    for path in sorted(a.keys() | b.keys()):
        x, y = a.get(path), b.get(path)
        if x == y:
            continue
        why = explain(ironlb.case, path, x, y, explained)
        out.append(Difference(ironlb.case, ironlb.step, path, x, y, why))
    return out


@dataclass(frozen=True)
class CaseRun:
    case: str
    observations: tuple[Observation, ...]  # one per step


def compare_runs(
    ironlb: CaseRun, metallb: CaseRun, explained: Mapping[str, Deliberate] = DELIBERATE
) -> list[Difference]:
    if ironlb.case != metallb.case or len(ironlb.observations) != len(metallb.observations):
        raise ValueError(f"runs of different cases: {ironlb.case} vs {metallb.case}")
    return [
        d
        for x, y in zip(ironlb.observations, metallb.observations, strict=True)
        for d in compare(x, y, explained)
    ]


def compare_all(
    ironlb: Sequence[CaseRun],
    metallb: Sequence[CaseRun],
    explained: Mapping[str, Deliberate] = DELIBERATE,
) -> list[Difference]:
    """The differences of every case both systems ran, in ironlb's order. A case only one of them
    ran (a run cut short) has nothing to be compared with, and is left out."""
    by_name = {run.case: run for run in metallb}
    return [
        d
        for run in ironlb
        if run.case in by_name
        for d in compare_runs(run, by_name[run.case], explained)
    ]


def summary(cases: int, differences: Sequence[Difference]) -> dict[str, int]:
    """The figures a bench reports."""
    return {
        "conformance_cases": cases,
        "conformance_differences": len(differences),
        "conformance_unexplained": sum(not d.explained for d in differences),
    }


def _values(values: tuple[Value, ...] | _Any) -> str:
    if values is ANY:
        return "any"
    assert not isinstance(values, _Any)
    return ", ".join("absent" if v is None else f"`{json.dumps(v)}`" for v in values)


def render_deliberate(table: Mapping[str, Deliberate] = DELIBERATE) -> str:
    """The "Deliberate differences" section of docs/compared-with-metallb.md."""
    lines = [
        "## Deliberate differences",
        "",
        "Generated from `hack/conformance.py` (`DELIBERATE`, rendered by `render_deliberate`).",
        "The conformance run compares what a user sees under ironlb and under MetalLB, path by",
        "path (`flatten`); a difference counts as explained only when it matches a row here.",
        "",
        "| id | MetalLB mode | cases | paths | ironlb | MetalLB | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in table.items():
        cases = ", ".join(f"`{c}`" for c in entry.cases) if entry.cases != ("*",) else "all"
        paths = ", ".join(f"`{p}`" for p in entry.paths)
        modes = ", ".join(entry.modes) if set(entry.modes) != set(METALLB_MODES) else "both"
        cells = [f"`{name}`", modes, cases, paths, _values(entry.ironlb), _values(entry.metallb)]
        cells.append(entry.reason)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


# --- running a case -----------------------------------------------------------------------------


def settle(
    read: Callable[[], Observation],
    timeout: float,
    *,
    ready: Callable[[Observation], bool] = lambda _: True,
    complete: Callable[[Observation], bool] = lambda _: True,
    grace: float = COUNTERS_GRACE_S,
    reads: int = SETTLE_READS,
    interval: float = SETTLE_INTERVAL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Observation:
    """Read until `reads` consecutive reads are equal and `ready`, `interval` apart, or until
    `timeout`; the last read, with `settled` saying which. A settled read that is not
    `complete` is read again, `interval` apart, until it is or `grace` (within `timeout`) has
    passed: equal reads of something not written yet (a MetalLB controller that has just
    started writes its pools' counters seconds later) are not what the user ends up seeing.
    After the grace it counts as settled as it is: some configurations get no counters."""
    deadline = clock() + timeout
    last = read()
    streak = 1 if ready(last) else 0
    while streak < reads:
        remaining = deadline - clock()
        if remaining <= 0:
            return dataclasses.replace(last, settled=False)
        sleep(min(interval, remaining))
        current = read()
        if not ready(current):
            streak = 0
        elif current == last and streak > 0:
            streak += 1
        else:
            streak = 1
        last = current
    grace_end = min(deadline, clock() + grace)
    while not complete(last) and clock() < grace_end:
        sleep(min(interval, grace_end - clock()))
        last = read()
    return dataclasses.replace(last, settled=True)


def counters_written(observation: Observation) -> bool:
    """Whether every IPAddressPool in `observation` has all its status counters."""
    return all(
        value is not None
        for key, view in observation.objects.items()
        if key.startswith("IPAddressPool/")
        for _, value in view.status
    )


def endpoints_ready(expected: Mapping[str, tuple[str, ...]]) -> Callable[[Observation], bool]:
    """Whether every Service's ready endpoints are where the case put its Pods."""

    def ready(observation: Observation) -> bool:
        for key, nodes in expected.items():
            view = observation.services.get(key)
            if view is None or not view.exists or view.endpoints != nodes:
                return False
        return True

    return ready


# Deleted first to last: what uses addresses, then what announces them, then the pools, then
# the namespaces (which would take their Services and Pods with them anyway).
_TEARDOWN_RANK = {
    "Service": 0,
    "Pod": 1,
    "L2Advertisement": 2,
    "BGPAdvertisement": 2,
    "BGPPeer": 3,
    "Community": 4,
    "BFDProfile": 4,
    "IPAddressPool": 5,
    "Namespace": 9,
}


def teardown_order(manifests: Iterable[Manifest]) -> list[Manifest]:
    ordered = list(manifests)
    ordered.reverse()  # later objects first within a rank
    return sorted(ordered, key=lambda m: _TEARDOWN_RANK.get(str(m.get("kind")), 6))


def run_case(
    case: Case,
    apply: Apply,
    observe: Observe,
    settle_timeout: float = SETTLE_TIMEOUT_S,
    *,
    delete: Delete,
    reads: int = SETTLE_READS,
    interval: float = SETTLE_INTERVAL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> CaseRun:
    """Apply each step, wait for it to settle (bounded), observe; delete everything the case
    made at the end, whatever happened. A refused object is recorded with its class."""
    namespaces = case.namespaces
    made: dict[str, Manifest] = {}
    observations: list[Observation] = []
    try:
        for index, step in enumerate(case.steps):
            if step.delete:
                delete(list(step.delete))
                for manifest in step.delete:
                    made.pop(ref(manifest), None)
            refused: dict[str, str] = {}
            for manifest in step.apply:
                try:
                    apply(manifest)
                except Refused as e:
                    refused[ref(manifest)] = e.refusal
                    continue
                made[ref(manifest)] = manifest

            def read(index: int = index, refused: dict[str, str] = refused) -> Observation:
                return dataclasses.replace(
                    observe(namespaces), case=case.name, step=index, refused=dict(refused)
                )

            observations.append(
                settle(
                    read,
                    settle_timeout,
                    ready=endpoints_ready(expected_endpoints(made.values())),
                    complete=counters_written,
                    reads=reads,
                    interval=interval,
                    sleep=sleep,
                    clock=clock,
                )
            )
    finally:
        if made:
            delete(teardown_order(made.values()))
    return CaseRun(case.name, tuple(observations))


# --- the lab's shell ----------------------------------------------------------------------------

_NOT_SERVED_TEXT = re.compile(r"doesn't have a resource type|the server could not find")


def lab_getter(lab: network_lab.Lab) -> Getter:
    """kubectl against the lab; a kind the apiserver does not serve raises NotServed."""

    def get(args: Sequence[str]) -> Any:
        try:
            return json.loads(lab.kubectl(*args))
        except network_lab.LabError as e:
            if _NOT_SERVED_TEXT.search(str(e)):
                raise NotServed(str(e)) from e
            raise

    return get


def lab_applier(
    lab: network_lab.Lab,
    *,
    timeout: float = objects.WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Apply:
    """`kubectl apply` of one object; a refusal raises Refused, any other failure LabError.
    A namespace's `default` ServiceAccount, which Pod admission needs, comes a moment after
    the namespace: that alone is retried."""

    def apply(manifest: Manifest) -> None:
        deadline = clock() + timeout
        while True:
            try:
                objects.apply(lab, dict(manifest))
                return
            except network_lab.LabError as e:
                text = str(e)
                if "serviceaccount" in text.lower() and clock() < deadline:
                    sleep(0.1)
                    continue
                refusal = refusal_class(text)
                if refusal is None:
                    raise
                raise Refused(refusal, text) from e

    return apply


def lab_deleter(lab: network_lab.Lab) -> Delete:
    """`kubectl delete` of the objects, in the order given, waiting until they are gone."""

    def delete(manifests: Sequence[Manifest]) -> None:
        if not manifests:
            return
        items = [
            {
                "apiVersion": m["apiVersion"],
                "kind": m["kind"],
                "metadata": {k: v for k, v in m["metadata"].items() if k in ("name", "namespace")},
            }
            for m in manifests
        ]
        lab.kubectl(
            "delete",
            "-f",
            "-",
            "--ignore-not-found",
            "--wait=true",
            f"--timeout={DELETE_TIMEOUT_S}s",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )

    return delete


def run_in_lab(
    lab: network_lab.Lab,
    cases: Sequence[Case],
    settle_timeout: float = SETTLE_TIMEOUT_S,
) -> list[CaseRun]:
    """Every case in turn against whatever runs in the lab now (ironlb or MetalLB)."""
    get = lab_getter(lab)

    def seen(namespaces: Sequence[str]) -> Observation:
        return observe(get, namespaces)

    apply, delete = lab_applier(lab), lab_deleter(lab)
    return [run_case(case, apply, seen, settle_timeout, delete=delete) for case in cases]
