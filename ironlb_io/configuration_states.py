"""Writes one ConfigurationState (`ironlb.configuration_state` decides what it says).

The controller and each speaker own one object each. The writer remembers the object as the
server last returned it and writes only when the status it wants differs, so a component that
checks its configuration every few seconds writes nothing while nothing changes. `refresh`
reads the object again first: someone may have deleted or edited it (it is then put back, as
MetalLB's reconciler does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ironlb import configuration_state, model
from ironlb.problems import Problem
from ironlb_io import kube

log = logging.getLogger(__name__)


class Writer:
    def __init__(
        self,
        client: kube.Client,
        namespace: str,
        component: configuration_state.Component,
        now: Callable[[], str] = kube.timestamp,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.component = component
        self.now = now
        plural, versions = model.RESOURCES[model.CONFIGURATION_STATE]
        self._collection = kube.group_path(model.GROUP, versions[-1], plural, namespace)
        self._path = f"{self._collection}/{component.name}"
        self._current: Mapping[str, Any] | None = None
        self._known = False  # whether _current is what the server holds, as far as we know
        self._failure = ""  # the last failure logged, so a lasting one is logged once
        self.writes = 0

    async def sync(
        self,
        problems: Iterable[Problem],
        *,
        refresh: bool = False,
        extra: Mapping[str, configuration_state.Verdict] | None = None,
    ) -> bool:
        """Make the object say what `problems` mean (and the `extra` conditions of ours);
        True once it does (written or already so)."""
        found = list(problems)
        try:
            if refresh or not self._known:
                self._current = await self._get()
                self._known = True
            patch = configuration_state.status_patch(
                self.component, found, self._current, self.now(), extra
            )
            if patch is None:
                return self._succeeded()
            if self._current is None:
                self._current = await self._create()
                patch = configuration_state.status_patch(
                    self.component, found, self._current, self.now(), extra
                )
                if patch is None:
                    return self._succeeded()
            self._current = await self.client.merge_patch(f"{self._path}/status", patch)
            self.writes += 1
            return self._succeeded()
        except kube.ApiError as e:
            self._known = False
            if str(e) != self._failure:
                self._failure = str(e)
                log.warning(
                    "could not write the ConfigurationState",
                    extra={"object": self.component.name, "error": str(e)},
                )
            return False

    def _succeeded(self) -> bool:
        self._failure = ""
        return True

    async def _get(self) -> Mapping[str, Any] | None:
        try:
            return await self.client.get(self._path)
        except kube.ApiError as e:
            if e.not_found:
                return None
            raise

    async def _create(self) -> Mapping[str, Any] | None:
        try:
            created = await self.client.create(
                self._collection, configuration_state.body(self.component, self.namespace)
            )
            self.writes += 1
            return created
        except kube.ApiError as e:
            if e.conflict:  # created meanwhile (by our previous self): take it as it is
                return await self._get()
            raise
