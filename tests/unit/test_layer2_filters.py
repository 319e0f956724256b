"""The BPF programs: same bytecode as `tcpdump -dd`, and they keep exactly the frames we answer."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from speaker.layer2 import filters, packets

# `tcpdump -dd EXPR` output (tcpdump 4.99.3, libpcap 1.10.3), pasted as the oracle.
TCPDUMP = {
    "arp and arp[6:2] = 1": [
        (0x28, 0, 0, 0x0C),
        (0x15, 0, 3, 0x0806),
        (0x28, 0, 0, 0x14),
        (0x15, 0, 1, 0x01),
        (0x06, 0, 0, 0x40000),
        (0x06, 0, 0, 0x00),
    ],
    "arp and arp[6:2] = 2": [
        (0x28, 0, 0, 0x0C),
        (0x15, 0, 3, 0x0806),
        (0x28, 0, 0, 0x14),
        (0x15, 0, 1, 0x02),
        (0x06, 0, 0, 0x40000),
        (0x06, 0, 0, 0x00),
    ],
    "ip6 and ip6[6] == 58 and ip6[40] == 135": [
        (0x28, 0, 0, 0x0C),
        (0x15, 0, 5, 0x86DD),
        (0x30, 0, 0, 0x14),
        (0x15, 0, 3, 0x3A),
        (0x30, 0, 0, 0x36),
        (0x15, 0, 1, 0x87),
        (0x06, 0, 0, 0x40000),
        (0x06, 0, 0, 0x00),
    ],
    "ip6 and ip6[6] == 58 and ip6[40] == 136": [
        (0x28, 0, 0, 0x0C),
        (0x15, 0, 5, 0x86DD),
        (0x30, 0, 0, 0x14),
        (0x15, 0, 3, 0x3A),
        (0x30, 0, 0, 0x36),
        (0x15, 0, 1, 0x88),
        (0x06, 0, 0, 0x40000),
        (0x06, 0, 0, 0x00),
    ],
    "arp and (arp[6:2] = 1 or arp[6:2] = 2)": [
        (0x28, 0, 0, 0x0C),
        (0x15, 0, 4, 0x0806),
        (0x28, 0, 0, 0x14),
        (0x15, 1, 0, 0x01),
        (0x15, 0, 1, 0x02),
        (0x06, 0, 0, 0x40000),
        (0x06, 0, 0, 0x00),
    ],
    "ip6 and ip6[6] == 58 and (ip6[40] == 135 or ip6[40] == 136)": [
        (0x28, 0, 0, 0x0C),
        (0x15, 0, 6, 0x86DD),
        (0x30, 0, 0, 0x14),
        (0x15, 0, 4, 0x3A),
        (0x30, 0, 0, 0x36),
        (0x15, 1, 0, 0x87),
        (0x15, 0, 1, 0x88),
        (0x06, 0, 0, 0x40000),
        (0x06, 0, 0, 0x00),
    ],
}

MAC = packets.mac_bytes("02:00:0a:fa:00:01")
LL = ipaddress.IPv6Address("fe80::1")
VIP4 = ipaddress.IPv4Address("10.250.0.200")
VIP6 = ipaddress.IPv6Address("fd00:250::200")


def run(program: Sequence[filters.Instruction], frame: bytes) -> int:
    """A classic-BPF interpreter for the instructions `filters.match` emits, as Linux runs them."""
    accumulator, pc = 0, 0
    while pc < len(program):
        code, jt, jf, k = program[pc]
        if code in (filters.LDH_ABS, filters.LDB_ABS):
            size = 2 if code == filters.LDH_ABS else 1
            if k + size > len(frame):
                return 0  # a load past the end drops the packet
            accumulator = int.from_bytes(frame[k : k + size], "big")
        elif code == filters.JEQ_K:
            pc += jt if accumulator == k else jf
        elif code == filters.RET_K:
            return min(k, len(frame))
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1
    raise AssertionError("program fell off its end")


@pytest.mark.parametrize(
    ("program", "expression"),
    [
        (filters.ARP_REQUESTS, "arp and arp[6:2] = 1"),
        (filters.ARP_REPLIES, "arp and arp[6:2] = 2"),
        (filters.NEIGHBOR_SOLICITATIONS, "ip6 and ip6[6] == 58 and ip6[40] == 135"),
        (filters.NEIGHBOR_ADVERTISEMENTS, "ip6 and ip6[6] == 58 and ip6[40] == 136"),
        (filters.ARP_REQUESTS_AND_REPLIES, "arp and (arp[6:2] = 1 or arp[6:2] = 2)"),
        (
            filters.NEIGHBOR_SOLICITATIONS_AND_ADVERTISEMENTS,
            "ip6 and ip6[6] == 58 and (ip6[40] == 135 or ip6[40] == 136)",
        ),
    ],
)
def test_programs_equal_tcpdump_bytecode(
    program: list[filters.Instruction], expression: str
) -> None:
    assert program == TCPDUMP[expression]
    assert len(filters.assemble(program)) == 8 * len(program)


def test_match_rejects_wide_fields() -> None:
    with pytest.raises(ValueError):
        filters.match(0x0800, (4, 20, 1))


SOLICITATION = packets.neighbor_solicitation(eth_src=MAC, source=LL, target=VIP6, source_mac=MAC)
FRAMES = {
    "arp request": packets.arp_request(MAC, ipaddress.IPv4Address("10.250.0.1"), VIP4),
    "arp reply": packets.gratuitous_arp(MAC, VIP4)[1],
    "gratuitous arp request": packets.gratuitous_arp(MAC, VIP4)[0],
    "solicitation": SOLICITATION,
    "advertisement": packets.unsolicited_advertisement(MAC, VIP6),
    "ipv4": MAC + MAC + b"\x08\x00" + b"\x45" + b"\x00" * 50,
    "short": MAC + MAC + b"\x86\xdd" + b"\x60",
    # Neither answered nor a claim: an InARP request, and an ICMPv6 router advertisement.
    "inverse arp": packets.arp(
        eth_dst=packets.BROADCAST,
        eth_src=MAC,
        operation=8,
        sender_mac=MAC,
        sender_ip=VIP4,
        target_mac=packets.ZERO_MAC,
        target_ip=VIP4,
    ),
    "router advertisement": SOLICITATION[:54] + bytes([134]) + SOLICITATION[55:],
}


@pytest.mark.parametrize(
    ("program", "kept"),
    [
        (filters.ARP_REQUESTS, {"arp request", "gratuitous arp request"}),
        (filters.ARP_REPLIES, {"arp reply"}),
        (filters.NEIGHBOR_SOLICITATIONS, {"solicitation"}),
        (filters.NEIGHBOR_ADVERTISEMENTS, {"advertisement"}),
        (
            filters.ARP_REQUESTS_AND_REPLIES,
            {"arp request", "arp reply", "gratuitous arp request"},
        ),
        (filters.NEIGHBOR_SOLICITATIONS_AND_ADVERTISEMENTS, {"solicitation", "advertisement"}),
    ],
)
def test_programs_keep_exactly_their_frames(
    program: list[filters.Instruction], kept: set[str]
) -> None:
    assert {name for name, frame in FRAMES.items() if run(program, frame)} == kept
    for name in kept:
        assert run(program, FRAMES[name]) == len(FRAMES[name])
