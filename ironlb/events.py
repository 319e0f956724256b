"""core/v1 Event bodies, as Kubernetes components write them: pure data.

Time and the unique name suffix come from the caller, so that building an Event stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def involved(obj: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """The `involvedObject` reference to an API object."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }


def body(
    about: Mapping[str, Any],
    *,
    type: str,
    reason: str,
    message: str,
    component: str,
    instance: str,
    now: str,
    name_suffix: str,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{about['name']}.{name_suffix}", "namespace": about["namespace"]},
        "involvedObject": dict(about),
        "type": type,
        "reason": reason,
        "message": message,
        "source": {"component": component, "host": instance},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
