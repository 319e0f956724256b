"""Fuzzing the membership receive path: datagram -> AES-GCM open -> decode -> state machine.

The path under test is the running process's own (`Node._on_datagram`), on a node that is never
started (no socket; the loop is only a clock). Its contract: every datagram is either used or
dropped under a named reason in `ironlb_memberlist_datagrams_dropped_total`. The catch-all reason
`error` means a parser or the machine raised, which the node survives but which is a bug, so the
fuzzers require it to stay at zero. Mutated packets are sealed with the cluster key before they
are fed, so that they get past authentication and reach the decoder and the machine: the inputs
an attacker without the key can send stop at `open`, which the random-bytes test covers.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironlb_io import prometheus
from speaker.membership import codec, metrics, node, sealing
from speaker.membership import messages as m
from tests.unit import fuzzing

AREA = "membership datagrams"
KEYS = sealing.Keyring.from_secrets([b"fuzz secret"])
PEER = ("10.0.0.2", 7946)
SELF = "a"

u32 = st.one_of(st.sampled_from((0, 1, 2**31, 2**32 - 2, 2**32 - 1)), st.integers(0, 2**32 - 1))
# Names collide on purpose: messages about this node and its peers exercise refutation, suspicion
# of self, a member moving address; arbitrary text covers the rest of the string decoder.
names = st.one_of(st.sampled_from((SELF, "b", "c", "")), st.text(max_size=40))
hosts = st.one_of(
    st.sampled_from(("10.0.0.1", "10.0.0.2", "0.0.0.0", "255.255.255.255", "::", "::1")),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)
addresses = st.builds(m.Address, hosts, st.integers(0, 65535))
# Metadata: none (what a previous-version member sends), short, and at the codec's limit.
metas = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=40),
    st.binary(min_size=codec.MAX_META - 2, max_size=codec.MAX_META),
)
states = st.builds(m.MemberState, names, addresses, u32, st.sampled_from(list(m.State)), metas)
messages = st.one_of(
    st.builds(m.Ping, u32, names),
    st.builds(m.Ack, u32),
    st.builds(m.Nack, u32),
    st.builds(m.IndirectPing, u32, names, addresses),
    st.builds(m.Alive, u32, names, addresses, metas),
    st.builds(m.Suspect, u32, names, names),
    st.builds(m.Dead, u32, names, names),
    st.builds(m.PushPull, st.booleans(), st.booleans(), st.lists(states, max_size=6).map(tuple)),
)
batches = st.lists(messages, min_size=1, max_size=6)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def offline_node(loop: asyncio.AbstractEventLoop, keyring: sealing.Keyring = KEYS) -> node.Node:
    member = node.Node(SELF, m.Address("10.0.0.1", 7946), keyring=keyring, rng=random.Random(1))
    member._loop = loop  # only its clock is read
    return member


def packet_of(batch: list[m.Message]) -> bytes:
    return codec.encode([codec.encode_message(x) for x in batch])


def receive(member: node.Node, datagrams: list[bytes]) -> None:
    for datagram in datagrams:
        fuzzing.feed(AREA, member._on_datagram, datagram, PEER)
    assert member.drops["error"] == 0, "a parser or the machine raised"
    assert set(member.drops) <= set(metrics.DROP_REASONS), "a drop reason the metric omits"
    # Timers run too: state left behind by a hostile datagram must not break the next tick.
    assert member._loop is not None
    member.machine.tick(member._loop.time() + 3600.0)


@fuzzing.fuzz_settings(300)
@given(st.lists(st.binary(max_size=1500), min_size=1, max_size=4))
def test_random_datagrams(loop: asyncio.AbstractEventLoop, datagrams: list[bytes]) -> None:
    sealed_node, plain_node = offline_node(loop), offline_node(loop, sealing.Keyring())
    receive(sealed_node, datagrams)
    # A node without a key reads plain packets: random bytes behind the plain marker reach decode.
    receive(plain_node, [bytes([sealing.MODE_PLAIN]) + d for d in datagrams])


@fuzzing.fuzz_settings(400)
@given(st.lists(batches, min_size=1, max_size=3), st.data())
def test_mutated_authenticated_packets(
    loop: asyncio.AbstractEventLoop, packets: list[list[m.Message]], data: st.DataObject
) -> None:
    member, sealer = offline_node(loop), sealing.Sealer(KEYS)
    datagrams = [sealer.seal(fuzzing.mutate(packet_of(batch), data.draw)) for batch in packets]
    receive(member, datagrams)


@fuzzing.fuzz_settings(150)
@given(batches, st.data())
def test_mutated_sealed_datagrams_fail_authentication(
    loop: asyncio.AbstractEventLoop, batch: list[m.Message], data: st.DataObject
) -> None:
    member = offline_node(loop)
    genuine = sealing.Sealer(KEYS).seal(packet_of(batch))
    mutated = fuzzing.mutate(genuine, data.draw)
    receive(member, [mutated])
    if mutated != genuine:
        # Any change of a sealed datagram is refused before its contents are read.
        assert member.received == sum(member.drops.values()) == 1


@fuzzing.fuzz_settings(200)
@given(batches)
def test_valid_packets_round_trip_and_are_used(
    loop: asyncio.AbstractEventLoop, batch: list[m.Message]
) -> None:
    packet = packet_of(batch)
    opened = sealing.Opener(KEYS).open(sealing.Sealer(KEYS).seal(packet))
    assert opened == packet
    assert fuzzing.feed(AREA, codec.decode, packet) == tuple(batch)
    member = offline_node(loop)
    datagram = sealing.Sealer(KEYS).seal(packet)
    receive(member, [datagram])
    if len(datagram) > member.config.max_datagram:
        # Large metadata makes some batches longer than any member sends; only those are dropped.
        assert member.drops == {"oversized": 1}
    else:
        assert sum(member.drops.values()) == 0  # well-formed input is never dropped


@fuzzing.fuzz_settings(150)
@given(
    st.lists(
        st.tuples(
            # Few names and incarnations, so that the same one comes back often.
            st.sampled_from((SELF, "b", "c")),
            st.integers(0, 3),
            st.one_of(
                st.just(b""),
                st.binary(min_size=1, max_size=8),
                st.binary(min_size=codec.MAX_META - 1, max_size=codec.MAX_META + 2),
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_metadata_of_any_length_is_taken_by_the_rules_or_a_counted_drop(
    loop: asyncio.AbstractEventLoop, alives: list[tuple[str, int, bytes]]
) -> None:
    member = offline_node(loop)
    sealer = sealing.Sealer(KEYS)
    known: dict[str, tuple[int, bytes]] = {}  # what the rules say each member's meta is
    for name, incarnation, meta in alives:
        alive = codec.encode_message(m.Alive(incarnation, name, m.Address(*PEER)))
        extension = bytes([9]) + len(meta).to_bytes(2, "big") + meta
        fuzzing.feed(
            AREA, member._on_datagram, sealer.seal(codec.encode([alive + extension])), PEER
        )
        if len(meta) > codec.MAX_META or name == SELF:
            continue
        old = known.get(name)
        newer = old is None or incarnation > old[0]
        filled = old is not None and incarnation == old[0] and meta and not old[1]
        if newer or filled:
            known[name] = (incarnation, meta)
    assert member.drops["error"] == 0
    assert member.drops["oversized_meta"] == sum(1 for *_, x in alives if len(x) > codec.MAX_META)
    assert {n: x for n, x in member.metadata().items() if n != SELF} == {
        n: x for n, (_, x) in known.items()
    }


def test_malformed_datagrams_are_counted_in_the_metric(loop: asyncio.AbstractEventLoop) -> None:
    member = offline_node(loop)
    registry = prometheus.Registry()
    metrics.register(member, registry)
    sealer = sealing.Sealer(KEYS)
    member._on_datagram(sealer.seal(b"\x01\x01\x02\x00\x09garbage!!"), PEER)  # bad length
    member._on_datagram(sealer.seal(b"\x07\x01"), PEER)  # unknown version
    member._on_datagram(b"\x45" + b"\x00" * 40, PEER)  # unknown key id
    name = "ironlb_memberlist_datagrams_dropped_total"
    for reason in ("malformed", "version", "unknown_key"):
        assert registry.get_sample_value(name, {"reason": reason}) == 1.0
    assert registry.get_sample_value("ironlb_memberlist_datagrams_received_total") == 3.0
