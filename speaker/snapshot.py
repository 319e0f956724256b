"""Raw API objects -> the speaker's view of the cluster (`desired.Snapshot`), purely.

The watch layer keeps the latest version of every object it was told about in a `Store`; this
module turns one Store into one Snapshot. Nothing is incremental: the whole snapshot is rebuilt
each time (a few hundred Services cost well under a millisecond), so a missed or reordered event
cannot leave stale state behind. Bad objects are dropped with Problems, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ironlb import addresses, model, parsing, validation
from ironlb import annotations as keys
from ironlb.problems import Problem
from speaker import desired, election

Object = Mapping[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _map(value: Any) -> Mapping[str, Any]:
    """A field that should be an object; anything else reads as empty (bad input is no crash)."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def key_of(obj: Object) -> str:
    meta = _map(obj.get("metadata"))
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


@dataclass
class Store:
    """The latest version of each watched object, by kind then `namespace/name`."""

    services: dict[str, Object] = field(default_factory=dict)
    endpoint_slices: dict[str, Object] = field(default_factory=dict)
    nodes: dict[str, Object] = field(default_factory=dict)
    config: dict[str, dict[str, Object]] = field(default_factory=dict)  # kind -> key -> object
    secrets: dict[str, Object] = field(default_factory=dict)  # metadata only

    def put(self, kind: str, event_type: str | None, obj: Object) -> None:
        table = self._table(kind)
        if event_type == "DELETED":
            table.pop(key_of(obj), None)
        else:
            table[key_of(obj)] = obj

    def _table(self, kind: str) -> dict[str, Object]:
        if kind == "Service":
            return self.services
        if kind == "EndpointSlice":
            return self.endpoint_slices
        if kind == "Node":
            return self.nodes
        if kind == model.SECRET:
            return self.secrets
        return self.config.setdefault(kind, {})


def _labels(obj: Object) -> model.Labels:
    raw = _map(_map(obj.get("metadata")).get("labels"))
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def handles(service: Object, lb_class: str) -> bool:
    """A LoadBalancer Service with no class, or with ours (MetalLB's --lb-class rule)."""
    spec = _map(service.get("spec"))
    if spec.get("type") != "LoadBalancer":
        return False
    return (spec.get("loadBalancerClass") or "") == lb_class


def ingress_ips(service: Object) -> tuple[addresses.IPAddress, ...] | None:
    """The addresses in status; None when an entry does not parse (MetalLB's invalidIP)."""
    entries = _list(_map(_map(service.get("status")).get("loadBalancer")).get("ingress"))
    ips: list[addresses.IPAddress] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not entry.get("ip"):
            continue  # hostname-only entries are not ours
        ip = addresses.parse_address(str(entry["ip"]))
        if ip is None:
            return None
        ips.append(ip)
    return tuple(ips)


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
    ips = ingress_ips(service)
    if ips is None:
        return None
    notes = _map(meta.get("annotations"))
    return desired.Service(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        ips=ips,
        labels=_labels(service),
        local=spec.get("externalTrafficPolicy") == "Local",
        shares=keys.has(notes, keys.ALLOW_SHARED_IP),
        endpoints=endpoints(slices),
    )


def node_view(node: Object) -> desired.Node:
    conditions = _list(_map(node.get("status")).get("conditions"))
    unavailable = any(
        isinstance(c, Mapping)
        and c.get("type") == "NetworkUnavailable"
        and c.get("status") == "True"
        for c in conditions
    )
    name = str(_map(node.get("metadata")).get("name") or "")
    return desired.Node(name, _labels(node), unavailable)


def ready_nodes(nodes: Iterable[Object]) -> frozenset[str]:
    return election.ready_nodes(
        {
            str(_map(n.get("metadata")).get("name") or ""): _map(n.get("status")).get("conditions")
            for n in nodes
        }
    )


def config_of(
    store: Store, namespace: str, last_good: model.Config | None = None
) -> tuple[model.Config, list[Problem]]:
    """Parse and validate the metallb.io objects of our namespace.

    An object that does not parse is left out alone. A conflict between objects (two pools
    overlapping after a race past the webhook) keeps the last configuration that was valid, as
    MetalLB does, so a new bad object cannot take addresses away from Services already served;
    before any valid configuration was seen, the conflicting objects are left out.
    """
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
    bad = validation.invalid_objects(checked)
    if bad:
        config = last_good if last_good is not None else _without(config, bad)
    return config, [*problems, *checked]


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
) -> tuple[desired.Snapshot, list[Problem]]:
    """The whole snapshot; `alive` None means membership is off: Node Ready decides."""
    config, problems = config_of(store, namespace, last_good)
    by_service: dict[str, list[Object]] = {}
    for s in store.endpoint_slices.values():
        meta = _map(s.get("metadata"))
        owner = _map(meta.get("labels")).get(SERVICE_NAME_LABEL)
        if owner:
            by_service.setdefault(f"{meta.get('namespace')}/{owner}", []).append(s)
    services = []
    for key, svc in sorted(store.services.items()):
        if not handles(svc, lb_class):
            continue
        view = service_view(svc, by_service.get(key, ()))
        if view is not None:
            services.append(view)
    nodes = {v.name: v for v in (node_view(n) for n in store.nodes.values()) if v.name}
    live = ready_nodes(store.nodes.values()) if alive is None else alive
    snap = desired.Snapshot(
        config=config,
        services=tuple(services),
        nodes=nodes,
        alive=live,
        ignore_exclude_lb=ignore_exclude_lb,
    )
    return snap, problems
