"""Address ranges as integer intervals.

Pools are written as CIDRs (`10.0.0.0/24`, `fc00::/120`) or inclusive ranges (`10.0.0.5-10.0.0.9`).
Both become one `AddressRange` (first and last address as integers), so that a /8 or a /64 costs
the same as a /32: nothing here ever enumerates addresses.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

Family = Literal[4, 6]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True, order=True)
class AddressRange:
    """An inclusive interval [first, last] of addresses of one family."""

    version: Family
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, address: object) -> bool:
        if not isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
            return False
        return address.version == self.version and self.first <= int(address) <= self.last

    def overlaps(self, other: AddressRange) -> bool:
        return (
            self.version == other.version and self.first <= other.last and other.first <= self.last
        )

    def address(self, value: int) -> IPAddress:
        return ipaddress.IPv4Address(value) if self.version == 4 else ipaddress.IPv6Address(value)

    def networks(self) -> list[IPNetwork]:
        """The minimal list of CIDRs covering exactly this range (MetalLB's summarise)."""
        return list(
            ipaddress.summarize_address_range(self.address(self.first), self.address(self.last))
        )

    def __str__(self) -> str:
        nets = self.networks()
        if len(nets) == 1:
            return str(nets[0])
        return f"{self.address(self.first)}-{self.address(self.last)}"


def parse_ip(text: object) -> IPAddress | None:
    """An IP address as Go's net.ParseIP reads it, which is how MetalLB reads every address.

    Go's rule differs from Python's `ip_address` in two places, and both matter here:
    * a zone (`fe80::1%eth0`) is refused: Python accepts it, Go does not;
    * an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) is IPv4: Go keeps every address in 16
      bytes and `To4()` recovers the IPv4 one, so MetalLB counts it in IPv4 pools and families,
      and prints (and hashes) it as `10.0.0.1`.
    Surrounding spaces are refused, as Go does; callers that MetalLB trims first (the parts of
    the loadBalancerIPs annotation, the ends of a pool range) strip before calling.
    """
    if not isinstance(text, str) or "%" in text:
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_range(text: str) -> AddressRange | str:
    """Parse `a/n` or `a-b`; on failure return the reason as a message for a person."""
    if not isinstance(text, str) or not text.strip():
        return "must be a CIDR (a.b.c.d/n) or a range (a.b.c.d-e.f.g.h)"
    text = text.strip()
    if "/" in text:
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return f"{text!r} is not a valid CIDR"
        # Host bits are accepted, as Go's net.ParseCIDR does: MetalLB's own docs write pools
        # like 198.51.100.10/24, and those manifests must apply unchanged.
        return AddressRange(net.version, int(net.network_address), int(net.broadcast_address))
    if "-" in text:
        start_text, _, end_text = text.partition("-")
        # MetalLB trims spaces around the ends of a range ("10.0.0.1 - 10.0.0.9").
        start, end = parse_ip(start_text.strip()), parse_ip(end_text.strip())
        if start is None or end is None:
            return f"{text!r} is not a valid range: both ends must be IP addresses"
        if start.version != end.version:
            return f"{text!r} mixes IPv4 and IPv6"
        if int(start) > int(end):
            return f"{text!r}: the start of the range is after its end"
        return AddressRange(start.version, int(start), int(end))
    address = parse_ip(text)
    if address is None:
        return f"{text!r} is not a CIDR or a range"
    return f"{text!r} is a single address; write it as {address}/{address.max_prefixlen}"


def family_of(address: IPAddress) -> Family:
    return 4 if address.version == 4 else 6
