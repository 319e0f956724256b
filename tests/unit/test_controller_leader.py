"""controller.leader: the Lease rules, on a fake clock and a fake API (no sleeps, no network)."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from controller import leader
from ironlb_io import kube

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def record(holder: str, duration: int = 10, renew: str = "t1") -> leader.Record:
    return leader.Record(holder, duration, 0, renew, "1")


@pytest.mark.parametrize(
    ("rec", "since", "now", "action"),
    [
        (None, 0.0, 0.0, leader.Action.CREATE),
        (record("me"), 0.0, 100.0, leader.Action.RENEW),
        (record(""), 0.0, 0.0, leader.Action.TAKE),  # released
        (record("other"), 0.0, 9.9, leader.Action.WAIT),
        (record("other"), 0.0, 10.0, leader.Action.TAKE),  # unchanged for a whole duration
        (record("other", duration=1), 5.0, 5.5, leader.Action.WAIT),
    ],
)
def test_decide(rec: leader.Record | None, since: float, now: float, action: leader.Action) -> None:
    assert leader.decide(rec, "me", since, now) is action


def test_record_of_a_lease() -> None:
    lease = {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "leaseTransitions": 2,
            "renewTime": "2026-01-01T00:00:00.000000Z",
        },
    }
    assert leader.record_of(lease) == leader.Record("a", 15, 2, "2026-01-01T00:00:00.000000Z", "7")
    assert leader.record_of({}) == leader.Record("", 0, 0, "", "")


def test_micro_time_is_rfc3339_utc_with_microseconds() -> None:
    assert leader.micro_time(NOW) == "2026-01-01T00:00:00.000000Z"


class FakeApi:
    """One Lease with resourceVersion checks, like the apiserver's optimistic concurrency."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.fail: kube.ApiError | None = None

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.lease = stored
        return copy.deepcopy(stored)

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if self.fail:
            raise self.fail
        if self.lease is None:
            raise kube.ApiError(404, "NotFound", "no lease")
        return copy.deepcopy(self.lease)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.lease is not None:
            raise kube.ApiError(409, "AlreadyExists", "exists")
        return self._stored(body)

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail:
            raise self.fail
        assert self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise kube.ApiError(409, "Conflict", "changed")
        return self._stored(body)

    def renew_as(self, holder: str) -> None:
        """Someone else writes the Lease (a live leader renewing)."""
        assert self.lease is not None
        self.lease["spec"]["holderIdentity"] = holder
        self.lease["spec"]["renewTime"] = f"t{self.version}"
        self.version += 1
        self.lease["metadata"]["resourceVersion"] = str(self.version)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def elector(api: FakeApi, clock: Clock, me: str = "me", duration: int = 9) -> leader.Elector:
    return leader.Elector(
        api,  # type: ignore[arg-type]
        "ns",
        "lease",
        me,
        duration,
        clock=clock,
        wall=lambda: NOW,
    )


async def test_first_replica_creates_the_lease_and_holds_it_until_the_deadline() -> None:
    api, clock = FakeApi(), Clock()
    e = elector(api, clock)
    assert await e.try_once()
    assert api.lease is not None
    spec = api.lease["spec"]
    assert spec["holderIdentity"] == "me" and spec["leaseDurationSeconds"] == 9
    assert spec["acquireTime"] == spec["renewTime"] == "2026-01-01T00:00:00.000000Z"
    assert e.holding()
    clock.now += 5.9  # renew deadline is two thirds of the duration: 6 s
    assert e.holding()
    clock.now += 0.2
    assert not e.holding()


async def test_a_second_replica_waits_while_the_leader_renews() -> None:
    api, clock = FakeApi(), Clock()
    assert await elector(api, clock, "leader").try_once()
    standby = elector(api, clock, "standby")
    for _ in range(5):
        assert not await standby.try_once()
        clock.now += 5
        api.renew_as("leader")
    assert not standby.holding()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "leader"


async def test_a_dead_leaders_lease_is_taken_after_a_whole_duration_unchanged() -> None:
    api, clock = FakeApi(), Clock()
    assert await elector(api, clock, "dead").try_once()
    standby = elector(api, clock, "standby")
    assert not await standby.try_once()  # first sight starts our own count
    clock.now += 8.9
    assert not await standby.try_once()
    clock.now += 0.2
    assert await standby.try_once()
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == "standby"
    assert api.lease["spec"]["leaseTransitions"] == 1


async def test_release_lets_a_successor_in_at_once() -> None:
    api, clock = FakeApi(), Clock()
    first = elector(api, clock, "first")
    assert await first.try_once()
    await first.release()
    assert not first.holding()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == ""
    assert await elector(api, clock, "second").try_once()


async def test_release_after_a_renewal_whose_answer_was_lost_still_releases() -> None:
    """A renewal cut short by the shutdown may have reached the apiserver although its answer
    was never read: our resourceVersion is then stale. The release reads the Lease again and
    releases it while it names us (a clean-clone run's stopped controller kept it)."""
    api, clock = FakeApi(), Clock()
    e = elector(api, clock)
    assert await e.try_once()
    api.renew_as("me")  # our renewal, landed; its answer lost to the cancellation
    await e.release()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == ""


async def test_release_after_the_renew_deadline_still_releases_a_lease_that_names_us() -> None:
    """A slow machine: the last renewal is older than the deadline when the process stops.
    Nobody else holds the Lease (it still names us), so handing it back is safe and spares a
    successor the wait."""
    api, clock = FakeApi(), Clock()
    e = elector(api, clock)
    assert await e.try_once()
    clock.now += 7  # past the 6 s deadline, within the 9 s duration
    assert not e.holding()
    await e.release()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == ""


async def test_release_never_takes_a_lease_someone_else_holds() -> None:
    api, clock = FakeApi(), Clock()
    e = elector(api, clock)
    assert await e.try_once()
    api.renew_as("successor")
    await e.release()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "successor"


async def test_renewal_failures_end_leadership_at_the_deadline() -> None:
    api, clock = FakeApi(), Clock()
    e = elector(api, clock)
    assert await e.try_once()
    api.fail = kube.ApiError(0, "Unavailable", "down")
    clock.now += 3
    assert not await e.try_once()
    assert e.holding()  # the last success still counts until its deadline
    clock.now += 3.1
    assert not e.holding()


async def test_losing_the_lease_to_someone_else_is_noticed() -> None:
    api, clock = FakeApi(), Clock()
    e = elector(api, clock)
    assert await e.try_once()
    api.renew_as("usurper")
    assert not await e.try_once()
    # At once, not at the deadline of our last renewal: the other holder may be writing.
    assert not e.holding()
    clock.now += 7
    assert not e.holding()


def test_duration_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        elector(FakeApi(), Clock(), duration=0)


async def test_reachable_says_whether_the_apiserver_answered_the_last_look() -> None:
    api, clock = FakeApi(), Clock()
    assert await elector(api, clock, "leader").try_once()
    standby = elector(api, clock, "standby")
    assert not standby.reachable  # nothing asked yet
    assert not await standby.try_once()
    assert standby.reachable  # it read the Lease: a healthy standby
    api.fail = kube.ApiError(0, "Unavailable", "down")
    assert not await standby.try_once()
    assert not standby.reachable
