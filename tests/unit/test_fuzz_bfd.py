"""Fuzzing BFD Control packet reception: UDP payload -> `packet.decode` -> session machine.

`decode` returns a packet or None, never raises; the endpoint counts None as malformed
(`ironlb_speaker_malformed_bfd_packets_total`). Inputs come from random bytes, from mutations of
packets our encoder wrote, and from scapy's BFD layer as an independent encoder (its field
values are drawn freely, so it writes lengths, flags and versions our encoder never would).
Decoded packets are handed to a live endpoint's receive path (`Endpoint._datagram`), whose
session must absorb anything a peer on the link can say, in any order.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.contrib.bfd import BFD

from ironlb_io import prometheus
from speaker.bgp import exabgp, speaking
from speaker.bgp import metrics as bgp_metrics
from speaker.bgp.bfd import machine, transport
from speaker.bgp.bfd import packet as pkt
from tests.unit import fuzzing

AREA = "bfd packets"
PEER = "127.0.0.1"

u32 = st.one_of(st.sampled_from((0, 1, 50_000, 300_000, 2**32 - 1)), st.integers(0, 2**32 - 1))
u8 = st.integers(0, 255)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[transport.Endpoint]:
    """An endpoint with one session to 127.0.0.1, on a loop that is never run: its receive path
    is called directly, and what it sends goes to a port nobody listens on."""
    loop = asyncio.new_event_loop()

    async def start() -> transport.Endpoint:
        ep = transport.Endpoint(lambda _peer, _change: None, port=0, rng=random.Random(5))
        ep.add(PEER, machine.Timers(300_000, 300_000, 3), local=PEER)
        return ep

    ep = loop.run_until_complete(start())
    yield ep
    ep.close()
    loop.close()


def session_of(endpoint: transport.Endpoint) -> machine.Session:
    session = endpoint.session(PEER)
    assert session is not None
    return session


def receive(endpoint: transport.Endpoint, data: bytes, ttl: int | None = transport.TTL) -> None:
    before = endpoint.stats.undecodable
    decoded = fuzzing.feed(AREA, pkt.decode, data)
    assert decoded is None or isinstance(decoded, pkt.ControlPacket)
    endpoint._datagram(data, ttl, PEER)
    assert endpoint.stats.undecodable == before + (decoded is None)
    if decoded is not None:
        assert pkt.decode(pkt.encode(decoded)) == decoded  # what was accepted re-encodes
    # The session must stay usable: its timers run whatever the peer said.
    session = session_of(endpoint)
    now = endpoint._loop.time()
    for later in (now, now + 0.5, now + 10.0):
        session.tick(later)
    assert session.next_deadline() is not None or session.timers.passive


def packets(your: st.SearchStrategy[int]) -> st.SearchStrategy[pkt.ControlPacket]:
    @st.composite
    def build(draw: st.DrawFn) -> pkt.ControlPacket:
        poll = draw(st.booleans())
        return pkt.ControlPacket(
            state=draw(st.sampled_from(list(pkt.State))),
            my_discriminator=draw(st.integers(1, 2**32 - 1)),
            your_discriminator=draw(your),
            detect_mult=draw(st.integers(1, 255)),
            desired_min_tx_us=draw(u32),
            required_min_rx_us=draw(u32),
            required_min_echo_rx_us=draw(u32),
            diag=draw(st.integers(0, 31)),
            poll=poll,
            final=not poll and draw(st.booleans()),
            control_plane_independent=draw(st.booleans()),
            demand=draw(st.booleans()),
        )

    return build()


def ours(endpoint: transport.Endpoint) -> st.SearchStrategy[int]:
    """Your Discriminator as a peer would set it: ours (demultiplexed to the session), 0 (the
    peer does not know us yet) or anything."""
    return st.one_of(st.just(session_of(endpoint).local_discriminator), st.just(0), u32)


@fuzzing.fuzz_settings(300)
@given(data=st.binary(max_size=80), ttl=st.sampled_from((255, 254, 1, None)))
def test_random_payloads(endpoint: transport.Endpoint, data: bytes, ttl: int | None) -> None:
    receive(endpoint, data, ttl)


@fuzzing.fuzz_settings(400)
@given(data=st.data())
def test_mutated_packets_of_our_encoder(endpoint: transport.Endpoint, data: st.DataObject) -> None:
    valid = pkt.encode(data.draw(packets(ours(endpoint))))
    receive(endpoint, valid)
    receive(endpoint, fuzzing.mutate(valid, data.draw))


@fuzzing.fuzz_settings(300)
@given(
    data=st.data(),
    version=st.integers(0, 7),
    diag=st.integers(0, 31),
    sta=st.integers(0, 3),
    flags=st.integers(0, 63),
    mult=u8,
    length=st.one_of(st.none(), u8),
    mine=u32,
    tx=u32,
    rx=u32,
    echo=u32,
    trailer=st.binary(max_size=32),
)
def test_packets_written_by_scapy(
    endpoint: transport.Endpoint,
    data: st.DataObject,
    version: int,
    diag: int,
    sta: int,
    flags: int,
    mult: int,
    length: int | None,
    mine: int,
    tx: int,
    rx: int,
    echo: int,
    trailer: bytes,
) -> None:
    your = data.draw(ours(endpoint))
    layer = BFD(
        version=version,
        diag=diag,
        sta=sta,
        flags=flags,
        detect_mult=mult,
        len=length,
        my_discriminator=mine,
        your_discriminator=your,
        min_tx_interval=tx,
        min_rx_interval=rx,
        echo_rx_interval=echo,
    )
    if flags & 0x04:  # scapy adds its authentication section when A is set: keep it unfilled
        layer.auth_type = 0
    wire = bytes(layer) + trailer
    receive(endpoint, wire)
    decoded = pkt.decode(wire)
    acceptable = (
        version == 1
        and mult != 0
        and mine != 0
        and not flags & 0x05  # A (authentication) and M (multipoint)
        and (flags & 0x30) != 0x30  # P and F together
        and 24 <= (len(bytes(layer)) if length is None else length) <= len(wire)
    )
    assert (decoded is not None) == acceptable
    if decoded is not None:
        # Both codecs read the same fields off the same bytes.
        assert (decoded.state, decoded.diag, decoded.detect_mult) == (sta, diag, mult)
        assert (decoded.my_discriminator, decoded.your_discriminator) == (mine, your)
        assert (decoded.desired_min_tx_us, decoded.required_min_rx_us) == (tx, rx)
        assert decoded.required_min_echo_rx_us == echo
        assert (decoded.poll, decoded.final) == (bool(flags & 0x20), bool(flags & 0x10))


@fuzzing.fuzz_settings(200)
@given(data=st.data())
def test_valid_packets_round_trip_with_scapy(
    endpoint: transport.Endpoint, data: st.DataObject
) -> None:
    packet = data.draw(packets(ours(endpoint)))
    wire = pkt.encode(packet)
    assert fuzzing.feed(AREA, pkt.decode, wire) == packet
    parsed = BFD(wire)
    assert (parsed.my_discriminator, parsed.your_discriminator) == (
        packet.my_discriminator,
        packet.your_discriminator,
    )
    assert (parsed.sta, parsed.detect_mult, parsed.len) == (packet.state, packet.detect_mult, 24)
    receive(endpoint, wire)


def test_malformed_packets_are_counted_in_the_metric(endpoint: transport.Endpoint) -> None:
    # The speaker's collector reads the endpoint it runs BFD on (no ExaBGP is started: no peer).
    speaker = speaking.Speaker(exabgp.Options(node_name="n1"))
    registry = prometheus.Registry()
    registry.register(bgp_metrics.Collector(speaker))
    name = "ironlb_speaker_malformed_bfd_packets_total"
    assert registry.get_sample_value(name) == 0.0  # exported before any BFD session exists
    speaker._bfd = endpoint  # type: ignore[assignment]  # the threaded wrapper's same surface
    before = registry.get_sample_value(name)
    assert before is not None
    endpoint._datagram(b"\x20\x40\x03\x18" + b"\x00" * 4, transport.TTL, PEER)  # truncated
    endpoint._datagram(b"\x40" + bytes(23), transport.TTL, PEER)  # version 2
    assert registry.get_sample_value(name) == before + 2
