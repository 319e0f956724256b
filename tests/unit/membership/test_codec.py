"""The wire codec: round trips, and any byte string is a packet or a named drop, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.membership import codec
from speaker.membership import messages as m

u32 = st.integers(0, 2**32 - 1)
names = st.text(min_size=0, max_size=60)
addresses = st.builds(
    m.Address,
    st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str)),
    st.integers(1, 65535),
)
states = st.builds(m.MemberState, names, addresses, u32, st.sampled_from(list(m.State)))
messages = st.one_of(
    st.builds(m.Ping, u32, names),
    st.builds(m.Ack, u32),
    st.builds(m.Nack, u32),
    st.builds(m.IndirectPing, u32, names, addresses),
    st.builds(m.Alive, u32, names, addresses),
    st.builds(m.Suspect, u32, names, names),
    st.builds(m.Dead, u32, names, names),
    st.builds(m.PushPull, st.booleans(), st.booleans(), st.lists(states, max_size=5).map(tuple)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8))
def test_round_trip(batch: list[m.Message]) -> None:
    packet = codec.encode([codec.encode_message(x) for x in batch])
    assert codec.decode(packet) == tuple(batch)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_drop(data: bytes) -> None:
    result = codec.decode(data)
    assert isinstance(result, tuple | codec.Drop)
    if isinstance(result, tuple):
        assert result  # a packet always carries something


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), st.data())
def test_truncated_or_corrupted_packets_never_raise(
    batch: list[m.Message], data: st.DataObject
) -> None:
    packet = codec.encode([codec.encode_message(x) for x in batch])
    cut = data.draw(st.integers(0, len(packet) - 1))
    assert isinstance(codec.decode(packet[:cut]), codec.Drop)
    at = data.draw(st.integers(0, len(packet) - 1))
    flipped = packet[:at] + bytes([packet[at] ^ data.draw(st.integers(1, 255))]) + packet[at + 1 :]
    assert isinstance(codec.decode(flipped), tuple | codec.Drop)


def test_unknown_message_types_are_skipped() -> None:
    ping = codec.encode_message(m.Ping(5, "n1"))
    future = bytes([200, 0, 3]) + b"xyz"
    assert codec.decode(codec.encode([future, ping])) == (m.Ping(5, "n1"),)
    assert codec.decode(codec.encode([future])) == codec.Drop("malformed")


def test_wrong_version_is_a_drop() -> None:
    packet = bytearray(codec.encode([codec.encode_message(m.Ack(1))]))
    packet[0] = 99
    assert codec.decode(bytes(packet)) == codec.Drop("version")


def test_trailing_garbage_is_a_drop() -> None:
    packet = codec.encode([codec.encode_message(m.Ack(1))])
    assert codec.decode(packet + b"\x00") == codec.Drop("malformed")


def test_names_longer_than_the_wire_allows_are_refused_when_encoding() -> None:
    with pytest.raises(ValueError, match="too long"):
        codec.encode_message(m.Ping(1, "x" * 256))


def test_a_ping_with_piggybacked_updates_is_small() -> None:
    address = m.Address("10.0.0.12", 7946)
    batch = [m.Ping(1, "worker-12")] + [m.Alive(3, f"worker-{i}", address) for i in range(3)]
    # The justification for a binary format: this is under a third of its JSON form.
    assert len(codec.encode([codec.encode_message(x) for x in batch])) < 120
