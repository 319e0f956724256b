"""The transport's receive path and the metrics, without sockets: hostile datagrams are counted
drops, genuine ones reach the state machine, and nothing raises."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ironlb_io import prometheus
from speaker.membership import codec, metrics, node, sealing
from speaker.membership import messages as m

KEYS = sealing.Keyring.from_secrets([b"unit secret"])
PEER = ("10.0.0.2", 7946)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    # Only its clock is used: the node is never started, so no socket is opened.
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def offline_node(loop: asyncio.AbstractEventLoop) -> node.Node:
    member = node.Node("a", m.Address("10.0.0.1", 7946), keyring=KEYS, rng=random.Random(1))
    member._loop = loop
    return member


def sealed(*messages: m.Message, sealer: sealing.Sealer | None = None) -> bytes:
    packet = codec.encode([codec.encode_message(x) for x in messages])
    return (sealer or sealing.Sealer(KEYS)).seal(packet)


def test_genuine_datagram_reaches_the_machine(loop: asyncio.AbstractEventLoop) -> None:
    member = offline_node(loop)
    member._on_datagram(sealed(m.Alive(0, "b", m.Address(*PEER))), PEER)
    assert member.members() == {"a", "b"}
    assert member.changed.is_set()
    assert sum(member.drops.values()) == 0


def test_each_kind_of_bad_datagram_is_counted(loop: asyncio.AbstractEventLoop) -> None:
    member = offline_node(loop)
    genuine = sealed(m.Ping(1, "a"))
    member._on_datagram(genuine, PEER)
    member._on_datagram(genuine, PEER)
    member._on_datagram(genuine[:10], PEER)
    member._on_datagram(genuine[:-1], PEER)
    member._on_datagram(b"\x00" * 2000, PEER)
    member._on_datagram(sealing.Sealer(sealing.Keyring()).seal(b"\x01\x01"), PEER)
    other = sealing.Keyring.from_secrets([b"other"])
    member._on_datagram(sealing.Sealer(other).seal(b"x"), PEER)
    member._on_datagram(sealing.Sealer(KEYS).seal(b"\x01\x00"), PEER)  # opens, does not decode
    assert dict(member.drops) == {
        "replay": 1,
        "truncated": 1,
        "auth": 1,
        "oversized": 1,
        "unauthenticated": 1,
        "unknown_key": 1,
        "malformed": 1,
    }
    assert member.received == 8


def test_injected_loss_hook_drops_about_the_configured_fraction(
    loop: asyncio.AbstractEventLoop,
) -> None:
    member = node.Node(
        "a", m.Address("10.0.0.1", 7946), keyring=KEYS, drop_rate=0.2, rng=random.Random(3)
    )
    member._loop = loop
    sealer = sealing.Sealer(KEYS)
    for i in range(1000):
        member._on_datagram(sealed(m.Ack(i), sealer=sealer), PEER)
    assert 150 < member.drops["injected"] < 250
    assert sum(member.drops.values()) == member.drops["injected"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1600))
def test_any_datagram_is_handled_without_raising(data: bytes) -> None:
    loop = asyncio.new_event_loop()
    try:
        member = offline_node(loop)
        member._on_datagram(data, PEER)
        assert sum(member.drops.values()) == 1  # forging a datagram needs the key
    finally:
        loop.close()


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_any_authenticated_payload_is_handled_without_raising(payload: bytes) -> None:
    # Even a member holding the key cannot crash another with a malformed packet.
    loop = asyncio.new_event_loop()
    try:
        member = offline_node(loop)
        member._on_datagram(sealing.Sealer(KEYS).seal(payload), PEER)
        assert member.drops["error"] == 0
    finally:
        loop.close()


def test_metrics_are_exported_with_the_prefix(loop: asyncio.AbstractEventLoop) -> None:
    member = offline_node(loop)
    registry = prometheus.Registry()
    metrics.register(member, registry)
    member._on_datagram(sealed(m.Alive(0, "b", m.Address(*PEER))), PEER)
    member._on_datagram(b"junk", PEER)
    member._on_datagram(sealed(m.Suspect(0, "b", "c")), PEER)
    text = registry.exposition().decode()
    assert 'ironlb_memberlist_members{state="alive"} 1.0' in text
    assert 'ironlb_memberlist_members{state="suspect"} 1.0' in text
    assert 'ironlb_memberlist_datagrams_dropped_total{reason="malformed"} 1.0' in text
    assert "ironlb_memberlist_probes_sent_total 0.0" in text
    assert 'ironlb_memberlist_suspicions_refuted_total{who="self"} 0.0' in text
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert line.startswith("ironlb_memberlist_"), line


def test_another_key_is_said_once_a_minute_not_per_datagram(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="speaker.membership.node")
    member = offline_node(loop)
    other = sealing.Sealer(sealing.Keyring.from_secrets([b"another key"]))
    for _ in range(5):
        member._on_datagram(sealed(m.Ping(1, "a"), sealer=other), PEER)
    said = [r for r in caplog.records if "another memberlist key" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert said[0].__dict__["source"] == PEER[0]
    assert said[0].__dict__["reason"] == "unknown_key"
    assert member.drops["unknown_key"] == 5 and member.members() == {"a"}


def test_addresses_parse_in_every_spelling() -> None:
    assert node.parse_address("10.0.0.1") == m.Address("10.0.0.1", 7946)
    assert node.parse_address("10.0.0.1:8000") == m.Address("10.0.0.1", 8000)
    assert node.parse_address("[2001:DB8::1]:8000") == m.Address("2001:db8::1", 8000)
    assert node.parse_address("2001:db8::1") == m.Address("2001:db8::1", 7946)
    with pytest.raises(ValueError):
        node.parse_address("10.0.0.1:0")


def test_keyring_files(tmp_path: Path) -> None:
    base = tmp_path
    (base / "a").write_bytes(b"new\n\nold\n")
    (base / "b").write_bytes(b"third")
    keyring = node.load_keyring([str(base / "a"), str(base / "b")])
    assert keyring == sealing.Keyring.from_secrets([b"new", b"old", b"third"])
    assert node.load_keyring([]).plain
