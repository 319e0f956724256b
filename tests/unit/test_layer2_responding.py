"""The answer-or-not decision, asserted by reason (MetalLB's internal/layer2 split)."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from speaker.layer2 import packets, responding
from speaker.layer2.responding import Reason

OUR_MAC = packets.mac_bytes("02:00:0a:fa:00:0b")
TOR_MAC = packets.mac_bytes("02:00:0a:fa:00:01")
OTHER_MAC = packets.mac_bytes("02:00:0a:fa:00:0c")
TOR4 = ipaddress.IPv4Address("10.250.0.1")
TOR_LL = ipaddress.IPv6Address("fe80::1")
VIP4 = ipaddress.IPv4Address("10.250.0.200")
VIP6 = ipaddress.IPv6Address("fd00:250::200")
FOREIGN4 = ipaddress.IPv4Address("10.250.0.201")
OWNED: responding.Owned = {VIP4: responding.ALL, VIP6: frozenset({"eth0", "eth1"})}


def arp_request(target: ipaddress.IPv4Address = VIP4, **changes: object) -> packets.Arp:
    parsed = packets.parse(packets.arp_request(TOR_MAC, TOR4, target))
    assert isinstance(parsed, packets.Arp)
    return dataclasses.replace(parsed, **changes)  # type: ignore[arg-type]


def solicitation(
    target: ipaddress.IPv6Address = VIP6, **changes: object
) -> packets.NeighborSolicitation:
    parsed = packets.parse(
        packets.neighbor_solicitation(
            eth_src=TOR_MAC, source=TOR_LL, target=target, source_mac=TOR_MAC
        )
    )
    assert isinstance(parsed, packets.NeighborSolicitation)
    return dataclasses.replace(parsed, **changes)  # type: ignore[arg-type]


def decide(packet: packets.Packet | None, interface: str = "eth0") -> responding.Decision:
    return responding.decide(packet, interface, OUR_MAC, OWNED)


def test_arp_request_for_an_owned_address_is_answered_from_our_mac() -> None:
    decision = decide(arp_request())
    assert isinstance(decision, responding.Answer)
    assert decision.address == VIP4
    reply = packets.parse(decision.frame)
    assert reply == packets.Arp(
        eth_dst=TOR_MAC,
        eth_src=OUR_MAC,
        operation=packets.ARP_REPLY,
        sender_mac=OUR_MAC,
        sender_ip=VIP4,
        target_mac=TOR_MAC,
        target_ip=TOR4,
    )


def test_arp_unicast_to_us_is_answered_too() -> None:
    # NUD-style refresh: the requester already knows our MAC.
    assert isinstance(decide(arp_request(eth_dst=OUR_MAC)), responding.Answer)


def test_arp_probe_from_an_address_less_host_is_answered() -> None:
    # RFC 5227 probe (sender 0.0.0.0): answering tells the prober the address is taken.
    decision = decide(arp_request(sender_ip=ipaddress.IPv4Address("0.0.0.0")))
    assert isinstance(decision, responding.Answer)


@pytest.mark.parametrize(
    ("packet", "interface", "reason"),
    [
        (None, "eth0", Reason.MALFORMED),
        (arp_request(operation=packets.ARP_REPLY), "eth0", Reason.NOT_REQUEST),
        (arp_request(eth_src=OUR_MAC, sender_mac=OUR_MAC), "eth0", Reason.OWN_PACKET),
        (arp_request(sender_mac=OUR_MAC), "eth0", Reason.OWN_PACKET),
        (arp_request(sender_ip=VIP4), "eth0", Reason.GRATUITOUS),
        (arp_request(eth_dst=OTHER_MAC), "eth0", Reason.NOT_FOR_US),
        (arp_request(FOREIGN4), "eth0", Reason.NOT_OWNER),
    ],
)
def test_arp_refusals(packet: packets.Packet | None, interface: str, reason: Reason) -> None:
    decision = decide(packet, interface)
    assert isinstance(decision, responding.Ignore)
    assert decision.reason is reason


def test_arp_on_any_interface_when_all_allowed() -> None:
    for interface in ("eth0", "eth1", "bond0"):
        assert isinstance(decide(arp_request(), interface), responding.Answer)


def test_solicitation_for_an_owned_address_is_answered() -> None:
    decision = decide(solicitation())
    assert isinstance(decision, responding.Answer)
    reply = packets.parse(decision.frame)
    assert isinstance(reply, packets.NeighborAdvertisement)
    assert (reply.eth_dst, reply.eth_src) == (TOR_MAC, OUR_MAC)
    assert (reply.source, reply.destination, reply.target) == (VIP6, TOR_LL, VIP6)
    assert (reply.router, reply.solicited, reply.override) == (False, True, True)
    assert reply.target_mac == OUR_MAC


def test_unicast_solicitation_to_the_address_is_answered() -> None:
    # Neighbour unreachability detection probes go unicast to the owner's MAC and the address.
    decision = decide(solicitation(eth_dst=OUR_MAC, destination=VIP6))
    assert isinstance(decision, responding.Answer)


@pytest.mark.parametrize(
    ("packet", "interface", "reason"),
    [
        (solicitation(eth_src=OUR_MAC), "eth0", Reason.OWN_PACKET),
        (solicitation(hop_limit=64), "eth0", Reason.INVALID),
        (solicitation(code=1), "eth0", Reason.INVALID),
        (solicitation(target=ipaddress.IPv6Address("ff02::1")), "eth0", Reason.INVALID),
        (solicitation(destination=ipaddress.IPv6Address("ff02::1")), "eth0", Reason.NOT_FOR_US),
        (solicitation(eth_dst=OTHER_MAC), "eth0", Reason.NOT_FOR_US),
        (solicitation(source_mac=None), "eth0", Reason.NO_SOURCE_LINK_ADDRESS),
        (
            solicitation(source=packets.UNSPECIFIED, source_mac=None),
            "eth0",
            Reason.NO_SOURCE_LINK_ADDRESS,
        ),
        (solicitation(ipaddress.IPv6Address("fd00:250::201")), "eth0", Reason.NOT_OWNER),
        (solicitation(), "eth2", Reason.WRONG_INTERFACE),
    ],
)
def test_solicitation_refusals(
    packet: packets.Packet | None, interface: str, reason: Reason
) -> None:
    decision = decide(packet, interface)
    assert isinstance(decision, responding.Ignore)
    assert decision.reason is reason
    assert isinstance(packet, packets.NeighborSolicitation)
    assert decision.address == packet.target


def test_advertisements_are_never_answered() -> None:
    na = packets.parse(packets.unsolicited_advertisement(OTHER_MAC, VIP6))
    decision = decide(na)
    assert decision == responding.Ignore(Reason.NOT_REQUEST, VIP6)


def test_listed_interfaces_only() -> None:
    owned: responding.Owned = {VIP4: frozenset({"eth1"})}
    assert responding.decide(arp_request(), "eth0", OUR_MAC, owned) == responding.Ignore(
        Reason.WRONG_INTERFACE, VIP4
    )
    assert isinstance(responding.decide(arp_request(), "eth1", OUR_MAC, owned), responding.Answer)


def test_nothing_owned_answers_nothing() -> None:
    assert responding.decide(arp_request(), "eth0", OUR_MAC, {}) == responding.Ignore(
        Reason.NOT_OWNER, VIP4
    )


owned_sets = st.dictionaries(
    st.builds(ipaddress.IPv4Address, st.integers(0x0AFA0000, 0x0AFA00FF)),
    st.frozensets(st.sampled_from(["eth0", "eth1", "bond0"]), max_size=2),
    max_size=8,
)


@given(
    owned=owned_sets,
    target=st.integers(0x0AFA0000, 0x0AFA00FF),
    iface=st.sampled_from(["eth0", "eth1", "bond0"]),
)
@settings(max_examples=200)
def test_answer_exactly_when_owned_on_an_allowed_interface(
    owned: dict[responding.IPAddress, frozenset[str]], target: int, iface: str
) -> None:
    address = ipaddress.IPv4Address(target)
    assume(address != TOR4)  # asking for the asker's own address is a gratuitous ARP
    decision = responding.decide(arp_request(address), iface, OUR_MAC, owned)
    allowed = owned.get(address)
    expected = allowed is not None and (not allowed or iface in allowed)
    assert isinstance(decision, responding.Answer) == expected
    if not expected:
        assert isinstance(decision, responding.Ignore)
        assert decision.reason is (Reason.NOT_OWNER if allowed is None else Reason.WRONG_INTERFACE)
