"""The status objects a speaker owns, as wanted vs as they are: a pure diff.

Each speaker writes one ServiceL2Status per Service it answers ARP/NDP for, and one
ServiceBGPStatus per Service it announces over BGP, labelled with its node name (MetalLB's labels)
and named deterministically, so that a restart finds its own objects again instead of creating
duplicates. It writes only objects labelled with its own node; the one exception is deleting
another node's ServiceL2Status for a Service it now answers for (see `diff`).

Once the speaker knows its own Pod, that Pod owns each of its objects (an ownerReference, as
MetalLB's speaker sets), so the garbage collector removes them when the Pod goes: uninstalled,
its node removed, or no longer scheduled there.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ironlb import addresses, model
from ironlb import annotations as keys
from speaker import desired

# Wanted objects kept from pass to pass (a Service's object is made again only when what it says
# changes): enough for the Services one speaker announces.
WANTED_KEPT = 1 << 16


@dataclass(frozen=True, slots=True)
class Wanted:
    kind: str
    name: str
    service_namespace: str
    service_name: str
    status: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Owner:
    """The speaker's own Pod, owner of its status objects."""

    pod_name: str
    uid: str

    def reference(self) -> dict[str, str]:
        # What MetalLB's controllerutil.SetOwnerReference writes: neither `controller` nor
        # `blockOwnerDeletion` (a Pod's deletion must never wait for its status objects).
        return {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.uid}

    def owns(self, obj: Mapping[str, Any]) -> bool:
        references = (obj.get("metadata") or {}).get("ownerReferences")
        return isinstance(references, list) and any(
            isinstance(r, Mapping) and r.get("uid") == self.uid for r in references
        )


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
    return [
        _l2_wanted(node, service, () if service in everywhere else tuple(sorted(names)))
        for service, names in sorted(interfaces.items())
    ]


@functools.lru_cache(maxsize=WANTED_KEPT)
def _l2_wanted(node: str, service: str, interfaces: tuple[str, ...]) -> Wanted:
    """`interfaces` empty: every interface (the status lists none)."""
    listed = [{"name": n} for n in interfaces]
    return _wanted(model.SERVICE_L2_STATUS, node, service, "interfaces", listed)


def wanted_bgp(node: str, announced: Mapping[str, Iterable[model.PeerName]]) -> list[Wanted]:
    """`announced`: Service key -> names of the BGPPeers its prefixes are configured to reach."""
    out = []
    for service, peers in sorted(announced.items()):
        peer_list = tuple(sorted(set(peers)))
        if peer_list:
            out.append(_bgp_wanted(node, service, peer_list))
    return out


@functools.lru_cache(maxsize=WANTED_KEPT)
def _bgp_wanted(node: str, service: str, peers: tuple[model.PeerName, ...]) -> Wanted:
    return _wanted(model.SERVICE_BGP_STATUS, node, service, "peers", list(peers))


def _wanted(kind: str, node: str, service: str, field: str, value: Any) -> Wanted:
    """One Service's object of `kind` from `node`: its status names them, and `field` says
    what that kind adds (interfaces, peers)."""
    namespace, _, name = service.partition("/")
    status = {"node": node, "serviceName": name, "serviceNamespace": namespace, field: value}
    return Wanted(kind, object_name(kind, node, service), namespace, name, status)


class Announcers(Mapping[tuple[str, str], frozenset[str]]):
    """(namespace, name) -> the nodes elected for one of the Service's layer 2 addresses, read
    per Service when asked (`diff` asks only about other nodes' objects), not made for every
    Service in every pass."""

    def __init__(
        self,
        services: Mapping[str, desired.Service],
        owners: Mapping[addresses.IPAddress, str | None],
    ) -> None:
        self._services = services
        self._owners = owners

    def __getitem__(self, key: tuple[str, str]) -> frozenset[str]:
        service = self._services[f"{key[0]}/{key[1]}"]
        return frozenset(owner for ip in service.ips if (owner := self._owners.get(ip)) is not None)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for service in self._services.values():
            yield service.namespace, service.name

    def __len__(self) -> int:
        return len(self._services)


