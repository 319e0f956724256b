"""The wire codec: round trips, and any byte string is a packet or a named drop, never a crash."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.membership import codec
from speaker.membership import messages as m

from . import previous_codec

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


# --- member metadata -----------------------------------------------------------------------

metas = st.one_of(st.just(b""), st.binary(min_size=1, max_size=codec.MAX_META))
meta_states = st.builds(m.MemberState, names, addresses, u32, st.sampled_from(list(m.State)), metas)
meta_messages = st.one_of(
    messages,
    st.builds(m.Alive, u32, names, addresses, metas),
    st.builds(
        m.PushPull, st.booleans(), st.booleans(), st.lists(meta_states, max_size=4).map(tuple)
    ),
)
ADDRESS = m.Address("10.0.0.2", 7946)


def packet(*batch: m.Message) -> bytes:
    return codec.encode([codec.encode_message(x) for x in batch])


def without_meta(message: m.Message) -> m.Message:
    """What a member of the previous version makes of a message."""
    if isinstance(message, m.Alive):
        return dataclasses.replace(message, meta=b"")
    if isinstance(message, m.PushPull):
        states = tuple(dataclasses.replace(s, meta=b"") for s in message.states)
        return dataclasses.replace(message, states=states)
    return message


@settings(max_examples=200, deadline=None)
@given(st.lists(meta_messages, min_size=1, max_size=6))
def test_round_trip_with_metadata(batch: list[m.Message]) -> None:
    encoded = [codec.encode_message(x) for x in batch]
    assert codec.decode(codec.encode(encoded)) == tuple(batch)
    # The packet's count is of wire messages: an Alive with metadata is two of them.
    data = codec.encode(encoded)
    extensions = sum(1 for x in batch if (isinstance(x, m.Alive) and x.meta)) + sum(
        1 for x in batch if isinstance(x, m.PushPull) and any(s.meta for s in x.states)
    )
    assert data[1] == len(batch) + extensions


@settings(max_examples=200, deadline=None)
@given(st.lists(meta_messages, min_size=1, max_size=6))
def test_a_previous_version_member_decodes_our_packets_without_the_metadata(
    batch: list[m.Message],
) -> None:
    assert previous_codec.decode(packet(*batch)) == tuple(without_meta(x) for x in batch)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=6))
def test_packets_of_a_previous_version_member_decode_here_with_empty_metadata(
    batch: list[m.Message],
) -> None:
    old = previous_codec.encode([previous_codec.encode_message(x) for x in batch])
    assert codec.decode(old) == tuple(batch)
    # And without metadata we send exactly what the previous version sent.
    assert packet(*batch) == old


def test_an_alive_from_the_previous_version_decodes_with_empty_metadata() -> None:
    # Alive(7, "n2", 10.0.0.2:7946) and a Ping as the previous version wrote them, byte for byte.
    old = bytes.fromhex("0102" + "05000e" + "00000007" + "026e32" + "040a000002" + "1f0a")
    old += bytes.fromhex("010007" + "00000001" + "026e31")
    decoded = codec.decode(old)
    assert decoded == (m.Alive(7, "n2", ADDRESS), m.Ping(1, "n1"))
    assert isinstance(decoded[0], m.Alive) and decoded[0].meta == b""


def test_metadata_rides_in_an_extension_message_after_the_alive() -> None:
    alive = m.Alive(7, "n2", ADDRESS, b"ready")
    encoded = codec.encode_message(alive)
    assert codec.frames(encoded) == 2
    assert encoded.startswith(codec.encode_message(m.Alive(7, "n2", ADDRESS)))
    assert encoded.endswith(bytes([9, 0, 5]) + b"ready")
    assert codec.decode(codec.encode([encoded])) == (alive,)


def test_metadata_up_to_the_limit_is_accepted_beyond_it_is_a_drop_never_an_exception() -> None:
    alive = codec.encode_message(m.Alive(1, "n2", ADDRESS))
    limit = alive + bytes([9]) + codec.MAX_META.to_bytes(2, "big") + b"x" * codec.MAX_META
    assert codec.decode(b"\x01\x02" + limit) == (m.Alive(1, "n2", ADDRESS, b"x" * codec.MAX_META),)
    over = alive + bytes([9]) + (codec.MAX_META + 1).to_bytes(2, "big") + b"x" * 513
    assert codec.decode(b"\x01\x02" + over) == codec.Drop("oversized_meta")
    states = (m.MemberState("n2", ADDRESS, 1, m.State.ALIVE),)
    push_pull = codec.encode_message(m.PushPull(False, False, states))
    body = (codec.MAX_META + 1).to_bytes(2, "big") + b"y" * (codec.MAX_META + 1)
    over_state = push_pull + bytes([10]) + len(body).to_bytes(2, "big") + body
    assert codec.decode(b"\x01\x02" + over_state) == codec.Drop("oversized_meta")
    with pytest.raises(ValueError, match="exceeds"):
        codec.encode_message(m.Alive(1, "n2", ADDRESS, b"x" * (codec.MAX_META + 1)))


def test_metadata_without_its_message_is_malformed() -> None:
    meta = bytes([9, 0, 2]) + b"hi"
    ack = codec.encode_message(m.Ack(1))
    alive = codec.encode_message(m.Alive(1, "n2", ADDRESS))
    future = bytes([200, 0, 0])
    assert codec.decode(b"\x01\x01" + meta) == codec.Drop("malformed")
    assert codec.decode(b"\x01\x02" + ack + meta) == codec.Drop("malformed")
    assert codec.decode(b"\x01\x03" + alive + future + meta) == codec.Drop("malformed")
    assert codec.decode(b"\x01\x03" + alive + meta + meta) == codec.Drop("malformed")
    # A PushPullMeta must hold exactly one metadata per state of its PushPull.
    states = (m.MemberState("n2", ADDRESS, 1, m.State.ALIVE),) * 2
    push_pull = codec.encode_message(m.PushPull(False, False, states))
    assert codec.frames(push_pull) == 1  # no metadata: no extension message
    one = bytes([10, 0, 4, 0, 2]) + b"hi"
    assert codec.decode(b"\x01\x02" + push_pull + one) == codec.Drop("malformed")
    two = bytes([10, 0, 6, 0, 2]) + b"hi" + bytes([0, 0])
    decoded = codec.decode(b"\x01\x02" + push_pull + two)
    assert not isinstance(decoded, codec.Drop)
    (merged,) = decoded
    assert isinstance(merged, m.PushPull) and [s.meta for s in merged.states] == [b"hi", b""]


def test_state_size_bounds_what_a_state_adds_to_a_push_pull() -> None:
    states = [m.MemberState(f"n{i}", ADDRESS, i, m.State.ALIVE, b"z" * (i * 50)) for i in range(5)]
    encoded = codec.encode_push_pull(True, False, states)
    room = codec.PUSH_PULL_OVERHEAD + sum(codec.state_size(s) for s in states)
    assert len(encoded) <= room
    empty = codec.encode_push_pull(True, False, [])
    assert len(empty) <= codec.PUSH_PULL_OVERHEAD
