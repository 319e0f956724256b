"""The status objects a speaker owns, as wanted vs as they are: a pure diff.

Each speaker writes one ServiceL2Status per Service it answers ARP/NDP for, and one
ServiceBGPStatus per Service it announces over BGP, labelled with its node name (MetalLB's labels)
and named deterministically, so that a restart finds its own objects again instead of creating
duplicates. It writes only objects labelled with its own node; the one exception is deleting
another node's ServiceL2Status for a Service it now answers for (see `diff`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ironlb import annotations as keys
from ironlb import model
from speaker import desired


@dataclass(frozen=True, slots=True)
class Wanted:
    kind: str
    name: str
    service_namespace: str
    service_name: str
    status: Mapping[str, Any]


@functools.lru_cache(maxsize=1 << 16)
def object_name(kind: str, node: str, service: str) -> str:
    digest = hashlib.sha256(f"{node}/{service}".encode()).hexdigest()[:16]
    return f"{'l2' if kind == model.SERVICE_L2_STATUS else 'bgp'}-{digest}"


def wanted_l2(node: str, plan: desired.L2Plan) -> list[Wanted]:
    interfaces: dict[str, set[str]] = {}
    everywhere: set[str] = set()
    for entry in plan.mine:
        for service in entry.services:
            if entry.interfaces == desired.ALL_INTERFACES:
                everywhere.add(service)
            interfaces.setdefault(service, set()).update(entry.interfaces)
    out = []
    for service, names in sorted(interfaces.items()):
        namespace, _, name = service.partition("/")
        listed = [] if service in everywhere else [{"name": n} for n in sorted(names)]
        status: dict[str, Any] = {
            "node": node,
            "serviceName": name,
            "serviceNamespace": namespace,
            "interfaces": listed,
        }
        out.append(
            Wanted(
                model.SERVICE_L2_STATUS,
                object_name(model.SERVICE_L2_STATUS, node, service),
                namespace,
                name,
                status,
            )
        )
    return out


def wanted_bgp(node: str, announced: Mapping[str, Iterable[model.PeerName]]) -> list[Wanted]:
    """`announced`: Service key -> names of the BGPPeers its prefixes are configured to reach."""
    out = []
    for service, peers in sorted(announced.items()):
        peer_list = sorted(set(peers))
        if not peer_list:
            continue
        namespace, _, name = service.partition("/")
        status = {
            "node": node,
            "serviceName": name,
            "serviceNamespace": namespace,
            "peers": peer_list,
        }
        out.append(
            Wanted(
                model.SERVICE_BGP_STATUS,
                object_name(model.SERVICE_BGP_STATUS, node, service),
                namespace,
                name,
                status,
            )
        )
    return out


def body(wanted: Wanted, node: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{model.GROUP}/v1beta1",
        "kind": wanted.kind,
        "metadata": {
            "name": wanted.name,
            "namespace": namespace,
            "labels": {
                keys.STATUS_NODE: node,
                keys.STATUS_SERVICE_NAME: wanted.service_name,
                keys.STATUS_SERVICE_NAMESPACE: wanted.service_namespace,
            },
        },
        "spec": {},
    }


@dataclass(frozen=True, slots=True)
class Changes:
    create: tuple[Wanted, ...]  # create the object, then set its status
    update: tuple[Wanted, ...]  # status differs
    delete: tuple[str, ...]  # names of our objects nobody wants any more


def diff(
    kind: str,
    node: str,
    wanted: Iterable[Wanted],
    existing: Iterable[Mapping[str, Any]],
    *,
    evict_others: bool = False,
    elected: Mapping[str, Collection[str]] | None = None,
) -> Changes:
    """Compare with the objects of `kind` that exist; only those labelled with our node count.

    `evict_others` (layer 2, where one node announces each address): another node's object for
    a Service we now announce is deleted too, as MetalLB's new owner does. That node may be dead
    (SIGKILL, a cut link) and never delete its own, and a reader must not see an announcer that
    is not. Except a node that `elected` (Service key -> nodes elected for one of its addresses)
    names: the addresses of one Service may be elected to different nodes, each rightly holding
    an object; evicting one makes it write its object again, which the other evicts again, and
    so on for as long as both stand."""
    wanted_list = list(wanted)
    ours = {(w.service_namespace, w.service_name) for w in wanted_list}
    others_elected = elected or {}
    mine = {}
    evicted = []
    for obj in existing:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if obj.get("kind", kind) != kind:
            continue
        if labels.get(keys.STATUS_NODE) == node:
            mine[str(meta.get("name"))] = obj
        elif evict_others:
            service = (
                labels.get(keys.STATUS_SERVICE_NAMESPACE),
                labels.get(keys.STATUS_SERVICE_NAME),
            )
            if service in ours and labels.get(keys.STATUS_NODE) not in others_elected.get(
                f"{service[0]}/{service[1]}", ()
            ):
                evicted.append(str(meta.get("name")))
    create, update = [], []
    wanted_names = set()
    for w in wanted_list:
        wanted_names.add(w.name)
        current = mine.get(w.name)
        if current is None:
            create.append(w)
        elif _normal(current.get("status")) != _normal(w.status):
            update.append(w)
    delete = tuple(sorted({*(n for n in mine if n not in wanted_names), *evicted}))
    return Changes(tuple(create), tuple(update), delete)


def _normal(status: Any) -> Any:
    """Absent lists and empty lists mean the same to a reader."""
    if not isinstance(status, Mapping):
        return {}
    return {k: v for k, v in status.items() if v not in (None, [], "")}
