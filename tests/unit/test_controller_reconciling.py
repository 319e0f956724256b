"""controller.reconciling against an in-memory fake of the API (no network, no processes).

The fake stores objects, applies merge patches, bumps resourceVersions and records every
write, so the tests can say exactly which requests a situation costs.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from controller import reconciling
from ironlb_io import kube

NS = "metallb-system"


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []
        self.versions = itertools.count(100)
        self.fail_next: list[kube.ApiError] = []

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def service(self, name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
        annotations = spec.pop("annotations", {})
        status = spec.pop("status", {})
        obj = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"u-{name}",
                "annotations": annotations,
            },
            "spec": {
                "type": "LoadBalancer",
                "clusterIPs": ["10.96.0.1"],
                "ports": [{"port": 80}],
                **spec,
            },
            "status": status,
        }
        return self.put(kube.core_path("services", ns, name), obj)

    def pool(self, name: str, *addresses: str) -> dict[str, Any]:
        obj = {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"addresses": list(addresses)},
        }
        return self.put(pool_path(name), obj)

    def get_obj(self, path: str) -> dict[str, Any]:
        return self.objects[path]

    # the kube.Client surface the reconciler uses

    async def list(self, path: str, params: Any = None, *, chunk: int = 0) -> tuple[list[Any], str]:
        if path.endswith("/events"):
            items = [e for e in self.events if e["type"] == "Warning"]
        elif path == kube.core_path("namespaces"):
            items = [{"metadata": {"name": "default", "labels": {}}}]
        else:
            prefix = path.split("/")[-1]
            items = [
                copy.deepcopy(o)
                for p, o in self.objects.items()
                if p.split("/")[-2] == prefix
                and (path.count("/namespaces/") == 0 or p.startswith(path))
            ]
        return items, str(next(self.versions))

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch", kube.resource_of(path)))
        if self.fail_next:
            raise self.fail_next.pop(0)
        target = path.removesuffix("/status")
        obj = copy.deepcopy(self.objects[target])
        merge(obj, body)
        return self.put(target, obj)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", kube.resource_of(path)))
        self.events.append(copy.deepcopy(body))
        return body

    def watch(self, path: str, params: Any = None) -> AsyncIterator[dict[str, Any]]:
        raise NotImplementedError  # the reconciler is fed by the test, never by a watch


def pool_path(name: str) -> str:
    return kube.group_path("metallb.io", "v1beta1", "ipaddresspools", NS, name)


def svc_path(name: str, ns: str = "default") -> str:
    return kube.core_path("services", ns, name)


def ingress(api: FakeApi, name: str) -> list[str]:
    entries = (
        (api.get_obj(svc_path(name)).get("status") or {}).get("loadBalancer", {}).get("ingress")
    )
    return [e["ip"] for e in entries or []]


async def until(what: str, probe: Callable[[], bool]) -> None:
    for _ in range(2000):
        if probe():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")


@pytest.fixture
async def running() -> AsyncIterator[Callable[..., Any]]:
    """Start a Reconciler over a FakeApi (after the test filled it); stop it afterwards."""
    tasks: list[asyncio.Task[None]] = []

    async def start(api: FakeApi, **kwargs: Any) -> reconciling.Reconciler:
        r = reconciling.Reconciler(api, namespace=NS, **kwargs)  # type: ignore[arg-type]
        await r.load()
        tasks.append(asyncio.ensure_future(r.run()))
        await asyncio.wait_for(r.ready.wait(), 10)
        return r

    yield start
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_pending_service_gets_status_event_and_pool_status(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    api.service("a")
    await running(api)
    assert ingress(api, "a") == ["10.0.0.0"]
    svc = api.get_obj(svc_path("a"))
    assert svc["metadata"]["annotations"]["metallb.io/ip-allocated-from-pool"] == "p"
    assert [e["reason"] for e in api.events] == ["IPAllocated"]
    pool = api.get_obj(pool_path("p"))
    assert pool["status"] == {
        "assignedIPv4": 1,
        "assignedIPv6": 0,
        "availableIPv4": 3,
        "availableIPv6": 0,
    }
    assert sorted(api.writes) == [
        ("create", "events"),
        ("patch", "ipaddresspools/status"),
        ("patch", "services/status"),
    ]


async def test_settled_state_costs_no_write(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    api.service("a")
    r = await running(api)
    first = list(api.writes)
    r2 = await running(api)  # a second process over what the first one left
    assert api.writes == first
    assert r2.allocator.allocation("default/a") == r.allocator.allocation("default/a")


async def test_holders_keep_their_addresses_on_rebuild(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/31")
    api.service(
        "zz",
        annotations={"metallb.io/ip-allocated-from-pool": "p"},
        status={"loadBalancer": {"ingress": [{"ip": "10.0.0.0"}]}},
    )
    api.service("aa")
    await running(api)
    assert ingress(api, "zz") == ["10.0.0.0"]
    assert ingress(api, "aa") == ["10.0.0.1"]


async def test_stale_and_echoed_events_decide_nothing(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    old = api.service("a")
    r = await running(api)
    writes = len(api.writes)
    r.observe_service("MODIFIED", old)  # older than our PATCH response: ignored
    r.observe_service("MODIFIED", api.get_obj(svc_path("a")))  # our own echo: nothing new
    await asyncio.sleep(0)
    assert not r._dirty
    assert len(api.writes) == writes
    assert ingress(api, "a") == ["10.0.0.0"]


async def test_deletion_frees_the_address_for_a_pending_service(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    api.service("b")
    r = await running(api)
    assert ingress(api, "a") == ["10.0.0.0"] and ingress(api, "b") == []
    assert "default/b" in r.pending
    gone = api.objects.pop(svc_path("a"))
    r.observe_service("DELETED", gone)
    await until("b to get the address", lambda: ingress(api, "b") == ["10.0.0.0"])
    assert not r.pending


async def test_repeated_failures_post_one_event_and_a_restart_posts_none(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    api.service("b")
    r = await running(api)
    failed = [e for e in api.events if e["reason"] == "AllocationFailed"]
    assert len(failed) == 1
    for _ in range(3):  # relabelled: decided again, fails the same way
        obj = api.get_obj(svc_path("b"))
        obj["metadata"].setdefault("labels", {})["n"] = str(len(api.writes))
        r.observe_service("MODIFIED", api.put(svc_path("b"), obj))
        await until("decided", lambda: not r._dirty)
    await asyncio.sleep(0)
    assert [e["reason"] for e in api.events].count("AllocationFailed") == 1
    writes = len(api.writes)
    await running(api)
    assert len(api.writes) == writes


async def test_retryable_write_failures_are_retried(
    running: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciling, "RETRY_S", (0.0,))
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    api.service("a")
    api.fail_next = [kube.ApiError(503, "ServiceUnavailable", "busy")]
    r = await running(api)
    await until("the retried write", lambda: ingress(api, "a") == ["10.0.0.0"])
    assert r.metrics.update_errors._value.get() == 1


async def test_nothing_is_written_without_the_lease_and_nothing_is_lost() -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    api.service("a")
    holding = False
    r = reconciling.Reconciler(api, namespace=NS, may_write=lambda: holding)  # type: ignore[arg-type]
    await r.load()
    task = asyncio.ensure_future(r.run())
    try:
        await until("decided", lambda: bool(r._queue) and not r._dirty)
        await asyncio.sleep(0.2)
        assert api.writes == []
        assert not r.ready.is_set()  # its first round's writes are not done
        # The renewal came late, not never: what was decided meanwhile is written now.
        holding = True
        await asyncio.wait_for(r.ready.wait(), 10)
        assert ingress(api, "a") == ["10.0.0.0"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_invalid_pools_keep_the_last_good_configuration(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    api.service("a")
    r = await running(api)
    bad = api.pool("q", "10.0.0.0/29")  # overlaps p
    r.observe_pool("ADDED", bad)
    api.service("b")
    r.observe_service("ADDED", api.get_obj(svc_path("b")))
    await until("b allocated from the old config", lambda: ingress(api, "b") == ["10.0.0.1"])
    assert r.metrics.config_stale._value.get() == 1
    assert [p.name for p in r.allocator.pools] == ["p"]


async def test_services_of_another_class_are_not_touched(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/30")
    api.service("mine", loadBalancerClass="x.io/lb")
    api.service("theirs")
    await running(api, lb_class="x.io/lb")
    assert ingress(api, "mine") == ["10.0.0.0"]
    assert ingress(api, "theirs") == []
    assert all(e["involvedObject"]["name"] == "mine" for e in api.events)


async def test_pool_removal_clears_and_pool_readdition_reallocates(running: Any) -> None:
    api = FakeApi()
    pool = api.pool("p", "10.0.0.0/30")
    api.service("a")
    r = await running(api)
    del api.objects[pool_path("p")]
    r.observe_pool("DELETED", pool)
    await until("cleared", lambda: ingress(api, "a") == [])
    assert (
        "metallb.io/ip-allocated-from-pool"
        not in api.get_obj(svc_path("a"))["metadata"]["annotations"]
    )
    r.observe_pool("ADDED", api.pool("p2", "10.0.1.0/30"))
    await until("re-allocated", lambda: ingress(api, "a") == ["10.0.1.0"])


async def test_resync_drops_services_the_watch_never_reported_deleted(running: Any) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/32")
    api.service("ghost")
    api.service("waiting")
    r = await running(api)
    assert ingress(api, "ghost") == ["10.0.0.0"]
    del api.objects[svc_path("ghost")]  # deleted, and no DELETED event ever arrives
    await r.resync()
    assert "default/ghost" not in r.services
    await until("the freed address to be reused", lambda: ingress(api, "waiting") == ["10.0.0.0"])


async def test_a_service_that_changes_class_frees_its_address_and_keeps_its_status(
    running: Any,
) -> None:
    api = FakeApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    api.service("b")
    r = await running(api)
    assert ingress(api, "a") == ["10.0.0.0"]
    obj = api.get_obj(svc_path("a"))
    obj["spec"]["loadBalancerClass"] = "someone.else/lb"
    r.observe_service("MODIFIED", api.put(svc_path("a"), obj))
    await until("b to get the freed address", lambda: ingress(api, "b") == ["10.0.0.0"])
    assert "default/a" not in r.services
    assert ingress(api, "a") == ["10.0.0.0"]  # not ours any more: left as it was


class GatedApi(FakeApi):
    """A FakeApi whose status writes wait where the test says: after `hold()`, before they reach
    the store, until `let_one_through()` passes the oldest; while `reply` is clear, after the
    store and before their response returns. It counts how many writes to one object are in
    flight at once and keeps each object as a write left it."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[asyncio.Future[None]] | None = None  # None: writes are not held
        self.reply = asyncio.Event()
        self.reply.set()
        self.in_flight: dict[str, int] = {}
        self.most_in_flight = 0
        self.waiting = 0
        self.results: list[dict[str, Any]] = []

    def hold(self) -> None:
        self.held = []

    def let_one_through(self) -> None:
        assert self.held
        self.held.pop(0).set_result(None)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.in_flight[path] = self.in_flight.get(path, 0) + 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight[path])
        self.waiting += 1
        try:
            if self.held is not None:
                turn = asyncio.get_running_loop().create_future()
                self.held.append(turn)
                await turn
            written = await super().merge_patch(path, body)
            self.results.append(written)
            await self.reply.wait()
        finally:
            self.waiting -= 1
            self.in_flight[path] -= 1
        return copy.deepcopy(written)


