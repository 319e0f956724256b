"""speaker.appliers.BGPApplier: routes are handed over before the sessions, once per plan; the
agent hands them over before its layer 2 work only while this node serves BGP."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ironlb import model
from ironlb_io import prometheus
from speaker import agent, appliers, desired


class RecordingSpeaker:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.routes: list[Mapping[str, Any]] = []

    def set_routes(self, wanted: Mapping[str, Any], complete: bool = True) -> None:
        self.calls.append("routes")
        self.routes.append(wanted)

    async def set_peers(self, sessions: Any, handing_over: bool = False) -> list[Any]:
        self.calls.append("peers")
        return []

    async def handed_over(self, timeout: float) -> None:
        self.calls.append("handed over")


PEER = model.BGPPeer(
    name=model.PeerName("tor"),
    my_asn=64512,
    peer_asn=64500,
    peer_address=ipaddress.ip_address("10.250.0.1"),
)
AD = model.BGPAdvertisement(name=model.BGPAdvertisementName("ad"))
CONFIG = model.Config(bgp_peers=(PEER,), bgp_advertisements=(AD,))
NODE = desired.Node("node1", internal_ips=("10.250.0.11",))


def plan(*addresses: str) -> desired.BGPPlan:
    return desired.BGPPlan(
        tuple(
            desired.BGPService(f"ns/s{i}", (ipaddress.ip_address(a),), (AD,))
            for i, a in enumerate(addresses)
        )
    )


async def test_routes_go_first_and_a_plan_is_rendered_once() -> None:
    applier = appliers.BGPApplier("node1", prometheus.Registry())
    recording = RecordingSpeaker()
    applier.speaker = recording  # type: ignore[assignment]
    first = plan("10.0.0.1", "10.0.0.2")
    applier.announce(CONFIG, NODE, first, {})
    await applier.handed_over(0.02)
    assert recording.calls == ["routes", "handed over"]
    reached = await applier.apply(CONFIG, NODE, first, {})
    # The routes announced first are the pass's: not computed and handed over again.
    assert recording.calls == ["routes", "handed over", "peers", "handed over"]
    assert reached == {"ns/s0": ("tor",), "ns/s1": ("tor",)}
    (routes,) = recording.routes
    assert sorted(str(p) for p in routes["tor"]) == ["10.0.0.1/32", "10.0.0.2/32"]
    # Without an announce of its plan first, apply announces itself, routes still first.
    recording.calls.clear()
    await applier.apply(CONFIG, NODE, plan("10.0.0.3"), {})
    assert recording.calls == ["routes", "peers", "handed over"]
    assert sorted(str(p) for p in recording.routes[-1]["tor"]) == ["10.0.0.3/32"]
    # An announce whose plan is not the one applied is not taken for it.
    recording.calls.clear()
    applier.announce(CONFIG, NODE, plan("10.0.0.4"), {})
    await applier.apply(CONFIG, NODE, plan("10.0.0.5"), {})
    assert recording.calls == ["routes", "routes", "peers", "handed over"]
    assert sorted(str(p) for p in recording.routes[-1]["tor"]) == ["10.0.0.5/32"]


class RecordingBGP:
    """The agent's BGP data plane, recording what a pass asks of it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []  # (call, handing_over for apply)
        self.problems: tuple[Any, ...] = ()

    def announce(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("announce", False))

    async def handed_over(self, timeout: float) -> None:
        self.calls.append(("handed over", False))

    async def apply(self, *args: Any, handing_over: bool = False, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("apply", handing_over))
        return {}

    async def wait_synced(self, timeout: float) -> bool:
        return True


class QuietClient:
    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body


def predecessor(ready: bool) -> dict[str, Any]:
    """The other load balancer's speaker Pod on this node."""
    return {
        "kind": "Pod",
        "metadata": {"name": "metallb-speaker-x", "namespace": "metallb-system"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


async def test_routes_go_early_only_while_this_node_serves_bgp() -> None:
    bgp = RecordingBGP()
    options = agent.Options(node_name="node1", take_over_from="metallb-speaker")
    a = agent.Agent(options, QuietClient(), bgp=bgp)  # type: ignore[arg-type]
    a.status_writer.quiet.set()
    # Serving: the routes are handed over before the layer 2 work, then the sessions.
    await a.reconcile_once()
    assert bgp.calls == [("announce", False), ("handed over", False), ("apply", False)]
    # The other speaker serves (or starts): our sessions end as for a restart, and nothing may
    # take up the empty route set before they do (the runners would withdraw every route a
    # graceful-restart peer is to keep): no early hand-over.
    for ready in (True, False):
        bgp.calls.clear()
        a.store.put("Pod", None, predecessor(ready))
        await a.reconcile_once()
        assert bgp.calls == [("apply", True)], ready
