"""Binary wire format of membership packets (before sealing).

Why struct and not JSON: a ping with three piggybacked updates is about 90 bytes here and 300+ as
JSON, and every byte saved is room for more gossip in the same datagram. Fixed-width integers and
length-prefixed strings also make the decoder's bounds checks explicit, so any byte string decodes
to a packet or to a named drop reason, never to an exception (hypothesis checks this).

Layout, big-endian:
    packet   = version:u8 count:u8 message*count
    message  = type:u8 length:u16 body            (unknown types are skipped by length)
    string   = length:u8 utf-8 bytes              (node names are at most 253 characters)
    address  = family:u8 (4|6) ip:4|16 port:u16
    Ping         seq:u32 target:string
    Ack / Nack   seq:u32
    IndirectPing seq:u32 target:string address
    Alive        incarnation:u32 name:string address
    Suspect/Dead incarnation:u32 name:string origin:string
    PushPull     flags:u8 (1 reply, 2 join) count:u16 (state:u8 incarnation:u32 name address)*
    AliveMeta    meta bytes (the whole body)                      only right after an Alive
    PushPullMeta (length:u16 meta)* , one per state of the PushPull  only right after a PushPull

Member metadata (`meta`, at most MAX_META bytes) is carried in extension messages of types of
their own, not in the Alive and PushPull bodies, because of what the previous version's decoder
does: it drops the whole packet when a body has bytes left over (so an optional trailing field
would cost a mixed-version group every packet carrying one: pings, acks, gossip), and it drops
any packet whose version byte is not 1 (so a new version would partition the group during a
rolling upgrade). It does skip message types it does not know. So an Alive with metadata is two
messages, the unchanged Alive followed at once by an AliveMeta, and a full state with metadata is
the unchanged PushPull followed at once by a PushPullMeta; both count in the packet's message
count (`encode` counts the messages inside what it is given). A previous-version member decodes
the Alive and the PushPull as before and skips the metadata (it then relays those Alives without
it: `machine` fills in such a gap at the same incarnation); a packet from it simply has no
extension messages and decodes with meta = b"". The empty meta is never sent, so packets without
metadata are byte for byte what the previous version sends. An extension message anywhere else,
or metadata that does not match its PushPull's state count, is malformed; metadata longer than
MAX_META is a drop under its own reason, `oversized_meta`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from speaker.membership import messages as m

VERSION = 1
HEADER_SIZE = 2  # version, count
MESSAGE_OVERHEAD = 3  # type, length
# flags and count, and the header of the PushPullMeta message that may follow
PUSH_PULL_OVERHEAD = MESSAGE_OVERHEAD + 3 + MESSAGE_OVERHEAD
MAX_MESSAGES = 255
# The longest member metadata accepted: the speaker's readiness needs at most 400 bytes
# (ironlb.datapath.MAX_ENCODED); an Alive with this much still fits a 1400-byte datagram twice over
# the worst-case name, and the transport refuses metadata that would not fit its datagrams.
MAX_META = 512

_PING, _ACK, _NACK, _INDIRECT, _ALIVE, _SUSPECT, _DEAD, _PUSH_PULL = range(1, 9)
_ALIVE_META, _PUSH_PULL_META = 9, 10
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


class _OversizedMeta(Exception):
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


def _meta(meta: bytes) -> bytes:
    if len(meta) > MAX_META:
        raise ValueError(f"metadata of {len(meta)} bytes exceeds {MAX_META}")
    return meta


def _frame(kind: int, body: bytes) -> bytes:
    return _MSG.pack(kind, len(body)) + body


def _body(message: m.Message) -> tuple[int, bytes]:
    """The type and body of a message without its metadata (what the previous version sent)."""
    match message:
        case m.Ping(seq, target):
            return _PING, _U32.pack(seq) + _string(target)
        case m.Ack(seq):
            return _ACK, _U32.pack(seq)
        case m.Nack(seq):
            return _NACK, _U32.pack(seq)
        case m.IndirectPing(seq, target, address):
            return _INDIRECT, _U32.pack(seq) + _string(target) + _address(address)
        case m.Alive(incarnation, name, address, _):
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


def _push_pull_meta(states: Sequence[m.MemberState]) -> bytes:
    """The PushPullMeta message for these states, or nothing when none has metadata."""
    if not any(s.meta for s in states):
        return b""
    return _frame(_PUSH_PULL_META, b"".join(_U16.pack(len(s.meta)) + _meta(s.meta) for s in states))


def encode_push_pull(reply: bool, join: bool, states: Sequence[m.MemberState]) -> bytes:
    """A PushPull message (and its PushPullMeta when some state has metadata)."""
    body = _push_pull_body(reply, join, [member_state(s) for s in states])
    return _frame(_PUSH_PULL, body) + _push_pull_meta(states)


def member_state(state: m.MemberState) -> bytes:
    """A state as it is in the PushPull body (its metadata goes in the PushPullMeta)."""
    return (
        _U8.pack(state.state)
        + _U32.pack(state.incarnation)
        + _string(state.name)
        + _address(state.address)
    )


def state_size(state: m.MemberState) -> int:
    """The bytes a state adds to `encode_push_pull`, beyond PUSH_PULL_OVERHEAD, at most."""
    return len(member_state(state)) + _U16.size + len(state.meta)


def encode_message(message: m.Message) -> bytes:
    """One message as it goes on the wire: one frame, or two for an Alive or PushPull with
    metadata (see the module docstring); `frames` tells how many."""
    if isinstance(message, m.PushPull):
        return encode_push_pull(message.reply, message.join, message.states)
    kind, body = _body(message)
    out = _frame(kind, body)
    if isinstance(message, m.Alive) and message.meta:
        out += _frame(_ALIVE_META, _meta(message.meta))
    return out


def frames(encoded: bytes) -> int:
    """How many messages (type-length-body frames) `encode_message` output holds."""
    count, at = 0, 0
    while at < len(encoded):
        _, length = _MSG.unpack_from(encoded, at)
        at += _MSG.size + length
        count += 1
    return count


def encode(messages: list[bytes]) -> bytes:
    """A packet from already encoded messages (see `encode_message`)."""
    count = sum(frames(x) for x in messages)
    if not 1 <= count <= MAX_MESSAGES:
        raise ValueError(f"a packet holds 1..{MAX_MESSAGES} messages, not {count}")
    return _U8.pack(VERSION) + _U8.pack(count) + b"".join(messages)


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


def _checked_meta(raw: bytes) -> bytes:
    if len(raw) > MAX_META:
        raise _OversizedMeta
    return raw


def _with_meta(kind: int, previous: int, message: m.Message | None, body: _Reader) -> m.Message:
    """The message just decoded (of type `previous`) with the metadata of the extension
    message that follows it."""
    if kind == _ALIVE_META and previous == _ALIVE and isinstance(message, m.Alive):
        return dataclasses.replace(message, meta=_checked_meta(body.take(len(body.data))))
    if kind == _PUSH_PULL_META and previous == _PUSH_PULL and isinstance(message, m.PushPull):
        states = tuple(
            dataclasses.replace(s, meta=_checked_meta(body.take(body.u16())))
            for s in message.states
        )
        return dataclasses.replace(message, states=states)
    raise _Malformed("metadata without its message")


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
        previous = 0  # the type of the message before, for the extension messages
        for _ in range(count):
            kind, length = _MSG.unpack(reader.take(_MSG.size))
            body = _Reader(reader.take(length))
            if kind in (_ALIVE_META, _PUSH_PULL_META):
                out[-1] = _with_meta(kind, previous, out[-1] if out else None, body)
            elif _PING <= kind <= _PUSH_PULL:
                out.append(_message(kind, body))
            else:
                previous = kind
                continue  # a newer peer's message type: skip it, keep the rest
            if not body.done():
                return Drop("malformed")
            previous = kind
        if not reader.done():
            return Drop("malformed")
        return tuple(out) if out else Drop("malformed")
    except _Malformed:
        return Drop("malformed")
    except _OversizedMeta:
        return Drop("oversized_meta")
