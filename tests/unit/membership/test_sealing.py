"""AES-GCM sealing: authentication, truncation, replay, key rotation; hostile bytes never raise."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.membership import codec, sealing

OLD = sealing.Keyring.from_secrets([b"old secret"])
NEW = sealing.Keyring.from_secrets([b"new secret"])
ROTATING = sealing.Keyring.from_secrets([b"new secret", b"old secret"])


def test_round_trip_and_ciphertext_hides_the_packet() -> None:
    sealer, opener = sealing.Sealer(NEW), sealing.Opener(NEW)
    sealed = sealer.seal(b"hello membership")
    assert b"hello" not in sealed
    assert len(sealed) == len(b"hello membership") + sealing.OVERHEAD
    assert opener.open(sealed) == b"hello membership"


def test_every_flipped_bit_fails_authentication() -> None:
    sealed = sealing.Sealer(NEW).seal(b"payload")
    for at in range(len(sealed)):
        opener = sealing.Opener(NEW)
        tampered = sealed[:at] + bytes([sealed[at] ^ 0x01]) + sealed[at + 1 :]
        assert isinstance(opener.open(tampered), codec.Drop), at


def test_truncated() -> None:
    sealed = sealing.Sealer(NEW).seal(b"payload")
    opener = sealing.Opener(NEW)
    assert opener.open(b"") == codec.Drop("truncated")
    assert opener.open(sealed[: sealing.OVERHEAD - 1]) == codec.Drop("truncated")
    assert opener.open(sealed[:-1]) == codec.Drop("auth")


def test_replay_is_dropped_but_reordering_is_not() -> None:
    sealer, opener = sealing.Sealer(NEW), sealing.Opener(NEW)
    first, second, third = (sealer.seal(bytes([i])) for i in range(3))
    assert opener.open(third) == b"\x02"
    assert opener.open(first) == b"\x00"  # late but new: accepted
    assert opener.open(first) == codec.Drop("replay")
    assert opener.open(third) == codec.Drop("replay")
    assert opener.open(second) == b"\x01"


def test_packets_older_than_the_window_are_dropped() -> None:
    sealer, opener = sealing.Sealer(NEW), sealing.Opener(NEW)
    old = sealer.seal(b"old")
    for _ in range(sealing.WINDOW):
        assert not isinstance(opener.open(sealer.seal(b"x")), codec.Drop)
    assert opener.open(old) == codec.Drop("replay")


def test_each_sender_has_its_own_window() -> None:
    counter = itertools.count()
    a = sealing.Sealer(NEW, random_bytes=lambda n: bytes([1]) * n)
    b = sealing.Sealer(NEW, random_bytes=lambda n: bytes([next(counter) + 2]) * n)
    opener = sealing.Opener(NEW)
    assert opener.open(a.seal(b"a")) == b"a"
    assert opener.open(b.seal(b"b")) == b"b"  # same counter, other epoch: not a replay


def test_rotation_accepts_old_and_new_and_sends_new() -> None:
    rotating = sealing.Sealer(ROTATING)
    assert sealing.Opener(NEW).open(rotating.seal(b"x")) == b"x"
    assert sealing.Opener(OLD).open(rotating.seal(b"x")) == codec.Drop("unknown_key")
    opener = sealing.Opener(ROTATING)
    assert opener.open(sealing.Sealer(OLD).seal(b"from old")) == b"from old"
    assert opener.open(sealing.Sealer(NEW).seal(b"from new")) == b"from new"


def test_keyring_swap_in_place() -> None:
    sealer, opener = sealing.Sealer(OLD), sealing.Opener(OLD)
    sealer.set_keyring(NEW)
    assert opener.open(sealer.seal(b"x")) == codec.Drop("unknown_key")
    opener.set_keyring(ROTATING)
    assert opener.open(sealer.seal(b"x")) == b"x"


def test_plain_and_sealed_modes_do_not_mix() -> None:
    plain = sealing.Keyring()
    assert plain.plain
    assert sealing.Opener(plain).open(sealing.Sealer(plain).seal(b"p")) == b"p"
    assert sealing.Opener(NEW).open(sealing.Sealer(plain).seal(b"p")) == codec.Drop(
        "unauthenticated"
    )
    assert sealing.Opener(plain).open(sealing.Sealer(NEW).seal(b"p")) == codec.Drop("encrypted")


def test_nonce_counter_wrap_takes_a_new_epoch() -> None:
    epochs = iter([b"\x01" * 6, b"\x02" * 6])
    sealer = sealing.Sealer(NEW, random_bytes=lambda n: next(epochs))
    sealer._counter = (1 << 48) - 1
    first, second = sealer.seal(b"a"), sealer.seal(b"b")
    assert first[5:11] == b"\x01" * 6 and second[5:11] == b"\x02" * 6
    opener = sealing.Opener(NEW)
    assert opener.open(first) == b"a" and opener.open(second) == b"b"


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError):
        sealing.derive_key(b"")


def test_duplicate_secrets_collapse() -> None:
    assert len(sealing.Keyring.from_secrets([b"k", b"k", b"j"]).keys) == 2


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_hostile_bytes_are_dropped_never_raised(data: bytes) -> None:
    for keyring in (NEW, sealing.Keyring()):
        result = sealing.Opener(keyring).open(data)
        assert isinstance(result, bytes | codec.Drop)
        if keyring is NEW:
            assert isinstance(result, codec.Drop)  # forging needs the key


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.binary(min_size=1, max_size=40))
def test_sealed_then_opened_is_identity(packet: bytes, secret: bytes) -> None:
    keyring = sealing.Keyring.from_secrets([secret])
    assert sealing.Opener(keyring).open(sealing.Sealer(keyring).seal(packet)) == packet


# --- a key read anew while running ------------------------------------------------------------

K1, K2 = (
    sealing.Keyring.from_secrets([b"k1"]).keys[0],
    sealing.Keyring.from_secrets([b"k2"]).keys[0],
)
S = sealing.SEAL_OLD_S


@pytest.mark.parametrize(
    ("elapsed", "keys"),
    [
        (0.0, (K1, K2)),  # the old key seals, both open
        (S - 1, (K1, K2)),
        (S, (K2, K1)),  # the new key seals, the old still opens
        (2 * S - 1, (K2, K1)),
        (2 * S, (K2,)),  # the old key is gone
    ],
)
def test_a_rotation_seals_with_the_old_key_then_the_new_and_drops_the_old_last(
    elapsed: float, keys: tuple[bytes, ...]
) -> None:
    rotation = sealing.Rotation(sealing.Keyring((K1,)), sealing.Keyring((K2,)), since=100.0)
    assert rotation.at(100.0 + elapsed).keys == keys
    assert rotation.done(100.0 + elapsed) == (elapsed >= 2 * S)


def test_a_rotation_to_a_keyring_holding_the_old_key_repeats_no_key() -> None:
    rotation = sealing.Rotation(sealing.Keyring((K1,)), sealing.Keyring((K2, K1)), since=0.0)
    assert rotation.at(0.0).keys == (K1, K2)
    assert rotation.at(S).keys == (K2, K1)
    assert rotation.at(2 * S).keys == (K2, K1)


@settings(max_examples=500)
@given(
    skew=st.floats(min_value=0.0, max_value=S, allow_nan=False),
    t=st.floats(min_value=-10.0, max_value=4 * S, allow_nan=False),
)
def test_speakers_that_read_the_new_key_up_to_seal_old_s_apart_always_open_each_other(
    skew: float, t: float
) -> None:
    """Whatever either seals with at any moment, the other opens (the first reads the change at
    0, the second `skew` later; before reading it a speaker uses the old keyring alone)."""
    old, new = sealing.Keyring((K1,)), sealing.Keyring((K2,))

    def keyring(read_at: float) -> sealing.Keyring:
        return old if t < read_at else sealing.Rotation(old, new, read_at).at(t)

    first, second = keyring(0.0), keyring(skew)
    assert first.keys[0] in second.keys
    assert second.keys[0] in first.keys
