"""Whole groups on a simulated clock and network: detection, loss, partitions, slow members.

Time bounds here are simulated seconds derived from the configuration, not wall-clock
thresholds; the real timings are measured by bench/membership.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from speaker.membership import config as cfg
from speaker.membership import machine
from speaker.membership import messages as m

from . import sim

ALIVE = {m.State.ALIVE, m.State.SUSPECT}
GONE = {m.State.DEAD, m.State.LEFT}


def worst_case_detection(config: cfg.Config, n: int) -> float:
    """A generous bound: a full round-robin cycle, the failed probe, the longest suspicion,
    and a second of dissemination."""
    _, high = cfg.suspicion_bounds(config, n)
    return config.probe_interval * (n + 1) + high + 1.0


def converged(network: sim.Network, names: list[str]) -> bool:
    return all(network.nodes[o].machine.alive() == set(names) for o in names)


@pytest.mark.parametrize("seed", range(5))
def test_group_forms_through_one_seed(seed: int) -> None:
    network = sim.Network(seed)
    names = network.cluster(8)
    network.run_for(3)
    assert converged(network, names)


@pytest.mark.parametrize("shared", [True, False])
def test_members_started_together_know_each_other_before_any_push_pull(shared: bool) -> None:
    # Members that join at the same moment learn of each other from gossip, which can run out
    # before it reaches them; each member's first probe of another carries its own Alive.
    config = cfg.DEFAULT.replace(shared_probe_schedule=shared)
    for seed in range(40):
        network = sim.Network(seed, config)
        names = network.cluster(8)
        network.run_for(config.push_pull_interval / 4)
        assert converged(network, names), seed


def ping_gaps(config: cfg.Config, n: int, seconds: float) -> list[float]:
    """Simulated seconds between consecutive probes of the same member, in a formed group."""
    network = sim.Network(7, config)
    names = network.cluster(n)
    network.run_for(3)
    assert converged(network, names)
    pinged: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        node = network.nodes[name]

        def recorded(
            now: float,
            source: m.Address,
            messages: tuple[m.Message, ...],
            _receive: Callable[..., machine.Output] = node.machine.receive,
            _name: str = name,
        ) -> machine.Output:
            if any(isinstance(x, m.Ping) and x.target == _name for x in messages):
                pinged[_name].append(now)
            return _receive(now, source, messages)

        node.machine.receive = recorded  # type: ignore[method-assign]
    network.run_for(seconds)
    return [b - a for times in pinged.values() for a, b in itertools.pairwise(times)]


def test_with_the_shared_schedule_every_member_is_probed_about_once_an_interval() -> None:
    interval = cfg.DEFAULT.probe_interval
    shared = ping_gaps(cfg.DEFAULT, 16, 30.0)
    # One prober a slot, the next slot's one a phase of 1/16 later; the network's delay and
    # loss-free delivery add a few milliseconds.
    assert max(shared) <= interval * (1 + 2 / 16) + 0.01
    # Each member's own random round-robin (memberlist's way) leaves members unprobed for
    # several intervals now and then.
    independent = ping_gaps(cfg.DEFAULT.replace(shared_probe_schedule=False), 16, 30.0)
    assert max(independent) > 3 * interval


@pytest.mark.parametrize(("seed", "n"), [(1, 3), (2, 8), (3, 8), (4, 32)])
def test_dead_member_is_declared_dead_by_all(seed: int, n: int) -> None:
    network = sim.Network(seed)
    names = network.cluster(n)
    network.run_for(3)
    victim = names[n // 2]
    network.kill(victim)
    killed_at = network.now
    network.run_for(worst_case_detection(network.config, n))
    others = [x for x in names if x != victim]
    assert network.all_see(victim, {m.State.DEAD}, others)
    times = [network.first_time(o, victim, {m.State.DEAD}) for o in others]
    assert all(t is not None and t > killed_at for t in times)
    # And nobody else was harmed.
    for other in others:
        assert network.ever_dead(other) == []


@pytest.mark.parametrize("seed", range(4))
def test_healthy_members_under_five_percent_loss_are_never_declared_dead(seed: int) -> None:
    network = sim.Network(seed, loss=0.05)
    names = network.cluster(8)
    network.run_for(600)
    for name in names:
        assert network.ever_dead(name) == [], name
    assert converged(network, names)
    # The loss did stress the detector: probes failed and suspicions were refuted.
    stats = [network.nodes[n].machine.stats for n in names]
    assert sum(s.probes_failed for s in stats) > 0
    assert sum(s.self_refutations for s in stats) > 0


def test_loss_is_survived_at_32_members() -> None:
    network = sim.Network(11, loss=0.05)
    names = network.cluster(32)
    network.run_for(120)
    assert [n for n in names if network.ever_dead(n)] == []
    assert converged(network, names)


def test_a_control_group_without_lifeguard_margins_does_fail() -> None:
    # The same loss with no indirect probes and a suspicion too short to refute in: false
    # deaths appear, so the test above is able to see them.
    fragile = cfg.DEFAULT.replace(
        indirect_checks=0, suspicion_mult=1.0, suspicion_max_mult=1.0, probe_interval=0.2
    )
    network = sim.Network(0, fragile, loss=0.05, delay=(0.02, 0.2))
    names = network.cluster(8)
    network.run_for(120)
    assert any(network.ever_dead(n) for n in names)


def cut_links_on_a_busy_host(config: cfg.Config, cuts: int) -> tuple[list[str], int]:
    """100 members sharing two busy cores at 2% loss; `cuts` link cuts, each healed once every
    other member has declared its victim dead. Returns the members other than the victims that
    anyone declared dead, and the datagrams full sockets dropped."""
    network = sim.Network(3, config, loss=0.02, host=sim.BUSY_TWO_CORES)
    names = network.start_in_batches(100)
    network.run_for(10)
    victims = [names[(t * 3 + 2) % 100] for t in range(cuts)]
    for victim in victims:
        others = [x for x in names if x != victim]
        network.partition(others)
        for _ in range(200):  # bounded: 10 simulated seconds
            if network.all_see(victim, GONE, others):
                break
            network.run_for(0.05)
        assert network.all_see(victim, GONE, others), victim
        network.heal()
        network.run_for(5)
        assert converged(network, names)
    harmed = [n for n in names if n not in victims and network.ever_dead(n)]
    return harmed, network.overflows


def test_a_link_cut_at_100_members_on_a_busy_host_declares_nobody_else_dead() -> None:
    harmed, _ = cut_links_on_a_busy_host(cfg.DEFAULT, cuts=2)
    assert harmed == []


def test_a_control_group_without_suspicion_margins_on_the_busy_host_does_fail() -> None:
    # The same cuts with every member checking each suspicion and no time to refute in: healthy
    # members die, so the test above is able to see it. (It also fails on the machine before
    # suspect_checkers, the bounded reminders and the withheld accusations.)
    fragile = cfg.DEFAULT.replace(
        suspect_checkers=1000, suspicion_mult=1.0, suspicion_max_mult=1.0, probe_timeout=0.02
    )
    harmed, _ = cut_links_on_a_busy_host(fragile, 2)
    assert harmed != []


def test_a_member_stopped_for_two_seconds_harms_nobody_else() -> None:
    network = sim.Network(4, loss=0.02, host=sim.BUSY_TWO_CORES)
    names = network.start_in_batches(100)
    network.run_for(10)
    starved = "m40"
    network.stop(starved)  # SIGSTOP: its socket fills, its timers wait
    network.run_for(2.0)
    network.resume(starved)
    network.run_for(8)
    assert [n for n in names if n != starved and network.ever_dead(n)] == []
    # It was declared dead (two seconds is longer than detection) and came back on its own.
    assert network.ever_dead(starved) != []
    assert network.nodes[starved].machine.incarnation > 0
    assert converged(network, names)


def test_partitioned_member_refutes_suspicion_after_the_partition_heals() -> None:
    network = sim.Network(5)
    names = network.cluster(8)
    network.run_for(3)
    lonely = "n4"
    network.partition([lonely], [n for n in names if n != lonely])
    others = [n for n in names if n != lonely]
    # Cut until somebody suspects it, then heal before any suspicion can expire.
    while not any(network.state(o, lonely) == m.State.SUSPECT for o in others):
        network.run_for(0.01)
    network.heal()
    network.run_for(5)
    assert network.ever_dead(lonely) == []
    assert network.nodes[lonely].machine.incarnation > 0  # it refuted
    assert network.all_see(lonely, {m.State.ALIVE}, others)


def test_long_partition_is_detected_then_heals() -> None:
    network = sim.Network(6)
    names = network.cluster(8)
    network.run_for(3)
    lonely = "n2"
    others = [n for n in names if n != lonely]
    network.partition([lonely], others)
    network.run_for(worst_case_detection(network.config, 8))
    assert network.all_see(lonely, {m.State.DEAD}, others)
    network.heal()
    network.run_for(5 * network.config.reconnect_interval + 5)
    assert converged(network, names)


@pytest.mark.parametrize("seed", range(3))
def test_two_halves_of_a_partition_converge_after_healing(seed: int) -> None:
    network = sim.Network(seed)
    names = network.cluster(8)
    network.run_for(3)
    left, right = names[:4], names[4:]
    network.partition(left, right)
    network.run_for(20)
    for observer in left:
        assert network.nodes[observer].machine.alive() == set(left)
    for observer in right:
        assert network.nodes[observer].machine.alive() == set(right)
    network.heal()
    network.run_for(10 * network.config.reconnect_interval)
    assert converged(network, names)


@pytest.mark.parametrize("seed", range(3))
def test_member_whose_process_runs_late_is_not_declared_dead(seed: int) -> None:
    network = sim.Network(seed, loss=0.01)
    names = network.cluster(8)
    network.run_for(3)
    slow = network.nodes["n3"]
    # Everything it does, timers and packets, happens 150 ms late: more than the probe
    # timeout, less than the probe interval.
    slow.lag = 0.15
    network.run_for(300)
    for name in names:
        assert network.ever_dead(name) == [], name
    assert slow.machine.stats.late_ticks > 0  # it noticed that it is the slow one
    assert converged(network, names)


def slow_receiver(seed: int, config: cfg.Config) -> tuple[machine.Stats, list[str]]:
    network = sim.Network(seed, config, loss=0.01)
    names = network.cluster(8)
    network.run_for(3)
    slow = network.nodes["n3"]
    # Its receive queue is 250 ms behind (longer than a probe interval); its timers are not.
    slow.inbound_lag = 0.25
    network.run_for(120)
    wrongly_dead = [n for n in names if n != "n3" and network.ever_dead(n)]
    return slow.machine.stats, wrongly_dead


@pytest.mark.parametrize("seed", range(2))
def test_one_slow_member_backs_off_and_stops_accusing_others(seed: int) -> None:
    stats, wrongly_dead = slow_receiver(seed, cfg.DEFAULT)
    assert wrongly_dead == []
    # Its failed probes (no helper's nack reaches it in time) stay private: it tells nobody.
    assert stats.suspicions_withheld > 0
    assert stats.suspicions_raised == 0
    # Without local health awareness, the same member fails probes all the time.
    blind, _ = slow_receiver(seed, cfg.DEFAULT.replace(awareness_max=1))
    assert stats.probes_failed * 10 < blind.probes_failed


def test_graceful_leave_is_seen_by_everyone_at_once() -> None:
    network = sim.Network(8)
    names = network.cluster(8)
    network.run_for(3)
    network.leave("n5")
    left_at = network.now
    network.run_for(0.05)
    others = [n for n in names if n != "n5"]
    assert network.all_see("n5", {m.State.LEFT}, others)
    slowest = max(network.first_time(o, "n5", {m.State.LEFT}) or 1e9 for o in others)
    assert slowest - left_at <= network.delay[1]  # one network hop: told directly


def test_restarted_member_rejoins_after_being_declared_dead() -> None:
    network = sim.Network(9)
    names = network.cluster(5)
    network.run_for(3)
    network.kill("n3")
    network.run_for(worst_case_detection(network.config, 5))
    assert network.all_see("n3", {m.State.DEAD}, ["n1", "n2", "n4", "n5"])
    sim.restart(network, "n3", seeds=["n1"])
    network.run_for(3)
    assert converged(network, names)
    assert network.nodes["n3"].machine.incarnation > 0


def test_detection_at_defaults_is_far_faster_than_memberlist_lan() -> None:
    def mean_detection(config: cfg.Config) -> float:
        total = 0.0
        for seed in range(5):
            network = sim.Network(seed, config)
            names = network.cluster(8)
            network.run_for(3)
            network.kill("n4")
            start = network.now
            network.run_for(worst_case_detection(config, 8))
            last = max(
                network.first_time(o, "n4", {m.State.DEAD}) or 1e9 for o in names if o != "n4"
            )
            total += last - start
        return total / 5

    assert mean_detection(cfg.DEFAULT) * 4 < mean_detection(cfg.MEMBERLIST_LAN)


def test_member_that_left_can_come_back() -> None:
    network = sim.Network(12)
    names = network.cluster(5)
    network.run_for(3)
    network.leave("n2")
    network.run_for(1)
    assert network.all_see("n2", {m.State.LEFT}, ["n1", "n3", "n4", "n5"])
    sim.restart(network, "n2", seeds=["n1"])
    network.run_for(3)
    assert converged(network, names)
    assert network.ever_dead("n2") == ["n1", "n3", "n4", "n5"]  # the leave, and nothing since
    assert all(
        [c.state for _, c in network.nodes[o].log if c.name == "n2"][-1] == m.State.ALIVE
        for o in ["n1", "n3", "n4", "n5"]
    )


def test_dissemination_of_a_death_needs_no_probe_of_every_member() -> None:
    # Once one member declares a death, everyone has heard within a few network hops.
    network = sim.Network(13, delay=(0.001, 0.001))
    names = network.cluster(32)
    network.run_for(5)
    network.kill("n7")
    network.run_for(worst_case_detection(network.config, 32))
    times = sorted(network.first_time(o, "n7", {m.State.DEAD}) or 1e9 for o in names if o != "n7")
    assert times[-1] - times[0] < 20 * 0.001 + network.config.gossip_interval


def test_every_member_elects_the_same_owners_before_and_after_a_failure() -> None:
    from speaker import election

    network = sim.Network(14, loss=0.02)
    names = network.cluster(8)
    network.run_for(3)
    addresses = [f"192.0.2.{i}" for i in range(1, 41)]

    def owners(observer: str) -> list[str | None]:
        view = network.nodes[observer].machine.alive()
        return [election.owner(a, view) for a in addresses]

    before = {tuple(owners(o)) for o in names}
    assert len(before) == 1
    (table,) = before
    victim = table[0]
    assert victim is not None
    network.kill(victim)
    network.run_for(worst_case_detection(network.config, 8))
    survivors = [n for n in names if n != victim]
    after = {tuple(owners(o)) for o in survivors}
    assert len(after) == 1
    (moved,) = after
    for address, old, new in zip(addresses, table, moved, strict=True):
        if old == victim:
            assert new == election.order(address, names)[1]  # the runner-up takes over
        else:
            assert new == old  # nothing else moves


def probe_round(config: cfg.Config, n: int) -> float:
    """How long a member takes to probe every other member once."""
    return config.probe_interval * (n - 1)


@pytest.mark.parametrize("seed", range(4))
def test_every_members_meta_converges_on_every_member(seed: int) -> None:
    network = sim.Network(seed, loss=0.05)
    names = network.cluster(8)
    network.set_meta("n1", b"before joining")  # the seed: others learn it when they join
    network.run_for(3)
    assert all(network.nodes[o].machine.meta()["n1"] == b"before joining" for o in names)
    # Everyone changes at once: gossip alone leaves a stale meta here and there; the probes
    # that carry each change repair it within a probe round or two (not a push-pull interval).
    for i, name in enumerate(names):
        network.set_meta(name, f"ready {name}".encode() * (i + 1))
    network.run_for(2 * probe_round(network.config, 8))
    expected = {name: f"ready {name}".encode() * (i + 1) for i, name in enumerate(names)}
    assert all(network.nodes[o].machine.meta() == expected for o in names)
    for observer in names:
        changes = [c for _, c in network.nodes[observer].log if c.meta == expected["n5"]]
        # Every observer was told, as a change of meta only.
        assert observer == "n5" or [c.kind for c in changes] == [machine.ChangeKind.META]


def test_meta_changed_during_a_partition_reaches_the_other_side_after_it_heals() -> None:
    network = sim.Network(5)
    names = network.cluster(8)
    network.run_for(3)
    network.partition(names[:4], names[4:])
    network.set_meta("n2", b"changed while partitioned")
    network.run_for(20)
    assert network.nodes["n1"].machine.meta()["n2"] == b"changed while partitioned"
    assert all("n2" not in network.nodes[o].machine.meta() for o in names[4:])
    network.heal()
    network.run_for(10 * network.config.reconnect_interval)
    assert converged(network, names)
    assert all(network.nodes[o].machine.meta()["n2"] == b"changed while partitioned" for o in names)


def test_a_restarted_member_publishes_its_new_meta_over_its_previous_life() -> None:
    network = sim.Network(21)
    names = network.cluster(5)
    network.set_meta("n3", b"first life")
    network.run_for(3)
    assert all(network.nodes[o].machine.meta()["n3"] == b"first life" for o in names)
    sim.restart(network, "n3", seeds=["n1"])
    network.set_meta("n3", b"second life")
    network.run_for(3)
    assert converged(network, names)
    assert all(network.nodes[o].machine.meta()["n3"] == b"second life" for o in names)
