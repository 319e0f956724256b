"""The piggyback queue: newest news replaces stale news, retransmission is bounded."""

from __future__ import annotations

from speaker.membership import codec, gossip
from speaker.membership import messages as m

ADDRESS = m.Address("10.0.0.1", 7946)


def decoded(chunks: list[bytes]) -> tuple[m.Message, ...]:
    result = codec.decode(codec.encode(chunks))
    assert not isinstance(result, codec.Drop)
    return result


def test_newer_update_about_a_member_replaces_the_queued_one() -> None:
    queue = gossip.Queue()
    queue.put(m.Suspect(1, "a", "b"))
    queue.put(m.Alive(2, "a", ADDRESS))
    assert queue.pending() == [m.Alive(2, "a", ADDRESS)]


def test_each_update_is_sent_limit_times_then_forgotten() -> None:
    queue = gossip.Queue()
    queue.put(m.Dead(0, "a", "b"))
    sent = 0
    while queue:
        assert decoded(queue.take(1000, 3, 10)) == (m.Dead(0, "a", "b"),)
        sent += 1
    assert sent == 3
    assert queue.take(1000, 3, 10) == []


def test_least_sent_first_and_budget_respected() -> None:
    queue = gossip.Queue()
    queue.put(m.Alive(0, "old", ADDRESS))
    queue.take(1000, 5, 10)
    queue.put(m.Alive(0, "new", ADDRESS))
    one = len(codec.encode_message(m.Alive(0, "new", ADDRESS)))
    assert decoded(queue.take(one, 5, 10)) == (m.Alive(0, "new", ADDRESS),)
    assert len(queue.take(one * 2, 5, 1)) == 1


def test_nothing_fits_nothing_sent() -> None:
    queue = gossip.Queue()
    queue.put(m.Alive(0, "a", ADDRESS))
    assert queue.take(3, 5, 10) == []
    assert len(queue) == 1
