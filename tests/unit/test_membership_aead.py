"""speaker.membership.aead: AES-256-GCM over the interpreter's libcrypto and HKDF-SHA256, checked
against the `cryptography` package (an independent implementation) and RFC 5869's vectors."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidTag as TheirInvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM as TheirAESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.membership import aead

keys = st.binary(min_size=32, max_size=32)
nonces = st.binary(min_size=12, max_size=12)


@settings(max_examples=300)
@given(keys, nonces, st.binary(max_size=1500), st.binary(max_size=40))
def test_sealed_as_cryptography_seals_and_opened_back(
    key: bytes, nonce: bytes, data: bytes, associated: bytes
) -> None:
    ours = aead.AESGCM(key).encrypt(nonce, data, associated)
    assert ours == TheirAESGCM(key).encrypt(nonce, data, associated or None)
    assert aead.AESGCM(key).decrypt(nonce, ours, associated) == data
    assert TheirAESGCM(key).decrypt(nonce, ours, associated or None) == data


@settings(max_examples=300)
@given(
    keys,
    nonces,
    st.binary(min_size=1, max_size=300),
    st.binary(max_size=20),
    st.integers(0, 10_000),
    st.sampled_from(["ciphertext", "associated", "nonce", "key", "truncated"]),
)
def test_anything_changed_is_refused(
    key: bytes, nonce: bytes, data: bytes, associated: bytes, where: int, what: str
) -> None:
    sealed = aead.AESGCM(key).encrypt(nonce, data, associated)

    def flip(b: bytes) -> bytes:
        i = where % len(b)
        return b[:i] + bytes([b[i] ^ 0x01]) + b[i + 1 :]

    opener, args = aead.AESGCM(key), [nonce, sealed, associated]
    if what == "ciphertext":
        args[1] = flip(sealed)
    elif what == "associated":
        args[2] = flip(associated) if associated else b"x"
    elif what == "nonce":
        args[0] = flip(nonce)
    elif what == "key":
        opener = aead.AESGCM(flip(key))
    else:
        args[1] = sealed[: where % len(sealed)]
    with pytest.raises(aead.InvalidTag):
        opener.decrypt(*args)
    # The independent implementation agrees that it must not open.
    their = TheirAESGCM(key if what != "key" else flip(key))
    with pytest.raises((TheirInvalidTag, ValueError)):
        their.decrypt(args[0], args[1], args[2] or None)


def test_nist_gcm_vector() -> None:
    """The GCM specification's test case 16 (AES-256, 60-byte plaintext, 20 bytes of AAD)."""
    key = bytes.fromhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
    nonce = bytes.fromhex("cafebabefacedbaddecaf888")
    plain = bytes.fromhex(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
        "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39"
    )
    associated = bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2")
    sealed = aead.AESGCM(key).encrypt(nonce, plain, associated)
    assert sealed[:-16] == bytes.fromhex(
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
        "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
    )
    assert sealed[-16:] == bytes.fromhex("76fc6ece0f4e1768cddf8853bb2d551b")


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        aead.AESGCM(b"short")
    with pytest.raises(ValueError):
        aead.AESGCM(bytes(32)).encrypt(b"1234", b"x", b"")
    with pytest.raises(aead.InvalidTag):
        aead.AESGCM(bytes(32)).decrypt(bytes(12), b"tiny", b"")


def test_hkdf_rfc5869_case_3() -> None:
    """RFC 5869 A.3: SHA-256, no salt, no info, 42 bytes."""
    ikm = bytes([0x0B] * 22)
    assert aead.hkdf_sha256(ikm, b"", 42) == bytes.fromhex(
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    )


@given(st.binary(min_size=1, max_size=200), st.binary(max_size=40), st.integers(1, 100))
def test_hkdf_as_cryptography_derives(secret: bytes, info: bytes, length: int) -> None:
    theirs = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(secret)
    assert aead.hkdf_sha256(secret, info, length) == theirs
