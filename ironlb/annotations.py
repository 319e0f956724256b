"""Annotation and label keys that make up MetalLB's user contract, each spelled once.

MetalLB renamed its annotations from `metallb.universe.tf/*` to `metallb.io/*` and still honours
the old spelling; when a Service carries both, the new one wins. Every reader goes through `read`
so that rule lives in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NEW_PREFIX = "metallb.io/"
LEGACY_PREFIX = "metallb.universe.tf/"


@dataclass(frozen=True, slots=True)
class Key:
    """An input annotation under its current name and its deprecated alias."""

    name: str
    legacy: str


LOAD_BALANCER_IPS = Key("metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs")
ADDRESS_POOL = Key("metallb.io/address-pool", "metallb.universe.tf/address-pool")
ALLOW_SHARED_IP = Key("metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip")

# Written by the controller only; the legacy spelling of this one is never written.
IP_ALLOCATED_FROM_POOL = "metallb.io/ip-allocated-from-pool"

# Node label: nodes carrying it (any value) never attract load-balancer traffic.
EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"

# Labels on the speakers' ServiceL2Status / ServiceBGPStatus objects: who wrote it, for which
# Service (MetalLB's own, so its tools find ours).
STATUS_NODE = "metallb.io/node"
STATUS_SERVICE_NAME = "metallb.io/service-name"
STATUS_SERVICE_NAMESPACE = "metallb.io/service-namespace"
# Labels on the ConfigurationState objects: which component wrote it, and a speaker's node.
COMPONENT_TYPE = "metallb.io/component-type"
NODE_NAME = "metallb.io/node-name"

# EndpointSlice label naming the Service the slice belongs to (set by Kubernetes).
ENDPOINT_SLICE_SERVICE = "kubernetes.io/service-name"

INPUT_KEYS = (LOAD_BALANCER_IPS, ADDRESS_POOL, ALLOW_SHARED_IP)


def read(annotations: Mapping[str, str] | None, key: Key) -> str | None:
    """The value under the new name if present (even empty), else under the legacy name."""
    if not annotations:
        return None
    if key.name in annotations:
        return annotations[key.name]
    return annotations.get(key.legacy)


def has(annotations: Mapping[str, str] | None, key: Key) -> bool:
    """Presence matters on its own: an empty `allow-shared-ip` is still a sharing key."""
    if not annotations:
        return False
    return key.name in annotations or key.legacy in annotations


def deprecated_keys(annotations: Mapping[str, str] | None) -> list[str]:
    """Every `metallb.universe.tf/*` key present, sorted, for the deprecation Warning event."""
    if not annotations:
        return []
    return sorted(k for k in annotations if k.startswith(LEGACY_PREFIX))
