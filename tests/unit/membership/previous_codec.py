"""The previous version's codec (before member metadata), verbatim but for this docstring: what a
member not yet upgraded runs. The tests check both directions of compatibility against it.

Layout as in speaker/membership/codec.py, without the AliveMeta and PushPullMeta messages.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from speaker.membership import messages as m

VERSION = 1
HEADER_SIZE = 2  # version, count
MESSAGE_OVERHEAD = 3  # type, length
PUSH_PULL_OVERHEAD = MESSAGE_OVERHEAD + 3  # flags, count
MAX_MESSAGES = 255

_PING, _ACK, _NACK, _INDIRECT, _ALIVE, _SUSPECT, _DEAD, _PUSH_PULL = range(1, 9)
_U8 = struct.Struct("!B")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_MSG = struct.Struct("!BH")
_REPLY, _JOIN = 1, 2


@dataclass(frozen=True, slots=True)
class Drop:
    """Why a datagram was discarded; the reason is a metric label."""

    reason: str


class _Malformed(Exception):
    pass


# --- encoding ----------------------------------------------------------------------------------


def _string(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"name too long for the wire: {value[:40]!r}...")
    return _U8.pack(len(raw)) + raw


def _address(address: m.Address) -> bytes:
    ip = ipaddress.ip_address(address.host)
    return _U8.pack(ip.version) + ip.packed + _U16.pack(address.port)


def _body(message: m.Message) -> tuple[int, bytes]:
    match message:
        case m.Ping(seq, target):
            return _PING, _U32.pack(seq) + _string(target)
        case m.Ack(seq):
            return _ACK, _U32.pack(seq)
        case m.Nack(seq):
            return _NACK, _U32.pack(seq)
        case m.IndirectPing(seq, target, address):
            return _INDIRECT, _U32.pack(seq) + _string(target) + _address(address)
        case m.Alive(incarnation, name, address):
            return _ALIVE, _U32.pack(incarnation) + _string(name) + _address(address)
        case m.Suspect(incarnation, name, origin):
            return _SUSPECT, _U32.pack(incarnation) + _string(name) + _string(origin)
        case m.Dead(incarnation, name, origin):
            return _DEAD, _U32.pack(incarnation) + _string(name) + _string(origin)
        case m.PushPull(reply, join, states):
            return _PUSH_PULL, _push_pull_body(reply, join, [member_state(s) for s in states])


def _push_pull_body(reply: bool, join: bool, states: list[bytes]) -> bytes:
    flags = (_REPLY if reply else 0) | (_JOIN if join else 0)
    return _U8.pack(flags) + _U16.pack(len(states)) + b"".join(states)


def encode_push_pull(reply: bool, join: bool, states: list[bytes]) -> bytes:
    """A PushPull message from states already encoded with `member_state`."""
    body = _push_pull_body(reply, join, states)
    return _MSG.pack(_PUSH_PULL, len(body)) + body


def member_state(state: m.MemberState) -> bytes:
    return (
        _U8.pack(state.state)
        + _U32.pack(state.incarnation)
        + _string(state.name)
        + _address(state.address)
    )


def encode_message(message: m.Message) -> bytes:
    kind, body = _body(message)
    return _MSG.pack(kind, len(body)) + body


def encode(messages: list[bytes]) -> bytes:
    """A packet from already encoded messages (see `encode_message`)."""
    if not 1 <= len(messages) <= MAX_MESSAGES:
        raise ValueError(f"a packet holds 1..{MAX_MESSAGES} messages, not {len(messages)}")
    return _U8.pack(VERSION) + _U8.pack(len(messages)) + b"".join(messages)


# --- decoding ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        end = self.at + n
        if end > len(self.data):
            raise _Malformed("truncated")
        chunk = self.data[self.at : end]
        self.at = end
        return chunk

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u16(self) -> int:
        value: int = _U16.unpack(self.take(2))[0]
        return value

    def u32(self) -> int:
        value: int = _U32.unpack(self.take(4))[0]
        return value

    def string(self) -> str:
        raw = self.take(self.u8())
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise _Malformed("bad string") from None

    def address(self) -> m.Address:
        family = self.u8()
        if family == 4:
            host = str(ipaddress.IPv4Address(self.take(4)))
        elif family == 6:
            host = str(ipaddress.IPv6Address(self.take(16)))
        else:
            raise _Malformed("bad address family")
        return m.Address(host, self.u16())

    def done(self) -> bool:
        return self.at == len(self.data)


def _state(reader: _Reader) -> m.MemberState:
    raw_state = reader.u8()
    if raw_state > max(m.State):
        raise _Malformed("bad member state")
    incarnation = reader.u32()
    return m.MemberState(reader.string(), reader.address(), incarnation, m.State(raw_state))


def _message(kind: int, reader: _Reader) -> m.Message:
    if kind == _PING:
        return m.Ping(reader.u32(), reader.string())
    if kind == _ACK:
        return m.Ack(reader.u32())
    if kind == _NACK:
        return m.Nack(reader.u32())
    if kind == _INDIRECT:
        return m.IndirectPing(reader.u32(), reader.string(), reader.address())
    if kind == _ALIVE:
        return m.Alive(reader.u32(), reader.string(), reader.address())
    if kind == _SUSPECT:
        return m.Suspect(reader.u32(), reader.string(), reader.string())
    if kind == _DEAD:
        return m.Dead(reader.u32(), reader.string(), reader.string())
    flags = reader.u8()
    states = tuple(_state(reader) for _ in range(reader.u16()))
    return m.PushPull(bool(flags & _REPLY), bool(flags & _JOIN), states)


def decode(data: bytes) -> tuple[m.Message, ...] | Drop:
    """The messages of a packet, or why it is unusable. Never raises."""
    try:
        reader = _Reader(data)
        if reader.u8() != VERSION:
            return Drop("version")
        count = reader.u8()
        if count == 0:
            return Drop("malformed")
        out: list[m.Message] = []
        for _ in range(count):
            kind, length = _MSG.unpack(reader.take(_MSG.size))
            body = _Reader(reader.take(length))
            if not _PING <= kind <= _PUSH_PULL:
                continue  # a newer peer's message type: skip it, keep the rest
            out.append(_message(kind, body))
            if not body.done():
                return Drop("malformed")
        if not reader.done():
            return Drop("malformed")
        return tuple(out) if out else Drop("malformed")
    except _Malformed:
        return Drop("malformed")
