"""Classic BPF programs that keep the kernel from waking the speaker for frames it ignores.

A raw socket bound to ETH_P_IPV6 would otherwise copy every IPv6 packet of the node to user
space. The programs are tiny "field equals value" chains, assembled here rather than compiled by
libpcap at run time; `tcpdump -dd` prints the same bytecode for the same expressions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from speaker.layer2 import packets

# Instruction classes and modes from linux/filter.h.
LDH_ABS: Final = 0x28  # BPF_LD | BPF_H | BPF_ABS
LDB_ABS: Final = 0x30  # BPF_LD | BPF_B | BPF_ABS
JEQ_K: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
RET_K: Final = 0x06  # BPF_RET | BPF_K
ACCEPT: Final = 0x40000  # snap length: the whole frame

Instruction = tuple[int, int, int, int]  # code, jump-if-true, jump-if-false, k

_IPV6_NEXT_HEADER = 14 + 6
_ICMPV6_TYPE = 14 + 40
_ARP_OPERATION = 14 + 6


def match(ethertype: int, *fields: tuple[int, int, int | tuple[int, ...]]) -> list[Instruction]:
    """Accept frames of `ethertype` whose (size 1 or 2, offset, value) fields all match; a field
    whose value is a tuple matches any of its values (tcpdump's `(f = a or f = b)`)."""
    checks: list[tuple[int, int, tuple[int, ...]]] = [(2, 12, (ethertype,))]
    for size, offset, value in fields:
        if size not in (1, 2):
            raise ValueError(f"field size must be 1 or 2 bytes, not {size}")
        checks.append((size, offset, value if isinstance(value, tuple) else (value,)))
    # Every field is one load and a compare per value; then accept, then reject.
    reject = sum(1 + len(values) for _, _, values in checks) + 1
    program: list[Instruction] = []
    for size, offset, values in checks:
        program.append((LDH_ABS if size == 2 else LDB_ABS, 0, 0, offset))
        for j, value in enumerate(values):
            after = len(program) + 1  # jumps count from the next instruction
            if j < len(values) - 1:
                # A match skips this field's other compares; a mismatch tries the next value.
                program.append((JEQ_K, len(values) - 1 - j, 0, value))
            else:
                program.append((JEQ_K, 0, reject - after, value))
    program.append((RET_K, 0, 0, ACCEPT))
    program.append((RET_K, 0, 0, 0))
    return program


ARP_REQUESTS: Final = match(packets.ETH_P_ARP, (2, _ARP_OPERATION, packets.ARP_REQUEST))
ARP_REPLIES: Final = match(packets.ETH_P_ARP, (2, _ARP_OPERATION, packets.ARP_REPLY))
NEIGHBOR_SOLICITATIONS: Final = match(
    packets.ETH_P_IPV6,
    (1, _IPV6_NEXT_HEADER, packets.ICMPV6),
    (1, _ICMPV6_TYPE, packets.NEIGHBOR_SOLICITATION),
)
NEIGHBOR_ADVERTISEMENTS: Final = match(
    packets.ETH_P_IPV6,
    (1, _IPV6_NEXT_HEADER, packets.ICMPV6),
    (1, _ICMPV6_TYPE, packets.NEIGHBOR_ADVERTISEMENT),
)
# What an announcing port reads: the requests it answers, and the replies / advertisements in
# which another machine may claim an owned address (`conflicts`).
ARP_REQUESTS_AND_REPLIES: Final = match(
    packets.ETH_P_ARP, (2, _ARP_OPERATION, (packets.ARP_REQUEST, packets.ARP_REPLY))
)
NEIGHBOR_SOLICITATIONS_AND_ADVERTISEMENTS: Final = match(
    packets.ETH_P_IPV6,
    (1, _IPV6_NEXT_HEADER, packets.ICMPV6),
    (1, _ICMPV6_TYPE, (packets.NEIGHBOR_SOLICITATION, packets.NEIGHBOR_ADVERTISEMENT)),
)


def assemble(program: Sequence[Instruction]) -> bytes:
    """The `struct sock_filter` array the kernel expects (u16 code, u8 jt, u8 jf, u32 k)."""
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
