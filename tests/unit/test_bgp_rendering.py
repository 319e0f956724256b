"""ExaBGP configuration (golden files, parsed back by ExaBGP's own parser) and API commands.

Regenerate the golden files after an intended change with IRONLB_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from speaker.bgp import bridge, peers, rendering, routes

GOLDEN = Path(__file__).parent / "bgp_golden"
GOLDEN_HELPER = ("/usr/bin/python3", "-I", "/opt/ironlb/bridge.py", "/run/ironlb/bgp/tor.sock")
ip = ipaddress.ip_address
net = ipaddress.ip_network

PEERS: dict[str, peers.Peer] = {
    "ebgp-basic": peers.Peer(
        name="tor",
        my_asn=64512,
        peer_asn=64500,
        peer_address=ip("10.250.0.1"),
        source_address=ip("10.250.0.11"),
    ),
    "ibgp-password-port-gr": peers.Peer(
        name="rr.example",
        my_asn=64512,
        peer_asn=64512,
        peer_address=ip("10.250.0.1"),
        peer_port=1179,
        router_id=ipaddress.IPv4Address("192.0.2.7"),
        hold_time=9,
        password="s3cret; with \"quotes\" and 'more' # {}",
        graceful_restart=True,
    ),
    "ebgp-multihop-dynamic-asn": peers.Peer(
        name="far",
        my_asn=4200000001,
        peer_asn=None,
        peer_address=ip("192.0.2.1"),
        ebgp_multi_hop=True,
    ),
    "ipv6-fallback-router-id": peers.Peer(
        name="tor6",
        my_asn=64512,
        peer_asn=64500,
        peer_address=ip("fd00:250::1"),
        source_address=ip("fd00:250::11"),
        keepalive_time=10,
    ),
    "dual-stack": peers.Peer(
        name="tor-dual",
        my_asn=64512,
        peer_asn=64500,
        peer_address=ip("10.250.0.1"),
        dual_stack=True,
        ipv6_next_hop=ipaddress.IPv6Address("fd00:250::11"),
    ),
    "dual-stack-over-ipv6": peers.Peer(
        name="tor6-dual",
        my_asn=64512,
        peer_asn=64500,
        peer_address=ip("fd00:250::1"),
        dual_stack=True,
        ipv4_next_hop=ipaddress.IPv4Address("10.250.0.11"),
    ),
    # localASN: the OPEN carries 65410, myASN appears nowhere in the file.
    "ebgp-local-asn": peers.Peer(
        name="tor-local-as",
        my_asn=64512,
        peer_asn=64500,
        peer_address=ip("10.250.0.1"),
        source_address=ip("10.250.0.11"),
        local_asn=65410,
    ),
    # A localASN equal to the peer's ASN makes the session iBGP, as in FRR: TTL 255.
    "ibgp-by-local-asn": peers.Peer(
        name="rr-local-as",
        my_asn=64512,
        peer_asn=65410,
        peer_address=ip("10.250.0.1"),
        local_asn=65410,
    ),
}


@pytest.mark.parametrize("name", sorted(PEERS))
def test_golden(name: str) -> None:
    text = rendering.config(PEERS[name], GOLDEN_HELPER, node_name="node1")
    path = GOLDEN / f"{name}.conf"
    if os.environ.get("IRONLB_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


@pytest.fixture(scope="module")
def exabgp_parser() -> Iterator[Any]:
    """ExaBGP's own configuration loader, in-process (what `exabgp validate` runs)."""
    from exabgp.configuration.configuration import Configuration
    from exabgp.environment import getenv
    from exabgp.logger import log

    env = getenv()
    env.log.enable = False
    log.init(env)
    yield Configuration


def _parse(exabgp_parser: Any, tmp_path: Path, peer: peers.Peer) -> Any:
    helper = (sys.executable, "-I", bridge.__file__, str(tmp_path / "api.sock"))
    path = tmp_path / "exabgp.conf"
    path.write_text(rendering.config(peer, helper, node_name="node1"))
    loaded = exabgp_parser([str(path)])
    assert loaded.reload(), str(loaded.error)
    (neighbor,) = loaded.neighbors.values()
    return neighbor


