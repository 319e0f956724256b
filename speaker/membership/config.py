"""Membership timings: configuration, their validation, and what they imply for detection time.

Every knob of the failure detector lives here so that the state machine, the benchmark and the
documentation read the same numbers. The defaults were chosen by measurement on a LAN-like setup
(processes in network namespaces on one host; `bench/membership.py`, figures in
docs/membership.md): they detect a silent member in under a second at N = 8 without false
positives under 2% loss. `MEMBERLIST_LAN` reproduces hashicorp/memberlist's DefaultLANConfig (what
MetalLB runs) so the benchmark can compare side by side.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ironlb.problems import Problem


@dataclass(frozen=True, slots=True)
class Config:
    # One member is probed per interval.
    probe_interval: float = 0.2
    # Whom: with a shared schedule, every member ranks the group by a hash of the names and, in
    # the slot `floor(wall clock / probe_interval)`, probes the member a slot-dependent offset
    # ahead of itself in that ring, at a phase given by its own rank. Each slot is then a
    # permutation: every member is probed once per interval, so a member that goes silent is
    # probed within about one interval. Without it (memberlist's way) each member runs its own
    # randomised round-robin; at N = 100 about 37% of intervals probe a given member nobody,
    # and 1% of failures wait about five intervals before their first probe.
    shared_probe_schedule: bool = True
    # A direct ping unanswered after this long triggers indirect pings.
    probe_timeout: float = 0.08
    # How many other members are asked to ping the target on our behalf.
    indirect_checks: int = 3
    # Suspicion lasts at least suspicion_mult * max(1, log10(n)) * probe_interval ...
    suspicion_mult: float = 2.0
    # ... and at most suspicion_max_mult times that when nobody else confirms it (Lifeguard).
    suspicion_max_mult: float = 4.0
    # Independent confirmations that shrink a suspicion from its maximum to its minimum.
    suspicion_confirmations: int = 2
    # How many members check a suspicion someone else raised at once, ahead of their
    # round-robin (chosen by a hash of the suspect, its incarnation and the member's name, so
    # every member knows whether it is one of them). Their failed probes are the confirmations;
    # every other member waits. All N - 1 at once flood a live suspect at N = 100.
    suspect_checkers: int = 3
    # A gossiped update is retransmitted retransmit_mult * ceil(log10(n + 1)) times.
    retransmit_mult: int = 4
    # Pending updates are pushed to gossip_nodes random members every gossip_interval; a new
    # update is pushed at once. Nothing is sent while there is nothing to tell.
    gossip_interval: float = 0.1
    gossip_nodes: int = 3
    # A member declared dead still receives gossip this long, so that it can refute.
    gossip_to_dead_time: float = 5.0
    # Full-state exchange with one random member, repairing whatever gossip missed.
    push_pull_interval: float = 15.0
    # Full-state exchange with one random dead member: heals partitions.
    reconnect_interval: float = 2.0
    # Seeds are contacted again this often until one of them answers.
    join_retry_interval: float = 1.0
    # Dead members are forgotten after this long (they can still rejoin).
    dead_retention: float = 600.0
    # Lifeguard local health: timeouts stretch up to this factor while we look unhealthy.
    awareness_max: int = 8
    # A timer that fires later than this is a sign that we, not the peers, are slow.
    lag_tolerance: float = 0.04
    # The largest datagram sent or accepted, sealed; fits a 1500-byte MTU with room to spare.
    max_datagram: int = 1400
    # A leave is sent to every member this many times, this far apart.
    leave_repeats: int = 2
    leave_spacing: float = 0.01

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


DEFAULT = Config()

# hashicorp/memberlist DefaultLANConfig (v0.5.x): the baseline MetalLB ships with.
MEMBERLIST_LAN = Config(
    probe_interval=1.0,
    probe_timeout=0.5,
    indirect_checks=3,
    suspicion_mult=4.0,
    suspicion_max_mult=6.0,
    suspicion_confirmations=2,
    shared_probe_schedule=False,
    retransmit_mult=4,
    gossip_interval=0.2,
    gossip_nodes=3,
    gossip_to_dead_time=30.0,
    push_pull_interval=30.0,
    reconnect_interval=30.0,
    awareness_max=8,
    lag_tolerance=0.25,
)

PROFILES: dict[str, Config] = {"default": DEFAULT, "memberlist-lan": MEMBERLIST_LAN}


def validate(config: Config) -> list[Problem]:
    """Problems with a configuration; an empty list means it is usable."""
    problems: list[Problem] = []

    def bad(field: str, message: str) -> None:
        problems.append(Problem("MembershipConfig", "", field, message))

    for name in (
        "probe_interval",
        "probe_timeout",
        "gossip_interval",
        "push_pull_interval",
        "reconnect_interval",
        "join_retry_interval",
        "dead_retention",
        "lag_tolerance",
    ):
        value = getattr(config, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            bad(name, f"must be a positive number of seconds, not {value!r}")
    if not problems and config.probe_interval < 2 * config.probe_timeout:
        # The indirect round (timeout, then the helpers' own timeout) must end inside the interval.
        bad("probe_interval", "must be at least twice probe_timeout")
    if config.indirect_checks < 0:
        bad("indirect_checks", "must not be negative")
    if config.suspicion_mult < 1:
        bad("suspicion_mult", "must be at least 1")
    if config.suspicion_max_mult < 1:
        bad("suspicion_max_mult", "must be at least 1")
    if config.suspicion_confirmations < 0:
        bad("suspicion_confirmations", "must not be negative")
    if config.suspect_checkers < 0:
        bad("suspect_checkers", "must not be negative")
    if config.retransmit_mult < 1:
        bad("retransmit_mult", "must be at least 1")
    if config.gossip_nodes < 1:
        bad("gossip_nodes", "must be at least 1")
    if config.awareness_max < 1:
        bad("awareness_max", "must be at least 1")
    if not 512 <= config.max_datagram <= 65000:
        bad("max_datagram", "must be between 512 and 65000 bytes")
    if config.leave_repeats < 1:
        bad("leave_repeats", "must be at least 1")
    return problems


def suspicion_bounds(config: Config, n: int) -> tuple[float, float]:
    """(minimum, maximum) suspicion timeout in a group of n live members (memberlist's formula)."""
    low = config.suspicion_mult * max(1.0, math.log10(max(n, 1))) * config.probe_interval
    return low, low * config.suspicion_max_mult


def retransmit_limit(config: Config, n: int) -> int:
    return config.retransmit_mult * max(1, math.ceil(math.log10(n + 1)))


def expected_detection(config: Config, n: int) -> float:
    """Expected seconds from a member going silent to every member declaring it dead.

    The sum of: the wait until some member probes it (with the shared schedule, every member is
    probed about once an interval: half an interval; else the first of n - 1 uniform positions
    in round-robin cycles of n - 1 intervals: about (n - 1) / n intervals), the failed probe (one
    interval), the suspicion, and gossip of the verdict (negligible on a LAN: it is pushed at
    once). Every member that hears of the suspicion probes the suspect next, so the k
    confirmations arrive together about 1.5 intervals into the suspicion (half an interval for
    a probe in flight to end, one for the new probe to fail); the suspicion then ends at
    max(that time, the Lifeguard timeout after k confirmations). See docs/membership.md.
    """
    if n < 2:
        return math.inf
    interval = config.probe_interval
    first_probe = interval / 2 if config.shared_probe_schedule else interval * (n - 1) / n
    low, high = suspicion_bounds(config, n)
    k = min(config.suspicion_confirmations, max(n - 2, 0))
    suspicion = low if k == 0 else max(1.5 * interval, lifeguard_timeout(low, high, k, k))
    return first_probe + interval + suspicion


def lifeguard_timeout(low: float, high: float, k: int, confirmations: int) -> float:
    """Lifeguard's dynamic suspicion timeout: high with no confirmation, low after k of them."""
    if k < 1:
        return low
    fraction = math.log(confirmations + 1) / math.log(k + 1)
    return max(low, high - (high - low) * fraction)
