"""Kubernetes objects the e2e tests create by hand in the lab.

There is no controller-manager in the lab, so nothing turns a Service's selector into
EndpointSlices: tests write the slices themselves, naming the nodes that host endpoints.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from hack import deploy
from hack import lab as network_lab


def apply(lab: network_lab.Lab, *objects: dict[str, Any]) -> None:
    lab.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def namespace_for(
    lab: network_lab.Lab, request: pytest.FixtureRequest, prefix: str
) -> Iterator[str]:
    """A namespace named after the test (unique even for parametrized variants)."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:30].strip("-")
    name = f"{prefix}-{slug}-{hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]}"
    lab.kubectl("create", "namespace", name)
    yield name
    lab.kubectl("delete", "service", "--all", "-n", name, "--wait=false")
    lab.kubectl("delete", "endpointslice", "--all", "-n", name, "--wait=false")


def create_service(
    lab: network_lab.Lab,
    namespace: str,
    name: str,
    *,
    local: bool = False,
    dual: bool = False,
    annotations: dict[str, str] | None = None,
) -> None:
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": {"app": name},
        "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
    }
    if dual:
        spec["ipFamilyPolicy"] = "RequireDualStack"
    if local:
        spec["externalTrafficPolicy"] = "Local"
    metadata = {"name": name, "namespace": namespace, "annotations": annotations or {}}
    apply(lab, {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec})


def set_endpoints(lab: network_lab.Lab, namespace: str, service: str, nodes: list[int]) -> None:
    """One ready endpoint on each of these nodes (replacing whatever the slice held)."""
    endpoints = [
        {
            "addresses": [str(lab.node_v4(i))],
            "nodeName": lab.node_names[i - 1],
            "conditions": {"ready": True, "serving": True, "terminating": False},
        }
        for i in nodes
    ]
    apply(
        lab,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-v4",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"port": 8080, "protocol": "TCP"}],
        },
    )


def ingress(lab: network_lab.Lab, namespace: str, name: str, count: int) -> list[str]:
    """The Service's addresses once it has `count` of them (bounded wait)."""

    def read() -> list[str] | None:
        svc = json.loads(lab.kubectl("get", "service", name, "-n", namespace, "-o", "json"))
        entries = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        ips = [e["ip"] for e in entries]
        return ips if len(ips) == count else None

    found: list[str] = deploy.wait_until(f"{namespace}/{name} to get {count} address(es)", read)
    return found


def status_nodes(lab: network_lab.Lab, plural: str, namespace: str) -> set[str] | None:
    """Nodes named by the speakers' status objects for a namespace's Services; None while one
    has been created but its status not written yet (two requests: object, then status)."""
    listed = json.loads(lab.kubectl("get", plural, "-n", "metallb-system", "-o", "json"))
    mine = [
        s
        for s in listed["items"]
        if (s["metadata"].get("labels") or {}).get("metallb.io/service-namespace") == namespace
    ]
    if any(not s.get("status") for s in mine):
        return None
    return {s["status"]["node"] for s in mine}
