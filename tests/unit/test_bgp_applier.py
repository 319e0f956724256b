"""speaker.appliers.BGPApplier: routes are handed over before the sessions, once per plan."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from ironlb import model
from speaker import appliers, desired


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
    applier = appliers.BGPApplier("node1", CollectorRegistry())
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
