"""The kernel's IPv6 address table (speaker.if_inet6) and the link-local addresses the layer-2
plane takes from it (speaker.layer2.sockets)."""

from __future__ import annotations

import ipaddress

import pytest

from speaker import if_inet6
from speaker.layer2 import sockets

ip = ipaddress.IPv6Address

# eth0's link-local address still in duplicate address detection (flags c0: permanent and
# tentative) and a global one that failed it (08), two link-local addresses on br0, one on veth1
# in fe80::/10 but outside fe80::/16, and lines the kernel never writes.
IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fd000250000000000000000000000011 02 40 00 80     eth0
fe800000000000000000000000000011 02 40 20 c0     eth0
fe800000000000000000000000000a01 05 40 20 80      br0
fe800000000000000000000000000a02 05 40 20 80      br0
fe810000000000000000000000000001 06 40 20 80    veth1
fd000250000000000000000000000098 02 40 00 08     eth0
zz000000000000000000000000000001 07 40 20 80      bad
fe80 08 40 20 80     cut
fe800000000000000000000000000001 09 40 20 xx  noflags
short line
"""


def test_parse_keeps_every_well_formed_line_in_order() -> None:
    assert if_inet6.parse(IF_INET6) == [
        if_inet6.InterfaceAddress("lo", ip("::1"), 0x80),
        if_inet6.InterfaceAddress("eth0", ip("fd00:250::11"), 0x80),
        if_inet6.InterfaceAddress("eth0", ip("fe80::11"), 0xC0),
        if_inet6.InterfaceAddress("br0", ip("fe80::a01"), 0x80),
        if_inet6.InterfaceAddress("br0", ip("fe80::a02"), 0x80),
        if_inet6.InterfaceAddress("veth1", ip("fe81::1"), 0x80),
        if_inet6.InterfaceAddress("eth0", ip("fd00:250::98"), 0x08),
    ]


def test_usable_means_past_duplicate_address_detection() -> None:
    usable = {str(a.address): a.usable for a in if_inet6.parse(IF_INET6)}
    assert usable == {
        "::1": True,
        "fd00:250::11": True,
        "fe80::11": False,  # tentative
        "fe80::a01": True,
        "fe80::a02": True,
        "fe81::1": True,
        "fd00:250::98": False,  # dadfailed
    }


def test_reading_this_machine_gives_what_parsing_its_file_does() -> None:
    try:
        with open(if_inet6.PATH) as f:
            text = f.read()
    except OSError:
        pytest.skip("no IPv6 in this network namespace")
    assert if_inet6.read() == if_inet6.parse(text)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(if_inet6, "read", lambda: if_inet6.parse(IF_INET6))


@pytest.mark.usefixtures("node")
def test_link_local_interfaces_count_tentative_addresses_and_only_fe80() -> None:
    assert sockets.link_local_interfaces() == {"eth0", "br0"}


@pytest.mark.usefixtures("node")
def test_link_local_address_is_the_interfaces_first() -> None:
    assert sockets.link_local_address("br0") == ip("fe80::a01")
    assert sockets.link_local_address("eth0") == ip("fe80::11")
    assert sockets.link_local_address("veth1") is None
    assert sockets.link_local_address("lo") is None
