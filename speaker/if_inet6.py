"""This node's IPv6 addresses as the kernel lists them in /proc/net/if_inet6.

Shared by the BGP plane (`bgp.local_addresses`) and the layer-2 one (`layer2.sockets`), which
may not import each other. /proc/net follows the network namespace of the process (a speaker
runs in its node's).

A line is the address (32 hex digits), the interface index, prefix length, scope and IFA_F_*
flags (hex), then the interface name.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

PATH: Final = "/proc/net/if_inet6"
# IFA_F_* flags of an address that cannot be used (yet, or at all).
IFA_F_DADFAILED: Final = 0x08
IFA_F_TENTATIVE: Final = 0x40


@dataclass(frozen=True, slots=True)
class InterfaceAddress:
    interface: str
    address: ipaddress.IPv6Address
    flags: int

    @property
    def usable(self) -> bool:
        """Neither still in nor failed by duplicate address detection."""
        return not self.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)


def parse(text: str) -> list[InterfaceAddress]:
    """The addresses of the file's lines, in its order; a line that does not parse is left out."""
    out: list[InterfaceAddress] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        try:
            address = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            flags = int(fields[4], 16)
        except ValueError:
            continue
        out.append(InterfaceAddress(fields[5], address, flags))
    return out


def read() -> list[InterfaceAddress]:
    """The addresses of this network namespace (none if the kernel has no IPv6)."""
    try:
        with open(PATH) as f:
            return parse(f.read())
    except OSError:
        return []