@pytest.mark.parametrize("name", sorted(PEERS))
def test_exabgp_accepts_and_reads_back(exabgp_parser: Any, tmp_path: Path, name: str) -> None:
    peer = PEERS[name]
    n = _parse(exabgp_parser, tmp_path, peer)
    assert str(n["peer-address"]) == str(peer.peer_address)
    assert n["local-as"] == peer.local_as
    assert n["peer-as"] == peer.peer_asn
    assert n["hold-time"] == peer.effective_hold_time
    assert n["connect"] == (0 if peer.peer_port == 179 else peer.peer_port)
    assert n["outgoing-ttl"] == (1 if not peer.is_ibgp and not peer.ebgp_multi_hop else 255)
    if peer.source_address is None:
        assert n.auto_discovery
    else:
        assert str(n["local-address"]) == str(peer.source_address)
    if peer.password:
        assert n["md5-base64"] is True
        assert base64.b64decode(n["md5-password"]).decode() == peer.password
    else:
        assert n["md5-password"] is None
    expected_gr = peers.GRACEFUL_RESTART_TIME if peer.graceful_restart else False
    assert n["capability"]["graceful-restart"] == expected_gr
    families = {str(afi) for afi, _ in n.families()}
    assert families == {f"ipv{f}" for f in peer.families}
    assert n.api["neighbor-changes"] == [rendering.PROCESS_NAME]
    assert n.api["send-update"] == [rendering.PROCESS_NAME]


def test_router_id_choices() -> None:
    v6 = PEERS["ipv6-fallback-router-id"]
    assert peers.router_id(v6, "node1") == peers.fallback_router_id("node1")
    assert peers.router_id(PEERS["ebgp-basic"], "x") == ipaddress.IPv4Address("10.250.0.11")
    assert peers.router_id(PEERS["ebgp-multihop-dynamic-asn"], "x") == peers.fallback_router_id("x")
    # CRC-32/IEEE check value of "123456789" is 0xCBF43926, written little-endian.
    assert peers.fallback_router_id("123456789") == ipaddress.IPv4Address("38.57.244.203")


def test_unsafe_helper_path_is_refused() -> None:
    with pytest.raises(ValueError):
        rendering.config(PEERS["ebgp-basic"], ("/tmp/a b/python",), "n")
    with pytest.raises(ValueError):
        rendering.config(PEERS["ebgp-basic"], ("python",), "n")


def test_peer_checks() -> None:
    """Only what stops ExaBGP from starting: what a session is made without is
    ironlb.honouring's (tests/unit/test_honouring.py)."""
    ok = PEERS["ebgp-basic"]
    assert peers.check(ok) == []
    assert [p.field for p in peers.check(PEERS["ipv6-fallback-router-id"])] == []  # 10 x 3 = 30
    odd = peers.Peer("p", 1, 2, ip("10.0.0.1"), hold_time=9, keepalive_time=1)
    assert peers.check(odd) == [], "keepalives every hold / 3: said by ironlb.honouring"
    ibgp_multihop = peers.Peer("p", 1, 1, ip("10.0.0.1"), ebgp_multi_hop=True)
    assert peers.check(ibgp_multihop) == [], "iBGP sends TTL 255 anyway"
    bad = peers.Peer("p", 1, 1, ip("10.0.0.1"), hold_time=2, password="x" * 81)
    assert [p.field for p in peers.check(bad)] == ["spec.holdTime", "spec.password"]


# --- API commands --------------------------------------------------------------------------------

A = routes.RouteAttributes
C = routes.Community
LC = routes.LargeCommunity


def test_single_route_commands() -> None:
    peer = PEERS["ebgp-basic"]
    change = routes.Change(
        announce={
            net("10.252.0.1/32"): A(
                local_pref=120,
                communities=frozenset({C(65535, 65282), C(1111, 2222)}),
                large_communities=frozenset({LC(123, 9999, 123)}),
            )
        },
        withdraw=frozenset({net("10.252.0.9/32")}),
    )
    assert [c.text for c in rendering.commands(peer, change)] == [
        "withdraw route 10.252.0.9/32",
        "announce route 10.252.0.1/32 next-hop self origin igp local-preference 120 "
        "community [ 1111:2222 65535:65282 ] large-community [ 123:9999:123 ]",
    ]


