"""The SWIM + Lifeguard failure detector as a deterministic state machine.

Inputs are method calls that carry the current time: `receive` (a decoded packet from an
address), `tick` (the clock reached `next_deadline()`), `join` and `leave`. Outputs are the
packets to send and the membership changes, returned as values. The machine never reads a clock,
touches a socket or uses global randomness (a seeded `random.Random` is injected), so the unit
tests run thousands of protocol periods of a lossy, partitioned network on a simulated clock, and
the asyncio transport stays a thin loop around it.

What it implements, and where it departs from memberlist:
- Probing: one member per `probe_interval`, a direct ping, then after `probe_timeout` indirect
  pings through `indirect_checks` members; helpers answer with a nack when they cannot reach the
  target (Lifeguard). Whom: memberlist walks a randomised round-robin of its own; we share one
  schedule (`shared_probe_schedule`): each wall-clock slot of one interval is a permutation of
  the ring of members ordered by a hash of their names, so every member is probed about once an
  interval and a silent one waits at most about one interval for its first probe (at N = 100
  the independent round-robins left 1% of failures unprobed for about five).
- Suspicion: an unanswered probe makes the target suspect; suspicion ends in death after a
  timeout that starts long and shrinks with each independent confirmation (Lifeguard's dynamic
  suspicion). A suspected member that hears of it refutes with a higher incarnation; suspect
  updates are always sent to the suspected member itself ("buddy system"), so refutation does not
  depend on gossip luck.
- Local health (Lifeguard): failed probes with missing nacks, being suspected, and timers firing
  late raise an awareness score that stretches our own probe interval and timeout, so a slow
  member backs off instead of accusing others. A late timer also defers verdicts once, so that
  replies already waiting in the socket are read before anyone is accused.
- Dissemination: updates are piggybacked on every packet and pushed to `gossip_nodes` members at
  once and then every `gossip_interval` while any remain (nothing is sent when there is nothing
  to tell), each retransmitted a logarithmic number of times.
- Anti-entropy: a full-state push-pull with a random member every `push_pull_interval`, and with a
  random dead member every `reconnect_interval` so that the halves of a healed partition find each
  other again. Dead states received in a push-pull are treated as suspicion, not death.
- Leave: a leaving member tells every member directly, and they drop it at once.
- Metadata (memberlist's node `Meta` and `UpdateNode`): each member publishes a small opaque byte
  string with its incarnation. `set_meta` bumps our incarnation and gossips a new Alive; every
  Alive we send (refutations included) and our state in every push-pull carries it. Gossip alone
  misses a member now and then (simulated, 8 members changing meta at once, no loss: some member
  kept a stale meta until the next push-pull in about half the runs), and members elect L2 owners
  from each other's meta, so after a change our Alive also rides on our next probe of each member
  until that member acks one: all have it within one probe round. Others take meta from an Alive
  of a higher incarnation, the usual rule, with one addition for groups in the middle of an
  upgrade: a member of the previous version relays Alives without their meta, so at the same
  incarnation a non-empty meta fills in an empty one (one incarnation has one meta), and an Alive
  about ourselves at our incarnation with an empty meta is not an older life to outbid. A change
  of a member's meta is a `Change` of kind META.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import math
import random
from dataclasses import dataclass, field

from speaker.membership import codec, gossip, sealing
from speaker.membership import config as cfg
from speaker.membership import messages as m

INF = math.inf
_SEQ_MASK = 0xFFFFFFFF
_NACK_RATIO = 0.8  # a helper gives up a little before the prober does
_NUDGES_PER_ROUND = 8
_RECONNECTERS = 3  # members of a group that try a dead member per reconnect_interval
# Probe intervals between waves of checkers: a check (probe, verdict, gossip of it) takes a
# little more than one.
_CHECK_WAVE_INTERVALS = 1.5


@functools.lru_cache(maxsize=4096)
def _ring_key(name: str) -> bytes:
    """A member's place in the probe ring: the same on every member, and unrelated to the
    order in which members joined or how they are named."""
    return hashlib.blake2b(name.encode(), digest_size=8, person=b"ironlb-ring").digest()


@dataclass(frozen=True, slots=True)
class Send:
    address: m.Address
    packet: bytes  # an encoded packet (codec); the transport seals it


class ChangeKind(enum.Enum):
    STATE = "state"  # joined, suspected, refuted, died, left (or moved)
    META = "meta"  # only its metadata changed
    # About ourselves: we refuted a verdict of our death. Members that believed it may have
    # taken over what we announce, and their announcements may still stand (a router's ARP
    # entry): announce it again.
    RETURNED = "returned"


@dataclass(frozen=True, slots=True)
class Change:
    """Something about a member changed; it carries the member's current meta (empty once the
    member is dead or gone)."""

    name: str
    state: m.State
    incarnation: int
    address: m.Address
    meta: bytes = b""
    kind: ChangeKind = ChangeKind.STATE


@dataclass(frozen=True, slots=True)
class Output:
    sends: tuple[Send, ...] = ()
    changes: tuple[Change, ...] = ()


@dataclass(slots=True)
class Stats:
    """Counters read by the metrics collector."""

    probes_sent: int = 0
    probes_failed: int = 0
    indirect_probes_sent: int = 0
    suspicions_raised: int = 0
    suspicions_refuted: int = 0
    self_refutations: int = 0
    deaths_declared: int = 0
    late_ticks: int = 0
    suspicions_withheld: int = 0  # failed probes while we were slow: suspected privately
    last_words: int = 0  # private suspicions run out: the suspect asked once more
    deaths_refuted: int = 0  # verdicts of our own death that we refuted


@dataclass(slots=True)
class _Member:
    name: str
    address: m.Address
    incarnation: int
    state: m.State
    since: float
    meta: bytes = b""


@dataclass(slots=True)
class _Suspicion:
    start: float
    low: float
    high: float
    k: int
    seen: set[str] = field(default_factory=set)
    confirmations: int = 0
    # When to remind the suspect again: it is the one who can end this.
    nudge_at: float = INF
    # Whether we accused it or were chosen to check it: we remind it every gossip_interval.
    # Every other member reminds it only now and then (`_quiet_nudge_period`), so that a
    # suspicion at N = 100 does not send the suspect a thousand datagrams a second.
    close: bool = False
    # When we check it ourselves if it still lacks confirmations (a later wave of checkers).
    check_at: float = INF
    # Ours alone, kept from the group because we were slow when the probe failed
    # (`_suspect_privately`), until someone else confirms it.
    private: bool = False
    # A private suspicion whose timer ran out asks the suspect once more and waits until then.
    last_word_until: float | None = None

    def deadline(self) -> float:
        timer = self.start + cfg.lifeguard_timeout(self.low, self.high, self.k, self.confirmations)
        return timer if self.last_word_until is None else max(timer, self.last_word_until)

    def confirm(self, origin: str) -> bool:
        if not origin or origin in self.seen:
            return False
        self.seen.add(origin)
        self.confirmations += 1
        self.private = False
        return True


@dataclass(slots=True)
class _Probe:
    target: str
    seq: int
    timeout_at: float
    end_at: float
    indirect: bool = False
    expected_nacks: int = 0
    nacks: int = 0
    announced: bool = False  # our Alive went with the ping


@dataclass(slots=True)
class _Relay:
    requester: m.Address
    seq: int
    nack_at: float


class Machine:
    def __init__(
        self,
        config: cfg.Config,
        name: str,
        address: m.Address,
        rng: random.Random,
        now: float,
        *,
        meta: bytes = b"",
        clock_offset: float = 0.0,
    ) -> None:
        """`clock_offset` turns `now` into wall-clock seconds (time.time() - the caller's
        clock): the shared probe schedule numbers its slots by the wall clock, which NTP keeps
        within milliseconds across the nodes of a cluster."""
        self.config = config
        self.name = name
        self.address = address
        self.rng = rng
        self.incarnation = 0
        self.stats = Stats()
        self.left = False
        self.awareness = 0
        self._members: dict[str, _Member] = {}
        self._suspicions: dict[str, _Suspicion] = {}
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._queue = gossip.Queue()
        self._seq = rng.getrandbits(32)
        # Randomised round-robin: the order still to probe; with the shared schedule only the
        # suspects to check ahead of it (`_probe_soon`).
        self._probe_order: list[str] = []
        self._clock_offset = clock_offset
        self._ring_cache: tuple[list[str], int] | None = None
        self._probe_slot = 0  # the shared schedule's slot of our next scheduled probe
        self._slot_at = INF  # when that is (the local clock)
        # Members not yet sure to know us or our latest meta: each gets our Alive with our next
        # probe of it until it acks one.
        self._unannounced: set[str] = set()
        self._max_packet = config.max_datagram - sealing.OVERHEAD
        if config.shared_probe_schedule:
            self._schedule_probe(now, after=-1)
        else:
            # Spread the first probes of members started together.
            self._next_probe_at = now + rng.uniform(0, config.probe_interval)
        self._next_gossip_at = INF
        self._next_push_pull_at = now + config.push_pull_interval * rng.uniform(0.5, 1.0)
        self._next_reconnect_at = now + config.reconnect_interval
        self._next_join_at = INF
        self._seeds: tuple[m.Address, ...] = ()
        self._grace_until = -INF
        self._in_grace = False
        self._sends: list[Send] = []
        self._changes: list[Change] = []
        self._meta = b""
        self._check_meta(meta)
        self._meta = meta

    # --- views ---------------------------------------------------------------------------------

    def alive(self) -> frozenset[str]:
        """Names of the members to treat as live (suspects included), ourselves included."""
        names = {n for n, mem in self._members.items() if mem.state <= m.State.SUSPECT}
        if not self.left:
            names.add(self.name)
        return frozenset(names)

    def states(self) -> dict[str, m.State]:
        """Every known member's state, ourselves included."""
        out = {n: mem.state for n, mem in self._members.items()}
        out[self.name] = m.State.LEFT if self.left else m.State.ALIVE
        return out

    def meta(self) -> dict[str, bytes]:
        """The metadata of the members in `alive()`, ourselves included."""
        out = {n: mem.meta for n, mem in self._members.items() if mem.state <= m.State.SUSPECT}
        if not self.left:
            out[self.name] = self._meta
        return out

    def next_deadline(self) -> float:
        if self.left:
            return INF
        deadlines = [
            self._next_probe_at,
            self._next_gossip_at,
            self._next_push_pull_at,
            self._next_reconnect_at,
            self._next_join_at,
        ]
        verdicts = [s.deadline() for s in self._suspicions.values()]
        deadlines.extend(s.nudge_at for s in self._suspicions.values())
        deadlines.extend(s.check_at for s in self._suspicions.values())
        if self._probe is not None:
            verdicts.append(self._probe.end_at if self._probe.indirect else self._probe.timeout_at)
        if verdicts:
            deadlines.append(max(min(verdicts), self._grace_until))
        deadlines.extend(r.nack_at for r in self._relays.values())
        return min(deadlines)

    # --- inputs --------------------------------------------------------------------------------

    def join(self, now: float, seeds: list[m.Address]) -> Output:
        """Contact seeds (again); retried every join_retry_interval until a member is known."""
        self._seeds = tuple(s for s in seeds if s != self.address)
        if self._seeds and not self.left:
            self._contact_seeds(now)
        return self._flush()

    def set_meta(self, now: float, meta: bytes) -> Output:
        """Publish new metadata: a new incarnation, gossiped at once. No-op if unchanged.

        Raises ValueError for metadata longer than codec.MAX_META or too long for our own Alive
        and full state to fit a datagram (a programming error, not an input from the network).
        """
        if meta == self._meta:
            return self._flush()
        self._check_meta(meta)
        self._meta = meta
        if self.left:
            return self._flush()
        self.incarnation = (self.incarnation + 1) & _SEQ_MASK
        self._queue_put(now, self._alive_message())
        self._unannounced = {n for n, mem in self._members.items() if mem.state <= m.State.SUSPECT}
        self._changes.append(
            Change(self.name, m.State.ALIVE, self.incarnation, self.address, meta, ChangeKind.META)
        )
        return self._flush()

    def _check_meta(self, meta: bytes) -> None:
        if len(meta) > codec.MAX_META:
            raise ValueError(f"metadata of {len(meta)} bytes exceeds {codec.MAX_META}")
        state = self._own_state(meta)
        alive = codec.HEADER_SIZE + len(codec.encode_message(self._alive_message(meta)))
        states = codec.HEADER_SIZE + codec.PUSH_PULL_OVERHEAD + codec.state_size(state)
        if max(alive, states) > self._max_packet:
            raise ValueError(f"metadata of {len(meta)} bytes does not fit a datagram")

    def _alive_message(self, meta: bytes | None = None) -> m.Alive:
        return m.Alive(
            self.incarnation, self.name, self.address, self._meta if meta is None else meta
        )

    def _own_state(self, meta: bytes | None = None) -> m.MemberState:
        return m.MemberState(
            self.name,
            self.address,
            self.incarnation,
            m.State.ALIVE,
            self._meta if meta is None else meta,
        )

    def leave(self, now: float) -> Output:
        """Announce our departure to every member; afterwards the machine is inert."""
        if self.left:
            return self._flush()
        self.left = True
        goodbye = codec.encode_message(m.Dead(self.incarnation, self.name, self.name))
        for member in self._members.values():
            if member.state <= m.State.SUSPECT:
                self._sends.append(Send(member.address, codec.encode([goodbye])))
        return self._flush()

    def receive(self, now: float, source: m.Address, messages: tuple[m.Message, ...]) -> Output:
        if self.left:
            return self._flush()
        for message in messages:
            self._handle(now, source, message)
        return self._flush()

    def tick(self, now: float) -> Output:
        if self.left:
            return self._flush()
        due = self.next_deadline()
        if now - due > self.config.lag_tolerance and not self._in_grace:
            # We woke up late: our own process is slow. Raise awareness and read what is
            # waiting before judging anyone.
            self.stats.late_ticks += 1
            self._raise_awareness(1)
            self._grace_until = now + self.config.lag_tolerance
            self._in_grace = True
        elif now >= self._grace_until:
            self._in_grace = False
        judging = now >= self._grace_until
        for seq, relay in list(self._relays.items()):
            if relay.nack_at <= now:
                del self._relays[seq]
                self._send(relay.requester, [m.Nack(relay.seq)])
        if judging:
            self._judge_probe(now)
            for name, suspicion in list(self._suspicions.items()):
                if suspicion.deadline() > now:
                    continue
                if suspicion.private and suspicion.last_word_until is None:
                    self._last_word(now, name, suspicion)
                else:
                    self._declare_dead(now, name)
        self._nudge_suspects(now)
        self._check_late_suspicions(now)
        if self._next_probe_at <= now:
            self._start_probe(now)
        if self._next_gossip_at <= now:
            self._gossip(now)
        if self._next_push_pull_at <= now:
            self._next_push_pull_at = now + self.config.push_pull_interval
            peers = [n for n, mem in self._members.items() if mem.state == m.State.ALIVE]
            if peers:
                self._send_states(self._members[self.rng.choice(peers)].address, reply=True)
        if self._next_reconnect_at <= now:
            self._reconnect(now)
        if self._next_join_at <= now:
            if any(mem.state == m.State.ALIVE for mem in self._members.values()):
                self._next_join_at = INF
            else:
                self._contact_seeds(now)
        return self._flush()

    # --- message handling ----------------------------------------------------------------------

    def _handle(self, now: float, source: m.Address, message: m.Message) -> None:
        match message:
            case m.Ping(seq, target):
                if target == self.name:
                    self._send(source, [m.Ack(seq)])
            case m.Ack(seq):
                probe = self._probe
                if probe is not None and seq == probe.seq:
                    if probe.announced:
                        self._unannounced.discard(probe.target)
                    self._probe = None
                    self._raise_awareness(-1)
                elif seq in self._relays:
                    relay = self._relays.pop(seq)
                    self._send(relay.requester, [m.Ack(relay.seq)])
            case m.Nack(seq):
                if self._probe is not None and seq == self._probe.seq:
                    self._probe.nacks += 1
            case m.IndirectPing(seq, target, address):
                own = self._next_seq()
                timeout = self.config.probe_timeout * self._scale() * _NACK_RATIO
                self._relays[own] = _Relay(source, seq, now + timeout)
                self._send(address, [m.Ping(own, target)])
            case m.Alive() | m.Suspect() | m.Dead():
                self._apply(now, message, source)
            case m.PushPull(reply, _join, states):
                for state in states:
                    self._merge(now, state)
                if reply:
                    self._send_states(source, reply=False)

    def _apply(self, now: float, message: m.Gossip, source: m.Address | None) -> None:
        match message:
            case m.Alive():
                self._on_alive(now, message)
            case m.Suspect():
                self._on_suspect(now, message, source)
            case m.Dead():
                self._on_dead(now, message, source)

    def _merge(self, now: float, state: m.MemberState) -> None:
        if state.state == m.State.ALIVE:
            alive = m.Alive(state.incarnation, state.name, state.address, state.meta)
            self._on_alive(now, alive)
        elif state.state == m.State.LEFT:
            self._on_dead(now, m.Dead(state.incarnation, state.name, state.name))
        elif state.name == self.name:
            # A verdict of our death that a push-pull carries: refuted as one.
            self._about_us(now, state.incarnation, "", None, death=state.state == m.State.DEAD)
        else:
            # Someone else's verdict of death is only a reason to check for ourselves.
            self._on_suspect(now, m.Suspect(state.incarnation, state.name, ""))

    def _on_alive(self, now: float, message: m.Alive) -> None:
        if message.name == self.name:
            newer = message.incarnation > self.incarnation
            # Another life of ours at this incarnation: elsewhere, or with other metadata (an
            # empty meta may be ours relayed by a member that drops it: see the docstring).
            other = message.address != self.address or message.meta not in (b"", self._meta)
            if newer or (message.incarnation == self.incarnation and other):
                # An older life of ours is remembered: outbid it.
                self._refute(now, message.incarnation, "")
            return
        member = self._members.get(message.name)
        if member is None:
            self._members[message.name] = _Member(
                message.name,
                message.address,
                message.incarnation,
                m.State.ALIVE,
                now,
                message.meta,
            )
            if not self.config.shared_probe_schedule:
                self._probe_order.insert(self.rng.randint(0, len(self._probe_order)), message.name)
            # It may not know us yet: members that joined at the same moment learn of each other
            # from gossip that can run out before it reaches them (8 members started together:
            # 1 in 8 groups took a push-pull, 8 to 12 s, to complete). Our next probe of it
            # carries our Alive until it acks one.
            self._unannounced.add(message.name)
            self._changed(message.name)
            self._queue_put(now, message)
            return
        same = message.incarnation == member.incarnation
        if same and message.meta and not member.meta and member.state <= m.State.SUSPECT:
            # The meta of this incarnation, which a previous-version relay had dropped.
            member.meta = message.meta
            self._queue_put(now, message)
            self._changed(message.name, ChangeKind.META)
            return
        if message.incarnation <= member.incarnation:
            return
        previous = member.state
        new_meta = message.meta != member.meta
        member.incarnation = message.incarnation
        member.address = message.address
        member.meta = message.meta
        self._queue_put(now, message)
        if previous != m.State.ALIVE:
            member.state = m.State.ALIVE
            member.since = now
            if self._suspicions.pop(message.name, None) is not None:
                self.stats.suspicions_refuted += 1
            self._changed(message.name)
        elif new_meta:
            self._changed(message.name, ChangeKind.META)

    def _on_suspect(self, now: float, message: m.Suspect, source: m.Address | None = None) -> None:
        if message.name == self.name:
            self._about_us(now, message.incarnation, message.origin, source)
            return
        member = self._members.get(message.name)
        if member is None or member.state >= m.State.DEAD:
            return
        if message.incarnation < member.incarnation:
            return
        if member.state == m.State.SUSPECT:
            member.incarnation = message.incarnation
            suspicion = self._suspicions[message.name]
            if suspicion.confirm(message.origin):
                self._queue_put(now, message)
            if message.origin == self.name and not suspicion.close:
                # Our own probe failed too: we are an accuser now, and remind it as one.
                suspicion.close = True
                suspicion.nudge_at = min(suspicion.nudge_at, now + self.config.gossip_interval)
            return
        ours = message.origin == self.name
        wave = None if ours else self._check_wave(message.name, message.incarnation, message.origin)
        checker = wave == 0
        suspicion = self._new_suspicion(now, close=ours or checker)
        if wave:
            suspicion.check_at = now + wave * _CHECK_WAVE_INTERVALS * self.config.probe_interval
        if message.origin:
            suspicion.seen.add(message.origin)
        self._suspicions[message.name] = suspicion
        member.incarnation = message.incarnation
        member.state = m.State.SUSPECT
        member.since = now
        if ours:
            self.stats.suspicions_raised += 1
        elif checker:
            self._probe_soon(now, message.name)
        # Relayed suspicions from a push-pull are re-gossiped under our name so that the
        # suspected member hears of them and refutes.
        gossiped = message if message.origin else m.Suspect(message.incarnation, message.name, "")
        self._queue_put(now, gossiped)
        self._changed(message.name)

    def _on_dead(self, now: float, message: m.Dead, source: m.Address | None = None) -> None:
        if message.name == self.name:
            self._about_us(now, message.incarnation, message.origin, source, death=True)
            return
        member = self._members.get(message.name)
        if member is None or member.state >= m.State.DEAD:
            return
        if message.incarnation < member.incarnation:
            return
        member.incarnation = message.incarnation
        member.state = m.State.LEFT if message.is_leave else m.State.DEAD
        member.since = now
        self._suspicions.pop(message.name, None)
        if self._probe is not None and self._probe.target == message.name:
            self._probe = None
        self._queue_put(now, message)
        self._changed(message.name)

    def _about_us(
        self,
        now: float,
        incarnation: int,
        accuser: str,
        source: m.Address | None,
        *,
        death: bool = False,
    ) -> None:
        """Somebody suspects us or thinks us dead."""
        if incarnation >= self.incarnation:
            self._refute(now, incarnation, accuser, source)
            if death:
                self.stats.deaths_refuted += 1
                self._changes.append(
                    Change(
                        self.name,
                        m.State.ALIVE,
                        self.incarnation,
                        self.address,
                        self._meta,
                        ChangeKind.RETURNED,
                    )
                )
        elif source is not None:
            # Already refuted, but this sender has not heard: tell it directly.
            self._send(source, [self._alive_message()])

    def _refute(
        self, now: float, incarnation: int, accuser: str, source: m.Address | None = None
    ) -> None:
        self.incarnation = (max(self.incarnation, incarnation) + 1) & _SEQ_MASK
        self.stats.self_refutations += 1
        self._raise_awareness(1)
        alive = self._alive_message()
        self._queue_put(now, alive)
        member = self._members.get(accuser)
        direct = {source} if source is not None else set()
        if member is not None and member.state <= m.State.SUSPECT:
            direct.add(member.address)
        for address in direct:
            self._send(address, [alive])

    def _nudge_suspects(self, now: float) -> None:
        """Remind each suspect that we suspect it, until it refutes or dies.

        Gossip alone may never carry its refutation to us (each update is retransmitted a
        bounded number of times); asking the suspect directly every gossip_interval makes a
        false death need the loss of every one of those exchanges.
        """
        due = [(s.nudge_at, n) for n, s in self._suspicions.items() if s.nudge_at <= now]
        # Bounded per round, so that suspecting half of a large group at once (a partition)
        # does not turn into a burst of datagrams; the others wait for the next round.
        for _, name in sorted(due)[:_NUDGES_PER_ROUND]:
            suspicion = self._suspicions[name]
            if suspicion.close:
                # A hair later than the skipped ones, so that those go first next round.
                suspicion.nudge_at = now + self.config.gossip_interval * 1.01
            else:
                suspicion.nudge_at = now + self._quiet_nudge_period(suspicion.low)
            self._remind(name)
        for _, name in sorted(due)[_NUDGES_PER_ROUND:]:
            self._suspicions[name].nudge_at = now + self.config.gossip_interval

    def _new_suspicion(self, now: float, *, close: bool) -> _Suspicion:
        """A suspicion starting now, its bounds from the live members' count; an accuser or a
        checker (`close`) reminds the suspect every gossip_interval, any other member less
        often."""
        n = self._live_count()
        low, high = cfg.suspicion_bounds(self.config, n)
        k = min(self.config.suspicion_confirmations, max(n - 2, 0))
        nudge_in = self.config.gossip_interval if close else self._quiet_nudge_period(low)
        return _Suspicion(now, low, high, k, nudge_at=now + nudge_in, close=close)

    def _quiet_nudge_period(self, low: float) -> float:
        """How often a member that neither accused a suspect nor was asked to check it reminds
        it: half the shortest suspicion, so that each such member still asks the suspect itself
        at least once before its own timer can expire, in case gossip never brings the
        refutation; by then it usually has, and most of them never send one."""
        return max(low / 2, self.config.gossip_interval)

    def _check_wave(self, suspect: str, incarnation: int, origin: str) -> int | None:
        """Which wave of checkers of a suspicion raised by someone else we belong to, if any.

        Members rank themselves by a hash of (suspect, incarnation, name) among the live members
        other than the suspect and its accuser; every member ranks the same way without a
        message, and each incarnation (each new suspicion after a refutation) picks others. The
        first `suspect_checkers` check at once (wave 0); the next as many check one wave later
        if the suspicion still lacks its confirmations then, and so on while a wave still
        starts within the shortest suspicion. On a busy host the first wave's members are often
        slow themselves and keep their failed probes private (`_judge_probe`): without later
        waves the suspicion then ran to its long timeout (simulated N = 100: 1 cut in 20 took
        2 s instead of 1.2).
        """
        wanted = self.config.suspect_checkers
        if wanted <= 0:
            return None
        low, _ = cfg.suspicion_bounds(self.config, self._live_count())
        waves = math.ceil(low / (_CHECK_WAVE_INTERVALS * self.config.probe_interval))
        prefix = f"{suspect}\0{incarnation}\0".encode()

        def rank(name: str) -> bytes:
            return hashlib.blake2b(prefix + name.encode(), digest_size=8).digest()

        ours = rank(self.name)
        ahead = 0
        for name, member in self._members.items():
            if name in (suspect, origin) or member.state > m.State.SUSPECT:
                continue
            if rank(name) < ours:
                ahead += 1
                if ahead >= wanted * waves:
                    return None
        return ahead // wanted

    def _check_late_suspicions(self, now: float) -> None:
        """Our wave has come: check the suspect ourselves if the suspicion still lacks its
        confirmations (as far as we have heard)."""
        for name, suspicion in self._suspicions.items():
            if suspicion.check_at <= now:
                suspicion.check_at = INF
                if suspicion.confirmations < suspicion.k and not suspicion.close:
                    self._probe_soon(now, name)

    def _last_word(self, now: float, name: str, suspicion: _Suspicion) -> None:
        """A private suspicion ran out: ask the suspect once more, and declare it dead only if
        no refutation comes within a probe's timeout (as long as ours are now).

        We kept it private because we were slow or cut off ourselves, and the suspect may not
        have heard of it: our reminders went nowhere while our link was down. A member back
        from a cut declared a healthy member dead 0.1 s after its link came back, before any
        reminder had reached it; the group took the verdict, and the healthy member's layer-2
        addresses moved away and back (the layer-2 cut test, 7 moves). A dead suspect costs one
        timeout more, and only when we were slow."""
        suspicion.last_word_until = now + self.config.probe_timeout * self._scale()
        self.stats.last_words += 1
        self._remind(name)

    def _remind(self, name: str) -> None:
        """Tell a suspect directly that we suspect it: it is the one who can refute."""
        member = self._members[name]
        self._send(member.address, [m.Suspect(member.incarnation, name, self.name)])

    def _declare_dead(self, now: float, name: str) -> None:
        member = self._members[name]
        self.stats.deaths_declared += 1
        self._on_dead(now, m.Dead(member.incarnation, name, self.name))

    # --- probing -------------------------------------------------------------------------------

    def _scale(self) -> int:
        return self.awareness + 1

    def _raise_awareness(self, delta: int) -> None:
        self.awareness = min(max(self.awareness + delta, 0), self.config.awareness_max - 1)

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & _SEQ_MASK
        return self._seq

    def _probeable(self, name: str) -> bool:
        member = self._members.get(name)
        return member is not None and member.state <= m.State.SUSPECT

    def _start_probe(self, now: float) -> None:
        interval = self.config.probe_interval * self._scale()
        if self.config.shared_probe_schedule:
            target = self._next_scheduled_target(now)
        else:
            self._next_probe_at = now + interval
            target = self._next_round_robin_target()
        if target is None:
            return
        member = self._members[target]
        seq = self._next_seq()
        timeout = self.config.probe_timeout * self._scale()
        self._probe = _Probe(target, seq, now + timeout, now + interval)
        primary: list[m.Message] = [m.Ping(seq, target)]
        if member.state == m.State.SUSPECT:
            primary.append(m.Suspect(member.incarnation, target, self.name))
        if target in self._unannounced:
            alive = self._alive_message()
            size = sum(len(codec.encode_message(x)) for x in [*primary, alive])
            if codec.HEADER_SIZE + size <= self._max_packet:  # else gossip has to do
                primary.append(alive)
                self._probe.announced = True
        self.stats.probes_sent += 1
        self._send(member.address, primary)

    def _next_round_robin_target(self) -> str | None:
        if self._probe is not None:
            return None  # the previous probe is still being judged (a deferred verdict)
        for _ in range(2):
            while self._probe_order:
                candidate = self._probe_order.pop()
                if self._probeable(candidate):
                    return candidate
            self._probe_order = [n for n in self._members if self._probeable(n)]
            self.rng.shuffle(self._probe_order)
        return None

    def _next_scheduled_target(self, now: float) -> str | None:
        """A suspect we were asked to check, else, when our slot is due, the member the shared
        schedule gives us in it. A slot whose probe is still being judged is skipped: the next
        slot's prober of that member is another member."""
        slot: int | None = None
        if now >= self._slot_at:
            slot = self._probe_slot
            self._schedule_probe(now, after=slot + self._scale() - 1)
        else:
            self._next_probe_at = self._slot_at  # a check between our slots
        if self._probe is not None:
            return None
        while self._probe_order:
            candidate = self._probe_order.pop()
            if self._probeable(candidate):
                return candidate
        if slot is None:
            return None
        ring, rank = self._ring()
        if len(ring) < 2:
            return None
        # The offset falls by one each slot, so a member's next prober is the next one round
        # the ring, whose phase is 1/len later: a member is probed every 1 + 1/len intervals
        # (the ring's wrap-around makes one gap short, none longer).
        offset = len(ring) - 1 - slot % (len(ring) - 1)
        return ring[(rank + offset) % len(ring)]

    def _schedule_probe(self, now: float, after: int) -> None:
        """Our next scheduled probe: the first slot past `after` whose time, slot plus our
        phase (our rank over the ring's size), is still ahead."""
        ring, rank = self._ring()
        interval = self.config.probe_interval
        phase = rank / len(ring)
        wall = now + self._clock_offset
        slot = max(math.floor(wall / interval - phase) + 1, after + 1)
        self._probe_slot = slot
        self._slot_at = self._next_probe_at = (slot + phase) * interval - self._clock_offset

    def _ring(self) -> tuple[list[str], int]:
        """The live members and ourselves in ring order, and our rank in it."""
        if self._ring_cache is None:
            ring = [n for n in self._members if self._probeable(n)]
            ring.append(self.name)
            ring.sort(key=_ring_key)
            self._ring_cache = (ring, ring.index(self.name))
        return self._ring_cache

    def _probe_soon(self, now: float, name: str) -> None:
        """Check someone else's suspicion ourselves, next: our own failed probe is the
        independent confirmation Lifeguard waits for, and it then comes one probe later
        instead of whenever our round-robin happens to reach the suspect."""
        if name in self._probe_order:
            self._probe_order.remove(name)
        self._probe_order.append(name)
        if self._probe is None:
            self._next_probe_at = min(self._next_probe_at, now)

    def _judge_probe(self, now: float) -> None:
        probe = self._probe
        if probe is None:
            return
        if not self._probeable(probe.target):
            self._probe = None
            return
        if not probe.indirect:
            if probe.timeout_at > now:
                return
            probe.indirect = True
            helpers = [
                n
                for n, mem in self._members.items()
                if mem.state == m.State.ALIVE and n != probe.target
            ]
            target = self._members[probe.target]
            for helper in self.rng.sample(helpers, min(self.config.indirect_checks, len(helpers))):
                probe.expected_nacks += 1
                self.stats.indirect_probes_sent += 1
                self._send(
                    self._members[helper].address,
                    [m.IndirectPing(probe.seq, probe.target, target.address)],
                )
            return
        if probe.end_at > now:
            return
        self._probe = None
        self.stats.probes_failed += 1
        # A member that is itself slow stops accusing (Lifeguard): when our own health was
        # already degraded, or none of the helpers' nacks reached us (we are more likely the
        # one cut off than the target), the failed probe makes a private suspicion. We still
        # ask the suspect, who refutes if it is alive, and a dead one still dies when its
        # timer runs out; but the group does not hear it, nor count it as a confirmation.
        # Otherwise a busy host (everyone's acks late) turns into accusations that make it
        # busier, and a member back from a cut link accuses whoever it failed to reach.
        slow = self.awareness > 0 or (probe.expected_nacks > 0 and probe.nacks == 0)
        if probe.expected_nacks:
            self._raise_awareness(probe.expected_nacks - probe.nacks)
        else:
            self._raise_awareness(1)
        target = self._members[probe.target]
        accusation = m.Suspect(target.incarnation, probe.target, self.name)
        if slow:
            self.stats.suspicions_withheld += 1
            self._suspect_privately(now, accusation)
        else:
            self._on_suspect(now, accusation)

    def _suspect_privately(self, now: float, accusation: m.Suspect) -> None:
        member = self._members[accusation.name]
        if member.state == m.State.SUSPECT:
            return  # the group's suspicion already runs here; ours adds nothing to it
        # Our own name stays out of `seen`: a failed probe once we are healthy again confirms
        # it and tells the group. The suspect is asked at once.
        suspicion = self._new_suspicion(now, close=True)
        suspicion.nudge_at = now
        suspicion.private = True
        self._suspicions[accusation.name] = suspicion
        member.state = m.State.SUSPECT
        member.since = now
        self._changed(accusation.name)

    # --- dissemination -------------------------------------------------------------------------

    def _queue_put(self, now: float, message: m.Gossip) -> None:
        if isinstance(message, m.Alive) and message.meta:
            size = codec.HEADER_SIZE + len(codec.encode_message(message))
            if size > self._max_packet:
                # Metadata from a member with larger datagrams than ours would never leave the
                # queue: pass the Alive on without it (receivers fill it in from its owner).
                message = m.Alive(message.incarnation, message.name, message.address)
        self._queue.put(message)
        self._next_gossip_at = min(self._next_gossip_at, now)

    def _live_count(self) -> int:
        return sum(1 for mem in self._members.values() if mem.state <= m.State.SUSPECT) + 1

    def _send(self, address: m.Address, primary: list[m.Message]) -> None:
        encoded = [codec.encode_message(p) for p in primary]
        used = codec.HEADER_SIZE + sum(len(e) for e in encoded)
        extra = self._queue.take(
            self._max_packet - used,
            cfg.retransmit_limit(self.config, self._live_count()),
            codec.MAX_MESSAGES - sum(codec.frames(e) for e in encoded),
        )
        self._sends.append(Send(address, codec.encode(encoded + extra)))

    def _gossip(self, now: float) -> None:
        if not self._queue:
            self._next_gossip_at = INF
            return
        candidates = [
            n
            for n, mem in self._members.items()
            if mem.state <= m.State.SUSPECT
            or (mem.state == m.State.DEAD and now - mem.since < self.config.gossip_to_dead_time)
        ]
        targets = self.rng.sample(candidates, min(self.config.gossip_nodes, len(candidates)))
        for pending in self._queue.pending():
            # The suspected member must hear of our own accusation: it is the one who can
            # refute. Accusations we only pass on reach it from their accuser (and from our
            # reminders); sending it every copy would flood it at N = 100.
            ours = isinstance(pending, m.Suspect) and pending.origin == self.name
            if ours and pending.name not in targets and self._probeable(pending.name):
                targets.append(pending.name)
        limit = cfg.retransmit_limit(self.config, self._live_count())
        for target in targets:
            extra = self._queue.take(
                self._max_packet - codec.HEADER_SIZE, limit, codec.MAX_MESSAGES
            )
            if not extra:
                break
            self._sends.append(Send(self._members[target].address, codec.encode(extra)))
        self._next_gossip_at = now + self.config.gossip_interval if self._queue else INF

    def _own_states(self, room: int) -> list[tuple[m.MemberState, int]]:
        """Every state we know, with its encoded size; only an alive member's meta is read."""
        states = [self._own_state()]
        for mem in self._members.values():
            meta = mem.meta if mem.state == m.State.ALIVE else b""
            state = m.MemberState(mem.name, mem.address, mem.incarnation, mem.state, meta)
            if codec.state_size(state) > room:
                # Metadata a member with larger datagrams sent: its Alives will tell it.
                state = m.MemberState(mem.name, mem.address, mem.incarnation, mem.state)
            states.append(state)
        return [(s, codec.state_size(s)) for s in states]

    def _send_states(self, address: m.Address, *, reply: bool, join: bool = False) -> None:
        """Our full state, in as many datagrams as it takes (merging is order-free)."""
        room = self._max_packet - codec.HEADER_SIZE - codec.PUSH_PULL_OVERHEAD
        chunks: list[list[m.MemberState]] = [[]]
        size = 0
        for state, length in self._own_states(room):
            if size + length > room or len(chunks[-1]) == 0xFFFF:
                chunks.append([])
                size = 0
            chunks[-1].append(state)
            size += length
        for i, chunk in enumerate(chunks):
            message = codec.encode_push_pull(reply and i == 0, join, chunk)
            self._sends.append(Send(address, codec.encode([message])))

    def _contact_seeds(self, now: float) -> None:
        for seed in self._seeds:
            self._send_states(seed, reply=True, join=True)
        self._next_join_at = now + self.config.join_retry_interval

    def _reconnect(self, now: float) -> None:
        self._next_reconnect_at = now + self.config.reconnect_interval
        dead = []
        for name, mem in list(self._members.items()):
            if mem.state >= m.State.DEAD and now - mem.since > self.config.dead_retention:
                del self._members[name]
            elif mem.state == m.State.DEAD:
                dead.append(mem)
        # About three members of the group try per round, not every one of them: after a link
        # cut heals, N - 1 full states (and N - 1 replies) at the one member just back
        # overloaded it at N = 100, and its late acks got it suspected again. A member alone
        # (the other side of a partition) always tries.
        if dead and self.rng.random() < _RECONNECTERS / self._live_count():
            self._send_states(self.rng.choice(dead).address, reply=True)

    def _changed(self, name: str, kind: ChangeKind = ChangeKind.STATE) -> None:
        self._ring_cache = None
        member = self._members[name]
        meta = member.meta if member.state <= m.State.SUSPECT else b""
        self._changes.append(
            Change(name, member.state, member.incarnation, member.address, meta, kind)
        )

    def _flush(self) -> Output:
        out = Output(tuple(self._sends), tuple(self._changes))
        self._sends.clear()
        self._changes.clear()
        return out
