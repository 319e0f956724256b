"""Only one active controller: a coordination.k8s.io/v1 Lease, held and renewed.

Two replicas that both allocate would hand out the same address, so allocation starts only once
this process holds the Lease, and a replica that cannot prove it still holds it stops writing at
once (the process then exits; its Deployment restarts it as a standby).

The rules are client-go's leaderelection, reduced to what we need:
* a Lease held by someone else is taken only after it has not changed for its whole
  `leaseDurationSeconds`, measured on *our* monotonic clock from when we first saw that record,
  so clock skew between nodes does not matter (the renewTime written in it is informational);
* an empty holderIdentity means released: take it at once (a graceful shutdown releases);
* every write is an update with the resourceVersion read, so two contenders cannot both win;
* we count ourselves leader only until `renew_deadline` after the last renewal we *sent* that
  succeeded, and that deadline is shorter than the lease duration, so we have stopped before any
  other replica can consider the Lease expired.

`decide` is the pure part (time passed in); `Elector` does the requests.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ironlb import services
from ironlb_io import kube

log = logging.getLogger(__name__)

GROUP, VERSION = "coordination.k8s.io", "v1"


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet
    TAKE = "take"  # free or expired: write ourselves in
    RENEW = "renew"  # ours: bump renewTime
    WAIT = "wait"  # someone else holds it and has renewed recently


# A release that meets a newer version of the Lease reads it and tries again, this often.
RELEASE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Record:
    holder: str
    duration_s: int
    transitions: int
    renew_time: str
    resource_version: str

    @property
    def fingerprint(self) -> tuple[str, str, int]:
        """What changes when its holder renews or it changes hands."""
        return (self.holder, self.renew_time, self.transitions)


def record_of(lease: Mapping[str, Any]) -> Record:
    spec = lease.get("spec") or {}
    return Record(
        holder=str(spec.get("holderIdentity") or ""),
        duration_s=int(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        renew_time=str(spec.get("renewTime") or ""),
        resource_version=services.resource_version(lease),
    )


def decide(record: Record | None, me: str, unchanged_since: float, now: float) -> Action:
    """What to do with the Lease as last read; `unchanged_since` is when (on our clock) we first
    saw its current fingerprint."""
    if record is None:
        return Action.CREATE
    if record.holder == me:
        return Action.RENEW
    if not record.holder:
        return Action.TAKE
    if now - unchanged_since >= record.duration_s:
        return Action.TAKE
    return Action.WAIT


def micro_time(now: datetime.datetime) -> str:
    """A Lease MicroTime: RFC 3339 with microseconds, UTC."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    """Acquire, keep and release one Lease."""

    def __init__(
        self,
        client: kube.Client,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        if duration_s < 1:
            raise ValueError("lease duration must be at least 1 second")
        self.client, self.namespace, self.name = client, namespace, name
        self.identity, self.duration_s = identity, duration_s
        self.clock, self.wall = clock, wall
        # Renew three times per duration; give up at two thirds (client-go: 15 s / 10 s / 2 s).
        self.renew_every = duration_s / 3
        self.renew_deadline = duration_s * 2 / 3
        self.retry_every = min(2.0, duration_s / 4)
        self._valid_until = 0.0
        self._seen: tuple[tuple[str, str, int], float] | None = None
        # Whether the apiserver answered our last look at the Lease: a standby that cannot even
        # read it (unreachable, an untrusted certificate) is no replica to send traffic to.
        self.reachable = False
        self._record: Record | None = None
        self._last_error = ""

    @property
    def path(self) -> str:
        return kube.group_path(GROUP, VERSION, "leases", self.namespace, self.name)

    def holding(self) -> bool:
        """Whether we may write right now."""
        return self.clock() < self._valid_until

    def _body(self, record: Record | None, taking: bool) -> dict[str, Any]:
        now = micro_time(self.wall())
        transitions = record.transitions if record else 0
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_s,
            "renewTime": now,
            "leaseTransitions": transitions + 1 if taking and record else transitions,
        }
        if taking:
            spec["acquireTime"] = now
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record is not None:
            metadata["resourceVersion"] = record.resource_version
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    async def _read(self) -> Record | None:
        try:
            record = record_of(await self.client.get(self.path))
        except kube.ApiError as e:
            if e.not_found:
                return None
            raise
        now = self.clock()
        if self._seen is None or self._seen[0] != record.fingerprint:
            self._seen = (record.fingerprint, now)
        return record

    async def try_once(self) -> bool:
        """One attempt to acquire or renew; True if we hold the Lease afterwards."""
        sent = self.clock()
        try:
            record = await self._read()
            self.reachable = True
            unchanged_since = self._seen[1] if self._seen else sent
            action = decide(record, self.identity, unchanged_since, self.clock())
            if action is Action.WAIT:
                if record is not None and record.holder not in ("", self.identity):
                    # Someone else holds it now (the Lease was deleted or edited, or we were
                    # too late): stop writing at once, not when our last renewal runs out,
                    # or two replicas allocate at the same time.
                    self._valid_until = 0.0
                return False
            if action is Action.CREATE:
                lease = await self.client.create(
                    kube.group_path(GROUP, VERSION, "leases", self.namespace),
                    self._body(None, taking=True),
                )
            else:
                lease = await self.client.replace(
                    self.path, self._body(record, taking=action is Action.TAKE)
                )
        except kube.ApiError as e:
            self.reachable = e.conflict  # a conflict is an answer; anything else is not
            if not e.conflict and str(e) != self._last_error:
                log.warning("lease request failed", extra={"error": str(e)})
            self._last_error = str(e)
            return False
        self._record = record_of(lease)
        self._valid_until = sent + self.renew_deadline
        self._last_error = ""
        return True

    async def acquire(self) -> None:
        """Return once we hold the Lease."""
        waited = False
        while not await self.try_once():
            if not waited:
                log.info(
                    "waiting for the leader lease",
                    extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity},
                )
                waited = True
            await asyncio.sleep(self.retry_every)
        log.info("acquired the leader lease", extra={"identity": self.identity})

    async def keep(self) -> None:
        """Renew until we cannot; return when the Lease is lost (the caller must stop writing)."""
        while True:
            await asyncio.sleep(self.renew_every)
            while not await self.try_once():
                if not self.holding():
                    log.error("lost the leader lease", extra={"identity": self.identity})
                    return
                await asyncio.sleep(min(self.retry_every, self.renew_every / 2))

    async def release(self) -> None:
        """Hand the Lease back so a successor need not wait for it to expire.

        Whenever the Lease still names us, even past our renew deadline (a slow machine): nobody
        else holds it then, and the write's resourceVersion keeps it from undoing anyone's. A
        renewal cut short by the shutdown may have reached the apiserver without its answer being
        read, leaving our version stale: on a conflict the Lease is read again and released
        while it names us."""
        record = self._record
        self._valid_until = 0.0
        for _ in range(RELEASE_ATTEMPTS):
            if record is None or record.holder != self.identity:
                return  # never ours, or someone else's now
            body = self._body(record, taking=False)
            body["spec"]["holderIdentity"] = ""
            body["spec"]["leaseDurationSeconds"] = 1
            try:
                await self.client.replace(self.path, body)
            except kube.ApiError as e:
                if not e.conflict:
                    log.warning("could not release the leader lease", extra={"error": str(e)})
                    return
                try:
                    record = await self._read()
                except kube.ApiError as again:
                    log.warning("could not release the leader lease", extra={"error": str(again)})
                    return
                continue
            log.info("released the leader lease", extra={"identity": self.identity})
            return
        log.warning(
            "could not release the leader lease",
            extra={"error": f"changed under us {RELEASE_ATTEMPTS} times"},
        )
