"""A raw Service, read once: its key and version, whether it is ours, its ingress addresses.

The controller, the speaker and `ironlb status` each read Services straight from the API, and
each used to spell these rules itself, slightly differently. They read them here instead, so a
Service is ours (or not) for all three at once and its status addresses are the same addresses
everywhere. Raw objects are untrusted: a field of the wrong type reads as absent, never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ironlb import addresses

Object = Mapping[str, Any]
Entries = tuple[tuple[str | None, str | None], ...]  # (ip, hostname) per ingress entry
LOAD_BALANCER = "LoadBalancer"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def key(obj: Object) -> str:
    """`namespace/name`, the key MetalLB and client-go's cache give any namespaced object."""
    meta = _map(obj.get("metadata"))
    return f"{_text(meta.get('namespace'))}/{_text(meta.get('name'))}"


def resource_version(obj: object) -> str:
    """`metadata.resourceVersion` of any object; "" when it has none (a body not yet created)."""
    meta = _map(obj.get("metadata")) if isinstance(obj, Mapping) else {}
    version = meta.get("resourceVersion")
    return str(version) if version else ""


def is_load_balancer(service: Object) -> bool:
    return _map(service.get("spec")).get("type") == LOAD_BALANCER


def lb_class(service: Object) -> str | None:
    """`spec.loadBalancerClass`; an empty one is the same as none."""
    return _text(_map(service.get("spec")).get("loadBalancerClass")) or None


def is_our_class(service_class: str | None, our_class: str) -> bool:
    """MetalLB's filterByLoadBalancerClass: run without --lb-class (`our_class` empty), only
    Services with no class; run with one, only Services of exactly that class. Every other
    Service belongs to another implementation and is never touched, not even to clear it."""
    return (service_class or None) == (our_class or None)


def class_matches(service: Object, our_class: str) -> bool:
    return is_our_class(lb_class(service), our_class)


def ours(service: Object, our_class: str) -> bool:
    """A LoadBalancer Service of our class: one to announce and to show."""
    return is_load_balancer(service) and class_matches(service, our_class)


@dataclass(frozen=True, slots=True)
class Ingress:
    """`status.loadBalancer.ingress` as written, and the addresses it holds."""

    entries: Entries = ()
    ips: tuple[addresses.IPAddress, ...] = ()  # the `ip` fields that parse, in order
    invalid: tuple[str, ...] = ()  # the `ip` fields that do not

    @property
    def texts(self) -> tuple[str, ...]:
        """Every `ip` field as written, parsable or not (for people to read)."""
        return tuple(ip for ip, _ in self.entries if ip)


def ingress(service: Object) -> Ingress:
    """Hostname-only entries carry no address (MetalLB skips them); an `ip` that does not parse
    is kept apart, since the controller and the speaker act on it differently (see callers)."""
    status = _map(_map(service.get("status")).get("loadBalancer"))
    raw = status.get("ingress")
    entries: list[tuple[str | None, str | None]] = []
    ips: list[addresses.IPAddress] = []
    invalid: list[str] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, Mapping):
            continue
        ip, hostname = _text(entry.get("ip")) or None, _text(entry.get("hostname")) or None
        entries.append((ip, hostname))
        if ip is None:
            continue
        parsed = addresses.parse_ip(ip)
        if parsed is None:
            invalid.append(ip)
        else:
            ips.append(parsed)
    return Ingress(tuple(entries), tuple(ips), tuple(invalid))
