"""What the speaker lists and watches, and what it reads of the Secrets in its namespace."""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from ironlb import annotations as keys
from ironlb import model, services
from ironlb_io import kube, watching
from speaker import snapshot


def sources(namespace: str, node_name: str, take_over_from: str = "") -> list[watching.Source]:
    """Services, Nodes, EndpointSlices, the metallb.io kinds and the status objects that
    concern this node, each kept slim (`snapshot.slim`); with `take_over_from` (a label
    selector), the Pods of `namespace` bound to this node that it matches
    (`ironlb.taking_over`)."""

    def source(kind: str, path: str, params: tuple[tuple[str, str], ...] = ()) -> watching.Source:
        return watching.Source(kind, path, params, keep=functools.partial(snapshot.slim, kind))

    found = [
        source("Service", kube.core_path("services")),
        source("Node", kube.core_path("nodes")),
        source("EndpointSlice", "/apis/discovery.k8s.io/v1/endpointslices"),
    ]
    for kind in (*model.CONFIG_KINDS, model.SERVICE_L2_STATUS, model.SERVICE_BGP_STATUS):
        plural, versions = model.RESOURCES[kind]
        # Every node's ServiceL2Status matters (a new owner deletes the old one's); of the
        # ServiceBGPStatuses, one per announcing node and Service, only our own do.
        mine = (
            (("labelSelector", f"{keys.STATUS_NODE}={node_name}"),)
            if kind == model.SERVICE_BGP_STATUS
            else ()
        )
        found.append(
            source(kind, kube.group_path(model.GROUP, versions[-1], plural, namespace), mine)
        )
    if take_over_from:
        on_this_node = (
            ("labelSelector", take_over_from),
            ("fieldSelector", f"spec.nodeName={node_name}"),
        )
        found.append(source(snapshot.PREDECESSOR, kube.core_path("pods", namespace), on_this_node))
    return found


def secret_names(items: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Secrets as the store keeps them: names only (dangling-reference checks)."""
    return {services.key(s): {"metadata": {"name": s["metadata"]["name"]}} for s in items}


def passwords(items: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """BGP passwords, which MetalLB reads from `kubernetes.io/basic-auth` Secrets' `password`
    key: Secret name -> password."""
    return {
        s["metadata"]["name"]: password
        for s in items
        if s.get("type") == "kubernetes.io/basic-auth"
        and (password := _decoded(s.get("data"), "password")) is not None
    }


def _decoded(data: Any, key: str) -> str | None:
    if not isinstance(data, Mapping) or not isinstance(data.get(key), str):
        return None
    try:
        return base64.b64decode(data[key], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
