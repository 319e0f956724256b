"""BFD Control packet codec (RFC 5880 §4.1, reception checks of §6.8.6)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.bgp.bfd import packet as pkt

# An Up packet with P set, as FRR's bfdd sends after coming up (diag 0, mult 3, 300 ms timers),
# written out byte by byte from the RFC's layout.
VECTOR = bytes.fromhex(
    "20"  # version 1, diag 0
    "e0"  # state Up (3 << 6) | P
    "03"  # detect mult
    "18"  # length 24
    "11223344"  # my discriminator
    "55667788"  # your discriminator
    "000493e0"  # desired min tx 300000 us
    "000493e0"  # required min rx 300000 us
    "0000c350"  # required min echo rx 50000 us
)


def test_known_vector() -> None:
    decoded = pkt.decode(VECTOR)
    assert decoded == pkt.ControlPacket(
        state=pkt.State.UP,
        my_discriminator=0x11223344,
        your_discriminator=0x55667788,
        detect_mult=3,
        desired_min_tx_us=300_000,
        required_min_rx_us=300_000,
        required_min_echo_rx_us=50_000,
        poll=True,
    )
    assert pkt.encode(decoded) == VECTOR


def _with(offset: int, value: int, data: bytes = VECTOR) -> bytes:
    return data[:offset] + bytes([value]) + data[offset + 1 :]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (VECTOR[:23], "shorter than the mandatory section"),
        (_with(0, 0x00), "version 0"),
        (_with(0, 0x40), "version 2"),
        (_with(3, 23), "length field below 24"),
        (_with(3, 25), "length field beyond the datagram"),
        (_with(2, 0), "detect multiplier 0"),
        (_with(1, 0xC1), "multipoint bit"),
        (_with(1, 0xC4), "authentication bit without authentication in use"),
        (_with(1, 0xF0), "poll and final together"),
        (VECTOR[:4] + b"\0\0\0\0" + VECTOR[8:], "my discriminator 0"),
    ],
)
def test_discarded(data: bytes, why: str) -> None:
    assert pkt.decode(data) is None, why


def test_trailing_bytes_beyond_length_are_ignored() -> None:
    assert pkt.decode(VECTOR + b"junk") == pkt.decode(VECTOR)


def test_unknown_diag_is_kept() -> None:
    decoded = pkt.decode(_with(0, 0x20 | 31))
    assert decoded is not None and decoded.diag == 31


_packets = st.builds(
    pkt.ControlPacket,
    state=st.sampled_from(pkt.State),
    my_discriminator=st.integers(1, 0xFFFFFFFF),
    your_discriminator=st.integers(0, 0xFFFFFFFF),
    detect_mult=st.integers(1, 255),
    desired_min_tx_us=st.integers(0, 0xFFFFFFFF),
    required_min_rx_us=st.integers(0, 0xFFFFFFFF),
    required_min_echo_rx_us=st.integers(0, 0xFFFFFFFF),
    diag=st.integers(0, 31),
    poll=st.booleans(),
    final=st.just(False),
    control_plane_independent=st.booleans(),
    demand=st.booleans(),
)


@settings(max_examples=200)
@given(_packets)
def test_roundtrip(packet: pkt.ControlPacket) -> None:
    data = pkt.encode(packet)
    assert len(data) == pkt.LENGTH
    assert pkt.decode(data) == packet


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_none(data: bytes) -> None:
    decoded = pkt.decode(data)
    if decoded is not None:
        # Whatever is accepted re-encodes to the same mandatory section (modulo the length byte).
        again = pkt.encode(decoded)
        assert again[:3] == data[:3] and again[4:24] == data[4:24]


@settings(max_examples=200)
@given(st.binary(min_size=24, max_size=24))
def test_header_shaped_bytes(data: bytes) -> None:
    # Force version 1 and length 24 so that many more inputs reach the field checks.
    data = bytes([(data[0] & 0x1F) | 0x20]) + data[1:3] + b"\x18" + data[4:]
    decoded = pkt.decode(data)
    flags = data[1]
    mult, mine = data[2], struct.unpack("!I", data[4:8])[0]
    rejected = flags & 0x05 or (flags & 0x30) == 0x30 or mult == 0 or mine == 0
    assert (decoded is None) == bool(rejected)


def test_constructor_refuses_what_must_not_be_sent() -> None:
    with pytest.raises(ValueError):
        pkt.ControlPacket(state=pkt.State.UP, my_discriminator=0)
    with pytest.raises(ValueError):
        pkt.ControlPacket(state=pkt.State.UP, my_discriminator=1, poll=True, final=True)
    with pytest.raises(ValueError):
        pkt.ControlPacket(state=pkt.State.UP, my_discriminator=1, detect_mult=0)
