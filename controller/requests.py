"""What a Service asks of the allocator, read from its annotations and spec (pure parsing).

The kopf shell hands us raw strings; this module turns them into addresses, families and keys with
MetalLB's precedence rules (`metallb.io/*` wins over `metallb.universe.tf/*`, an annotation that is
present but empty counts as absent for IPs and pools but as a sharing key of "" for sharing) and
MetalLB's error texts, so that Events read the same as MetalLB's. Errors are returned, not raised:
a user can write any string into an annotation.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ironlb import addresses
from ironlb import annotations as keys


class ServiceFamily(enum.Enum):
    """The family of a set of addresses: a Service's cluster IPs or its load-balancer IPs."""

    IPV4 = "ipv4"
    IPV6 = "ipv6"
    DUAL = "dual"
    # Cluster IPs are present but say nothing usable (two of one family, three, garbage).
    UNKNOWN = "unknown"


class FamilyPolicy(enum.Enum):
    """`spec.ipFamilyPolicy`; an unset policy behaves as SingleStack, as in MetalLB."""

    SINGLE_STACK = "SingleStack"
    PREFER_DUAL_STACK = "PreferDualStack"
    REQUIRE_DUAL_STACK = "RequireDualStack"

    @classmethod
    def parse(cls, value: str | None) -> FamilyPolicy:
        for policy in cls:
            if policy.value == value:
                return policy
        return cls.SINGLE_STACK


@dataclass(frozen=True, slots=True)
class RequestedIPs:
    """The addresses a Service asks for explicitly; `error` set when the request is unusable."""

    ips: tuple[addresses.IPAddress, ...] = ()
    family: ServiceFamily | None = None
    error: str | None = None


NOTHING_REQUESTED = RequestedIPs()


def go_quoted(items: Iterable[object]) -> str:
    """Go's %q of a slice, as MetalLB's messages print addresses: ["1.2.3.4" "1000::"]."""
    return "[" + " ".join(f'"{item}"' for item in items) + "]"


def family_of(ips: Sequence[addresses.IPAddress]) -> tuple[ServiceFamily, str | None]:
    """MetalLB's ipfamily.ForAddresses: one address, or one of each family."""
    texts = [str(ip) for ip in ips]
    if len(ips) == 1:
        return (ServiceFamily.IPV4 if ips[0].version == 4 else ServiceFamily.IPV6), None
    if len(ips) == 2:
        if ips[0].version == ips[1].version:
            return ServiceFamily.UNKNOWN, f"same address family {go_quoted(texts)}"
        return ServiceFamily.DUAL, None
    return ServiceFamily.UNKNOWN, f"invalid ips length {len(ips)} {go_quoted(texts)}"


def cluster_family(
    cluster_ips: Sequence[str], cluster_ip: str | None = None
) -> ServiceFamily | None:
    """The family of `spec.clusterIPs` (falling back to `spec.clusterIP`); None when neither is set.

    Family comes from the cluster IPs, not from `spec.ipFamilies` (MetalLB's ForService).
    """
    texts = list(cluster_ips) if cluster_ips else ([cluster_ip] if cluster_ip else [])
    if not texts:
        return None
    parsed = [addresses.parse_ip(t) for t in texts]
    valid = [ip for ip in parsed if ip is not None]
    if len(valid) != len(parsed):
        return ServiceFamily.UNKNOWN
    return family_of(valid)[0]


def primary_family(ip_families: Sequence[str]) -> addresses.Family:
    """`spec.ipFamilies[0]`, which only breaks PreferDualStack ties; IPv4 unless it says IPv6."""
    return 6 if ip_families and ip_families[0] == "IPv6" else 4


def requested_pool(annotations: Mapping[str, str]) -> str | None:
    """`metallb.io/address-pool` (or its deprecated spelling); empty means no pool asked for."""
    return keys.read(annotations, keys.ADDRESS_POOL) or None


def sharing_key(annotations: Mapping[str, str]) -> str | None:
    """`metallb.io/allow-shared-ip`; None when absent. An empty value allows no sharing either."""
    return keys.read(annotations, keys.ALLOW_SHARED_IP)


def backend_key(selector: Mapping[str, str] | None, external_traffic_policy: str | None) -> str:
    """Services with ETP Local may share an address only with identical selectors."""
    if external_traffic_policy != "Local":
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted((selector or {}).items()))


def requested_ips(
    annotations: Mapping[str, str], spec_load_balancer_ip: str | None = None
) -> RequestedIPs:
    """The explicit address request: `metallb.io/loadBalancerIPs` or `spec.loadBalancerIP`.

    Errors carry MetalLB's texts: both set, an unparsable entry, two of one family, three or more.
    """
    annotated = keys.read(annotations, keys.LOAD_BALANCER_IPS) or ""
    spec = spec_load_balancer_ip or ""
    if not annotated and not spec:
        return RequestedIPs()
    if annotated and spec:
        return RequestedIPs(
            error=f"service can not have both {keys.LOAD_BALANCER_IPS.name} and "
            "svc.Spec.LoadBalancerIP"
        )
    if annotated:
        ips: list[addresses.IPAddress] = []
        for part in annotated.split(","):
            ip = addresses.parse_ip(part.strip())  # MetalLB trims each entry, and only these
            if ip is None:
                return RequestedIPs(error=f'invalid {keys.LOAD_BALANCER_IPS.name}: "{annotated}"')
            ips.append(ip)
        family, error = family_of(ips)
        if error is not None:
            return RequestedIPs(error=error)
        return RequestedIPs(tuple(ips), family)
    ip = addresses.parse_ip(spec)
    if ip is None:
        return RequestedIPs(error=f'invalid spec.loadBalancerIP "{spec}"')
    return RequestedIPs((ip,), family_of([ip])[0])
