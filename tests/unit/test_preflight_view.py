"""ironlb_cli.preflight_view: whether MetalLB can be taken over, from what the API holds."""

from __future__ import annotations

from typing import Any

import pytest

from ironlb_cli import preflight_view, render
from ironlb_cli.preflight_view import Inputs, Level

OURS = [
    {"metadata": {"name": "bgppeers.metallb.io"}, "spec": {"conversion": {"strategy": "None"}}},
    {"metadata": {"name": "configurationstates.metallb.io"}, "spec": {}},
]
METALLBS = [
    {"metadata": {"name": "bgppeers.metallb.io"}, "spec": {"conversion": {"strategy": "Webhook"}}}
]
NODES = [{"metadata": {"name": n}} for n in ("n1", "n2")]


def speaker(node: str, port: int | None = 7946) -> dict[str, Any]:
    ports = [] if port is None else [{"name": "memberlist-udp", "containerPort": port}]
    return {
        "metadata": {"name": f"metallb-speaker-{node}"},
        "spec": {"nodeName": node, "containers": [{"name": "speaker", "ports": ports}]},
    }


def peer(name: str, graceful: bool) -> dict[str, Any]:
    spec = {"myASN": 64512, "peerASN": 64500, "peerAddress": "10.0.0.1"}
    return {
        "kind": "BGPPeer",
        "metadata": {"name": name, "namespace": "metallb-system"},
        "spec": {**spec, **({"enableGracefulRestart": True} if graceful else {})},
    }


def inputs(**changes: Any) -> Inputs:
    base: dict[str, Any] = {
        "crds": OURS,
        "config": {},
        "nodes": NODES,
        "metallb_speakers": [speaker("n1"), speaker("n2")],
        "ml_bind_port": 7947,
    }
    return Inputs(**{**base, **changes})


def levels(found: list[preflight_view.Finding]) -> dict[str, list[Level]]:
    out: dict[str, list[Level]] = {}
    for f in found:
        out.setdefault(f.check, []).append(f.level)
    return out


def test_ready_when_every_check_passes() -> None:
    found = preflight_view.check(inputs())
    assert levels(found) == {
        "crds": [Level.OK],
        "objects": [Level.OK],
        "speakers": [Level.OK],
        "membership-port": [Level.OK],
    }
    assert preflight_view.passed(found)
    assert render.preflight_text(found).endswith("ready: install ironlb beside MetalLB "
                                                 "(docs/migration.md)\n")  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "check", "level", "words"),
    [
        ({"crds": METALLBS}, "crds", Level.FAIL, "converts through a webhook (Webhook)"),
        ({"crds": []}, "crds", Level.FAIL, "no bgppeers.metallb.io"),
        ({"metallb_speakers": []}, "speakers", Level.FAIL, "no Pod matches"),
        ({"metallb_speakers": [speaker("n1")]}, "speakers", Level.WARN, "at once on n2"),
        ({"ml_bind_port": 7946}, "membership-port", Level.FAIL, "bind UDP 7946"),
        # No named port: memberlist's default, which MetalLB's speaker binds.
        (
            {"ml_bind_port": 7946, "metallb_speakers": [speaker("n1", None)]},
            "membership-port",
            Level.FAIL,
            "on n1",
        ),
        (
            {"config": {"BGPPeer": [peer("tor", False), peer("tor2", True)]}},
            "graceful-restart",
            Level.WARN,
            "without enableGracefulRestart (tor)",
        ),
        (
            {"config": {"BGPPeer": [peer("tor", True)]}},
            "graceful-restart",
            Level.OK,
            "every BGPPeer",
        ),
        (
            {"metallb_controllers": [{"metadata": {"name": "metallb-controller-x"}}]},
            "controller",
            Level.OK,
            "controller.enabled=false",
        ),
        (
            {
                "config": {
                    "IPAddressPool": [{"metadata": {"name": "p"}, "spec": {"addresses": ["x"]}}]
                }
            },
            "objects",
            Level.FAIL,
            "IPAddressPool",
        ),
    ],
)
def test_each_check(changes: dict[str, Any], check: str, level: Level, words: str) -> None:
    found = preflight_view.check(inputs(**changes))
    mine = [f for f in found if f.check == check]
    assert [f.level for f in mine] == [level], found
    assert words in mine[0].message
    assert preflight_view.passed(found) == all(f.level is not Level.FAIL for f in found)
    if level is Level.FAIL:
        text = render.preflight_text(found)
        assert text.startswith("FAIL") and text.endswith("not ready: fix what FAILs first\n")
