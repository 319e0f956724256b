"""ironlb_io.watching against the real apiserver: list, watch from the list's version, resume
after the server ends a watch. (An expired version, 410 Gone, cannot be provoked here: the
apiserver's watch cache answers old versions with the current state; the relist on 410 is
covered by tests/unit/test_speaker_watching.py with a scripted server.)"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from ironlb_io import kube, watching

pytestmark = pytest.mark.integration

WAIT_S = 20.0


ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.relists: list[list[str]] = []
        self.changed = asyncio.Event()

    def observe(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        # kube-controller-manager's root-CA publisher puts this ConfigMap in every new
        # namespace, whenever it gets there; the tests watch only their own objects.
        if obj["metadata"]["name"] == ROOT_CA_CONFIG_MAP:
            return
        self.events.append((kind, event, obj["metadata"]["name"]))
        self.changed.set()

    def replace(self, kind: str, items: list[Mapping[str, Any]]) -> None:
        self.relists.append(sorted(i["metadata"]["name"] for i in items))
        self.changed.set()

    async def until(self, check: Any) -> None:
        async def wait() -> None:
            while not check():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), WAIT_S)


def config_map(name: str, value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"v": value}}


def run(kubeconfig: str, scenario: Any) -> None:
    async def go() -> None:
        async with kube.Client(kube.load(kubeconfig)) as client:
            await scenario(client)

    asyncio.run(go())


def test_events_after_the_list_arrive_in_order_and_nothing_listed_is_replayed(
    kubeconfig: str, test_namespace: str
) -> None:
    path = kube.core_path("configmaps", test_namespace)
    source = watching.Source("ConfigMap", path)

    async def scenario(client: kube.Client) -> None:
        await client.create(path, config_map("before"))
        items, version = await watching.list_kind(client, source)
        assert "before" in {i["metadata"]["name"] for i in items}
        assert all(i["kind"] == "ConfigMap" for i in items)
        seen = Recorder()
        task = asyncio.create_task(
            watching.follow(client, source, version, seen.observe, seen.replace)
        )
        try:
            await client.create(path, config_map("after"))
            await client.merge_patch(f"{path}/after", {"data": {"v": "2"}})
            await client.delete(f"{path}/after")
            await seen.until(lambda: len(seen.events) >= 3)
            assert seen.events == [
                ("ConfigMap", "ADDED", "after"),
                ("ConfigMap", "MODIFIED", "after"),
                ("ConfigMap", "DELETED", "after"),
            ]
            assert seen.relists == []
        finally:
            task.cancel()

    run(kubeconfig, scenario)


def test_a_watch_the_server_ends_is_resumed_without_a_relist(
    kubeconfig: str, test_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watching, "WATCH_TIMEOUT_S", 1)
    path = kube.core_path("configmaps", test_namespace)
    source = watching.Source("ConfigMap", path)

    async def scenario(client: kube.Client) -> None:
        _, version = await watching.list_kind(client, source)
        seen = Recorder()
        task = asyncio.create_task(
            watching.follow(client, source, version, seen.observe, seen.replace)
        )
        try:
            for i in range(3):
                await asyncio.sleep(1.5)  # longer than one watch request lives
                await client.create(path, config_map(f"late-{i}"))
            await seen.until(lambda: len(seen.events) >= 3)
            assert [e[2] for e in seen.events] == ["late-0", "late-1", "late-2"]
            assert seen.relists == []
        finally:
            task.cancel()

    run(kubeconfig, scenario)


def test_a_metadata_only_list_carries_names_and_no_secret_data(
    kubeconfig: str, test_namespace: str
) -> None:
    """The controller needs Secrets' names only (dangling references); their data must not
    travel (PartialObjectMetadataList), page after page."""
    path = kube.core_path("secrets", test_namespace)

    async def scenario(client: kube.Client) -> None:
        for i in range(3):
            await client.create(
                path, {"metadata": {"name": f"s{i}"}, "stringData": {"password": "hunter2"}}
            )
        full, _ = await client.list(path)
        assert all("data" in s for s in full if s["metadata"]["name"].startswith("s"))
        items, version = await client.list(path, chunk=2, metadata_only=True)
        assert version
        assert {"s0", "s1", "s2"} <= {i["metadata"]["name"] for i in items}
        for item in items:
            assert item.get("kind") == "PartialObjectMetadata", item
            assert "data" not in item and "stringData" not in item, item

    run(kubeconfig, scenario)
