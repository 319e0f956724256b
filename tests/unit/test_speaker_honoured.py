"""The speaker's part of "not honoured": its ConfigurationState's `Honoured` condition holds the
configuration's findings and this node's own; each of this node's own gets one Warning Event on
the object it is about when it appears (the configuration's findings are the controller's to
post, once for every node). A pass that changes nothing writes and posts nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ironlb import configuration_state, honouring, model, parsing
from ironlb.problems import Problem
from speaker import agent

NS = "metallb-system"
PEER = {
    "apiVersion": "metallb.io/v1beta2",
    "kind": "BGPPeer",
    "metadata": {"name": "tor", "namespace": NS, "uid": "u-1"},
    "spec": {"myASN": 64512, "peerASN": 64500, "peerAddress": "10.0.0.1", "vrf": "red"},
}
SECRET_TOO_LONG = honouring.password_finding("tor", "spec.passwordSecret", "x" * 81)
assert SECRET_TOO_LONG is not None


class FakeClient:
    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((path, body))
        return body


class FakeBGP:
    def __init__(self) -> None:
        self.problems: Sequence[Problem] = ()

    async def wait_synced(self, timeout: float) -> bool:
        return True


async def settle(a: agent.Agent) -> None:
    await asyncio.gather(*list(a.poster.posting))


async def test_condition_and_one_event_per_new_finding_of_this_node() -> None:
    client, bgp = FakeClient(), FakeBGP()
    a = agent.Agent(agent.Options(node_name="node1"), client, bgp=bgp)  # type: ignore[arg-type]
    a.status_writer.quiet.set()
    a.store.put(model.BGP_PEER, None, PEER)
    config, problems = parsing.parse_config({model.BGP_PEER: [PEER]})
    assert problems == []
    (vrf,) = honouring.not_honoured(config)

    # The configuration's finding (which the applier repeats for its session) and one of this
    # node's own: both in the condition, an Event for this node's own only.
    bgp.problems = (vrf, SECRET_TOO_LONG)
    a.honoured_reporter.judge(config, bgp.problems, ())
    await settle(a)
    assert a.state_writer.honoured == configuration_state.honoured([vrf, SECRET_TOO_LONG])
    assert a.state_writer.dirty.is_set()
    ((path, event),) = client.created
    assert path == f"/api/v1/namespaces/{NS}/events"
    assert event["type"] == "Warning" and event["reason"] == "NotHonoured"
    assert event["involvedObject"]["kind"] == "BGPPeer"
    assert event["involvedObject"]["apiVersion"] == "metallb.io/v1beta2"
    assert event["involvedObject"]["uid"] == "u-1"
    assert event["message"].startswith('on node "node1": spec.passwordSecret: not honoured: ')

    # The same again: nothing to write, nothing to post.
    a.state_writer.dirty.clear()
    a.honoured_reporter.judge(config, bgp.problems, ())
    await settle(a)
    assert not a.state_writer.dirty.is_set() and len(client.created) == 1

    # Fixed on this node: the condition says so; it comes back: a new Event.
    bgp.problems = (vrf,)
    a.honoured_reporter.judge(config, bgp.problems, ())
    assert (
        a.state_writer.honoured == configuration_state.honoured([vrf])
        and a.state_writer.dirty.is_set()
    )
    bgp.problems = (SECRET_TOO_LONG,)
    a.honoured_reporter.judge(config, bgp.problems, ())
    await settle(a)
    assert len(client.created) == 2


async def test_without_bgp_the_configuration_alone_is_judged() -> None:
    client = FakeClient()
    a = agent.Agent(agent.Options(node_name="node1"), client)  # type: ignore[arg-type]
    a.honoured_reporter.judge(model.Config(), (), ())
    assert a.state_writer.honoured is not None and a.state_writer.honoured.status == "True"
    await settle(a)
    assert client.created == []
