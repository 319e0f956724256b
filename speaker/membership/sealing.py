"""Authenticated encryption of datagrams (AES-GCM) with a keyring and replay protection.

Anyone who can send UDP to port 7946 could otherwise declare every node dead and move every
address, so each datagram is sealed under a shared key taken from a Kubernetes Secret. Layout:

    sealed = mode:u8 ('E') key_id:4 nonce:12 ciphertext+tag:16      (mode and key id are AAD)
    plain  = mode:u8 ('P') packet                                     (only with no key at all)

The key id (a hash of the key) lets a receiver pick the key without trial decryption. The keyring
opens with any of its keys and seals with the first, so a rotation is: put the new key first next
to the old one everywhere, then remove the old one.

The nonce is a random 6-byte sender epoch followed by a 6-byte counter, so nonces never repeat
under one key (the epoch changes at every start and on counter wrap). The receiver keeps, per
epoch, the highest counter seen and a 64-packet window below it and drops anything seen before
or older than the window. Epochs are forgotten least-recently-used first; a replay from a forgotten
epoch is harmless in SWIM: its updates carry old incarnations and its acks old sequence numbers.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from speaker.membership import codec
from speaker.membership.aead import AESGCM, InvalidTag, hkdf_sha256

MODE_SEALED = 0x45  # 'E'
MODE_PLAIN = 0x50  # 'P'
KEY_ID_SIZE = 4
NONCE_SIZE = 12
TAG_SIZE = 16
EPOCH_SIZE = 6
OVERHEAD = 1 + KEY_ID_SIZE + NONCE_SIZE + TAG_SIZE
WINDOW = 64
MAX_EPOCHS = 4096
_COUNTER_LIMIT = 1 << (8 * (NONCE_SIZE - EPOCH_SIZE))


def derive_key(secret: bytes) -> bytes:
    """An AES-256 key from a Secret's bytes of any length (HKDF-SHA256)."""
    if not secret:
        raise ValueError("an empty secret is not a key")
    return hkdf_sha256(secret, b"ironlb memberlist v1")


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"ironlb memberlist key id" + key).digest()[:KEY_ID_SIZE]


@dataclass(frozen=True, slots=True)
class Keyring:
    """Derived keys; the first seals, all open. Empty means plain mode."""

    keys: tuple[bytes, ...] = ()

    @classmethod
    def from_secrets(cls, raw: Sequence[bytes]) -> Keyring:
        keys: list[bytes] = []
        for secret in raw:
            key = derive_key(secret)
            if key not in keys:
                keys.append(key)
        return cls(tuple(keys))

    @property
    def plain(self) -> bool:
        return not self.keys


# A key read anew while running (a Secret's mounted files change when GitOps or a person
# rotates it) reaches the speakers over up to two minutes (the kubelet's sync period plus its
# cache). Sealing with the new key at once would make the speakers that have not read it yet
# drop this one's datagrams and declare it dead. So a speaker keeps sealing with its previous
# key for SEAL_OLD_S while opening both, and opens the previous key for twice that in all: a
# speaker that reads the change up to SEAL_OLD_S later still seals with it until then.
SEAL_OLD_S = 180.0


@dataclass(frozen=True)
class Rotation:
    """From the keyring in use to one read anew at `since` (seconds, any monotonic clock)."""

    old: Keyring
    new: Keyring
    since: float
    seal_old_s: float = SEAL_OLD_S  # opens the old key twice as long

    def at(self, now: float) -> Keyring:
        """The keyring to use at `now`: the old key seals, then the new; the old one opens
        until the end."""
        elapsed = now - self.since
        if elapsed < self.seal_old_s:
            keys = self.old.keys[:1] + self.new.keys + self.old.keys[1:]
        elif elapsed < 2 * self.seal_old_s:
            keys = self.new.keys + self.old.keys
        else:
            keys = self.new.keys
        return Keyring(tuple(dict.fromkeys(keys)))

    def done(self, now: float) -> bool:
        return now - self.since >= 2 * self.seal_old_s


class Sealer:
    """Seals outgoing packets; one per sender process (it owns the nonce sequence)."""

    def __init__(self, keyring: Keyring, random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._random = random_bytes
        self._epoch = random_bytes(EPOCH_SIZE)
        self._counter = 0
        self.set_keyring(keyring)

    def set_keyring(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self._aead = AESGCM(keyring.keys[0]) if keyring.keys else None
        self._header = (
            bytes([MODE_SEALED]) + key_id(keyring.keys[0]) if keyring.keys else bytes([MODE_PLAIN])
        )

    @property
    def overhead(self) -> int:
        return OVERHEAD if self._aead else 1

    def seal(self, packet: bytes) -> bytes:
        if self._aead is None:
            return self._header + packet
        if self._counter >= _COUNTER_LIMIT:
            self._epoch, self._counter = self._random(EPOCH_SIZE), 0
        nonce = self._epoch + self._counter.to_bytes(NONCE_SIZE - EPOCH_SIZE, "big")
        self._counter += 1
        return self._header + nonce + self._aead.encrypt(nonce, packet, self._header)


class _Window:
    __slots__ = ("bits", "top")

    def __init__(self) -> None:
        self.top = -1
        self.bits = 0  # bit i set: counter top - i was seen

    def check_and_set(self, counter: int) -> bool:
        """True if counter is new (and records it)."""
        if counter > self.top:
            shift = counter - self.top
            self.bits = ((self.bits << shift) | 1) & ((1 << WINDOW) - 1) if shift < WINDOW else 1
            self.top = counter
            return True
        offset = self.top - counter
        if offset >= WINDOW or self.bits & (1 << offset):
            return False
        self.bits |= 1 << offset
        return True


class Opener:
    """Authenticates, decrypts and replay-checks incoming datagrams."""

    def __init__(self, keyring: Keyring) -> None:
        self._windows: OrderedDict[bytes, _Window] = OrderedDict()
        self.set_keyring(keyring)

    def set_keyring(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self._by_id = {key_id(k): AESGCM(k) for k in keyring.keys}

    def open(self, datagram: bytes) -> bytes | codec.Drop:
        """The packet inside a datagram, or why it was dropped. Never raises."""
        if not datagram:
            return codec.Drop("truncated")
        mode = datagram[0]
        if mode == MODE_PLAIN:
            return datagram[1:] if not self._by_id else codec.Drop("unauthenticated")
        if mode != MODE_SEALED:
            return codec.Drop("malformed")
        if not self._by_id:
            return codec.Drop("encrypted")  # we have no key: cannot read it
        if len(datagram) < OVERHEAD:
            return codec.Drop("truncated")
        header = datagram[: 1 + KEY_ID_SIZE]
        aead = self._by_id.get(header[1:])
        if aead is None:
            return codec.Drop("unknown_key")
        nonce = datagram[len(header) : len(header) + NONCE_SIZE]
        try:
            packet = aead.decrypt(nonce, datagram[len(header) + NONCE_SIZE :], header)
        except InvalidTag:
            return codec.Drop("auth")
        epoch, counter = nonce[:EPOCH_SIZE], int.from_bytes(nonce[EPOCH_SIZE:], "big")
        window = self._windows.get(epoch)
        if window is None:
            window = self._windows[epoch] = _Window()
            if len(self._windows) > MAX_EPOCHS:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(epoch)
        if not window.check_and_set(counter):
            return codec.Drop("replay")
        return packet