@pytest.fixture(scope="module")
def exabgp_api(exabgp_parser: Any) -> Any:
    """ExaBGP's API command parser, in-process (logging set up by `exabgp_parser`)."""
    from exabgp.reactor.api import API

    return API(None)


def _sent_as_path(exabgp_api: Any, line: str, local_as: int, peer_as: int) -> list[int]:
    """The AS_PATH ExaBGP encodes for the route of an API `line` on a session local_as ->
    peer_as, read back from the attribute bytes it would put in the UPDATE."""
    from exabgp.bgp.message.open.asn import ASN

    (change,) = exabgp_api.api_route(line)
    negotiated = SimpleNamespace(local_as=ASN(local_as), peer_as=ASN(peer_as), asn4=True)
    data = change.attributes.pack(negotiated)
    while data:
        flags, code = data[0], data[1]
        size, start = (int.from_bytes(data[2:4]), 4) if flags & 0x10 else (data[2], 3)
        value, data = data[start : start + size], data[start + size :]
        if code == 2:  # AS_PATH: segments of (type, count, 4-byte ASNs)
            asns: list[int] = []
            while value:
                count = value[1]
                asns += [int.from_bytes(value[2 + 4 * i : 6 + 4 * i]) for i in range(count)]
                value = value[2 + 4 * count :]
            return asns
    raise AssertionError("no AS_PATH")


@pytest.mark.parametrize(
    ("name", "seen"),
    [
        pytest.param("ebgp-basic", [64512], id="ebgp-my-asn"),
        pytest.param("ebgp-local-asn", [65410], id="ebgp-local-asn-not-my-asn"),
        pytest.param("ibgp-password-port-gr", [], id="ibgp-empty"),
        pytest.param("ibgp-by-local-asn", [], id="ibgp-by-local-asn-empty"),
        pytest.param("ebgp-multihop-dynamic-asn", [4200000001], id="four-byte-asn"),
    ],
)
def test_the_as_path_sent_is_the_sessions_asn_alone(
    exabgp_api: Any, name: str, seen: list[int]
) -> None:
    """The router sees the AS_PATH FRR sends for a route MetalLB originates: on eBGP the
    session's ASN alone, which with localASN is localASN and never myASN (FRR's `local-as N
    no-prepend replace-as`); on iBGP an empty path. Asked of the installed ExaBGP: the bytes of
    the UPDATE it would send for our command line, on the session `config` renders."""
    peer = PEERS[name]
    (command,) = rendering.commands(peer, routes.Change(announce={net("10.252.0.1/32"): A()}))
    # An address for `self`, which only a running session can resolve; a dynamic peer ASN is
    # any other than ours.
    line = command.text.replace("next-hop self", "next-hop 10.250.0.11")
    peer_as = peer.peer_asn or 64999
    assert _sent_as_path(exabgp_api, line, peer.local_as, peer_as) == seen


def test_batched_commands_group_by_attributes() -> None:
    peer = PEERS["dual-stack"]
    plain, tagged = A(), A(communities=frozenset({C(1, 1)}))
    announce = {net(f"10.252.0.{i}/32"): (plain if i % 2 else tagged) for i in range(1, 8)}
    announce[net("fd00:252::1/128")] = plain
    withdraw = frozenset(net(f"10.253.0.{i}/32") for i in range(5))
    cmds = rendering.commands(peer, routes.Change(announce, withdraw), batch=3)
    assert [c.text for c in cmds] == [
        "withdraw attributes nlri 10.253.0.0/32 10.253.0.1/32 10.253.0.2/32",
        "withdraw attributes nlri 10.253.0.3/32 10.253.0.4/32",
        "announce attributes next-hop self origin igp nlri "
        "10.252.0.1/32 10.252.0.3/32 10.252.0.5/32",
        "announce route 10.252.0.7/32 next-hop self origin igp",
        "announce attributes next-hop self origin igp community [ 1:1 ] nlri "
        "10.252.0.2/32 10.252.0.4/32 10.252.0.6/32",
        "announce route fd00:252::1/128 next-hop fd00:250::11 origin igp",
    ]
    # Every prefix is carried exactly once, with its own attributes.
    carried = {p: c.attributes for c in cmds for p in c.announce}
    assert carried == announce
    assert {p for c in cmds for p in c.withdraw} == withdraw


