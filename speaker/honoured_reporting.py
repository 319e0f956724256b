"""What this node does not honour: our `Honoured` condition, from the configuration's findings
(`ironlb.honouring`) and this node's own (such as a password Secret too long for TCP MD5); each
of this node's own gets one Warning Event on the object it is about when it appears, not on
every pass (the controller posts the configuration's findings, once for every node)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ironlb import configuration_state, honouring, model
from ironlb.problems import Problem
from speaker import snapshot
from speaker.event_posting import EventPoster, event_body
from speaker.state_writing import ConfigurationStateWriter

log = logging.getLogger(__name__)


class HonouredReporter:
    def __init__(
        self,
        node_name: str,
        store: snapshot.Store,
        poster: EventPoster,
        state: ConfigurationStateWriter,
    ) -> None:
        self.node_name = node_name
        self.store = store
        self.poster = poster
        self.state = state
        # The configuration's findings (worked out again only when the configuration is a new
        # one), and this node's own reported so far.
        self._findings_of: model.Config | None = None
        self._findings: list[Problem] = []
        self._own_findings: frozenset[Problem] = frozenset()

    def judge(
        self, config: model.Config, bgp_problems: Sequence[Problem], problems: Sequence[Problem]
    ) -> None:
        """After a pass: `bgp_problems` are what the BGP plane could not honour on this node,
        `problems` the pass's configuration problems."""
        if config is not self._findings_of:
            self._findings_of = config
            found = honouring.not_honoured(config)
            if found != self._findings:
                for p in found:
                    log.warning("configuration not honoured", extra={"problem": str(p)})
            self._findings = found
        findings = honouring.on_node(self._findings, bgp_problems, problems)
        configured = set(self._findings)
        mine = frozenset(p for p in findings if p not in configured)
        for p in sorted(mine - self._own_findings, key=str):
            self._post_not_honoured(p)
        self._own_findings = mine
        verdict = configuration_state.honoured(findings)
        if verdict != self.state.honoured:
            self.state.honoured = verdict
            self.state.dirty.set()

    def _post_not_honoured(self, finding: Problem) -> None:
        if finding.kind not in model.CONFIG_KINDS:
            return
        about = next(
            (
                o
                for o in self.store.config.get(finding.kind, {}).values()
                if (o.get("metadata") or {}).get("name") == finding.name
            ),
            None,
        )
        if about is None:
            return
        where = f"{finding.field}: " if finding.field else ""
        self.poster.post_soon(
            event_body(
                about,
                configuration_state.REASON_NOT_HONOURED,
                f'on node "{self.node_name}": {where}{finding.message}',
                self.node_name,
                kind=finding.kind,
                api_version=f"{model.GROUP}/{model.RESOURCES[finding.kind][1][-1]}",
                warning=True,
            )
        )
