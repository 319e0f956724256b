"""The state machine, one exchange at a time: probes, helpers, suspicion, refutation, leave."""

from __future__ import annotations

import math
import random

from speaker.membership import codec, machine
from speaker.membership import config as cfg
from speaker.membership import messages as m

CONFIG = cfg.DEFAULT


def address(i: int) -> m.Address:
    return m.Address(f"10.0.0.{i}", 7946)


def make(name: str, i: int, now: float = 0.0, config: cfg.Config = CONFIG) -> machine.Machine:
    return machine.Machine(config, name, address(i), random.Random(i), now)


def messages(send: machine.Send) -> tuple[m.Message, ...]:
    result = codec.decode(send.packet)
    assert not isinstance(result, codec.Drop)
    return result


def primary(output: machine.Output, kind: type) -> list[tuple[m.Address, m.Message]]:
    return [(s.address, x) for s in output.sends for x in messages(s) if isinstance(x, kind)]


def know(member: machine.Machine, *others: tuple[str, int]) -> None:
    member.receive(0.0, address(99), tuple(m.Alive(0, n, address(i)) for n, i in others))


def test_ping_for_us_is_acked_ping_for_someone_else_is_not() -> None:
    a = make("a", 1)
    out = a.receive(0.0, address(2), (m.Ping(42, "a"),))
    assert primary(out, m.Ack) == [(address(2), m.Ack(42))]
    assert primary(a.receive(0.0, address(2), (m.Ping(43, "z"),)), m.Ack) == []


def test_silent_target_gets_indirect_probes_then_suspicion() -> None:
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3), ("d", 4), ("e", 5))
    pings: list[tuple[m.Address, m.Message]] = []
    while not pings:
        sent_at = a.next_deadline()
        pings = primary(a.tick(sent_at), m.Ping)
    (ping_to, ping) = pings[0]
    assert isinstance(ping, m.Ping)
    target = ping.target
    # Nothing until the probe timeout, then k indirect probes to other members.
    indirect: list[tuple[m.Address, m.Message]] = []
    while not indirect:
        now = a.next_deadline()
        indirect = primary(a.tick(now), m.IndirectPing)
    assert now - sent_at >= CONFIG.probe_timeout
    assert len(indirect) == CONFIG.indirect_checks
    assert all(x.target == target and x.seq == ping.seq for _, x in indirect)  # type: ignore[union-attr]
    assert ping_to not in {addr for addr, _ in indirect}
    # Every helper nacks: it is the target, not us, that is unreachable.
    for helper, _ in indirect:
        a.receive(now, helper, (m.Nack(ping.seq),))
    while a.states()[target] == m.State.ALIVE:
        a.tick(a.next_deadline())
    assert a.states()[target] == m.State.SUSPECT
    assert a.stats.probes_failed == 1 and a.stats.suspicions_raised == 1
    assert a.awareness == 0  # all nacks arrived: our own health is not in doubt


def test_missing_nacks_raise_our_own_awareness() -> None:
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3), ("d", 4), ("e", 5))
    start = a.next_deadline()
    a.tick(start)
    while a.stats.probes_failed == 0:
        a.tick(a.next_deadline())
    assert a.awareness == CONFIG.indirect_checks  # no helper answered: maybe it is us
    # A slower probe cadence follows: the interval stretches by awareness + 1.
    times: list[float] = []
    while len(times) < 2:
        now = a.next_deadline()
        if primary(a.tick(now), m.Ping):
            times.append(now)
    assert times[1] - times[0] >= (CONFIG.indirect_checks + 1) * CONFIG.probe_interval


def test_ack_through_a_helper_clears_the_probe() -> None:
    a, helper = make("a", 1), make("h", 2)
    know(a, ("h", 2), ("t", 3))
    # The helper relays: it pings the target under its own sequence number...
    out = helper.receive(0.0, address(1), (m.IndirectPing(7, "t", address(3)),))
    ((to, relay_ping),) = primary(out, m.Ping)
    assert to == address(3) and isinstance(relay_ping, m.Ping)
    # ...and forwards the target's ack under ours.
    out = helper.receive(0.01, address(3), (m.Ack(relay_ping.seq),))
    assert primary(out, m.Ack) == [(address(1), m.Ack(7))]