def pool_annotation(api: FakeApi, name: str) -> str | None:
    annotations = api.get_obj(svc_path(name))["metadata"].get("annotations") or {}
    return annotations.get("metallb.io/ip-allocated-from-pool")


async def test_a_type_round_trip_with_writes_in_flight_keeps_address_and_pool(
    running: Any,
) -> None:
    """LoadBalancer -> ClusterIP -> LoadBalancer while the first status write is still in flight:
    the Service ends with its address and its pool annotation, no write leaves the address
    without its pool, and no two status writes for it are ever in flight at once."""
    api = GatedApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    r = await running(api)
    assert ingress(api, "a") == ["10.0.0.0"] and pool_annotation(api, "a") == "p"

    api.hold()
    api.results.clear()
    # What the apiserver does when the type leaves LoadBalancer: status.loadBalancer cleared,
    # the annotation kept.
    obj = api.get_obj(svc_path("a"))
    obj["spec"]["type"] = "ClusterIP"
    obj["status"] = {"loadBalancer": {}}
    r.observe_service("MODIFIED", api.put(svc_path("a"), obj))
    await until("the clearing write held", lambda: api.waiting == 1)
    obj = api.get_obj(svc_path("a"))
    obj["spec"]["type"] = "LoadBalancer"
    r.observe_service("MODIFIED", api.put(svc_path("a"), obj))
    for _ in range(200):  # every writer gets its turn while the write is held
        await asyncio.sleep(0)
    while api.held:  # one write at a time, in the order they were sent
        api.let_one_through()
        for _ in range(200):
            await asyncio.sleep(0)
    assert not api.waiting and not r.unconfirmed and not r._queue
    for written in api.results:
        annotations = written["metadata"].get("annotations") or {}
        if (written.get("status") or {}).get("loadBalancer", {}).get("ingress"):
            assert annotations.get("metallb.io/ip-allocated-from-pool") == "p", written
    for _ in range(200):  # and it stays so: no write still to come takes either back
        assert ingress(api, "a") == ["10.0.0.0"] and pool_annotation(api, "a") == "p"
        await asyncio.sleep(0)
    assert api.most_in_flight == 1


