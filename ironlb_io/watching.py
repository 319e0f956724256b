"""List, then watch from the list's resourceVersion, as client-go's reflector does: how the
speaker gets its inputs.

Watching from the list's resourceVersion means a start-up costs one LIST per kind and no replay:
an operator framework that lists again and hands every object over as an event would cost every
speaker a pass over 10,000 Services for nothing. A watch the server ends is resumed from the last
resourceVersion seen (bookmarks keep it fresh on quiet kinds); one the server can no longer
resume (410 Gone) is replaced by a new LIST whose result replaces the kind's objects whole, so a
deletion missed in between cannot survive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ironlb import services
from ironlb_io import kube

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 290  # the server ends each watch after this; a new one resumes where it stopped
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0

Observe = Callable[[str, str, Mapping[str, Any]], None]  # kind, ADDED/MODIFIED/DELETED, object
Replace = Callable[[str, list[Mapping[str, Any]]], None]  # kind, every object after a relist


@dataclass(frozen=True, slots=True)
class Source:
    """One collection to list and watch. `params` narrows it (a label selector); `keep`, if
    given, is applied to each listed item as its page arrives, so that a LIST of 10,000 full
    objects is never held at once when only a slim copy of each is kept (the heap a whole
    LIST leaves behind is not given back to the system)."""

    kind: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    keep: Callable[[Mapping[str, Any]], dict[str, Any]] | None = field(default=None, compare=False)


class Gone(Exception):
    """The server cannot resume from our resourceVersion any more."""


async def list_kind(client: kube.Client, source: Source) -> tuple[list[Mapping[str, Any]], str]:
    def kept(item: dict[str, Any]) -> dict[str, Any]:
        typed = {**item, "kind": item.get("kind") or source.kind}
        return typed if source.keep is None else source.keep(typed)

    items, version = await client.list(source.path, dict(source.params), keep=kept)
    out: list[Mapping[str, Any]] = list(items)
    return out, version


async def follow(
    client: kube.Client,
    source: Source,
    version: str,
    observe: Observe,
    replace: Replace,
) -> None:
    """Forever: watch `source` from `version`, feeding `observe`; relist on 410 Gone."""
    delay = RETRY_FIRST_S
    cursor = [version]  # advanced by every event, also by those of a watch that then fails
    while True:
        try:
            await _watch_once(client, source, cursor, observe)
            delay = RETRY_FIRST_S
            continue
        except Gone:
            log.info("watch expired; listing again", extra={"kind": source.kind})
        except kube.ApiError as e:
            if e.status != 410:
                log.warning(
                    "watch failed; will resume",
                    extra={"kind": source.kind, "error": str(e), "retry_s": delay},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
        try:
            items, cursor[0] = await list_kind(client, source)
        except kube.ApiError as e:
            log.warning("list failed; will retry", extra={"kind": source.kind, "error": str(e)})
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            # The old resourceVersion is gone; the next attempt must list again.
            cursor[0] = ""
            continue
        replace(source.kind, items)
        delay = RETRY_FIRST_S


async def _watch_once(
    client: kube.Client, source: Source, cursor: list[str], observe: Observe
) -> None:
    """One watch request, from and advancing `cursor[0]`, until the server ends it."""
    if not cursor[0]:
        raise Gone()
    params = {
        **dict(source.params),
        "resourceVersion": cursor[0],
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(WATCH_TIMEOUT_S),
    }
    async for event in client.watch(source.path, params):
        kind = event.get("type")
        obj = event.get("object")
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, Mapping) else None
            if code == 410:
                raise Gone()
            raise kube.ApiError(int(code or 0), "WatchError", str(obj))
        if not isinstance(obj, dict):
            continue
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("kind", source.kind)
            observe(source.kind, kind, obj)
        cursor[0] = services.resource_version(obj) or cursor[0]