def test_helper_nacks_when_the_target_is_silent() -> None:
    helper = make("h", 2)
    helper.receive(0.0, address(1), (m.IndirectPing(7, "t", address(3)),))
    out = helper.tick(helper.next_deadline())
    assert primary(out, m.Nack) == [(address(1), m.Nack(7))]


def test_suspicion_of_ourselves_is_refuted_with_a_higher_incarnation() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    out = a.receive(0.0, address(2), (m.Suspect(0, "a", "b"),))
    assert a.incarnation == 1 and a.stats.self_refutations == 1
    assert a.awareness == 1  # being suspected is a hint that we are the slow one
    assert (address(2), m.Alive(1, "a", address(1))) in primary(out, m.Alive)
    # An old suspicion (lower incarnation) changes nothing.
    a.receive(0.0, address(2), (m.Suspect(0, "a", "b"),))
    assert a.incarnation == 1


def test_refutation_clears_suspicion_and_stale_alive_does_not() -> None:
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3), ("d", 4))
    a.receive(0.0, address(3), (m.Suspect(0, "b", "c"),))
    assert a.states()["b"] == m.State.SUSPECT
    a.receive(0.0, address(2), (m.Alive(0, "b", address(2)),))
    assert a.states()["b"] == m.State.SUSPECT  # same incarnation: not a refutation
    out = a.receive(0.0, address(2), (m.Alive(1, "b", address(2)),))
    assert a.states()["b"] == m.State.ALIVE and a.stats.suspicions_refuted == 1
    assert [c.state for c in out.changes] == [m.State.ALIVE]


def test_confirmations_shorten_the_suspicion() -> None:
    a = make("a", 1)
    know(a, *[(f"m{i}", i) for i in range(2, 10)])
    a.receive(0.0, address(3), (m.Suspect(0, "m2", "m3"),))
    alone = a._suspicions["m2"].deadline()
    a.receive(0.0, address(4), (m.Suspect(0, "m2", "m4"),))
    a.receive(0.0, address(4), (m.Suspect(0, "m2", "m4"),))  # the same origin counts once
    once = a._suspicions["m2"].deadline()
    a.receive(0.0, address(5), (m.Suspect(0, "m2", "m5"),))
    twice = a._suspicions["m2"].deadline()
    low, high = cfg.suspicion_bounds(CONFIG, 9)
    assert alone == high and high > once > twice == low


def test_suspicion_expires_into_death_and_is_gossiped() -> None:
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3), ("d", 4))
    a.receive(0.0, address(3), (m.Suspect(0, "b", "c"),))
    low, _ = cfg.suspicion_bounds(CONFIG, 4)
    now = 0.0
    sends: list[machine.Send] = []
    while a.states()["b"] != m.State.DEAD:
        now = a.next_deadline()
        sends.extend(a.tick(now).sends)
    # Our own failed probes of b confirm it too, so it may die before the maximum.
    assert now >= low and a.stats.deaths_declared == 1
    assert any(isinstance(x, m.Dead) for s in a.tick(now).sends + tuple(sends) for x in messages(s))


def test_dead_in_a_push_pull_is_only_a_suspicion() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    state = m.MemberState("b", address(2), 0, m.State.DEAD)
    a.receive(0.0, address(3), (m.PushPull(False, False, (state,)),))
    assert a.states()["b"] == m.State.SUSPECT


def test_push_pull_merges_and_answers_with_our_state() -> None:
    a = make("a", 1)
    states = (m.MemberState("b", address(2), 3, m.State.ALIVE),)
    out = a.receive(0.0, address(2), (m.PushPull(True, True, states),))
    assert a.states()["b"] == m.State.ALIVE
    replies = primary(out, m.PushPull)
    assert [addr for addr, _ in replies] == [address(2)]
    (_, reply) = replies[0]
    assert isinstance(reply, m.PushPull) and not reply.reply
    assert {s.name for s in reply.states} == {"a", "b"}


def test_full_state_is_split_into_datagrams_that_fit() -> None:
    a = make("a", 1)
    others = [(f"worker-{'x' * 60}-{i}", i % 250 + 2) for i in range(100)]
    know(a, *others)
    out = a.receive(0.0, address(2), (m.PushPull(True, False, ()),))
    assert len(out.sends) > 1
    assert all(len(s.packet) <= CONFIG.max_datagram - 33 for s in out.sends)
    b = make("b", 2)
    for send in out.sends:
        b.receive(0.0, address(1), messages(send))
    assert set(b.states()) == set(a.states()) | {"b"} - set()
    flags = [x.reply for s in out.sends for x in messages(s) if isinstance(x, m.PushPull)]
    assert flags.count(True) == 0  # an answer never asks for another answer


