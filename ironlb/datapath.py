"""Whether a node's data path takes traffic: the vocabulary every program shares.

A cloud load balancer probes kube-proxy on each node and sends nothing to a node whose data path
is not ready; ironlb's speakers do the same from the node itself (kube-proxy's `/healthz`, and per
`externalTrafficPolicy: Local` Service its `healthCheckNodePort`). Every speaker must elect the
same L2 owner, so a node's own verdict travels to the others in its membership metadata
(`NodeReadiness.encode`), not through the API server. What makes a node drain (deletion, the
cluster autoscaler's taint, cordon when configured) is read from the Node object, which every
speaker sees alike.

The names here are what status conditions, Events, metrics, logs and `ironlb status --explain`
print, so that one reason has one spelling everywhere.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The taint the cluster autoscaler puts on a node it is about to delete (and Karpenter's).
TO_BE_DELETED_TAINTS = ("ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted")
CONDITION_TYPE = "DataPathReady"  # our condition on the speaker's ConfigurationState
# Also ours, on the same object: True while another machine claims an address this node answers
# ARP/NDP for (split brain on the wire).
CONFLICT_CONDITION_TYPE = "L2AddressConflict"


class Reason(enum.StrEnum):
    """Why a node's data path does not take new traffic (for every Service, or for one)."""

    KUBE_PROXY_NOT_READY = "kubeProxyNotReady"
    # kube-proxy's healthCheckNodePort says it has no local endpoint for this Local Service,
    # although the EndpointSlices name one here: its rules lag behind.
    KUBE_PROXY_NO_LOCAL_ENDPOINTS = "kubeProxyNoLocalEndpoints"
    NODE_DELETING = "nodeDeleting"
    NODE_TO_BE_DELETED = "nodeToBeDeleted"
    NODE_CORDONED = "nodeCordoned"
    NODE_UNKNOWN = "nodeReadinessUnknown"  # no verdict from the node's speaker yet


class Check(enum.StrEnum):
    """How a speaker judges its node's data path (its --datapath-check)."""

    KUBE_PROXY = "kube-proxy"  # /healthz and healthCheckNodePort: the default
    URL = "url"  # another health URL (a kube-proxy replacement's), no per-Service check
    ENDPOINTS = "endpoints"  # EndpointSlices only, as MetalLB does


@dataclass(frozen=True, slots=True)
class Drain:
    """A node leaving: what the Node object says (never guessed from silence)."""

    reason: Reason
    message: str


def drain(
    *,
    deleting: bool,
    taints: tuple[str, ...],
    unschedulable: bool,
    drain_on_cordon: bool,
) -> Drain | None:
    """Whether a node is draining, from its Node object's fields; None when it is not."""
    if deleting:
        return Drain(Reason.NODE_DELETING, "the Node is being deleted")
    for taint in taints:
        if taint in TO_BE_DELETED_TAINTS:
            return Drain(Reason.NODE_TO_BE_DELETED, f"the Node is tainted {taint}")
    if unschedulable and drain_on_cordon:
        return Drain(Reason.NODE_CORDONED, "the Node is cordoned (spec.unschedulable)")
    return None


# Metadata travels in every Alive message: keep it far below a datagram.
MAX_ENCODED = 400
_VERSION = 1
_PROXY_READY = 1
_OVERFLOW = 2


@dataclass(frozen=True, slots=True)
class NodeReadiness:
    """One node's own verdict on its data path, as its speaker gossips it.

    `unready_local`: Local Services for which the EndpointSlices name a ready endpoint here but
    kube-proxy's healthCheckNodePort reports none (normally empty; it is the transient lag).
    `overflow`: more of those than fit in a datagram; the others then fall back to the
    EndpointSlices alone, as without the check, rather than withdraw every Local Service."""

    proxy_ready: bool
    unready_local: frozenset[str] = frozenset()
    overflow: bool = False

    def ready_for(self, service: str, local: bool) -> bool:
        if not self.proxy_ready:
            return False
        return not (local and service in self.unready_local)

    def encode(self) -> bytes:
        keys: list[bytes] = []
        size = 2
        overflow = self.overflow
        for key in sorted(self.unready_local):
            data = key.encode()
            if size + len(data) + 1 > MAX_ENCODED:
                overflow = True
                break
            keys.append(data)
            size += len(data) + 1
        flags = (_PROXY_READY if self.proxy_ready else 0) | (_OVERFLOW if overflow else 0)
        return bytes((_VERSION, flags)) + b"\n".join(keys)

    def as_gossiped(self) -> NodeReadiness:
        """This verdict as the other nodes read it: cut at MAX_ENCODED. Wherever every node must
        decide alike (the L2 election), a node uses this for itself, not its whole list: keys
        past the cut would otherwise make it defer to a winner that thinks it is the winner."""
        found = decode(self.encode())
        return self if found is None else found


def decode(data: bytes) -> NodeReadiness | None:
    """A peer's gossiped readiness; None when it sent none (an older speaker) or garbage."""
    if len(data) < 2 or data[0] != _VERSION:
        return None
    try:
        text = data[2:].decode()
    except UnicodeDecodeError:
        return None
    keys = frozenset(k for k in text.split("\n") if k)
    return NodeReadiness(
        proxy_ready=bool(data[1] & _PROXY_READY),
        unready_local=keys,
        overflow=bool(data[1] & _OVERFLOW),
    )
