"""The shape of `ironlb status -o json` (and `--explain`'s), as a JSON Schema, and a checker.

Scripts that read the JSON can rely on this document: every key listed is always present (null
where a value is unknown), nothing else appears, and `schemaVersion` changes if that ever stops
being true. `check` understands the part of JSON Schema used here (type, enum, minimum,
properties, required, additionalProperties: false, items), enough to hold the command to it in
tests without another dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_STR = {"type": "string"}
_STRINGS = {"type": "array", "items": _STR}
_COUNT = {"type": ["integer", "null"], "minimum": 0}
_STATE = {"type": "string", "enum": ["up", "down", "absent", "unknown"]}


def _object(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


STATUS: dict[str, Any] = _object(
    schemaVersion={"type": "integer", "enum": [1]},
    pools={
        "type": "array",
        "items": _object(
            name=_STR,
            addresses=_STRINGS,
            autoAssign={"type": "boolean"},
            families={
                "type": "array",
                "items": _object(
                    family={"type": "string", "enum": ["IPv4", "IPv6"]},
                    assigned=_COUNT,
                    available=_COUNT,
                    total=_COUNT,
                    usage={"type": ["number", "null"], "minimum": 0},
                ),
            },
            l2Advertisements=_STRINGS,
            bgpAdvertisements=_STRINGS,
            services={"type": "integer", "minimum": 0},
        ),
    },
    services={
        "type": "array",
        "items": _object(
            namespace=_STR,
            name=_STR,
            addresses=_STRINGS,
            pool={"type": ["string", "null"]},
            externalTrafficPolicy=_STR,
            state={"type": "string", "enum": ["pending", "not-announced", "announced"]},
            modes={"type": "array", "items": {"type": "string", "enum": ["bgp", "layer2"]}},
            announcements={
                "type": "array",
                "items": _object(
                    protocol={"type": "string", "enum": ["bgp", "layer2"]},
                    node=_STR,
                    peers=_STRINGS,
                    interfaces=_STRINGS,
                ),
            },
            reason={"type": ["string", "null"]},
        ),
    },
    sessions={
        "type": "array",
        "items": _object(
            peer=_STR,
            address=_STR,
            myASN={"type": "integer", "minimum": 0},
            peerASN=_COUNT,
            node=_STR,
            bgp=_STATE,
            bfd={**_STATE, "type": ["string", "null"], "enum": [*_STATE["enum"], None]},
            prefixes=_COUNT,
        ),
    },
    nodes={
        "type": "array",
        "items": _object(
            name=_STR,
            ready={"type": "string", "enum": ["True", "False", "Unknown"]},
            speaker={"type": "string", "enum": ["scraped", "error", "not-scraped"]},
            error={"type": ["string", "null"]},
            members={
                "type": ["object", "null"],
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
            announced=_COUNT,
            configStale={"type": ["boolean", "null"]},
        ),
    },
    problems=_STRINGS,
    scrapes={
        "type": "array",
        "items": _object(
            url=_STR,
            node={"type": ["string", "null"]},
            ok={"type": "boolean"},
            error={"type": ["string", "null"]},
        ),
    },
)


_NULLABLE_STR = {"type": ["string", "null"]}

# `ironlb status --explain NAMESPACE/NAME -o json`: the Service and one row per node.
EXPLAIN: dict[str, Any] = _object(
    schemaVersion={"type": "integer", "enum": [1]},
    service=_object(
        namespace=_STR,
        name=_STR,
        addresses=_STRINGS,
        pool=_NULLABLE_STR,
        externalTrafficPolicy=_STR,
        state={"type": "string", "enum": ["pending", "not-announced", "announced"]},
        reason=_NULLABLE_STR,
    ),
    nodes={
        "type": "array",
        "items": _object(
            name=_STR,
            isNode={"type": "boolean"},
            speaker={"type": "string", "enum": ["answered", "no-verdict", "error", "not-given"]},
            url=_NULLABLE_STR,
            error=_NULLABLE_STR,
            source={"type": "string", "enum": ["speaker", "api", "none"]},
            verdicts={
                "type": "array",
                "items": _object(
                    # Open on purpose: a newer speaker may add a protocol or a reason.
                    protocol=_STR,
                    announcing={"type": ["boolean", "null"]},
                    reason=_NULLABLE_STR,
                    message=_STR,
                    ips=_STRINGS,
                    source={
                        "type": "string",
                        "enum": ["speaker", "ServiceL2Status", "ServiceBGPStatus"],
                    },
                ),
            },
            datapath=_object(
                ready={"type": ["boolean", "null"]},
                reason=_NULLABLE_STR,
                message=_STR,
                source={"type": "string", "enum": ["speaker", "ConfigurationState", "none"]},
            ),
            conflicts={
                "type": "array",
                "items": _object(
                    ip=_STR,
                    mac=_STR,
                    interface=_STR,
                    lastSeenSecondsAgo={"type": ["number", "null"], "minimum": 0},
                ),
            },
        ),
    },
    problems=_STRINGS,
)


def _is(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    raise ValueError(f"schema uses unknown type {kind!r}")


def check(document: Any, schema: Mapping[str, Any] = STATUS, where: str = "$") -> list[str]:
    """Every way `document` breaks `schema`, as `path: what` lines (empty: it conforms)."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(document, k) for k in kinds):
            return [f"{where}: {type(document).__name__} is not {'/'.join(kinds)}"]
    errors: list[str] = []
    if "enum" in schema and document not in schema["enum"]:
        errors.append(f"{where}: {document!r} is not one of {schema['enum']!r}")
    minimum = schema.get("minimum")
    number = isinstance(document, int | float) and not isinstance(document, bool)
    if minimum is not None and number and document < minimum:
        errors.append(f"{where}: {document} is below {minimum}")
    if isinstance(document, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in document:
                errors.append(f"{where}: missing {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, value in document.items():
            if key in properties:
                errors += check(value, properties[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unexpected {key!r}")
            elif isinstance(extra, Mapping):
                errors += check(value, extra, f"{where}.{key}")
    if isinstance(document, list) and "items" in schema:
        for i, item in enumerate(document):
            errors += check(item, schema["items"], f"{where}[{i}]")
    return errors