async def test_status_replaced_while_our_write_is_in_flight_is_written_again(
    running: Any,
) -> None:
    """Someone else empties status.loadBalancer after our write landed and before its response
    came back, and the watch brings both in one burst: the decision is unchanged and the response
    shows the address, so only a look at the newest view after the write notices it is gone."""
    api = GatedApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    r = await running(api)

    def emptied() -> dict[str, Any]:
        obj = api.get_obj(svc_path("a"))
        obj["status"] = {"loadBalancer": {}}
        return api.put(svc_path("a"), obj)

    api.reply.clear()
    api.results.clear()
    r.observe_service("MODIFIED", emptied())
    await until("our write landed, its response held", lambda: len(api.results) == 1)
    assert ingress(api, "a") == ["10.0.0.0"]
    ours = copy.deepcopy(api.get_obj(svc_path("a")))
    theirs = emptied()
    r.observe_service("MODIFIED", ours)  # the watch: our write, then theirs, before we decide
    r.observe_service("MODIFIED", theirs)
    await until("decided", lambda: not r._dirty)
    api.reply.set()
    await until(
        "the address written back",
        lambda: ingress(api, "a") == ["10.0.0.0"] and not api.waiting and not r.unconfirmed,
    )
    assert pool_annotation(api, "a") == "p"
    assert api.most_in_flight == 1


