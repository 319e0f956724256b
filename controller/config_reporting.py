"""The loop behind `config_report`: read every metallb.io object, write verdicts back.

Level-triggered and periodic: each round LISTs the configuration kinds and the Secret names in
the MetalLB namespace, parses and validates them together, and writes only the conditions that
differ plus one Warning Event per newly found problem. Nothing depends on having seen an event,
so a restarted controller converges on the same statuses without writing anything new.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from controller import config_report
from ironlb import configuration_state, events, honouring, model, parsing, validation
from ironlb_io import configuration_states, kube

log = logging.getLogger(__name__)

INTERVAL_S = 5.0
COMPONENT = "metallb-controller"


class Reporter:
    def __init__(
        self,
        client: kube.Client,
        namespace: str,
        instance: str,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.instance = instance
        self.may_write = may_write
        self.state = configuration_states.Writer(client, namespace, configuration_state.CONTROLLER)

    def _path(self, kind: str, name: str | None = None) -> str:
        plural, versions = model.RESOURCES[kind]
        return kube.group_path(model.GROUP, versions[-1], plural, self.namespace, name)

    async def round(self) -> int:
        """One check of the whole configuration; returns the number of writes made."""
        objects: dict[str, list[dict[str, Any]]] = {}
        for kind in model.CONFIG_KINDS:
            items, _ = await self.client.list(self._path(kind))
            objects[kind] = items
        secret_items, _ = await self.client.list(
            kube.core_path("secrets", self.namespace), metadata_only=True
        )
        raw: dict[str, list[Any]] = {k: list(v) for k, v in objects.items()}
        raw[model.SECRET] = [{"metadata": {"name": s["metadata"]["name"]}} for s in secret_items]
        config, problems = parsing.parse_config(raw)
        found = validation.order([*problems, *validation.validate(config)])
        keys = [
            (kind, str((o.get("metadata") or {}).get("name")))
            for kind, items in objects.items()
            for o in items
        ]
        verdicts = config_report.verdicts(keys, found, honouring.not_honoured(config))
        writes = 0
        if self.may_write():
            # The ConfigurationState `controller`, read again each round (a GET beside the
            # LISTs above) so that a deleted or edited one is put back; written only on change.
            before = self.state.writes
            await self.state.sync(config_report.controller_problems(objects), refresh=True)
            writes += self.state.writes - before
        now = kube.timestamp()
        for kind, items in objects.items():
            for obj in items:
                name = str((obj.get("metadata") or {}).get("name"))
                verdict = verdicts[(kind, name)]
                patch = config_report.condition_patch(obj, verdict, now)
                if patch is None or not self.may_write():
                    continue
                warn = config_report.needs_event(obj, verdict)
                try:
                    await self.client.merge_patch(self._path(kind, name) + "/status", patch)
                    writes += 1
                    if warn:
                        await self._warn(kind, obj, verdict)
                        writes += 1
                except kube.ApiError as e:
                    if not e.not_found:
                        log.warning(
                            "could not report a configuration problem",
                            extra={"object": f"{kind}/{name}", "error": str(e)},
                        )
                if verdict.status == "False":
                    log.warning(
                        "configuration problem",
                        extra={
                            "object": f"{kind}/{name}",
                            "reason": verdict.reason,
                            "problem": verdict.message,
                        },
                    )
        return writes

    async def _warn(
        self, kind: str, obj: Mapping[str, Any], verdict: config_report.Verdict
    ) -> None:
        version = model.RESOURCES[kind][1][-1]
        body = events.body(
            events.involved(obj, f"{model.GROUP}/{version}", kind),
            type="Warning",
            reason=config_report.event_reason(verdict),
            message=verdict.message,
            component=COMPONENT,
            instance=self.instance,
            now=kube.timestamp(),
            name_suffix=secrets.token_hex(8),
        )
        await self.client.create(kube.core_path("events", self.namespace), body)

    async def run_forever(self, interval: float = INTERVAL_S) -> None:
        while True:
            try:
                await self.round()
            except kube.ApiError as e:
                log.warning("configuration check failed; will retry", extra={"error": str(e)})
            await asyncio.sleep(interval)