@pytest.mark.parametrize(
    ("name", "prefixes", "lines"),
    [
        pytest.param(
            "dual-stack",
            ("10.252.0.1/32", "fd00:252::1/128", "fd00:252::2/128"),
            [
                "announce route 10.252.0.1/32 next-hop self origin igp",
                "announce attributes next-hop fd00:250::11 origin igp nlri "
                "fd00:252::1/128 fd00:252::2/128",
            ],
            id="v6-over-v4",
        ),
        pytest.param(
            "dual-stack-over-ipv6",
            ("10.252.0.1/32", "10.252.0.2/32", "fd00:252::1/128"),
            [
                "announce attributes next-hop 10.250.0.11 origin igp nlri "
                "10.252.0.1/32 10.252.0.2/32",
                "announce route fd00:252::1/128 next-hop self origin igp",
            ],
            id="v4-over-v6",
        ),
    ],
)
def test_the_other_family_goes_out_with_its_own_next_hop(
    name: str, prefixes: tuple[str, ...], lines: list[str]
) -> None:
    """A dual-stack session: its own family's routes name "self", the other family's the
    node's address of that family (`next_hops`; ExaBGP refuses "self" for them)."""
    change = routes.Change(announce={net(p): A() for p in prefixes})
    assert [c.text for c in rendering.commands(PEERS[name], change)] == lines


def test_other_family_without_next_hop_is_refused() -> None:
    change = routes.Change(announce={net("fd00:252::1/128"): A()})
    with pytest.raises(ValueError):
        rendering.commands(PEERS["ebgp-basic"], change)


def test_teardown() -> None:
    assert rendering.teardown(PEERS["ebgp-basic"]) == "neighbor 10.250.0.1 teardown 6"


def test_farewell() -> None:
    plain = peers.Peer("p", 64512, 64500, ipaddress.ip_address("10.0.0.1"))
    gr = peers.Peer("g", 64512, 64500, ipaddress.ip_address("10.0.0.1"), graceful_restart=True)
    # Without graceful restart a Cease drops everything at once, whether the node stays or not.
    assert peers.farewell(plain, restarting=False) is peers.Farewell.CEASE
    assert peers.farewell(plain, restarting=True) is peers.Farewell.CEASE
    # ExaBGP never sends a NOTIFICATION on a graceful-restart session: withdraw unless the
    # routes are meant to stay (the speaker restarts, the node stays).
    assert peers.farewell(gr, restarting=False) is peers.Farewell.WITHDRAW
    assert peers.farewell(gr, restarting=True) is peers.Farewell.KEEP


def test_the_first_announcement_line_is_short() -> None:
    """The first routes go out after ExaBGP parsed a few, the rest in long lines; only the
    first announcement line of a change is short, whatever group it belongs to."""
    peer = PEERS["ebgp-basic"]
    plain, tagged = A(), A(communities=frozenset({C(1, 1)}))
    announce = {net(f"10.252.0.{i}/32"): plain for i in range(1, 8)}
    announce |= {net(f"10.252.1.{i}/32"): tagged for i in range(1, 6)}
    withdraw = frozenset(net(f"10.253.0.{i}/32") for i in range(5))
    cmds = rendering.commands(peer, routes.Change(announce, withdraw), batch=4, first_batch=2)
    assert [(len(c.withdraw), len(c.announce)) for c in cmds] == [
        (4, 0),
        (1, 0),
        (0, 2),
        (0, 4),
        (0, 1),
        (0, 4),
        (0, 1),
    ]
    assert {p: c.attributes for c in cmds for p in c.announce} == announce
    # A first batch bigger than the batch changes nothing.
    same = rendering.commands(peer, routes.Change(announce, withdraw), batch=4, first_batch=9)
    assert [c.text for c in same] == [
        c.text for c in rendering.commands(peer, routes.Change(announce, withdraw), batch=4)
    ]
