"""Membership that waits for what it needs instead of dying of its absence.

Membership needs three things that may come later than the speaker: its key (a mounted Secret),
its bind address (the node's address) and its seeds (a DNS name that cluster DNS may not answer
yet). Each is retried with bounded exponential backoff (`ironlb.backoff`), logged once per change
of state, and named in the speaker's readiness (`reasons()`), while the speaker keeps serving.

Until membership can speak for the cluster, `members()` returns None and the agent decides
liveness from the Node Ready condition, as with membership off: every speaker reads the same
Nodes from the apiserver, so speakers that cannot reach each other still agree on who announces,
where a speaker alone in its own membership would take every address for itself. Membership
speaks for the cluster once another member is heard (it answered a join, or found this one), or
at once when there is no one to hear: no seeds (told it is alone), or seeds that resolve to this
member's own address only (a one-node cluster's headless Service); from then on for good. Seeds
that resolve are not enough: if nobody answers (UDP filtered, keys that differ) the speaker stays
on Node Ready and names why in its readiness. Seeds are resolved again every minute, because the
headless Service lists speakers as they come and go.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ironlb import backoff
from ironlb_io import prometheus, retrying
from speaker import seeds
from speaker.membership import config as membership_config
from speaker.membership import metrics as membership_metrics
from speaker.membership import node as membership
from speaker.membership import sealing
from speaker.membership import threaded as membership_threaded

log = logging.getLogger(__name__)

REJOIN_EVERY_S = 60.0
# How often the mounted key is read again (a rotated Secret reaches the files within minutes).
KEY_POLL_S = 10.0
# Readiness reasons, as /readyz names them.
SEEDS_UNRESOLVED = "seeds_unresolved"
KEY_MISSING = "memberlist_key_missing"
BIND_FAILED = "memberlist_bind_failed"
NO_MEMBER_ANSWERED = "memberlist_no_member_answered"


@dataclass(frozen=True)
class Settings:
    name: str
    bind: str  # host or [v6], with an optional port
    port: int
    seeds: tuple[seeds.Seed, ...] = ()
    key_dir: str = ""  # empty: plain mode, on purpose
    config: membership_config.Config = membership_config.DEFAULT


def read_keyring(directory: str) -> sealing.Keyring:
    """Every file of a mounted Secret; OSError when there is no key (yet)."""
    files = sorted(str(p) for p in Path(directory).iterdir() if p.is_file())
    keyring = membership.load_keyring(files)
    if keyring.plain:
        raise FileNotFoundError(f"no key in {directory}")
    return keyring


@dataclass
class Membership:
    """What the agent needs (`changed`, `members()`, `leave()`), whatever is still missing."""

    settings: Settings
    registry: prometheus.Registry
    lookup: seeds.Lookup = seeds.system_lookup
    new_backoff: Callable[[], backoff.Backoff] = backoff.Backoff
    rejoin_every: float = REJOIN_EVERY_S
    key_poll_s: float = KEY_POLL_S
    key_seal_old_s: float = sealing.SEAL_OLD_S
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    member: membership_threaded.ThreadedNode | None = None
    resolution: seeds.Resolution | None = None
    _authoritative: bool = False
    # Read by the HTTP server's thread: always replaced whole, never changed in place.
    _reasons: tuple[str, ...] = ()
    _metadata: bytes = b""  # what this member gossips about itself (its data-path readiness)
    _unanswered_joins: int = 0  # joins sent while no other member was heard yet

    def __post_init__(self) -> None:
        self._authoritative = not self.settings.seeds
        self._reasons = () if self._authoritative else (SEEDS_UNRESOLVED,)

    # --- what the agent and the readiness endpoint read -----------------------------------------

    def reasons(self) -> tuple[str, ...]:
        return self._reasons

    def members(self) -> frozenset[str] | None:
        """Alive members, itself included; None while membership cannot speak for the cluster."""
        if self.member is None:
            return None
        alive = self.member.members()
        if not self._authoritative and len(alive) > 1:
            self._take_over("another member found this one")
        return alive if self._authoritative else None

    def returns(self) -> int:
        """How many verdicts of this member's death it refuted (0 before it started)."""
        return 0 if self.member is None else self.member.returns()

    def metadata(self) -> Mapping[str, bytes]:
        """Every alive member's gossiped metadata (empty before membership started)."""
        return {} if self.member is None else self.member.metadata()

    def set_metadata(self, data: bytes) -> None:
        """Gossip `data` about this member from now on (kept for a member not started yet)."""
        self._metadata = data
        if self.member is not None:
            self.member.set_metadata(data)

    async def leave(self) -> None:
        if self.member is not None:
            await self.member.leave()

    # --- the work -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Key, socket, then seeds, each retried until it works; then forever: seeds again."""
        keyring = await self._keyring() if self.settings.key_dir else None
        self.member = await self._start(keyring)
        self.changed.set()
        tasks = [asyncio.ensure_future(self._relay(self.member))]
        if keyring is not None:
            tasks.append(asyncio.ensure_future(self._follow_key(self.member, keyring)))
        try:
            if self.settings.seeds:
                await self._resolve_forever(self.member)
            else:
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _relay(self, member: membership_threaded.ThreadedNode) -> None:
        while True:
            await member.changed.wait()
            member.changed.clear()
            self.changed.set()

    def _take_over(self, why: str) -> None:
        self._authoritative = True
        self._set(SEEDS_UNRESOLVED, False)
        self._set(NO_MEMBER_ANSWERED, False)
        log.info(
            "membership now decides which speakers are alive",
            extra={"why": why, "node": self.settings.name},
        )
        self.changed.set()

    def _set(self, reason: str, on: bool) -> None:
        reasons = set(self._reasons)
        if on:
            reasons.add(reason)
        else:
            reasons.discard(reason)
        self._reasons = tuple(sorted(reasons))

    async def _keyring(self) -> sealing.Keyring:
        path = self.settings.key_dir

        async def read() -> sealing.Keyring:
            return read_keyring(path)

        keyring = await retrying.retry(
            read,
            OSError,
            message="membership key missing; membership waits for it, liveness from Node Ready",
            fields={"path": path},
            logger=log,
            on_failure=lambda _: self._set(KEY_MISSING, True),
            on_recovery=lambda _: log.info("membership key found", extra={"path": path}),
            new_backoff=self.new_backoff,
        )
        self._set(KEY_MISSING, False)
        return keyring

    async def _follow_key(
        self, member: membership_threaded.ThreadedNode, in_use: sealing.Keyring
    ) -> None:
        """Read the mounted key again every KEY_POLL_S; a changed one is taken in steps
        (`sealing.Rotation`), so that speakers reading it minutes apart keep hearing each
        other. A key that cannot be read (the files being swapped) leaves the one in use."""
        read = in_use
        rotation: sealing.Rotation | None = None
        failing = ""
        while True:
            await asyncio.sleep(self.key_poll_s)
            try:
                latest = await asyncio.to_thread(read_keyring, self.settings.key_dir)
            except OSError as e:
                if str(e) != failing:
                    failing = str(e)
                    log.warning(
                        "membership key unreadable; keeping the one in use",
                        extra={"path": self.settings.key_dir, "error": failing},
                    )
                continue
            failing = ""
            now = time.monotonic()
            if latest != read:
                read = latest
                rotation = sealing.Rotation(in_use, latest, now, self.key_seal_old_s)
                log.info(
                    "membership key changed; sealing with the previous one a while longer",
                    extra={
                        "keys": len(latest.keys),
                        "seal_previous_s": self.key_seal_old_s,
                        "open_previous_s": 2 * self.key_seal_old_s,
                    },
                )
            if rotation is None:
                continue
            wanted = rotation.at(now)
            if wanted != in_use:
                in_use = wanted
                await asyncio.to_thread(member.set_keyring, wanted)
            if rotation.done(now):
                rotation = None

    async def _start(self, keyring: sealing.Keyring | None) -> membership_threaded.ThreadedNode:
        async def bind_and_start() -> membership_threaded.ThreadedNode:
            bind = await asyncio.to_thread(
                membership.parse_address, self.settings.bind, self.settings.port
            )
            node = membership.Node(
                self.settings.name, bind, keyring=keyring, config=self.settings.config
            )
            # In the very first Alive: the others never count this node ready too early.
            node.set_metadata(self._metadata)
            member = membership_threaded.ThreadedNode(node)
            await member.start()
            return member

        member = await retrying.retry(
            bind_and_start,
            (OSError, UnicodeError),
            message="membership cannot bind its address; retrying",
            fields={"address": self.settings.bind, "port": self.settings.port},
            logger=log,
            on_failure=lambda _: self._set(BIND_FAILED, True),
            on_recovery=lambda started: log.info(
                "membership bound its address", extra={"address": str(started.node.bind)}
            ),
            new_backoff=self.new_backoff,
        )
        self._set(BIND_FAILED, False)
        membership_metrics.register(member.node, self.registry)
        return member

    async def _resolve_forever(self, member: membership_threaded.ThreadedNode) -> None:
        wait = self.new_backoff()
        while True:
            now = await asyncio.to_thread(seeds.resolve, self.settings.seeds, self.lookup)
            retry = wait.next() if now.failures else None
            if retry is None:
                wait.reset()
            line = seeds.note(self.resolution, now, retry)
            if line is not None:
                level = logging.WARNING if line.level == "warning" else logging.INFO
                log.log(level, line.message, extra=dict(line.fields))
            self.resolution = now
            if now.addresses:
                member.join(now.addresses)
                if not self._authoritative:
                    self._joined_before_authority(member, now)
            await asyncio.sleep(retry if retry is not None else self.rejoin_every)

    def _joined_before_authority(
        self, member: membership_threaded.ThreadedNode, resolution: seeds.Resolution
    ) -> None:
        """Membership speaks for the cluster only when it can hear it: a join nobody answers
        leaves it alone in its own view, where it would own every address."""
        if all(address == member.node.advertise for address in resolution.addresses):
            # Nobody else to wait for: a one-node cluster, whose Service lists only this speaker.
            self._take_over("seeds name only this member")
            return
        if len(member.members()) > 1:  # heard since an earlier join, even if no one asked yet
            self._take_over("another member answered")
            return
        self._set(SEEDS_UNRESOLVED, False)
        self._set(NO_MEMBER_ANSWERED, True)
        self._unanswered_joins += 1
        # An answer takes milliseconds: the first join is given until the next one to get it,
        # so that a cluster that answers logs nothing here; one line per wait, not per join.
        if self._unanswered_joins == 2:
            log.warning(
                "membership seeds resolved but no member answered; liveness from Node Ready",
                extra={"addresses": ", ".join(str(a) for a in resolution.addresses)},
            )
