"""Data-path readiness as a pass sees it: ours, from our probes of kube-proxy (of the Local
Services `local_targets` names), is gossiped through membership; the others' are read from it
(a pass's election weighs them)."""

from __future__ import annotations

from ironlb import datapath
from speaker import datapath_probing, desired
from speaker.planes import Membership


class ReadinessGossip:
    """`membership` None: nothing is gossiped; `prober` None: we probe nothing."""

    def __init__(
        self,
        node_name: str,
        membership: Membership | None,
        prober: datapath_probing.Prober | None,
    ) -> None:
        self.node_name = node_name
        self.membership = membership
        self.prober = prober
        self._published: bytes | None = None  # the readiness last handed to membership

    def readiness(self) -> dict[str, datapath.NodeReadiness]:
        """Every node's data-path verdict: the others' as they gossip it, ours from our probes
        (a node that gossips none, an older speaker, counts as ready)."""
        out: dict[str, datapath.NodeReadiness] = {}
        if self.membership is not None:
            for name, data in self.membership.metadata().items():
                found = datapath.decode(data)
                if found is not None:
                    out[name] = found
        if self.prober is not None:
            out[self.node_name] = self.prober.readiness().as_gossiped()
        return out

    def publish(self) -> None:
        """Hand our probes' verdict to membership, which gossips it when it changed."""
        if self.prober is None or self.membership is None:
            return
        data = self.prober.readiness().encode()
        if data != self._published:
            self._published = data
            self.membership.set_metadata(data)


def local_targets(snap: desired.Snapshot, me: str) -> dict[str, int]:
    """Local Services with a ready endpoint on this node: kube-proxy's healthCheckNodePort
    must agree before they are announced from here. Not those served here only by terminating
    (serving) endpoints: kube-proxy answers 503 for them by design (so that cloud load
    balancers drain the node) while it still forwards to them when nothing is ready anywhere;
    MetalLB keeps announcing then, and so do we, on the EndpointSlices alone."""
    return {
        s.key: s.health_check_node_port
        for s in snap.services
        if s.local
        and s.ips
        and s.health_check_node_port is not None
        and any(e.ready and e.node == me for e in s.endpoints)
    }
