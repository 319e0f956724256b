"""The queue of membership updates waiting to be piggybacked, with bounded retransmission.

SWIM spreads updates by infection: each member retransmits what it learnt a few times,
`retransmit_mult * ceil(log10(n + 1))`, which reaches everyone with high probability while keeping
the traffic per update logarithmic. A newer update about a member replaces the queued one, so stale
news is never sent; the least-sent updates go first so fresh news is never starved.
"""

from __future__ import annotations

from dataclasses import dataclass

from speaker.membership import codec
from speaker.membership import messages as m


@dataclass(slots=True)
class _Entry:
    message: m.Gossip
    encoded: bytes
    frames: int  # wire messages in encoded (an Alive with metadata is two)
    transmits: int
    order: int


class Queue:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._order = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, message: m.Gossip) -> None:
        self._order += 1
        encoded = codec.encode_message(message)
        self._entries[message.name] = _Entry(
            message, encoded, codec.frames(encoded), 0, self._order
        )

    def pending(self) -> list[m.Gossip]:
        return [e.message for e in self._entries.values()]

    def take(self, budget: int, limit: int, max_count: int) -> list[bytes]:
        """Encoded updates fitting in budget bytes and max_count wire messages; each taken one
        counts as one transmission."""
        if not self._entries or budget <= 0 or max_count <= 0:
            return []
        chosen: list[bytes] = []
        for entry in sorted(self._entries.values(), key=lambda e: (e.transmits, -e.order)):
            if len(entry.encoded) > budget or entry.frames > max_count:
                continue
            chosen.append(entry.encoded)
            budget -= len(entry.encoded)
            max_count -= entry.frames
            entry.transmits += 1
            if entry.transmits >= limit:
                del self._entries[entry.message.name]
            if max_count <= 0 or budget < codec.MESSAGE_OVERHEAD + 6:
                break
        return chosen
