"""Fuzzing ARP / neighbour discovery reception: raw frame -> `packets.parse` -> the responder.

Frames go through the announcer's own receive path (`Announcer.handle`) on a fake port (a list
standing in for the raw socket). The contract: a frame either parses or is dropped and counted
in `ironlb_speaker_malformed_layer2_frames_total`; nothing raises; an answer is only ever sent for
an owned address, and is itself a well-formed frame; a conflict is only ever recorded for an
owned address and a MAC that is not the port's. Inputs: random bytes, mutations of frames
built by our own builders, and frames built by scapy with freely drawn fields (an independent
encoder that also computes the ICMPv6 checksum the parser verifies).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet6 import (
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6NDOptUnknown,
    IPv6,
)
from scapy.layers.l2 import ARP, Ether

from ironlb_io import prometheus
from speaker.layer2 import announcing, metrics, packets, responding
from tests.unit import fuzzing

AREA = "layer2 frames"
MAC = packets.mac_bytes("02:00:0a:fa:00:0b")
TOR_MAC = packets.mac_bytes("02:00:0a:fa:00:01")
VIP4 = ipaddress.IPv4Address("10.250.0.200")
VIP6 = ipaddress.IPv6Address("fd00:250::200")
TOR4 = ipaddress.IPv4Address("10.250.0.1")
TOR_LL = ipaddress.IPv6Address("fe80::1")


@dataclass
class FakePort:
    name: str = "eth0"
    mac: bytes = MAC
    arp: bool = True
    ndp: bool = True
    sent: list[bytes] = field(default_factory=list)

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)

    def set_groups(self, groups: frozenset[bytes]) -> None:
        pass


def announcer() -> tuple[announcing.Announcer, FakePort]:
    core, port = announcing.Announcer(), FakePort()
    core.set_ports({port.name: port})
    core.set_owned({VIP4: (), VIP6: ()}, 0.0)
    return core, port


def handle(frames: list[bytes]) -> None:
    core, port = announcer()
    expected_malformed = 0
    for frame in frames:
        parsed = fuzzing.feed(AREA, packets.parse, frame)
        expected_malformed += parsed is None
        decision = core.handle(port, frame)
        if isinstance(decision, responding.Answer):
            assert decision.address in (VIP4, VIP6)
            assert port.sent[-1] == decision.frame
            check_reply(decision)
    assert core.stats.malformed == expected_malformed
    assert len(port.sent) == core.stats.responses_sent.total()
    # A conflict is only ever another machine's claim on an owned address.
    for conflict in core.conflicts.current:
        assert conflict.ip in (VIP4, VIP6) and conflict.mac != mac_text(MAC)
    assert core.stats.address_conflicts.total() >= len(core.conflicts.current)


def check_reply(answer: responding.Answer) -> None:
    """Our reply read back by both codecs: for the address asked, with a correct checksum."""
    reply = packets.parse(answer.frame)
    scapy_reply = Ether(answer.frame)
    if isinstance(reply, packets.Arp):
        assert reply.operation == packets.ARP_REPLY and reply.sender_ip == answer.address
        assert scapy_reply[ARP].psrc == str(answer.address)
    else:
        assert isinstance(reply, packets.NeighborAdvertisement)
        assert reply.target == answer.address and reply.solicited and reply.override
        advertisement = scapy_reply[ICMPv6ND_NA]
        checksum = advertisement.cksum
        del advertisement.cksum
        assert Ether(bytes(scapy_reply))[ICMPv6ND_NA].cksum == checksum


macs = st.one_of(
    st.sampled_from((MAC, TOR_MAC, packets.BROADCAST)), st.binary(min_size=6, max_size=6)
)
ipv4s = st.one_of(st.sampled_from((VIP4, TOR4)), st.ip_addresses(v=4))
ipv6s = st.one_of(
    st.sampled_from((VIP6, TOR_LL, packets.solicited_node(VIP6), packets.UNSPECIFIED)),
    st.ip_addresses(v=6),
)


@st.composite
def own_frames(draw: st.DrawFn) -> bytes:
    """Frames from our builders: requests as a host sends them, and our own replies."""
    kind = draw(st.sampled_from(("arp", "ns", "na", "garp", "reply")))
    if kind == "arp":
        return packets.arp_request(draw(macs), draw(ipv4s), draw(ipv4s))
    if kind == "ns":
        return packets.neighbor_solicitation(
            eth_src=draw(macs),
            source=draw(ipv6s),
            target=draw(ipv6s),
            source_mac=draw(st.one_of(st.none(), macs)),
            hop_limit=draw(st.sampled_from((255, 254, 1))),
        )
    if kind == "na":
        return packets.unsolicited_advertisement(draw(macs), draw(ipv6s))
    if kind == "reply":
        v4 = ipaddress.IPv4Address
        asking = packets.parse(packets.arp_request(draw(macs), v4(draw(ipv4s)), v4(draw(ipv4s))))
        assert isinstance(asking, packets.Arp)
        return packets.arp_reply(asking, draw(macs))
    return draw(st.sampled_from(packets.gratuitous_arp(draw(macs), draw(ipv4s))))


def mac_text(raw: bytes) -> str:
    return packets.mac_text(raw)


@st.composite
def scapy_arp(draw: st.DrawFn) -> bytes:
    layer = ARP(
        hwtype=draw(st.sampled_from((1, 1, 1, 6, 0xFFFF))),
        ptype=draw(st.sampled_from((0x0800, 0x0800, 0x86DD))),
        op=draw(st.sampled_from((1, 1, 2, 0, 0xFFFF))),
        hwsrc=mac_text(draw(macs)),
        psrc=str(draw(ipv4s)),
        hwdst=mac_text(draw(macs)),
        pdst=str(draw(ipv4s)),
    )
    frame = Ether(dst=mac_text(draw(macs)), src=mac_text(draw(macs))) / layer
    return bytes(frame) + draw(st.binary(max_size=24))


@st.composite
def scapy_nd(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A neighbour solicitation or advertisement, and whether scapy wrote every option length
    (then the frame is well-formed; a length drawn here may or may not be)."""
    target = str(draw(ipv6s))
    code = draw(st.sampled_from((0, 0, 1, 255)))
    if draw(st.booleans()):
        message = ICMPv6ND_NS(tgt=target, code=code)
        lladdr = ICMPv6NDOptSrcLLAddr(lladdr=mac_text(draw(macs)))
    else:
        message = ICMPv6ND_NA(
            tgt=target,
            code=code,
            R=draw(st.booleans()),
            S=draw(st.booleans()),
            O=draw(st.booleans()),
        )
        lladdr = ICMPv6NDOptDstLLAddr(lladdr=mac_text(draw(macs)))
    options = []
    lengths_written_by_scapy = True
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            options.append(lladdr)
        else:
            data = draw(st.binary(max_size=22))
            units = draw(st.one_of(st.none(), st.integers(0, 4)))
            lengths_written_by_scapy &= units is None
            options.append(ICMPv6NDOptUnknown(type=draw(st.integers(3, 255)), len=units, data=data))
    layer = message
    for option in options:
        layer = layer / option
    frame = (
        Ether(dst=mac_text(draw(macs)), src=mac_text(draw(macs)))
        / IPv6(src=str(draw(ipv6s)), dst=str(draw(ipv6s)), hlim=draw(st.sampled_from((255, 64))))
        / layer
    )
    return bytes(frame), lengths_written_by_scapy


