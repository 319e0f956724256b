"""ironlb_io.watching's recovery rules with a scripted server (the real apiserver cannot be made
to expire a version on demand: its watch cache answers old versions with the current state).

A 410, in the response or as an ERROR event in the stream, must be followed by a LIST whose
result replaces the kind's objects; any other failure resumes the watch from the last version
seen, after a pause."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from ironlb_io import kube, watching

SOURCE = watching.Source("Service", "/api/v1/services")


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "a", "resourceVersion": version}}


class Script:
    """Each watch call plays the next scripted stream; lists answer from `lists`."""

    def __init__(self, streams: list[list[Any]], lists: list[tuple[list[Any], str]]) -> None:
        self.streams = streams
        self.lists = lists
        self.watched_from: list[str] = []
        self.watched_with: list[dict[str, str]] = []
        self.listed_with: list[dict[str, str]] = []
        self.done = asyncio.Event()

    async def list(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        keep: Callable[[Any], Any] | None = None,
    ) -> tuple[list[Any], str]:
        self.listed_with.append(dict(params or {}))
        items, version = self.lists.pop(0)
        return [item if keep is None else keep(item) for item in items], version

    async def watch(self, path: str, params: Mapping[str, str]) -> AsyncIterator[Any]:
        self.watched_from.append(params["resourceVersion"])
        self.watched_with.append(dict(params))
        if not self.streams:
            self.done.set()
            await asyncio.Event().wait()
        for item in self.streams.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


def play(
    script: Script, source: watching.Source = SOURCE
) -> tuple[list[tuple[str, str]], list[list[str]]]:
    seen: list[tuple[str, str]] = []
    relists: list[list[str]] = []

    async def main() -> None:
        task = asyncio.create_task(
            watching.follow(
                script,  # type: ignore[arg-type]
                source,
                "10",
                lambda kind, event, o: seen.append((event, o["metadata"]["name"])),
                lambda kind, items: relists.append([i["metadata"]["name"] for i in items]),
            )
        )
        await asyncio.wait_for(script.done.wait(), 10)
        task.cancel()

    asyncio.run(main())
    return seen, relists


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watching, "RETRY_FIRST_S", 0.01)


def test_an_ended_watch_resumes_from_the_last_version_seen() -> None:
    script = Script([[{"type": "ADDED", "object": obj("x", "11")}], []], [])
    seen, relists = play(script)
    assert seen == [("ADDED", "x")] and relists == []
    assert script.watched_from == ["10", "11", "11"]


def test_bookmarks_move_the_version_without_an_event() -> None:
    script = Script([[{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50"}}}]], [])
    seen, _ = play(script)
    assert seen == [] and script.watched_from == ["10", "50"]


def test_410_in_the_stream_relists_and_watches_from_the_new_version() -> None:
    script = Script(
        [[{"type": "ERROR", "object": {"kind": "Status", "code": 410}}]],
        [([obj("kept", "90")], "100")],
    )
    seen, relists = play(script)
    assert relists == [["kept"]] and seen == []
    assert script.watched_from == ["10", "100"]


def test_410_as_a_response_relists_too() -> None:
    script = Script([[kube.ApiError(410, "Expired", "too old")]], [([], "7")])
    _, relists = play(script)
    assert relists == [[]] and script.watched_from == ["10", "7"]


def test_other_failures_resume_from_the_same_version_after_a_pause() -> None:
    script = Script(
        [
            [{"type": "ADDED", "object": obj("x", "12")}, kube.ApiError(0, "Unavailable", "x")],
            [{"type": "ERROR", "object": {"code": 500}}],
        ],
        [],
    )
    seen, relists = play(script)
    assert seen == [("ADDED", "x")] and relists == []
    assert script.watched_from == ["10", "12", "12"]


def test_a_narrowed_source_lists_and_watches_with_its_selector_and_keeps_slim_copies() -> None:
    def slim(item: Any) -> dict[str, Any]:
        return {"kind": item["kind"], "metadata": {"name": item["metadata"]["name"] + "-slim"}}

    source = watching.Source("Service", "/api/v1/services", (("labelSelector", "a=b"),), keep=slim)
    script = Script(
        [[{"type": "ERROR", "object": {"kind": "Status", "code": 410}}]],
        [([obj("kept", "90")], "100")],
    )
    _, relists = play(script, source)
    # The relist hands over what `keep` made of each item, typed with the source's kind.
    assert relists == [["kept-slim"]]
    assert script.listed_with == [{"labelSelector": "a=b"}]
    assert all(params["labelSelector"] == "a=b" for params in script.watched_with)
    assert script.watched_from == ["10", "100"]