def test_a_restarted_member_outbids_its_previous_life() -> None:
    a = make("a", 1)
    states = (m.MemberState("a", address(1), 5, m.State.DEAD),)
    a.receive(0.0, address(2), (m.PushPull(False, False, states),))
    assert a.incarnation == 6


def test_dead_member_is_not_revived_by_a_stale_alive() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    a.receive(0.0, address(3), (m.Dead(0, "b", "c"),))
    a.receive(0.0, address(3), (m.Alive(0, "b", address(2)),))
    assert a.states()["b"] == m.State.DEAD
    a.receive(0.0, address(3), (m.Alive(1, "b", address(2)),))
    assert a.states()["b"] == m.State.ALIVE


def test_leave_tells_everyone_directly_and_they_drop_us_at_once() -> None:
    a, b = make("a", 1), make("b", 2)
    know(a, ("b", 2), ("c", 3), ("d", 4))
    know(b, ("a", 1))
    out = a.leave(1.0)
    assert {s.address for s in out.sends} == {address(2), address(3), address(4)}
    goodbye = next(s for s in out.sends if s.address == address(2))
    changes = b.receive(1.0, address(1), messages(goodbye)).changes
    assert [(c.name, c.state) for c in changes] == [("a", m.State.LEFT)]
    assert "a" not in b.alive()
    # After leaving, nothing more is sent and nothing is scheduled.
    assert a.next_deadline() == machine.INF
    assert a.receive(2.0, address(2), (m.Ping(1, "a"),)).sends == ()


def test_late_timer_defers_the_verdict_and_raises_awareness() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    a.tick(a.next_deadline())
    due = a.next_deadline()
    late = due + 10 * CONFIG.lag_tolerance
    a.tick(late)
    assert a.stats.late_ticks == 1 and a.awareness == 1
    assert a.stats.indirect_probes_sent == 0  # not judged yet: replies may be waiting
    probe = a._probe
    assert probe is not None
    a.receive(late, address(2), (m.Ack(probe.seq),))  # ...and indeed one was
    a.tick(a.next_deadline())
    assert a.stats.probes_failed == 0


def test_join_retries_seeds_until_someone_answers() -> None:
    a = make("a", 1)
    out = a.join(0.0, [address(2), address(1)])
    assert {s.address for s in out.sends} == {address(2)}  # never ourselves
    retry = a.next_deadline()
    assert retry <= CONFIG.join_retry_interval
    now = 0.0
    seen = 0
    while now < 5 * CONFIG.join_retry_interval:
        now = a.next_deadline()
        seen += sum(1 for s in a.tick(now).sends if s.address == address(2))
    assert seen >= 4
    know(a, ("b", 2))
    deadline_after = a.next_deadline()
    a.tick(max(deadline_after, now + CONFIG.join_retry_interval))
    assert a._next_join_at == machine.INF


def test_a_checker_of_a_suspicion_probes_the_suspect_next() -> None:
    # Every member a checker: `a` is one whoever the hash picks.
    a = make("a", 1, config=CONFIG.replace(suspect_checkers=100))
    know(a, *[(f"m{i}", i) for i in range(2, 10)])
    while a._next_gossip_at == 0.0:
        a.tick(0.0)  # let the introductions go out
    a.receive(0.01, address(3), (m.Suspect(0, "m7", "m3"),))
    assert a.next_deadline() <= 0.01
    pings: list[tuple[m.Address, m.Message]] = []
    while not pings:
        pings = primary(a.tick(a.next_deadline()), m.Ping)
    assert pings[0] == (address(7), m.Ping(pings[0][1].seq, "m7"))  # type: ignore[union-attr]


def test_a_member_that_is_no_checker_leaves_the_suspect_to_its_round_robin() -> None:
    a = make("a", 1, config=CONFIG.replace(suspect_checkers=0))
    know(a, *[(f"m{i}", i) for i in range(2, 10)])
    while a._next_gossip_at == 0.0:
        a.tick(0.0)
    order = list(a._probe_order)
    a.receive(0.01, address(3), (m.Suspect(0, "m7", "m3"),))
    assert a._probe_order == order


