"""What the layer-2 tests (`test_layer2_*.py`) share: an interface as a scan reports it."""

from __future__ import annotations

from speaker.layer2 import interfaces

MAC = b"\x02\x00\x0a\xfa\x00\x0b"


def facts(
    name: str = "eth0",
    index: int = 2,
    mac: bytes = MAC,
    *,
    up: bool = True,
    broadcast: bool = True,
    noarp: bool = False,
    enslaved: bool = False,
    ethernet: bool = True,
    has_ipv4: bool = True,
    has_link_local: bool = True,
) -> interfaces.InterfaceFacts:
    """An up Ethernet interface with an IPv4 and a link-local address: eligible for both
    responders unless a keyword says otherwise."""
    return interfaces.InterfaceFacts(
        name=name,
        index=index,
        mac=mac,
        up=up,
        broadcast=broadcast,
        noarp=noarp,
        enslaved=enslaved,
        ethernet=ethernet,
        has_ipv4=has_ipv4,
        has_link_local=has_link_local,
    )