async def test_a_refused_status_write_is_not_sent_again_until_the_decision_changes(
    running: Any,
) -> None:
    """After a write ends the Service is written again when it does not show the decision, but
    not after a refusal: the same body would be refused again, as fast as the apiserver answers."""
    api = FakeApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    api.fail_next = [kube.ApiError(422, "Invalid", "refused")]
    r = await running(api)
    for _ in range(200):
        await asyncio.sleep(0)
    assert api.writes.count(("patch", "services/status")) == 1
    assert ingress(api, "a") == [] and not r._queue


class RefusingApi(FakeApi):
    """Answers the writes of the first object written of one resource (as `kube.resource_of`
    names it) with errors, in order; every other write goes through."""

    def __init__(self, resource: str, *errors: kube.ApiError) -> None:
        super().__init__()
        self.resource, self.errors = resource, list(errors)
        self.target: tuple[str, str] | None = None

    def _refuse(self, method: str, path: str, body: dict[str, Any]) -> None:
        which = (path, str(body.get("metadata", {}).get("name")))
        if kube.resource_of(path) != self.resource or not self.errors:
            return
        if self.target is None:
            self.target = which
        if which == self.target:
            self.writes.append((method, kube.resource_of(path)))
            raise self.errors.pop(0)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._refuse("patch", path, body)
        return await super().merge_patch(path, body)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._refuse("create", path, body)
        return await super().create(path, body)


@pytest.mark.parametrize(
    ("resource", "final"),
    [
        ("services/status", kube.ApiError(422, "Invalid", "refused")),
        ("events", kube.ApiError(404, "NotFound", "namespace gone")),
    ],
)
async def test_a_write_that_ends_refused_after_retries_forgets_its_attempt_count(
    running: Any, monkeypatch: pytest.MonkeyPatch, resource: str, final: kube.ApiError
) -> None:
    """The retry count of a write kept after its last failure stayed for good: one entry per
    Event name (each is new) or per Service, a slow leak in a long-running controller."""
    monkeypatch.setattr(reconciling, "RETRY_S", (0.0,))
    api = RefusingApi(resource, kube.ApiError(503, "ServiceUnavailable", "busy"), final)
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    api.service("b")  # no address left: an AllocationFailed Event
    r = await running(api)
    await until("both failures answered", lambda: not api.errors)
    await until("the refused write ended", lambda: not r._queue and not r._in_flight)
    assert r._attempts == {}


async def test_a_service_deleted_and_created_again_between_rounds_gets_its_own_events(
    running: Any,
) -> None:
    """Events already posted are remembered per Service to say each once; a new object of the
    same name (another uid) is news, even when its deletion and creation land in one round."""
    api = FakeApi()
    api.pool("p", "10.0.0.0/32")
    api.service("a")
    api.service("b")
    r = await running(api)
    assert [e["reason"] for e in api.events].count("AllocationFailed") == 1
    old = api.get_obj(svc_path("b"))
    r.observe_service("DELETED", old)
    again = copy.deepcopy(old)
    again["metadata"]["uid"] = "u-b-again"
    r.observe_service("ADDED", api.put(svc_path("b"), again))
    await until("decided", lambda: not r._dirty)
    await asyncio.sleep(0)
    failed = [e for e in api.events if e["reason"] == "AllocationFailed"]
    assert [e["involvedObject"]["uid"] for e in failed] == ["u-b", "u-b-again"]
