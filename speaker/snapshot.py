"""Raw API objects -> the speaker's view of the cluster (`desired.Snapshot`), purely.

The watch layer keeps the latest version of every object it was told about in a `Store`; this
module turns one Store into one Snapshot. The snapshot is always rebuilt whole from the Store, so
a missed or reordered event cannot leave stale state behind; what makes that cheap at 10,000
Services is that the Store keeps only the fields a speaker reads (`slim`), remembers each
Service's view until the Service or one of its EndpointSlices changes, and parses the
configuration again only when a metallb.io object changed. `Store.put` also says whether an
object changed anything a pass reads, so that watch events which do not (a kubelet heartbeat,
another node's status object, a relist returning what the store holds) cost no pass at all.
Bad objects are dropped with Problems, never raised.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ironlb import annotations as keys
from ironlb import datapath, model, parsing, services, validation
from ironlb.problems import Problem
from speaker import desired, election

Object = Mapping[str, Any]
STATUS_KINDS = (model.SERVICE_L2_STATUS, model.SERVICE_BGP_STATUS)
# The Pods of the load balancer this node takes over from (`ironlb.taking_over`), watched only
# with `--take-over-from`.
PREDECESSOR = "Pod"
# Metadata that changes on every write without changing what the object says.
_BOOKKEEPING = ("resourceVersion", "managedFields", "generation")


def _map(value: Any) -> Mapping[str, Any]:
    """A field that should be an object; anything else reads as empty (bad input is no crash)."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _pick(mapping: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {n: mapping[n] for n in names if n in mapping}


def _shared_pick(mapping: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return _share(_pick(mapping, names))  # type: ignore[no-any-return]


def _slim_metadata(obj: Object, *, annotations: bool) -> dict[str, Any]:
    meta = _map(obj.get("metadata"))
    out = _pick(meta, ("name", "namespace", "uid", "resourceVersion", "labels"))
    if isinstance(out.get("namespace"), str):
        out["namespace"] = sys.intern(out["namespace"])
    notes = meta.get("annotations")
    if annotations and isinstance(notes, Mapping):
        # Only MetalLB's own keys are read; last-applied-configuration alone can be kilobytes.
        out["annotations"] = {
            k: v
            for k, v in notes.items()
            if isinstance(k, str) and k.startswith((keys.NEW_PREFIX, keys.LEGACY_PREFIX))
        }
    return out


# Slim parts that thousands of objects have in common (an endpoint on a node with the same
# conditions, a Service's spec) are kept once and shared: they are never modified in place
# (the Store replaces whole objects). Bounded: cleared when it grows past this many entries.
_SHARED_MAX = 50_000
_shared: dict[Any, Any] = {}


def _frozen(value: Any) -> Any:
    """A hashable key for a slim value: equal keys mean equal values of the same types."""
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(_frozen(v) for v in value))
    return (type(value).__name__, value)


def _share(value: Any) -> Any:
    """The kept copy of a slim value equal to `value` (kept now if there was none)."""
    try:
        key = _frozen(value)
        found = _shared.get(key)
    except TypeError:  # an unhashable part (bad input): kept as it is
        return value
    if found is not None:
        return found
    if len(_shared) >= _SHARED_MAX:
        _shared.clear()
    _shared[key] = value
    return value


def _slim_endpoint(e: Any) -> Any:
    if not isinstance(e, Mapping):
        return e
    out: dict[str, Any] = {"addresses": bool(e.get("addresses"))}
    if "nodeName" in e:
        out["nodeName"] = e["nodeName"]
    conditions = e.get("conditions")
    out["conditions"] = (
        _pick(conditions, ("ready", "serving")) if isinstance(conditions, Mapping) else conditions
    )
    return _share(out)