@fuzzing.fuzz_settings(300)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_random_frames(frames: list[bytes]) -> None:
    handle(frames)


@fuzzing.fuzz_settings(300)
@given(st.lists(st.binary(max_size=120), min_size=1, max_size=4), st.sampled_from((0x0806, 0x86DD)))
def test_random_bodies_behind_a_valid_ethernet_header(bodies: list[bytes], ethertype: int) -> None:
    # Random bytes rarely carry a useful ethertype; these reach the ARP and IPv6 parsers.
    header = packets.BROADCAST + TOR_MAC + ethertype.to_bytes(2, "big")
    ipv6 = (6 << 28).to_bytes(4, "big")
    handle([header + (ipv6 + b if ethertype == 0x86DD else b) for b in bodies])


@fuzzing.fuzz_settings(400)
@given(st.data())
def test_mutated_frames_of_our_builders(data: st.DataObject) -> None:
    valid = data.draw(own_frames())
    assert isinstance(fuzzing.feed(AREA, packets.parse, valid), packets.Packet)
    handle([valid, fuzzing.mutate(valid, data.draw)])


@fuzzing.fuzz_settings(200)
@given(scapy_arp(), st.data())
def test_arp_frames_written_by_scapy(frame: bytes, data: st.DataObject) -> None:
    handle([frame, fuzzing.mutate(frame, data.draw)])
    parsed = packets.parse(frame)
    scapy = Ether(frame)[ARP]
    valid = (scapy.hwtype, scapy.ptype, scapy.hwlen, scapy.plen) == (1, 0x0800, 6, 4)
    assert isinstance(parsed, packets.Arp) == valid
    if isinstance(parsed, packets.Arp):
        assert (parsed.operation, str(parsed.sender_ip), str(parsed.target_ip)) == (
            scapy.op,
            scapy.psrc,
            scapy.pdst,
        )
        assert (mac_text(parsed.sender_mac), mac_text(parsed.target_mac)) == (
            scapy.hwsrc,
            scapy.hwdst,
        )


@fuzzing.fuzz_settings(250)
@given(scapy_nd(), st.data())
def test_neighbor_discovery_frames_written_by_scapy(
    built: tuple[bytes, bool], data: st.DataObject
) -> None:
    frame, consistent = built
    handle([frame, fuzzing.mutate(frame, data.draw)])
    parsed = packets.parse(frame)
    # scapy computed the checksum and (when `consistent`) every option length: such a frame
    # is a valid solicitation or advertisement whatever its field values.
    assert parsed is not None or not consistent
    if parsed is not None:
        scapy = Ether(frame)
        message = scapy[ICMPv6ND_NS] if ICMPv6ND_NS in scapy else scapy[ICMPv6ND_NA]
        v6 = ipaddress.IPv6Address
        assert parsed.target == v6(message.tgt)
        assert (parsed.source, parsed.destination) == (v6(scapy[IPv6].src), v6(scapy[IPv6].dst))
        assert (parsed.hop_limit, parsed.code) == (scapy[IPv6].hlim, message.code)


def test_malformed_frames_are_counted_in_the_metric() -> None:
    core, port = announcer()
    registry = prometheus.Registry()
    registry.register(metrics.Collector(core.stats))
    name = "ironlb_speaker_malformed_layer2_frames_total"
    solicitation = packets.neighbor_solicitation(
        eth_src=TOR_MAC, source=TOR_LL, target=VIP6, source_mac=TOR_MAC
    )
    broken = bytearray(solicitation)
    broken[-1] ^= 0xFF  # the checksum no longer matches
    core.handle(port, bytes(broken))
    core.handle(port, packets.arp_request(TOR_MAC, TOR4, VIP4)[:30])  # truncated
    core.handle(port, solicitation)  # a good one is answered, not counted
    assert registry.get_sample_value(name) == 2.0
    assert len(port.sent) == 1
