"""The next hop of a dual-stack session's other family (speaker.bgp.next_hops), and the kernel
facts it is chosen from as speaker.bgp.local_addresses parses them."""

from __future__ import annotations

import ipaddress
import socket
import struct

import pytest

from speaker import if_inet6
from speaker.bgp import local_addresses, next_hops, peers

ip = ipaddress.ip_address

# The lab's node 1: eth0 on the ToR's LAN with both families and a link-local address, a pod
# bridge with the pods' gateways, and the loopback.
NODE = next_hops.Facts(
    interfaces={
        "lo": (ip("127.0.0.1"), ip("::1")),
        "eth0": (ip("10.250.0.11"), ip("fd00:250::11"), ip("fe80::1")),
        "cbr0": (ip("10.244.1.1"), ip("fd00:244:1::1")),
    },
    sources={ip("10.250.0.1"): ip("10.250.0.11"), ip("fd00:250::1"): ip("fd00:250::11")},
)
V4_ONLY_LAN = next_hops.Facts(
    interfaces={"eth0": (ip("10.250.0.11"), ip("fe80::1")), "eth1": (ip("fd00:9::11"),)}
)
TWO_V6 = next_hops.Facts(
    interfaces={"eth0": (ip("10.250.0.11"), ip("fd00:250::99"), ip("fd00:250::11"))}
)
LOOPBACK_SOURCE = next_hops.Facts(
    interfaces={"lo": (ip("127.0.0.1"), ip("192.0.2.11"), ip("::1"), ip("2001:db8::11"))}
)
INTERNAL = ("fd00:250::11", "10.250.0.11")

CASES = [
    # (id, family, local, facts, InternalIPs, chosen)
    ("v6 over v4: eth0's global address", 6, "10.250.0.11", NODE, INTERNAL, "fd00:250::11"),
    ("v4 over v6: eth0's address", 4, "fd00:250::11", NODE, INTERNAL, "10.250.0.11"),
    ("not the pod bridge's, without InternalIPs", 6, "10.250.0.11", NODE, (), "fd00:250::11"),
    ("the local address on another interface", 6, "10.244.1.1", NODE, (), "fd00:244:1::1"),
    ("the InternalIP among the interface's", 6, "10.250.0.11", TWO_V6, INTERNAL, "fd00:250::11"),
    ("else the first listed", 6, "10.250.0.11", TWO_V6, (), "fd00:250::99"),
    (
        "link-local only: the InternalIP",
        6,
        "10.250.0.11",
        V4_ONLY_LAN,
        ("fd00:9::11",),
        "fd00:9::11",
    ),
    ("link-local only, no InternalIP: none", 6, "10.250.0.11", V4_ONLY_LAN, ("10.250.0.11",), None),
    (
        "source on the loopback: its global one",
        6,
        "192.0.2.11",
        LOOPBACK_SOURCE,
        (),
        "2001:db8::11",
    ),
    ("never 127.0.0.1", 4, "2001:db8::11", LOOPBACK_SOURCE, (), "192.0.2.11"),
    ("no local address known: the InternalIP", 6, None, NODE, INTERNAL, "fd00:250::11"),
    ("local address on no interface: the InternalIP", 4, "fd00::9", NODE, INTERNAL, "10.250.0.11"),
    ("nothing known: none", 6, None, next_hops.Facts(), (), None),
    ("a link-local InternalIP does not count", 6, None, NODE, ("fe80::1",), None),
    ("text that is no address is skipped", 4, None, NODE, ("node1", "10.250.0.11"), "10.250.0.11"),
]


@pytest.mark.parametrize(
    ("family", "local", "facts", "internal", "chosen"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_choose(
    family: peers.Family,
    local: str | None,
    facts: next_hops.Facts,
    internal: tuple[str, ...],
    chosen: str | None,
) -> None:
    found = next_hops.choose(family, None if local is None else ip(local), facts, internal)
    assert found == (None if chosen is None else ip(chosen))


def dual(address: str, **fields: object) -> peers.Peer:
    return peers.Peer("tor", 64512, 64500, ip(address), dual_stack=True, **fields)  # type: ignore[arg-type]


def test_a_dual_stack_session_gets_the_other_family_only() -> None:
    over_v4 = next_hops.with_next_hop(dual("10.250.0.1"), NODE, INTERNAL)
    assert (over_v4.ipv4_next_hop, over_v4.ipv6_next_hop) == (None, ip("fd00:250::11"))
    over_v6 = next_hops.with_next_hop(dual("fd00:250::1"), NODE, INTERNAL)
    assert (over_v6.ipv4_next_hop, over_v6.ipv6_next_hop) == (ip("10.250.0.11"), None)
    # sourceAddress says which interface, whatever the kernel would pick.
    sourced = dual("10.250.0.1", source_address=ip("10.244.1.1"))
    assert next_hops.with_next_hop(sourced, NODE).ipv6_next_hop == ip("fd00:244:1::1")


def test_what_is_left_alone() -> None:
    single = peers.Peer("tor", 64512, 64500, ip("10.250.0.1"))
    assert next_hops.with_next_hop(single, NODE, INTERNAL) is single
    given = dual("10.250.0.1", ipv6_next_hop=ip("fd00::77"))
    assert next_hops.with_next_hop(given, NODE, INTERNAL) is given
    nothing = dual("10.250.0.1")
    assert next_hops.with_next_hop(nothing, next_hops.Facts(), ()) is nothing


# --- local_addresses: what the kernel says, parsed ----------------------------------------------

IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fd000250000000000000000000000011 02 40 00 80     eth0
fe800000000000000000000000000001 02 40 20 80     eth0
fd000250000000000000000000000099 02 40 00 c0     eth0
fd000250000000000000000000000098 02 40 00 08     eth0
short line
"""


def test_ipv6_addresses_leave_out_tentative_and_failed_ones() -> None:
    assert local_addresses.ipv6_addresses(if_inet6.parse(IF_INET6)) == [
        ("lo", ip("::1")),
        ("eth0", ip("fd00:250::11")),
        ("eth0", ip("fe80::1")),
    ]


def ifreq(name: str, family: int, address: str) -> bytes:
    sockaddr = struct.pack("H", family) + b"\0\0" + ipaddress.IPv4Address(address).packed
    union = sockaddr.ljust(local_addresses.IFREQ_SIZE - local_addresses.IFNAMSIZ, b"\0")
    return name.encode().ljust(local_addresses.IFNAMSIZ, b"\0") + union


def test_ipv4_addresses_from_the_ifreq_array() -> None:
    data = b"".join(
        (
            ifreq("lo", socket.AF_INET, "127.0.0.1"),
            ifreq("eth0", socket.AF_INET, "10.250.0.11"),
            ifreq("eth0:vip", socket.AF_INET, "10.250.0.12"),
            ifreq("odd", socket.AF_INET6, "1.2.3.4"),
        )
    )
    assert local_addresses.ipv4_addresses(data + b"\0" * 7) == [
        ("lo", ip("127.0.0.1")),
        ("eth0", ip("10.250.0.11")),
        ("eth0", ip("10.250.0.12")),
    ]


def test_reading_this_machine_gives_facts_of_its_own() -> None:
    facts = local_addresses.read([ip("127.0.0.2")])
    assert ip("127.0.0.1") in {a for on in facts.interfaces.values() for a in on}
    assert facts.sources == {ip("127.0.0.2"): ip("127.0.0.1")}