def slim(kind: str, obj: Object) -> dict[str, Any]:
    """The part of an object a speaker reads: a Service with its managedFields and
    last-applied annotation is ten times the size of what decides its announcement."""
    if kind == "Service":
        spec = _map(obj.get("spec"))
        return {
            "kind": kind,
            "metadata": _slim_metadata(obj, annotations=True),
            "spec": _shared_pick(
                spec, ("type", "loadBalancerClass", "externalTrafficPolicy", "healthCheckNodePort")
            ),
            "status": _pick(_map(obj.get("status")), ("loadBalancer",)),
        }
    if kind == "EndpointSlice":
        meta = _slim_metadata(obj, annotations=False)
        labels = meta.get("labels")
        if isinstance(labels, Mapping):
            meta["labels"] = _pick(labels, (keys.ENDPOINT_SLICE_SERVICE,))
        endpoints = obj.get("endpoints")
        return {
            "kind": kind,
            "metadata": meta,
            "endpoints": (
                [_slim_endpoint(e) for e in endpoints] if isinstance(endpoints, list) else endpoints
            ),
        }
    if kind == "Node":
        conditions = _map(obj.get("status")).get("conditions")
        if isinstance(conditions, list):
            conditions = [
                _pick(c, ("type", "status")) if isinstance(c, Mapping) else c for c in conditions
            ]
        meta = _slim_metadata(obj, annotations=False)
        deleting = _map(obj.get("metadata")).get("deletionTimestamp")
        if deleting:
            meta["deletionTimestamp"] = deleting
        spec = _map(obj.get("spec"))
        taints = spec.get("taints")
        addresses = _map(obj.get("status")).get("addresses")
        return {
            "kind": kind,
            "metadata": meta,
            # Drain: what makes a node leave (taint keys, cordon), nothing else of the spec.
            "spec": {
                "unschedulable": bool(spec.get("unschedulable")),
                "taints": sorted(_taint_keys(taints)),
            },
            # Heartbeat times change every few seconds; type and status are what is read.
            "status": {
                "conditions": conditions,
                "addresses": [
                    _pick(a, ("type", "address"))
                    for a in _list(addresses)
                    if isinstance(a, Mapping)
                ],
            },
        }
    if kind == PREDECESSOR:
        # What `taking_over.Predecessor.of` reads: deletion, phase and the Ready condition.
        found = _map(obj.get("metadata"))
        status = _map(obj.get("status"))
        return {
            "kind": kind,
            "metadata": _pick(found, ("name", "namespace", "resourceVersion", "deletionTimestamp")),
            "status": {
                "phase": status.get("phase"),
                "conditions": [
                    _pick(c, ("type", "status"))
                    for c in _list(status.get("conditions"))
                    if isinstance(c, Mapping)
                ],
            },
        }
    if kind in STATUS_KINDS:
        # Thirty thousand of these at 10,000 Services: what the status writer compares (its
        # labels, status and owner) and the version its watch echoes, nothing more. A node's
        # objects all name the same owner: one shared copy.
        found = _map(obj.get("metadata"))
        kept = _pick(found, ("name", "namespace", "resourceVersion", "labels"))
        if "ownerReferences" in found:
            kept["ownerReferences"] = _share(found["ownerReferences"])
        return {"kind": kind, "metadata": kept, "status": obj.get("status")}
    meta = {k: v for k, v in _map(obj.get("metadata")).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _same(a: Object | None, b: Object | None, *, ignore_status: bool = False) -> bool:
    """Equal apart from write bookkeeping (and, for configuration, the status we report)."""
    if a is None or b is None:
        return a is b

    def essence(o: Object) -> dict[str, Any]:
        meta = {k: v for k, v in _map(o.get("metadata")).items() if k not in _BOOKKEEPING}
        out = {**o, "metadata": meta}
        if ignore_status:
            out.pop("status", None)
        return out

    return essence(a) == essence(b)


def _same_status(a: Object | None, b: Object | None) -> bool:
    """A status object says what its labels, owner and status say; the rest is the server's."""
    if a is None or b is None:
        return a is b
    meta_a, meta_b = _map(a.get("metadata")), _map(b.get("metadata"))
    return (
        meta_a.get("labels") == meta_b.get("labels")
        and meta_a.get("ownerReferences") == meta_b.get("ownerReferences")
        and a.get("status") == b.get("status")
    )


@dataclass(frozen=True, slots=True)
class _ConfigMemo:
    key: tuple[int, str]  # config_version, namespace
    config: model.Config  # as parsed, the conflicting objects included
    problems: tuple[Problem, ...]
    without: model.Config | None  # the parse without them (None: no conflict)


@dataclass
class Store:
    """The latest version of each watched object (slimmed), by kind then `namespace/name`.

    `status_node`: changes to status objects of other nodes do not concern this speaker's
    passes (None: every status object does)."""

    services: dict[str, Object] = field(default_factory=dict)
    endpoint_slices: dict[str, Object] = field(default_factory=dict)
    nodes: dict[str, Object] = field(default_factory=dict)
    config: dict[str, dict[str, Object]] = field(default_factory=dict)  # kind -> key -> object
    secrets: dict[str, Object] = field(default_factory=dict)  # metadata only
    predecessors: dict[str, Object] = field(default_factory=dict)  # PREDECESSOR Pods
    status_node: str | None = None
    config_version: int = 0
    _slices_of: dict[str, set[str]] = field(default_factory=dict)  # Service key -> slice keys
    _views: dict[str, desired.Service | None] = field(default_factory=dict)
    # `ours`: (lb_class, every view of ours in key order), until a Service or slice changes.
    _ours: tuple[str, tuple[desired.Service, ...]] | None = None
    # `node_views`: each Node's view with the object it was read from, and the whole mapping
    # (with its drain_on_cordon) until a Node changes.
    _node_views: dict[str, tuple[Object, bool, desired.Node]] = field(default_factory=dict)
    _nodes_seen: tuple[bool, Mapping[str, desired.Node]] | None = None
    _config_memo: _ConfigMemo | None = None

    def put(self, kind: str, event_type: str | None, obj: Object) -> bool:
        """Record one object (or its deletion); True if it changed what a pass reads."""
        key = services.key(obj)
        table = self._table(kind)
        old = table.get(key)
        if event_type == "DELETED":
            if old is None:
                return False
            del table[key]
            new: Object | None = None
        else:
            new = slim(kind, obj)
            table[key] = new
        if kind == "Service":
            self._forget_view(key)
            return not _same(old, new)
        if kind == "EndpointSlice":
            return self._slice_moved(key, old, new)
        if kind == "Node":
            if _same(old, new):
                return False
            self._nodes_seen = None
            return True
        if kind == PREDECESSOR:
            return not _same(old, new)
        if kind in STATUS_KINDS:
            if _same_status(old, new):
                return False
            return self._concerns_us(old) or self._concerns_us(new)
        changed = not _same(old, new, ignore_status=True)
        if changed:
            self.config_version += 1
        return changed

    def replace(self, kind: str, objects: Iterable[Object]) -> bool:
        """Every object of a kind, from a fresh LIST: what is not in it was deleted."""
        changed = False
        seen = set()
        for obj in objects:
            seen.add(services.key(obj))
            changed |= self.put(kind, None, obj)
        for key in [k for k in self._table(kind) if k not in seen]:
            changed |= self.put(kind, "DELETED", self._table(kind)[key])
        return changed

    def set_secrets(self, secrets: Mapping[str, Object]) -> bool:
        if dict(secrets) == self.secrets:
            return False
        self.secrets = dict(secrets)
        self.config_version += 1
        return True

    def node(self, name: str) -> Object | None:
        """A Node by name (cluster-scoped: its key has an empty namespace)."""
        return self.nodes.get(f"/{name}")

    def view(self, key: str) -> desired.Service | None:
        """The Service's view with its endpoints, remembered until either changes."""
        if key not in self._views:
            slices = [self.endpoint_slices[k] for k in sorted(self._slices_of.get(key, ()))]
            self._views[key] = service_view(self.services[key], slices)
        return self._views[key]

    def ours(self, lb_class: str) -> tuple[desired.Service, ...]:
        """The views of every Service of ours (`services.ours`) that has one, in key order;
        the same tuple until a Service or an EndpointSlice changes (a pass then costs what
        changed: `desired.Memo` knows an unchanged Service by its view's identity)."""
        if self._ours is None or self._ours[0] != lb_class:
            found = []
            for key in sorted(self.services):
                if not services.ours(self.services[key], lb_class):
                    continue
                view = self.view(key)
                if view is not None:
                    found.append(view)
            self._ours = (lb_class, tuple(found))
        return self._ours[1]

    def node_views(self, drain_on_cordon: bool) -> Mapping[str, desired.Node]:
        """Every Node's view by name; the same mapping until a Node changes, and only the
        Nodes that changed read again."""
        if self._nodes_seen is not None and self._nodes_seen[0] == drain_on_cordon:
            return self._nodes_seen[1]
        kept, fresh = self._node_views, {}
        views: dict[str, desired.Node] = {}
        for key, obj in self.nodes.items():
            before = kept.get(key)
            if before is not None and before[0] is obj and before[1] == drain_on_cordon:
                view = before[2]
            else:
                view = node_view(obj, drain_on_cordon)
            fresh[key] = (obj, drain_on_cordon, view)
            if view.name:
                views[view.name] = view
        self._node_views = fresh
        self._nodes_seen = (drain_on_cordon, views)
        return views

    def parsed_config(
        self, namespace: str, last_good: model.Config | None
    ) -> tuple[model.Config, list[Problem]]:
        """The metallb.io objects of our namespace, parsed and validated; parsed again only when
        one of them or a Secret name changed. While nothing changes, every pass gets the same
        configuration object (what is remembered per configuration, such as `desired.pool_of`'s
        answers, stays).

        An object that does not parse is left out alone. A conflict between objects (two pools
        overlapping after a race past the webhook) keeps `last_good`, the last configuration
        that was valid, as MetalLB does, so a new bad object cannot take addresses away from
        Services already served; before any valid configuration was seen, the conflicting
        objects are left out."""
        memo = self._config_memo
        if memo is None or memo.key != (self.config_version, namespace):
            config, problems, bad = _parsed(self, namespace)
            memo = self._config_memo = _ConfigMemo(
                (self.config_version, namespace),
                config,
                tuple(problems),
                _without(config, bad) if bad else None,
            )
        return _kept(memo, last_good), list(memo.problems)

    def config_conflicts(self) -> bool:
        """Whether the latest `parsed_config` found objects in conflict (and so answered with
        the last good configuration, or without them)."""
        return self._config_memo is not None and self._config_memo.without is not None

    def _slice_moved(self, key: str, old: Object | None, new: Object | None) -> bool:
        before, after = _owner(old), _owner(new)
        if before is not None:
            self._slices_of.get(before, set()).discard(key)
            self._forget_view(before)
        if after is not None:
            self._slices_of.setdefault(after, set()).add(key)
            self._forget_view(after)
        return not _same(old, new)

    def _forget_view(self, key: str) -> None:
        self._views.pop(key, None)
        self._ours = None

    def _concerns_us(self, obj: Object | None) -> bool:
        if obj is None:
            return False
        if self.status_node is None:
            return True
        labels = _map(_map(obj.get("metadata")).get("labels"))
        return labels.get(keys.STATUS_NODE) == self.status_node

    def _table(self, kind: str) -> dict[str, Object]:
        if kind == "Service":
            return self.services
        if kind == "EndpointSlice":
            return self.endpoint_slices
        if kind == "Node":
            return self.nodes
        if kind == model.SECRET:
            return self.secrets
        if kind == PREDECESSOR:
            return self.predecessors
        return self.config.setdefault(kind, {})


def _owner(endpoint_slice: Object | None) -> str | None:
    if endpoint_slice is None:
        return None
    meta = _map(endpoint_slice.get("metadata"))
    owner = _map(meta.get("labels")).get(keys.ENDPOINT_SLICE_SERVICE)
    return f"{meta.get('namespace') or ''}/{owner}" if owner else None


def _labels(obj: Object) -> model.Labels:
    raw = _map(_map(obj.get("metadata")).get("labels"))
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def endpoints(slices: Iterable[Object]) -> tuple[desired.Endpoint, ...]:
    out: list[desired.Endpoint] = []
    for s in slices:
        for e in _list(s.get("endpoints")):
            if not isinstance(e, Mapping) or not e.get("addresses"):
                continue
            conditions = _map(e.get("conditions"))
            ready = conditions.get("ready") is not False  # unset means ready
            serving = conditions.get("serving")
            node = e.get("nodeName")
            out.append(
                desired.Endpoint(
                    model.NodeName(str(node)) if node else None,
                    ready=ready,
                    serving=ready if serving is None else bool(serving),
                )
            )
    return tuple(out)


def service_view(service: Object, slices: Iterable[Object]) -> desired.Service | None:
    meta = _map(service.get("metadata"))
    spec = _map(service.get("spec"))
    ingress = services.ingress(service)
    if ingress.invalid:
        return None  # MetalLB's invalidIP: withdrawn until every entry parses
    notes = _map(meta.get("annotations"))
    check_port = spec.get("healthCheckNodePort")
    return desired.Service(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        ips=ingress.ips,
        labels=_labels(service),
        local=spec.get("externalTrafficPolicy") == "Local",
        shares=keys.has(notes, keys.ALLOW_SHARED_IP),
        endpoints=endpoints(slices),
        health_check_node_port=(
            check_port if isinstance(check_port, int) and 0 < check_port < 65536 else None
        ),
    )


def node_view(node: Object, drain_on_cordon: bool = False) -> desired.Node:
    conditions = _list(_map(node.get("status")).get("conditions"))
    unavailable = any(
        isinstance(c, Mapping)
        and c.get("type") == "NetworkUnavailable"
        and c.get("status") == "True"
        for c in conditions
    )
    meta = _map(node.get("metadata"))
    spec = _map(node.get("spec"))
    name = str(meta.get("name") or "")
    drain = datapath.drain(
        deleting=bool(meta.get("deletionTimestamp")),
        taints=tuple(_taint_keys(spec.get("taints"))),
        unschedulable=spec.get("unschedulable") is True,
        drain_on_cordon=drain_on_cordon,
    )
    return desired.Node(name, _labels(node), unavailable, drain, tuple(internal_ips(node)))


def _taint_keys(taints: Any) -> list[str]:
    """Taint keys, from a slimmed Node (strings) or an API one (objects)."""
    return [
        str(t["key"] if isinstance(t, Mapping) else t)
        for t in _list(taints)
        if isinstance(t, str) or (isinstance(t, Mapping) and t.get("key"))
    ]


def internal_ips(node: Object | None) -> list[str]:
    """The Node's InternalIP addresses, as its status lists them (the kubelet's order)."""
    if node is None:
        return []
    return [
        str(a.get("address"))
        for a in _list(_map(node.get("status")).get("addresses"))
        if isinstance(a, Mapping) and a.get("type") == "InternalIP" and a.get("address")
    ]


def ready_nodes(nodes: Iterable[Object]) -> frozenset[str]:
    return election.ready_nodes(
        {str(_map(n.get("metadata")).get("name") or ""): _conditions(n) for n in nodes}
    )


def _conditions(node: Object) -> list[Mapping[str, Any]]:
    # `status.conditions` as a list of objects; a string, a number or a list of strings there
    # used to raise out of every pass (membership off), stopping the speaker's loop for good.
    return [c for c in _list(_map(node.get("status")).get("conditions")) if isinstance(c, Mapping)]


def _parsed(
    store: Store, namespace: str
) -> tuple[model.Config, list[Problem], frozenset[tuple[str, str]]]:
    """`Store.parsed_config`'s parse, whatever the last good configuration: the configuration as
    written, its problems, and the objects in conflict."""
    objects: dict[str, list[Object]] = {
        kind: [
            o
            for o in store.config.get(kind, {}).values()
            if _map(o.get("metadata")).get("namespace") == namespace
        ]
        for kind in model.CONFIG_KINDS
    }
    objects[model.SECRET] = list(store.secrets.values())
    config, problems = parsing.parse_config(objects)
    checked = validation.validate(config)
    return config, [*problems, *checked], frozenset(validation.invalid_objects(checked))


def _kept(memo: _ConfigMemo, last_good: model.Config | None) -> model.Config:
    """`Store.parsed_config`'s answer from a parse: the parsed configuration when nothing
    conflicts, else the last good one, or before any the parse without the conflicting
    objects."""
    if memo.without is None:
        return memo.config
    return last_good if last_good is not None else memo.without


def _without(config: model.Config, bad: frozenset[tuple[str, str]]) -> model.Config:
    def keep(kind: str, items: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(i for i in items if (kind, i.name) not in bad)

    return model.Config(
        pools=keep(model.IP_ADDRESS_POOL, config.pools),
        l2_advertisements=keep(model.L2_ADVERTISEMENT, config.l2_advertisements),
        bgp_advertisements=keep(model.BGP_ADVERTISEMENT, config.bgp_advertisements),
        bgp_peers=keep(model.BGP_PEER, config.bgp_peers),
        bfd_profiles=keep(model.BFD_PROFILE, config.bfd_profiles),
        communities=keep(model.COMMUNITY, config.communities),
        secret_names=config.secret_names,
    )


def build(
    store: Store,
    *,
    namespace: str,
    alive: frozenset[str] | None,
    lb_class: str = "",
    ignore_exclude_lb: bool = False,
    last_good: model.Config | None = None,
    drain_on_cordon: bool = False,
    readiness: Mapping[str, datapath.NodeReadiness] | None = None,
) -> tuple[desired.Snapshot, list[Problem]]:
    """The whole snapshot; `alive` None means membership is off: Node Ready decides."""
    config, problems = store.parsed_config(namespace, last_good)
    views = store.ours(lb_class)
    nodes = store.node_views(drain_on_cordon)
    live = ready_nodes(store.nodes.values()) if alive is None else alive
    snap = desired.Snapshot(
        config=config,
        services=views,
        nodes=nodes,
        alive=live,
        ignore_exclude_lb=ignore_exclude_lb,
        readiness=readiness or {},
    )
    return snap, problems