def body(wanted: Wanted, node: str, namespace: str, owner: Owner | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": wanted.name,
        "namespace": namespace,
        "labels": {
            keys.STATUS_NODE: node,
            keys.STATUS_SERVICE_NAME: wanted.service_name,
            keys.STATUS_SERVICE_NAMESPACE: wanted.service_namespace,
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    return {
        "apiVersion": f"{model.GROUP}/v1beta1",
        "kind": wanted.kind,
        "metadata": metadata,
        "spec": {},
    }


@dataclass(frozen=True, slots=True)
class Changes:
    create: tuple[Wanted, ...]  # create the object, then set its status
    update: tuple[Wanted, ...]  # status differs
    delete: tuple[str, ...]  # names of our objects nobody wants any more
    # Names of our wanted objects that the owner does not own yet (made before the speaker
    # knew its Pod, or by an earlier Pod): their ownerReferences are to be set.
    adopt: tuple[str, ...] = ()


def diff(
    kind: str,
    node: str,
    wanted: Iterable[Wanted],
    existing: Iterable[Mapping[str, Any]],
    *,
    announcers: Mapping[tuple[str, str], frozenset[str]] | None = None,
    owner: Owner | None = None,
    only_ours: bool = False,
) -> Changes:
    """Compare with the objects of `kind` that exist; only those labelled with our node count.

    `only_ours`: of those, only the ones with the name we give (`object_name`): a node standing
    by for another load balancer's speaker (`ironlb.taking_over`) removes its own and leaves
    that speaker's, which carry the same labels, alone.

    `announcers` (layer 2, where one node announces a Service): for each Service, the nodes
    elected for one of its addresses. Another node's object for a Service we announce is
    deleted too, as MetalLB's new owner does, unless that node is elected as well (a Service
    whose addresses have different owners): it may be dead (SIGKILL, a cut link) and never
    delete its own, and a reader must not see a node that does not announce. Two elected nodes
    deleting each other's objects would rewrite them for ever.

    `owner`: the speaker's Pod; each of our wanted objects it does not own (no ownerReference
    with its uid) is to be adopted. None: ownership is left as it is."""
    wanted_list = list(wanted)
    ours = {(w.service_namespace, w.service_name) for w in wanted_list}
    mine = {}
    evicted = []
    for obj in existing:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if obj.get("kind", kind) != kind:
            continue
        service = (
            str(labels.get(keys.STATUS_SERVICE_NAMESPACE)),
            str(labels.get(keys.STATUS_SERVICE_NAME)),
        )
        if labels.get(keys.STATUS_NODE) == node:
            name = str(meta.get("name"))
            if not only_ours or name == object_name(kind, node, "/".join(service)):
                mine[name] = obj
        elif (
            announcers is not None
            and service in ours
            and labels.get(keys.STATUS_NODE) not in announcers.get(service, frozenset())
        ):
            evicted.append(str(meta.get("name")))
    create, update, adopt = [], [], []
    wanted_names = set()
    for w in wanted_list:
        wanted_names.add(w.name)
        current = mine.get(w.name)
        if current is None:
            create.append(w)
            continue
        if _normal(current.get("status")) != _normal(w.status):
            update.append(w)
        if owner is not None and not owner.owns(current):
            adopt.append(w.name)
    delete = tuple(sorted({*(n for n in mine if n not in wanted_names), *evicted}))
    return Changes(tuple(create), tuple(update), delete, tuple(adopt))


def _normal(status: Any) -> Any:
    """Absent lists and empty lists mean the same to a reader."""
    if not isinstance(status, Mapping):
        return {}
    return {k: v for k, v in status.items() if v not in (None, [], "")}
