"""This node's data-path verdict as the latest pass saw it: our DataPathReady condition on
`speaker-<node>`, and an Event on our Node when it flips."""

from __future__ import annotations

from ironlb import configuration_state, datapath
from speaker import datapath_probing, desired
from speaker.event_posting import EventPoster
from speaker.state_writing import ConfigurationStateWriter


class DataPathReporter:
    """`prober` None: kube-proxy is not checked (the EndpointSlices decide)."""

    def __init__(
        self,
        node_name: str,
        prober: datapath_probing.Prober | None,
        poster: EventPoster,
        state: ConfigurationStateWriter,
    ) -> None:
        self.node_name = node_name
        self.prober = prober
        self.poster = poster
        self.state = state

    def judge(self, snap: desired.Snapshot) -> configuration_state.Verdict:
        """This node's verdict for the DataPathReady condition (and an Event when it flips)."""
        verdict = self._verdict(snap)
        before = self.state.datapath
        self.state.datapath = verdict
        if before is None or before.status != verdict.status or before.reason != verdict.reason:
            self.state.dirty.set()
            if before is not None:
                self.poster.post_node_event(
                    "DataPathReady" if verdict.status == "True" else "DataPathNotReady",
                    f"{verdict.reason}: {verdict.message}",
                    warning=verdict.status != "True",
                )
        return verdict

    def _verdict(self, snap: desired.Snapshot) -> configuration_state.Verdict:
        node = snap.nodes.get(self.node_name)
        if node is not None and node.drain is not None:
            return configuration_state.Verdict("False", node.drain.reason, node.drain.message)
        if self.prober is None or self.prober.check == datapath.Check.ENDPOINTS:
            return configuration_state.Verdict(
                "True", "EndpointsOnly", "kube-proxy is not checked: EndpointSlices decide"
            )
        if not self.prober.proxy_ready:
            return configuration_state.Verdict(
                "False", datapath.Reason.KUBE_PROXY_NOT_READY, self.prober.message
            )
        return configuration_state.Verdict("True", "Ready", self.prober.message)