def group_views(n: int, config: cfg.Config = CONFIG) -> dict[str, machine.Machine]:
    """n machines, each knowing every other as alive."""
    names = [(f"m{i}", i) for i in range(1, n + 1)]
    views = {}
    for name, i in names:
        member = make(name, i, config=config)
        know(member, *[(x, j) for x, j in names if x != name])
        views[name] = member
    return views


def test_each_wave_of_checkers_has_the_configured_number_of_members() -> None:
    views = group_views(20)
    # At N = 20, S_min = 2 * log10(20) * 0.2 s = 0.52 s: waves start 0.3 s apart, two of them.
    low, _ = cfg.suspicion_bounds(CONFIG, 20)
    waves = math.ceil(low / (machine._CHECK_WAVE_INTERVALS * CONFIG.probe_interval))
    assert waves == 2
    chosen: set[str] = set()
    for suspect, origin, incarnation in [("m5", "m9", 0), ("m5", "m9", 1), ("m12", "", 3)]:
        by_wave: dict[int | None, set[str]] = {}
        for name, member in views.items():
            if name not in (suspect, origin):
                wave = member._check_wave(suspect, incarnation, origin)
                by_wave.setdefault(wave, set()).add(name)
        sizes = {w: len(names) for w, names in by_wave.items() if w is not None}
        assert sizes == {w: CONFIG.suspect_checkers for w in range(waves)}, (suspect, incarnation)
        chosen |= by_wave[0]
    # Each new suspicion (a new incarnation) asks other members: no member is everyone's checker.
    assert len(chosen) > CONFIG.suspect_checkers


def later_wave_member(n: int) -> tuple[machine.Machine, str]:
    """A member of a group of n that is in wave 1 for a suspicion of m7 raised by m3."""
    views = group_views(n)
    for name, member in views.items():
        if name not in ("m7", "m3") and member._check_wave("m7", 0, "m3") == 1:
            while member._next_gossip_at == 0.0:
                member.tick(0.0)  # let the introductions go out
            return member, name
    raise AssertionError("no member in wave 1")


def queued_checks(member: machine.Machine, until: float) -> list[tuple[float, str]]:
    """When the member decided to check a suspect ahead of its schedule, and which."""
    queued: list[tuple[float, str]] = []
    check = member._probe_soon

    def recorded(now: float, name: str) -> None:
        queued.append((now, name))
        check(now, name)

    member._probe_soon = recorded  # type: ignore[method-assign]
    now = member.next_deadline()
    while now <= until:
        member.tick(now)
        now = member.next_deadline()
    return queued


def test_a_later_wave_checks_a_suspicion_that_still_lacks_confirmations() -> None:
    member, _ = later_wave_member(20)
    member.receive(1.0, address(3), (m.Suspect(0, "m7", "m3"),))
    assert "m7" not in member._probe_order  # not in the first wave
    wave_at = 1.0 + machine._CHECK_WAVE_INTERVALS * CONFIG.probe_interval
    assert queued_checks(member, wave_at + 0.5) == [(wave_at, "m7")]


def test_a_later_wave_stays_out_of_a_suspicion_already_confirmed() -> None:
    member, _ = later_wave_member(20)
    member.receive(1.0, address(3), (m.Suspect(0, "m7", "m3"),))
    member.receive(1.1, address(4), (m.Suspect(0, "m7", "m4"), m.Suspect(0, "m7", "m5")))
    wave_at = 1.0 + machine._CHECK_WAVE_INTERVALS * CONFIG.probe_interval
    assert queued_checks(member, wave_at + 0.5) == []


def reminders(member: machine.Machine, suspect: m.Address, until: float) -> int:
    sent = 0
    now = member.next_deadline()
    while now <= until:
        out = member.tick(now)
        sent += sum(
            1
            for s in out.sends
            if s.address == suspect and primary(machine.Output(sends=(s,)), m.Suspect)
        )
        now = member.next_deadline()
    return sent


