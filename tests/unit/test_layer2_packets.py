"""The ARP/NDP codec: round trips, never-raising parser, and scapy as an independent oracle."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet6 import (
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
)
from scapy.layers.l2 import ARP, Ether

from speaker.layer2 import packets

MAC_A = packets.mac_bytes("02:00:0a:fa:00:0b")
MAC_B = packets.mac_bytes("02:00:0a:fa:00:01")
VIP4 = ipaddress.IPv4Address("10.250.0.200")
VIP6 = ipaddress.IPv6Address("fd00:250::200")
TOR4 = ipaddress.IPv4Address("10.250.0.1")
TOR_LL = ipaddress.IPv6Address("fe80::1")

macs = st.binary(min_size=6, max_size=6)
ipv4s = st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1))
ipv6s = st.builds(ipaddress.IPv6Address, st.integers(0, 2**128 - 1))


# --- addresses ------------------------------------------------------------------------------------


def test_mac_text_round_trip_and_rejects_garbage() -> None:
    assert packets.mac_text(packets.mac_bytes("02:00:0A:fa:00:0b")) == "02:00:0a:fa:00:0b"
    for bad in ("02:00:0a:fa:00", "02-00-0a-fa-00-0b", "2:0:a:fa:0:b", "zz:00:0a:fa:00:0b"):
        with pytest.raises(ValueError):
            packets.mac_bytes(bad)


def test_solicited_node_group_and_mac_follow_rfc_examples() -> None:
    # RFC 4291 2.7.1: the low 24 bits go after ff02::1:ff; RFC 2464 7: 33:33 + low 32 bits.
    address = ipaddress.IPv6Address("fe80::2aa:ff:fe28:9c5a")
    group = packets.solicited_node(address)
    assert group == ipaddress.IPv6Address("ff02::1:ff28:9c5a")
    assert packets.mac_text(packets.multicast_mac(group)) == "33:33:ff:28:9c:5a"
    assert packets.mac_text(packets.multicast_mac(packets.ALL_NODES)) == "33:33:00:00:00:01"


def test_icmpv6_checksum_matches_scapy() -> None:
    frame = bytes(
        Ether(src="02:00:0a:fa:00:01", dst="33:33:ff:00:02:00")
        / IPv6(src="fe80::1", dst="ff02::1:ff00:200", hlim=255)
        / ICMPv6ND_NS(tgt="fd00:250::200")
        / ICMPv6NDOptSrcLLAddr(lladdr="02:00:0a:fa:00:01")
    )
    message = frame[54:]
    zeroed = message[:2] + b"\x00\x00" + message[4:]
    checksum = packets.icmpv6_checksum(frame[22:38], frame[38:54], zeroed)
    assert checksum == int.from_bytes(message[2:4], "big")


# --- ARP ------------------------------------------------------------------------------------------


@given(
    eth_dst=macs, eth_src=macs, op=st.integers(0, 0xFFFF), sha=macs, spa=ipv4s, tha=macs, tpa=ipv4s
)
@settings(max_examples=200)
def test_arp_build_parse_round_trip(
    eth_dst: bytes,
    eth_src: bytes,
    op: int,
    sha: bytes,
    spa: ipaddress.IPv4Address,
    tha: bytes,
    tpa: ipaddress.IPv4Address,
) -> None:
    frame = packets.arp(
        eth_dst=eth_dst,
        eth_src=eth_src,
        operation=op,
        sender_mac=sha,
        sender_ip=spa,
        target_mac=tha,
        target_ip=tpa,
    )
    assert len(frame) == packets.ETHERNET_MIN
    assert packets.parse(frame) == packets.Arp(eth_dst, eth_src, op, sha, spa, tha, tpa)


def test_arp_reply_answers_the_requester_as_scapy_reads_it() -> None:
    request = packets.parse(packets.arp_request(MAC_B, TOR4, VIP4))
    assert isinstance(request, packets.Arp)
    reply = Ether(packets.arp_reply(request, MAC_A))
    assert reply[Ether].dst == "02:00:0a:fa:00:01"
    assert reply[Ether].src == "02:00:0a:fa:00:0b"
    assert (reply[ARP].op, reply[ARP].hwsrc, reply[ARP].psrc) == (2, "02:00:0a:fa:00:0b", str(VIP4))
    assert (reply[ARP].hwdst, reply[ARP].pdst) == ("02:00:0a:fa:00:01", str(TOR4))


def test_gratuitous_arp_has_both_forms_linux_accepts_within_locktime() -> None:
    request, reply = (Ether(f) for f in packets.gratuitous_arp(MAC_A, VIP4))
    for frame in (request, reply):
        assert frame[Ether].dst == "ff:ff:ff:ff:ff:ff"
        assert frame[ARP].psrc == frame[ARP].pdst == str(VIP4)
        assert frame[ARP].hwsrc == "02:00:0a:fa:00:0b"
    assert (request[ARP].op, request[ARP].hwdst) == (1, "00:00:00:00:00:00")
    # A reply is a GARP for Linux only with tha == sha (net/ipv4/arp.c arp_is_garp).
    assert (reply[ARP].op, reply[ARP].hwdst) == (2, "02:00:0a:fa:00:0b")


def test_parse_reads_scapy_built_arp() -> None:
    frame = bytes(
        Ether(dst="ff:ff:ff:ff:ff:ff", src="02:00:0a:fa:00:01")
        / ARP(op=1, hwsrc="02:00:0a:fa:00:01", psrc="10.250.0.1", pdst="10.250.0.200")
    )
    assert packets.parse(frame) == packets.Arp(
        packets.BROADCAST, MAC_B, 1, MAC_B, TOR4, packets.ZERO_MAC, VIP4
    )


def test_arp_for_other_hardware_or_protocols_is_not_parsed() -> None:
    frame = bytearray(packets.arp_request(MAC_B, TOR4, VIP4))
    for offset, value in ((15, 6), (17, 0xDD), (18, 8), (19, 16)):
        broken = bytearray(frame)
        broken[offset] = value
        assert packets.parse(bytes(broken)) is None
    assert packets.parse(bytes(frame[:41])) is None


# --- neighbour discovery --------------------------------------------------------------------------


@given(
    eth_src=macs,
    source=ipv6s,
    target=ipv6s,
    source_mac=st.none() | macs,
    hop_limit=st.integers(0, 255),
)
@settings(max_examples=200)
def test_solicitation_round_trip(
    eth_src: bytes,
    source: ipaddress.IPv6Address,
    target: ipaddress.IPv6Address,
    source_mac: bytes | None,
    hop_limit: int,
) -> None:
    frame = packets.neighbor_solicitation(
        eth_src=eth_src, source=source, target=target, source_mac=source_mac, hop_limit=hop_limit
    )
    group = packets.solicited_node(target)
    assert packets.parse(frame) == packets.NeighborSolicitation(
        packets.multicast_mac(group), eth_src, source, group, hop_limit, 0, target, source_mac
    )


@given(
    eth_dst=macs,
    eth_src=macs,
    source=ipv6s,
    destination=ipv6s,
    target=ipv6s,
    target_mac=st.none() | macs,
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
@settings(max_examples=200)
def test_advertisement_round_trip(
    eth_dst: bytes,
    eth_src: bytes,
    source: ipaddress.IPv6Address,
    destination: ipaddress.IPv6Address,
    target: ipaddress.IPv6Address,
    target_mac: bytes | None,
    flags: tuple[bool, bool, bool],
) -> None:
    router, solicited, override = flags
    frame = packets.neighbor_advertisement(
        eth_dst=eth_dst,
        eth_src=eth_src,
        source=source,
        destination=destination,
        target=target,
        target_mac=target_mac,
        router=router,
        solicited=solicited,
        override=override,
    )
    assert packets.parse(frame) == packets.NeighborAdvertisement(
        eth_dst,
        eth_src,
        source,
        destination,
        255,
        0,
        router,
        solicited,
        override,
        target,
        target_mac,
    )


def test_reply_to_a_solicitation_as_scapy_reads_it() -> None:
    solicitation = packets.parse(
        packets.neighbor_solicitation(eth_src=MAC_B, source=TOR_LL, target=VIP6, source_mac=MAC_B)
    )
    assert isinstance(solicitation, packets.NeighborSolicitation)
    raw = packets.neighbor_reply(solicitation, MAC_A)
    frame = Ether(raw)
    recomputed = Ether(raw)
    del recomputed[ICMPv6ND_NA].cksum
    assert frame[ICMPv6ND_NA].cksum == Ether(bytes(recomputed))[ICMPv6ND_NA].cksum
    assert (frame[Ether].dst, frame[Ether].src) == ("02:00:0a:fa:00:01", "02:00:0a:fa:00:0b")
    # Source = the target itself, so strict resolvers (ndisc6) accept it.
    assert (frame[IPv6].src, frame[IPv6].dst, frame[IPv6].hlim) == (str(VIP6), str(TOR_LL), 255)
    na = frame[ICMPv6ND_NA]
    assert (na.tgt, na.R, na.S, na.O) == (str(VIP6), 0, 1, 1)
    assert frame[ICMPv6NDOptDstLLAddr].lladdr == "02:00:0a:fa:00:0b"


def test_unsolicited_advertisement_overrides_and_goes_to_all_nodes() -> None:
    frame = Ether(packets.unsolicited_advertisement(MAC_A, VIP6))
    assert frame[Ether].dst == "33:33:00:00:00:01"
    assert (frame[IPv6].src, frame[IPv6].dst, frame[IPv6].hlim) == (str(VIP6), "ff02::1", 255)
    na = frame[ICMPv6ND_NA]
    assert (na.tgt, na.R, na.S, na.O) == (str(VIP6), 0, 0, 1)
    assert frame[ICMPv6NDOptDstLLAddr].lladdr == "02:00:0a:fa:00:0b"
    assert packets.gratuitous(MAC_A, VIP6) == (packets.unsolicited_advertisement(MAC_A, VIP6),)
    assert packets.gratuitous(MAC_A, VIP4) == packets.gratuitous_arp(MAC_A, VIP4)


def test_parse_reads_scapy_built_solicitation() -> None:
    frame = bytes(
        Ether(src="02:00:0a:fa:00:01", dst="33:33:ff:00:02:00")
        / IPv6(src="fe80::1", dst="ff02::1:ff00:200", hlim=255)
        / ICMPv6ND_NS(tgt="fd00:250::200")
        / ICMPv6NDOptSrcLLAddr(lladdr="02:00:0a:fa:00:01")
    )
    assert packets.parse(frame) == packets.NeighborSolicitation(
        packets.mac_bytes("33:33:ff:00:02:00"),
        MAC_B,
        TOR_LL,
        ipaddress.IPv6Address("ff02::1:ff00:200"),
        255,
        0,
        VIP6,
        MAC_B,
    )


def test_bad_checksum_and_broken_options_are_not_parsed() -> None:
    good = bytearray(
        packets.neighbor_solicitation(eth_src=MAC_B, source=TOR_LL, target=VIP6, source_mac=MAC_B)
    )
    assert packets.parse(bytes(good)) is not None
    flipped = bytearray(good)
    flipped[-1] ^= 0x01
    assert packets.parse(bytes(flipped)) is None
    # A zero-length option must make the receiver drop the packet (RFC 4861 4.6).
    zero = packets.neighbor_solicitation(eth_src=MAC_B, source=TOR_LL, target=VIP6, source_mac=None)
    assert packets.parse(_with_options(zero, b"\x01\x00" + b"\x00" * 6)) is None
    assert packets.parse(_with_options(zero, b"\x01\x02" + b"\x00" * 6)) is None  # runs past
    # An unknown option is skipped; a second source option does not replace the first.
    extra = b"\x0e\x01" + b"\x00" * 6 + b"\x01\x01" + MAC_A + b"\x01\x01" + MAC_B
    parsed = packets.parse(_with_options(zero, extra))
    assert isinstance(parsed, packets.NeighborSolicitation)
    assert parsed.source_mac == MAC_A


def _with_options(frame: bytes, options: bytes) -> bytes:
    """`frame` (an ICMPv6 ND frame) with `options` appended and lengths/checksum fixed up."""
    message = bytearray(frame[54:] + options)
    message[2:4] = b"\x00\x00"
    checksum = packets.icmpv6_checksum(frame[22:38], frame[38:54], bytes(message))
    message[2:4] = checksum.to_bytes(2, "big")
    header = bytearray(frame[14:54])
    header[4:6] = len(message).to_bytes(2, "big")
    return frame[:14] + bytes(header) + bytes(message)


def test_truncated_and_foreign_frames_are_none() -> None:
    frame = packets.neighbor_solicitation(
        eth_src=MAC_B, source=TOR_LL, target=VIP6, source_mac=MAC_B
    )
    for cut in range(len(frame)):
        assert packets.parse(frame[:cut]) is None
    echo = bytes(Ether() / IPv6(src="fe80::1", dst="fe80::2") / b"\x80\x00\x00\x00")
    assert packets.parse(echo) is None
    assert packets.parse(bytes(Ether(type=0x0800) / (b"\x45" + b"\x00" * 40))) is None


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_any_bytes_parse_to_a_packet_or_none(data: bytes) -> None:
    result = packets.parse(data)
    assert result is None or isinstance(
        result, packets.Arp | packets.NeighborSolicitation | packets.NeighborAdvertisement
    )


@given(st.binary(max_size=64), st.booleans())
@settings(max_examples=300)
def test_any_options_behind_a_valid_header_parse_or_give_none(options: bytes, ns: bool) -> None:
    # Random bytes almost never carry a valid checksum; fix it up so the option walker runs.
    if ns:
        base = packets.neighbor_solicitation(
            eth_src=MAC_B, source=TOR_LL, target=VIP6, source_mac=None
        )
    else:
        base = packets.neighbor_advertisement(
            eth_dst=MAC_B, eth_src=MAC_A, source=VIP6, destination=TOR_LL, target=VIP6,
            target_mac=None,
        )  # fmt: skip
    parsed = packets.parse(_with_options(base, options))
    if parsed is not None:
        assert not isinstance(parsed, packets.Arp)
        assert parsed.target == VIP6
