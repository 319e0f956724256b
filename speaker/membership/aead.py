"""AES-256-GCM and HKDF-SHA256 for sealing membership datagrams (`speaker.membership.sealing`).

AES-GCM comes from the OpenSSL libcrypto that the interpreter's `ssl` module has already
loaded, called through ctypes. The `cryptography` package would bring a second, statically
linked OpenSSL into every speaker for these two operations: 7 MB of resident memory per node,
measured (an interpreter with `ssl` loaded: 16.1 MB; with `cryptography`'s AESGCM as well:
23.2 MB). HKDF is two HMACs (RFC 5869), from the standard library.

Each call makes its own cipher context, so the membership thread and the loop may seal at the
same time; ctypes lets go of the GIL during each OpenSSL call.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import hmac
import ssl
from collections.abc import Iterator
from typing import Any

KEY_SIZE = 32
TAG_SIZE = 16
NONCE_SIZE = 12

# EVP_CIPHER_CTX_ctrl's commands for GCM (openssl/evp.h: EVP_CTRL_AEAD_* / EVP_CTRL_GCM_*).
_SET_IVLEN = 0x9
_GET_TAG = 0x10
_SET_TAG = 0x11


class InvalidTag(Exception):
    """The datagram was not sealed with this key, or was changed on the way."""


def _loaded_libcrypto() -> ctypes.CDLL:
    """The libcrypto already mapped into this process (by `ssl`), else the system's."""
    assert ssl.OPENSSL_VERSION  # the import maps libcrypto; it is read so that it stays
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if path.startswith("/") and "/libcrypto.so" in path:
                    return ctypes.CDLL(path)
    except OSError:
        pass
    found = ctypes.util.find_library("crypto")
    if found is None:
        raise RuntimeError("no OpenSSL libcrypto to seal membership datagrams with")
    return ctypes.CDLL(found)


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    ptr, cint, buf = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    lib.EVP_CIPHER_CTX_new.restype = ptr
    lib.EVP_CIPHER_CTX_new.argtypes = []
    lib.EVP_CIPHER_CTX_free.restype = None
    lib.EVP_CIPHER_CTX_free.argtypes = [ptr]
    lib.EVP_aes_256_gcm.restype = ptr
    lib.EVP_aes_256_gcm.argtypes = []
    lib.EVP_CIPHER_CTX_ctrl.restype = cint
    lib.EVP_CIPHER_CTX_ctrl.argtypes = [ptr, cint, cint, ptr]
    for name in ("EVP_EncryptInit_ex", "EVP_DecryptInit_ex"):
        getattr(lib, name).restype = cint
        getattr(lib, name).argtypes = [ptr, ptr, ptr, buf, buf]
    for name in ("EVP_EncryptUpdate", "EVP_DecryptUpdate"):
        getattr(lib, name).restype = cint
        getattr(lib, name).argtypes = [ptr, ptr, ctypes.POINTER(cint), buf, cint]
    for name in ("EVP_EncryptFinal_ex", "EVP_DecryptFinal_ex"):
        getattr(lib, name).restype = cint
        getattr(lib, name).argtypes = [ptr, ptr, ctypes.POINTER(cint)]
    return lib


_LIB = _bind(_loaded_libcrypto())
_AES_256_GCM = _LIB.EVP_aes_256_gcm()


class AESGCM:
    """AES-256-GCM under one key: 12-byte nonces, 16-byte tags appended to the ciphertext."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError(f"an AES-256 key is {KEY_SIZE} bytes, not {len(key)}")
        self._key = bytes(key)

    def encrypt(self, nonce: bytes, data: bytes, associated: bytes) -> bytes:
        """The ciphertext of `data` followed by its tag, which also covers `associated`."""
        out = ctypes.create_string_buffer(len(data) + TAG_SIZE)
        begin, update = _LIB.EVP_EncryptInit_ex, _LIB.EVP_EncryptUpdate
        with _started(begin, update, self._key, nonce, associated) as ctx:
            written, last = ctypes.c_int(0), ctypes.c_int(0)
            _ok(update(ctx, out, written, data, len(data)))
            _ok(_LIB.EVP_EncryptFinal_ex(ctx, ctypes.byref(out, written.value), last))
            total = written.value + last.value
            _ok(_LIB.EVP_CIPHER_CTX_ctrl(ctx, _GET_TAG, TAG_SIZE, ctypes.byref(out, total)))
        return out.raw[: total + TAG_SIZE]

    def decrypt(self, nonce: bytes, sealed: bytes, associated: bytes) -> bytes:
        """`data` back from `encrypt`'s output; InvalidTag unless this key sealed exactly
        this ciphertext with this nonce and `associated`."""
        _check_nonce(nonce)
        if len(sealed) < TAG_SIZE:
            raise InvalidTag
        body, tag = sealed[:-TAG_SIZE], sealed[-TAG_SIZE:]
        out = ctypes.create_string_buffer(max(len(body), 1))
        tag_buffer = ctypes.create_string_buffer(tag, TAG_SIZE)
        begin, update = _LIB.EVP_DecryptInit_ex, _LIB.EVP_DecryptUpdate
        with _started(begin, update, self._key, nonce, associated) as ctx:
            written, last = ctypes.c_int(0), ctypes.c_int(0)
            _ok(update(ctx, out, written, body, len(body)))
            _ok(_LIB.EVP_CIPHER_CTX_ctrl(ctx, _SET_TAG, TAG_SIZE, tag_buffer))
            if _LIB.EVP_DecryptFinal_ex(ctx, ctypes.byref(out, written.value), last) <= 0:
                raise InvalidTag
            total = written.value + last.value
        return out.raw[:total]


@contextlib.contextmanager
def _started(init: Any, update: Any, key: bytes, nonce: bytes, associated: bytes) -> Iterator[int]:
    """A fresh AES-256-GCM context for one operation (`init`/`update`: OpenSSL's Encrypt or
    Decrypt functions), keyed, with its nonce and the associated data taken in; freed after."""
    _check_nonce(nonce)
    ctx = _LIB.EVP_CIPHER_CTX_new()
    if not ctx:
        raise MemoryError("EVP_CIPHER_CTX_new")
    try:
        _ok(init(ctx, _AES_256_GCM, None, None, None))
        _ok(_LIB.EVP_CIPHER_CTX_ctrl(ctx, _SET_IVLEN, NONCE_SIZE, None))
        _ok(init(ctx, None, None, key, nonce))
        if associated:
            _ok(update(ctx, None, ctypes.byref(ctypes.c_int(0)), associated, len(associated)))
        yield ctx
    finally:
        _LIB.EVP_CIPHER_CTX_free(ctx)


def _check_nonce(nonce: bytes) -> None:
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"a nonce is {NONCE_SIZE} bytes, not {len(nonce)}")


def _ok(result: int) -> None:
    if result <= 0:
        raise RuntimeError("OpenSSL refused an AES-GCM step")


def hkdf_sha256(secret: bytes, info: bytes, length: int = KEY_SIZE) -> bytes:
    """HKDF-SHA256 (RFC 5869) without a salt (a hash-length run of zeros, as the RFC says)."""
    size = hashlib.sha256().digest_size
    if not 0 < length <= 255 * size:
        raise ValueError("HKDF-SHA256 gives 1 to 8160 bytes")
    pseudo_random = hmac.digest(bytes(size), secret, "sha256")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(pseudo_random, block + info + bytes([counter]), "sha256")
        out += block
        counter += 1
    return out[:length]