def test_only_accusers_and_checkers_remind_a_suspect_every_gossip_interval() -> None:
    # At N = 20, S_min = 2 * log10(20) * 0.2 s = 0.52 s: a bystander reminds the suspect every
    # 0.26 s, a checker every 0.1 s. Nobody refutes here, so both keep reminding.
    counts = {}
    for checkers in (0, 100):
        views = group_views(20, CONFIG.replace(suspect_checkers=checkers))
        a = views["m1"]
        a.tick(0.0)
        a.receive(0.0, address(3), (m.Suspect(0, "m7", "m3"),))
        counts[checkers] = reminders(a, address(7), 1.0)
    low, _ = cfg.suspicion_bounds(CONFIG, 20)
    assert 1 <= counts[0] <= 1.0 / (low / 2) + 1
    assert counts[100] >= 1.0 / CONFIG.gossip_interval - 1


def reconnect_rounds(a: machine.Machine, dead: m.Address, rounds: int) -> int:
    """How many of `rounds` reconnect rounds sent our state to the dead member."""
    tried = 0
    for r in range(1, rounds + 1):
        now = r * CONFIG.reconnect_interval
        a._next_reconnect_at = now  # only the reconnect is due here
        a._reconnect(now)
        out = a._flush()
        tried += any(s.address == dead for s in out.sends)
    return tried


def test_a_dead_member_gets_a_few_reconnects_a_round_from_a_large_group() -> None:
    # 99 live members and one dead: each member tries it with probability 3 / 100 a round, so
    # the dead member gets about three full states a round, not 99 (which overloaded it at
    # N = 100 the moment its link came back).
    a = make("a", 1)
    know(a, *[(f"m{i}", i) for i in range(2, 101)])
    a.receive(0.0, address(2), (m.Dead(0, "m50", "m2"),))
    tried = reconnect_rounds(a, address(50), 400)
    assert 2 <= tried <= 30  # expected 12 of 400 rounds


def test_a_member_alone_tries_a_dead_member_every_round() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    a.receive(0.0, address(2), (m.Dead(0, "b", "a"),))
    assert reconnect_rounds(a, address(2), 20) == 20


def fail_one_probe(a: machine.Machine, nack: bool) -> tuple[str, list[machine.Output]]:
    """Run `a` until its next probe has failed; the helpers answer with nacks when `nack`.
    Returns the target and every output from the ping to the verdict."""
    outputs: list[machine.Output] = []
    pings: list[tuple[m.Address, m.Message]] = []
    while not pings:
        out = a.tick(a.next_deadline())
        pings = primary(out, m.Ping)
    outputs.append(out)
    ping = pings[0][1]
    assert isinstance(ping, m.Ping)
    failed = a.stats.probes_failed
    while a.stats.probes_failed == failed:
        now = a.next_deadline()
        out = a.tick(now)
        outputs.append(out)
        if nack:
            for _, indirect in primary(out, m.IndirectPing):
                assert isinstance(indirect, m.IndirectPing)
                a.receive(now, address(99), (m.Nack(indirect.seq),))
    return ping.target, outputs


def gossiped_suspects(
    a: machine.Machine, target: str, until: float, since: list[machine.Output]
) -> list[m.Address]:
    """Where `a` sends a Suspect of target by `a` (in `since`, then until then), to anyone but
    target."""
    outputs = list(since)
    now = a.next_deadline()
    while now <= until:
        outputs.append(a.tick(now))
        now = a.next_deadline()
    seen = [
        send.address
        for out in outputs
        for send in out.sends
        for x in messages(send)
        if isinstance(x, m.Suspect) and x.name == target and x.origin == "a"
    ]
    return [s for s in seen if s != address(int(target[1:]))]


def test_a_healthy_member_whose_probe_failed_tells_the_group() -> None:
    a = make("a", 1)
    know(a, *[(f"m{i}", i) for i in range(2, 10)])
    target, outputs = fail_one_probe(a, nack=True)
    assert a.states()[target] == m.State.SUSPECT
    assert a.stats.suspicions_raised == 1 and a.stats.suspicions_withheld == 0
    assert gossiped_suspects(a, target, a.next_deadline() + 0.3, outputs[-1:]) != []


