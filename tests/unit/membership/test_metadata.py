"""Member metadata: published with an incarnation, learnt by gossip and push-pull, newest wins."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable

import pytest

from speaker.membership import codec, machine, node, sealing, threaded
from speaker.membership import config as cfg
from speaker.membership import messages as m

from .test_machine import address, know, make, messages, primary

META = machine.ChangeKind.META
STATE = machine.ChangeKind.STATE
KEYS = sealing.Keyring.from_secrets([b"unit secret"])


def deliver(
    sends: Iterable[machine.Send], source: machine.Machine, to: machine.Machine
) -> machine.Output:
    """Hand `to` every packet from `source` addressed to it; its outputs merged."""
    sent: list[machine.Send] = []
    changes: list[machine.Change] = []
    for send in sends:
        if send.address == to.address:
            out = to.receive(0.0, source.address, messages(send))
            sent.extend(out.sends)
            changes.extend(out.changes)
    return machine.Output(tuple(sent), tuple(changes))


def kinds(output: machine.Output) -> list[tuple[str, machine.ChangeKind, bytes]]:
    return [(c.name, c.kind, c.meta) for c in output.changes]


def test_our_meta_is_published_with_a_new_incarnation_and_gossiped() -> None:
    a, b = make("a", 1), make("b", 2)
    know(a, ("b", 2))
    know(b, ("a", 1))
    out = a.set_meta(1.0, b"ready")
    assert a.incarnation == 1
    assert kinds(out) == [("a", META, b"ready")]
    assert a.meta() == {"a": b"ready", "b": b""}
    gossip = a.tick(a.next_deadline())
    alives = primary(gossip, m.Alive)
    assert (address(2), m.Alive(1, "a", address(1), b"ready")) in alives
    learnt = deliver(gossip.sends, a, b)
    assert b.meta()["a"] == b"ready"
    assert kinds(learnt) == [("a", META, b"ready")]
    assert b.states()["a"] == m.State.ALIVE  # a change of meta only, not of state


def test_unchanged_meta_sends_nothing_and_keeps_the_incarnation() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    a.set_meta(1.0, b"x")
    a.tick(a.next_deadline())
    assert a.incarnation == 1
    assert a.set_meta(2.0, b"x") == machine.Output()
    assert a.incarnation == 1
    # Metadata given at construction is the first incarnation's: setting it again is no change.
    c = machine.Machine(cfg.DEFAULT, "c", address(3), random.Random(3), 0.0, meta=b"y")
    assert c.set_meta(0.0, b"y") == machine.Output() and c.incarnation == 0
    assert c.meta() == {"c": b"y"}


def test_meta_reaches_a_new_member_by_push_pull_both_ways() -> None:
    a = machine.Machine(cfg.DEFAULT, "a", address(1), random.Random(1), 0.0, meta=b"from a")
    b = machine.Machine(cfg.DEFAULT, "b", address(2), random.Random(2), 0.0, meta=b"from b")
    join = a.join(0.0, [address(2)])
    (request,) = primary(join, m.PushPull)
    assert request[1].states[0].meta == b"from a"  # type: ignore[union-attr]
    answer = deliver(join.sends, a, b)
    assert b.meta() == {"a": b"from a", "b": b"from b"}
    deliver(answer.sends, b, a)
    assert a.meta() == {"a": b"from a", "b": b"from b"}
    assert a.incarnation == b.incarnation == 0  # no bump for the initial meta


def test_a_newer_incarnation_wins_an_older_or_equal_one_does_not() -> None:
    b = make("b", 2)
    b.receive(0.0, address(1), (m.Alive(2, "a", address(1), b"two"),))
    assert b.receive(0.0, address(1), (m.Alive(1, "a", address(1), b"one"),)).changes == ()
    assert b.receive(0.0, address(1), (m.Alive(2, "a", address(1), b"other"),)).changes == ()
    assert b.meta()["a"] == b"two"
    out = b.receive(0.0, address(1), (m.Alive(3, "a", address(1), b"three"),))
    assert kinds(out) == [("a", META, b"three")] and b.meta()["a"] == b"three"
    # A newer incarnation with the same meta (a refutation) is no change of meta.
    assert b.receive(0.0, address(1), (m.Alive(4, "a", address(1), b"three"),)).changes == ()
    # Nor does an empty meta at the same incarnation erase it (a previous-version relay's copy).
    assert b.receive(0.0, address(1), (m.Alive(4, "a", address(1)),)).changes == ()
    assert b.meta()["a"] == b"three"
    # A newer incarnation may clear it.
    out = b.receive(0.0, address(1), (m.Alive(5, "a", address(1)),))
    assert kinds(out) == [("a", META, b"")] and b.meta()["a"] == b""


def test_meta_dropped_by_a_previous_version_relay_is_filled_in_at_the_same_incarnation() -> None:
    b = make("b", 2)
    know(b, ("a", 1))
    b.receive(0.0, address(3), (m.Alive(1, "a", address(1)),))  # relayed without its meta
    out = b.receive(0.0, address(1), (m.Alive(1, "a", address(1), b"ready"),))
    assert kinds(out) == [("a", META, b"ready")] and b.meta()["a"] == b"ready"
    # ... and passed on, so that others who got the stripped copy learn it too.
    assert m.Alive(1, "a", address(1), b"ready") in b._queue.pending()


def test_refutation_carries_the_current_meta() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    a.set_meta(0.0, b"ready")
    out = a.receive(0.0, address(2), (m.Suspect(a.incarnation, "a", "b"),))
    assert (address(2), m.Alive(2, "a", address(1), b"ready")) in primary(out, m.Alive)
    # A stale accusation is answered directly, with the meta too.
    out = a.receive(0.0, address(3), (m.Dead(0, "a", "c"),))
    assert (address(3), m.Alive(2, "a", address(1), b"ready")) in primary(out, m.Alive)
    # A member that was suspected takes the meta from the refutation.
    c = make("c", 3)
    know(c, ("a", 1), ("b", 2))
    c.receive(0.0, address(2), (m.Suspect(0, "a", "b"),))
    out = c.receive(0.0, address(1), (m.Alive(2, "a", address(1), b"ready"),))
    assert kinds(out) == [("a", STATE, b"ready")]
    assert c.states()["a"] == m.State.ALIVE and c.meta()["a"] == b"ready"


def test_another_life_of_ours_with_other_meta_is_outbid_an_empty_one_is_not() -> None:
    a = make("a", 1)
    a.set_meta(0.0, b"now")
    a.receive(0.0, address(2), (m.Alive(1, "a", address(1)),))  # ours, relayed without meta
    assert a.incarnation == 1
    a.receive(0.0, address(2), (m.Alive(1, "a", address(1), b"before restart"),))
    assert a.incarnation == 2 and a.stats.self_refutations == 1


def test_meta_lists_live_members_only() -> None:
    a = make("a", 1)
    a.receive(0.0, address(2), (m.Alive(0, "b", address(2), b"b"), m.Alive(0, "c", address(3))))
    a.receive(0.0, address(4), (m.Suspect(0, "b", "d"),))
    assert a.meta() == {"a": b"", "b": b"b", "c": b""}  # a suspect is still live
    out = a.receive(0.0, address(4), (m.Dead(0, "b", "d"),))
    assert a.meta() == {"a": b"", "c": b""}
    assert kinds(out) == [("b", STATE, b"")]
    a.leave(1.0)
    assert a.meta() == {"c": b""}


def test_meta_that_is_too_long_or_does_not_fit_a_datagram_is_refused() -> None:
    a = make("a", 1)
    with pytest.raises(ValueError, match="exceeds"):
        a.set_meta(0.0, b"x" * (codec.MAX_META + 1))
    small = make("s", 2, config=cfg.DEFAULT.replace(max_datagram=512))
    with pytest.raises(ValueError, match="does not fit"):
        small.set_meta(0.0, b"x" * 470)
    assert a.incarnation == small.incarnation == 0 and a.meta()["a"] == b""
    with pytest.raises(ValueError, match="exceeds"):
        machine.Machine(cfg.DEFAULT, "c", address(3), random.Random(3), 0.0, meta=b"x" * 600)
    a.set_meta(0.0, b"x" * codec.MAX_META)  # the limit itself fits the default datagram


def test_full_state_with_meta_is_split_into_datagrams_that_fit() -> None:
    a = make("a", 1)
    a.set_meta(0.0, b"a" * codec.MAX_META)
    others = [(f"worker-{'x' * 60}-{i}", i % 250 + 2) for i in range(60)]
    for name, i in others:
        a.receive(0.0, address(i), (m.Alive(0, name, address(i), name.encode() * 5),))
    out = a.receive(0.0, address(2), (m.PushPull(True, False, ()),))
    assert len(out.sends) > 20
    assert all(len(s.packet) <= cfg.DEFAULT.max_datagram - sealing.OVERHEAD for s in out.sends)
    b = make("b", 2)
    for send in out.sends:
        b.receive(0.0, address(1), messages(send))
    assert b.meta() == a.meta() | {"b": b""}


def test_gossip_of_large_meta_fits_every_datagram() -> None:
    a = make("a", 1)
    for i in range(2, 30):
        a.receive(0.0, address(i), (m.Alive(0, f"n{i}", address(i), bytes([i]) * 400),))
    now, sent = 0.0, 0
    while a._queue and now < 5.0:
        now = a.next_deadline()
        for send in a.tick(now).sends:
            sent += 1
            assert len(send.packet) <= cfg.DEFAULT.max_datagram - sealing.OVERHEAD
            # Metadata is never split from its Alive (ours, without meta, rides on our
            # first probe of each member).
            for x in messages(send):
                if isinstance(x, m.Alive) and x.name != "a":
                    assert x.meta == bytes([int(x.name[1:])]) * 400
    assert sent > 0


# --- node ----------------------------------------------------------------------------------


@pytest.fixture
def loop() -> Iterable[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def sealed(*batch: m.Message) -> bytes:
    return sealing.Sealer(KEYS).seal(codec.encode([codec.encode_message(x) for x in batch]))


def test_node_sets_changed_and_calls_back_when_a_members_meta_changes(
    loop: asyncio.AbstractEventLoop,
) -> None:
    seen: list[machine.Change] = []
    member = node.Node("a", address(1), keyring=KEYS, rng=random.Random(1), on_change=seen.append)
    member._loop = loop  # never started: only its clock is read
    peer = ("10.0.0.2", 7946)
    member._on_datagram(sealed(m.Alive(0, "b", address(2), b"one")), peer)
    assert member.metadata() == {"a": b"", "b": b"one"}
    member.changed.clear()
    member._on_datagram(sealed(m.Alive(1, "b", address(2), b"two")), peer)
    assert member.changed.is_set() and member.metadata()["b"] == b"two"
    assert (seen[-1].name, seen[-1].kind, seen[-1].meta) == ("b", META, b"two")
    member.changed.clear()
    member._on_datagram(sealed(m.Alive(2, "b", address(2), b"two")), peer)
    assert not member.changed.is_set()  # a new incarnation, the same meta and members
    member.set_metadata(b"mine")
    assert member.changed.is_set() and member.metadata()["a"] == b"mine"
    with pytest.raises(ValueError):
        member.set_metadata(b"x" * (codec.MAX_META + 1))
    assert member.metadata()["a"] == b"mine"


class _Recording(node.Node):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sends: list[machine.Send] = []

    def _send_all(self, sends: Iterable[machine.Send]) -> None:
        self.sends.extend(sends)


def test_metadata_set_before_start_is_in_the_first_join() -> None:
    async def main() -> None:
        member = _Recording(
            "a",
            m.Address("127.0.0.1", 0),
            keyring=KEYS,
            seeds=[m.Address("127.0.0.1", 9)],
            rng=random.Random(1),
        )
        member.set_metadata(b"early")
        with pytest.raises(ValueError):
            member.set_metadata(b"x" * (codec.MAX_META + 1))
        await member.start()
        try:
            assert member.metadata() == {"a": b"early"}
            assert member.machine.incarnation == 0
            (join,) = member.sends
            opened = sealing.Opener(KEYS).open(sealing.Sealer(KEYS).seal(join.packet))
            assert not isinstance(opened, codec.Drop)
            decoded = codec.decode(opened)
            assert not isinstance(decoded, codec.Drop)
            (request,) = decoded
            assert isinstance(request, m.PushPull) and request.join
            assert request.states[0] == m.MemberState(
                "a", member.advertise, 0, m.State.ALIVE, b"early"
            )
        finally:
            member.close()

    asyncio.run(main())


def test_threaded_node_publishes_and_reads_metadata_across_threads() -> None:
    async def main() -> None:
        member = threaded.ThreadedNode(node.Node("a", m.Address("127.0.0.1", 0), keyring=KEYS))
        member.set_metadata(b"before")
        await member.start()
        try:
            assert member.metadata() == {"a": b"before"}
            member.set_metadata(b"after")
            assert member.metadata() == {"a": b"after"}
            assert member.node.machine.incarnation == 1
            with pytest.raises(ValueError):
                member.set_metadata(b"x" * (codec.MAX_META + 1))
        finally:
            await member.leave()

    asyncio.run(main())


def test_meta_too_large_for_our_datagrams_is_passed_on_without_it() -> None:
    # A member configured with larger datagrams than ours: its Alive reaches us, but we can
    # neither gossip it nor put it in our full state as it is.
    small = make("s", 1, config=cfg.DEFAULT.replace(max_datagram=512))
    big = m.Alive(0, "b" * 200, address(2), b"m" * 400)
    small.receive(0.0, address(2), (big,))
    assert small.meta()["b" * 200] == b"m" * 400
    assert small._queue.pending() == [m.Alive(0, "b" * 200, address(2))]
    out = small.receive(0.0, address(3), (m.PushPull(True, False, ()),))
    assert out.sends
    assert all(len(s.packet) <= 512 - sealing.OVERHEAD for s in out.sends)
    (states,) = [x.states for s in out.sends for x in messages(s) if isinstance(x, m.PushPull)]
    assert [s.meta for s in states if s.name == "b" * 200] == [b""]


def test_after_a_change_our_alive_rides_on_each_probe_until_it_is_acked() -> None:
    # Gossip may miss a member; our next probe of each member carries the new meta.
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3))
    a.set_meta(0.0, b"ready")
    while a._queue:  # let the gossip run out: what remains is the probes
        a.tick(a.next_deadline())
    to_b: list[bool] = []  # for each probe of b: did our Alive go along
    to_c: list[bool] = []
    while len(to_b) < 3 or len(to_c) < 2:
        now = a.next_deadline()
        for send in a.tick(now).sends:
            batch = messages(send)
            if not isinstance(batch[0], m.Ping):
                continue
            ping = batch[0]
            alive = m.Alive(a.incarnation, "a", address(1), b"ready") in batch
            (to_b if ping.target == "b" else to_c).append(alive)
            if ping.target == "c" or len(to_b) > 1:  # b's answer to the first probe is lost
                a.receive(now, send.address, (m.Ack(ping.seq),))
    assert to_b[:3] == [True, True, False]
    assert to_c[:2] == [True, False]


def test_a_probe_too_small_for_our_alive_goes_without_it() -> None:
    # Small datagrams, a long target name and meta that fits an Alive alone but not beside the
    # ping: the probe is sent as it fits, the change is left to gossip.
    config = cfg.DEFAULT.replace(max_datagram=512)
    a = make("a", 1, config=config)
    know(a, ("b" * 250, 2))
    a.set_meta(0.0, b"m" * 380)
    pings: list[tuple[m.Message, ...]] = []
    while not pings:
        out = a.tick(a.next_deadline())
        assert all(len(s.packet) <= 512 - sealing.OVERHEAD for s in out.sends)
        pings = [messages(s) for s in out.sends if isinstance(messages(s)[0], m.Ping)]
    assert not any(isinstance(x, m.Alive) for x in pings[0])
