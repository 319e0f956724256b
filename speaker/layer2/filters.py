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


def match(ethertype: int, *fields: tuple[int, int, int]) -> list[Instruction]:
    """Accept frames of `ethertype` whose (size 1 or 2, offset, value) fields all match."""
    checks = [(2, 12, ethertype), *fields]
    program: list[Instruction] = []
    for i, (size, offset, value) in enumerate(checks):
        if size not in (1, 2):
            raise ValueError(f"field size must be 1 or 2 bytes, not {size}")
        later = len(checks) - i - 1
        program.append((LDH_ABS if size == 2 else LDB_ABS, 0, 0, offset))
        # On a mismatch skip the later checks (two instructions each) and the accept.
        program.append((JEQ_K, 0, 2 * later + 1, value))
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


def assemble(program: Sequence[Instruction]) -> bytes:
    """The `struct sock_filter` array the kernel expects (u16 code, u8 jt, u8 jf, u32 k)."""
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