def test_a_member_that_heard_no_helper_suspects_privately_and_still_asks_the_suspect() -> None:
    a = make("a", 1)
    know(a, *[(f"m{i}", i) for i in range(2, 10)])
    target, _ = fail_one_probe(a, nack=False)  # nobody answered: probably we are cut off
    assert a.states()[target] == m.State.SUSPECT
    assert a.stats.suspicions_raised == 0 and a.stats.suspicions_withheld == 1
    reminded = []
    now = a.next_deadline()
    while now <= 0.5 + a._suspicions[target].start:
        for send in a.tick(now).sends:
            reminded += [x for x in messages(send) if isinstance(x, m.Suspect)]
        now = a.next_deadline()
    assert {(x.name, x.origin) for x in reminded} == {(target, "a")}
    # Told only to the suspect itself: the group never hears this accusation.
    a2 = make("a", 1)
    know(a2, *[(f"m{i}", i) for i in range(2, 10)])
    target2, outputs = fail_one_probe(a2, nack=False)
    assert gossiped_suspects(a2, target2, a2.next_deadline() + 1.0, outputs[-1:]) == []


def test_a_member_already_slow_withholds_even_when_helpers_answered() -> None:
    a = make("a", 1)
    know(a, *[(f"m{i}", i) for i in range(2, 10)])
    a.awareness = 2  # e.g. its timers fired late
    fail_one_probe(a, nack=True)
    assert a.stats.suspicions_raised == 0 and a.stats.suspicions_withheld == 1


def test_a_private_suspicion_of_a_dead_member_still_ends_in_its_death() -> None:
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3))
    target = ""
    while not target or a.stats.suspicions_withheld == 0:
        target, _ = fail_one_probe(a, nack=False)
    deadline = a._suspicions[target].deadline()
    while a.states()[target] == m.State.SUSPECT and a.next_deadline() <= deadline + 1:
        a.tick(a.next_deadline())
    assert a.states()[target] == m.State.DEAD


def test_a_private_suspicion_run_out_asks_the_suspect_once_more_before_the_verdict() -> None:
    """Back from a cut, a member's private suspicion runs out before any reminder reached the
    suspect: it asks once more, and the suspect's refutation saves it from a false death."""
    a = make("a", 1)
    know(a, ("b", 2), ("c", 3))
    target = ""
    while not target or a.stats.suspicions_withheld == 0:
        target, _ = fail_one_probe(a, nack=False)
    suspicion = a._suspicions[target]
    timer = suspicion.deadline()
    now = a.next_deadline()
    while now < timer:  # the link is down: every reminder is lost
        a.tick(now)
        now = a.next_deadline()
    out = a.tick(timer)
    suspect = a._members[target]
    asked = [s.address for s in out.sends for x in messages(s) if isinstance(x, m.Suspect)]
    assert suspect.address in asked
    assert a.states()[target] == m.State.SUSPECT and a.stats.last_words == 1
    assert a.stats.deaths_declared == 0
    # The suspect heard it and refutes before the last word's wait is over.
    refutation = m.Alive(suspect.incarnation + 1, target, suspect.address)
    a.receive(timer + 0.01, suspect.address, (refutation,))
    assert a.states()[target] == m.State.ALIVE
    while a.next_deadline() <= timer + 1:
        a.tick(a.next_deadline())
    assert a.states()[target] != m.State.DEAD  # (the other, never refuting, may be by now)


def returned(output: machine.Output) -> list[machine.Change]:
    return [c for c in output.changes if c.kind == machine.ChangeKind.RETURNED]


def test_refuting_our_own_death_is_a_returned_change_and_a_suspicion_is_not() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    assert returned(a.receive(0.1, address(2), (m.Suspect(0, "a", "b"),))) == []
    assert a.incarnation == 1
    out = a.receive(0.2, address(2), (m.Dead(1, "a", "b"),))
    assert [(c.name, c.state, c.incarnation) for c in returned(out)] == [("a", m.State.ALIVE, 2)]
    assert a.stats.deaths_refuted == 1
    # Already refuted: an older verdict changes nothing.
    assert returned(a.receive(0.3, address(2), (m.Dead(1, "a", "b"),))) == []


def test_a_verdict_of_our_death_in_a_push_pull_is_refuted_as_a_return() -> None:
    a = make("a", 1)
    know(a, ("b", 2))
    dead = m.MemberState("a", address(1), 0, m.State.DEAD, b"")
    out = a.receive(0.1, address(2), (m.PushPull(False, False, (dead,)),))
    assert [c.name for c in returned(out)] == ["a"]
    assert a.incarnation == 1
