"""Parsing ExaBGP's API output. The JSON lines are verbatim ExaBGP 5.0.15 output from the lab."""

from __future__ import annotations

import ipaddress
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speaker.bgp import events

net = ipaddress.ip_network
HEAD = (
    '{ "exabgp": "5.0.0", "time": 1796218959.36, "host" : "vm", "pid" : 5527, "ppid" : 5509, '
    '"counter": 4, "type": "%s", "neighbor": { "address": { "local": "10.250.0.11", '
    '"peer": "10.250.0.1" }, "asn": { "local": 64512, "peer": 64500 }, '
    '"router-id": "10.250.0.11" , '
)

LINES = [
    ("done", events.Ack(True)),
    ("error\n", events.Ack(False)),
    ("shutdown in progress", events.Other("shutdown in progress")),
    (HEAD % "state" + '"state": "connected" } }', events.StateChange("10.250.0.1", "connected")),
    (HEAD % "state" + '"state": "up" } }', events.StateChange("10.250.0.1", "up")),
    (
        HEAD % "state" + '"state": "down", "reason": "notification received (6,4)" } }',
        events.StateChange("10.250.0.1", "down", "notification received (6,4)"),
    ),
    (
        HEAD % "update"
        + '"direction": "send", "message": { "eor": { "afi" : "ipv4", "safi" : "unicast" } } } }',
        events.Sent("10.250.0.1", end_of_rib=True),
    ),
    (
        HEAD % "update" + '"direction": "send", "message": { "update": { "attribute": { '
        '"origin": "igp", "as-path": {"0": {"element": "as-sequence", "value": [64512]}}, '
        '"community": [ [ 1, 2 ], [ 65535, 65281 ] ], "large-community": [ [ 1, 2 , 3 ] ] }, '
        '"announce": { "ipv4 unicast": { "10.250.0.11": [ { "nlri": "10.252.0.7/32" } ] } } '
        "} } } }",
        events.Sent("10.250.0.1", announced=frozenset({net("10.252.0.7/32")})),
    ),
    (
        HEAD % "update" + '"direction": "send", "message": { "update": { "withdraw": { '
        '"ipv4 unicast": [ { "nlri": "10.252.0.8/32" }, { "nlri": "10.252.0.9/32" } ] } } } } }',
        events.Sent(
            "10.250.0.1", withdrawn=frozenset({net("10.252.0.8/32"), net("10.252.0.9/32")})
        ),
    ),
    (
        HEAD % "update" + '"direction": "send", "message": { "update": { "attribute": { '
        '"origin": "igp" }, "announce": { "ipv6 unicast": { "fd00:250::11": [ '
        '{ "nlri": "fd00:252::7/128" } ] } } } } } }',
        events.Sent("10.250.0.1", announced=frozenset({net("fd00:252::7/128")})),
    ),
]


@pytest.mark.parametrize(("line", "expected"), LINES)
def test_parse(line: str, expected: events.Event) -> None:
    assert events.parse(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        HEAD % "state" + '"state": "weird" } }',
        HEAD % "update" + '"direction": "receive", "message": { "eor": {} } } }',
        HEAD % "notification" + '"notification": {} } }',
        '{"type": "state"}',
        '{"neighbor": {"address": {}}}',
        HEAD % "update" + '"direction": "send", "message": { "update": { "withdraw": { '
        '"ipv4 unicast": [ { "nlri": "not-a-prefix" } ] } } } } }',
        "{ not json",
        "[1, 2]",
    ],
)
def test_unexpected_lines_are_other(line: str) -> None:
    assert isinstance(events.parse(line), events.Other)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "neighbor",
                    "address",
                    "peer",
                    "type",
                    "state",
                    "message",
                    "update",
                    "announce",
                    "withdraw",
                    "nlri",
                    "direction",
                    "eor",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60) | _json.map(json.dumps))
def test_parse_never_raises(line: str) -> None:
    assert isinstance(
        events.parse(line), events.Ack | events.StateChange | events.Sent | events.Other
    )
