"""Split-brain detection: which frames claim an owned address, how long a conflict stays current,
how often it is reported, and the metrics and log lines it leaves, on fake ports and clocks."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironlb_io import logs, prometheus
from speaker.layer2 import announcing, conflicts, interfaces, metrics, packets, sockets
from tests.unit import fake_interfaces, fuzzing

MAC0 = packets.mac_bytes("02:00:0a:fa:00:0b")
MAC1 = packets.mac_bytes("02:00:0a:fa:01:0b")
BRIDGE_MAC = packets.mac_bytes("02:00:0a:fa:02:0b")  # ours, on an interface that does not answer
ROGUE = packets.mac_bytes("02:00:0b:ad:00:01")
ROGUE2 = packets.mac_bytes("02:00:0b:ad:00:02")
TOR_MAC = packets.mac_bytes("02:00:0a:fa:00:01")
NODE4 = ipaddress.IPv4Address("10.250.0.11")
TOR4 = ipaddress.IPv4Address("10.250.0.1")
TOR_LL = ipaddress.IPv6Address("fe80::1")
VIP4 = ipaddress.IPv4Address("10.250.0.200")
VIP4B = ipaddress.IPv4Address("10.250.0.201")
VIP6 = ipaddress.IPv6Address("fd00:250::200")
OWNED: dict[packets.IPAddress, frozenset[str]] = {
    VIP4: frozenset(),
    VIP6: frozenset(),
    VIP4B: frozenset({"eth1"}),
}
OURS = frozenset({MAC0, MAC1, BRIDGE_MAC})


def arp(
    operation: int,
    sender_mac: bytes,
    sender_ip: ipaddress.IPv4Address,
    target_ip: ipaddress.IPv4Address,
    *,
    target_mac: bytes = packets.ZERO_MAC,
    eth_dst: bytes = packets.BROADCAST,
) -> bytes:
    return packets.arp(
        eth_dst=eth_dst,
        eth_src=sender_mac,
        operation=operation,
        sender_mac=sender_mac,
        sender_ip=sender_ip,
        target_mac=target_mac,
        target_ip=target_ip,
    )


def advertisement(
    mac: bytes,
    target: ipaddress.IPv6Address,
    *,
    option: bytes | None = None,
    no_option: bool = False,
    hop_limit: int = 255,
    code: int = 0,
    solicited: bool = False,
) -> bytes:
    return packets.neighbor_advertisement(
        eth_dst=packets.multicast_mac(packets.ALL_NODES),
        eth_src=mac,
        source=target,
        destination=packets.ALL_NODES,
        target=target,
        target_mac=None if no_option else option or mac,
        solicited=solicited,
        override=True,
        hop_limit=hop_limit,
        code=code,
    )


CLAIMS: dict[str, tuple[bytes, str, conflicts.Claim | None]] = {
    # (frame, receiving interface, the claim it makes)
    "gratuitous request (arping -U)": (
        packets.gratuitous_arp(ROGUE, VIP4)[0],
        "eth0",
        conflicts.Claim(VIP4, ROGUE, "eth0"),
    ),
    "gratuitous reply, tha = sha": (
        packets.gratuitous_arp(ROGUE, VIP4)[1],
        "eth0",
        conflicts.Claim(VIP4, ROGUE, "eth0"),
    ),
    "broadcast reply (arping -A)": (
        arp(packets.ARP_REPLY, ROGUE, VIP4, VIP4, target_mac=packets.BROADCAST),
        "eth0",
        conflicts.Claim(VIP4, ROGUE, "eth0"),
    ),
    "reply to this node's own request": (
        arp(packets.ARP_REPLY, ROGUE, VIP4, NODE4, target_mac=MAC0, eth_dst=MAC0),
        "eth0",
        conflicts.Claim(VIP4, ROGUE, "eth0"),
    ),
    "unsolicited advertisement": (
        advertisement(ROGUE, VIP6),
        "eth0",
        conflicts.Claim(VIP6, ROGUE, "eth0"),
    ),
    "solicited advertisement": (
        advertisement(ROGUE, VIP6, solicited=True),
        "eth0",
        conflicts.Claim(VIP6, ROGUE, "eth0"),
    ),
    "advertisement without an option: the Ethernet source": (
        advertisement(ROGUE, VIP6, no_option=True),
        "eth0",
        conflicts.Claim(VIP6, ROGUE, "eth0"),
    ),
    "advertisement whose option names another machine than its source": (
        advertisement(TOR_MAC, VIP6, option=ROGUE),
        "eth0",
        conflicts.Claim(VIP6, ROGUE, "eth0"),
    ),
    "restricted address on its interface": (
        packets.gratuitous_arp(ROGUE, VIP4B)[0],
        "eth1",
        conflicts.Claim(VIP4B, ROGUE, "eth1"),
    ),
    # No claim:
    "request for the address (someone asking)": (
        packets.arp_request(TOR_MAC, TOR4, VIP4),
        "eth0",
        None,
    ),
    "ARP probe for the address (sender 0.0.0.0)": (
        arp(packets.ARP_REQUEST, ROGUE, ipaddress.IPv4Address(0), VIP4),
        "eth0",
        None,
    ),
    "request from the address for another one": (
        packets.arp_request(ROGUE, VIP4, TOR4),
        "eth0",
        None,
    ),
    "solicitation for the address": (
        packets.neighbor_solicitation(eth_src=ROGUE, source=TOR_LL, target=VIP6, source_mac=ROGUE),
        "eth0",
        None,
    ),
    "duplicate address detection for the address": (
        packets.neighbor_solicitation(
            eth_src=ROGUE, source=packets.UNSPECIFIED, target=VIP6, source_mac=None
        ),
        "eth0",
        None,
    ),
    "our own gratuitous ARP, seen on another port": (
        packets.gratuitous_arp(MAC1, VIP4)[1],
        "eth0",
        None,
    ),
    "our own advertisement from a bridge of this node": (
        advertisement(BRIDGE_MAC, VIP6),
        "eth0",
        None,
    ),
    "advertisement with our MAC in the option": (
        advertisement(ROGUE, VIP6, option=MAC0),
        "eth0",
        None,
    ),
    "address not owned": (
        packets.gratuitous_arp(ROGUE, ipaddress.IPv4Address("10.250.0.99"))[0],
        "eth0",
        None,
    ),
    "address owned on other interfaces only": (
        packets.gratuitous_arp(ROGUE, VIP4B)[0],
        "eth0",
        None,
    ),
    "zero sender MAC": (
        packets.gratuitous_arp(packets.ZERO_MAC, VIP4)[1],
        "eth0",
        None,
    ),
    "ARP operation neither request nor reply": (
        arp(8, ROGUE, VIP4, VIP4),
        "eth0",
        None,
    ),
    "advertisement with hop limit 64 (off-link: receivers drop it)": (
        advertisement(ROGUE, VIP6, hop_limit=64),
        "eth0",
        None,
    ),
    "advertisement with code 1": (
        advertisement(ROGUE, VIP6, code=1),
        "eth0",
        None,
    ),
    "not ARP or neighbour discovery": (
        ROGUE + TOR_MAC + b"\x08\x00" + b"\x45" + b"\x00" * 50,
        "eth0",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(CLAIMS))
def test_detect(case: str) -> None:
    frame, interface, claim = CLAIMS[case]
    assert conflicts.detect(packets.parse(frame), interface, OURS, OWNED) == claim


# --- the tracker on a fake clock ------------------------------------------------------------------


def test_a_conflict_is_reported_first_then_at_most_every_interval() -> None:
    tracker = conflicts.Tracker()
    claim = conflicts.Claim(VIP4, ROGUE, "eth0")
    reports = [
        t
        for t in (0.0, 0.5, 5.0, 9.9, 10.0, 12.0, 19.9, 20.1)
        if tracker.observe(claim, t, 1e9 + t)
    ]
    assert reports == [0.0, 10.0, 20.1]
    (conflict,) = tracker.current
    assert conflict == conflicts.Conflict(VIP4, "02:00:0b:ad:00:01", "eth0", 1e9, 1e9 + 20.1, 8)
    assert tracker.by_address == {VIP4: conflict}


def test_each_foreign_mac_is_its_own_conflict_and_the_latest_stands_for_the_address() -> None:
    tracker = conflicts.Tracker()
    assert tracker.observe(conflicts.Claim(VIP4, ROGUE, "eth0"), 0.0, 100.0)
    assert tracker.observe(conflicts.Claim(VIP4, ROGUE2, "eth1"), 1.0, 101.0)  # new: reported
    assert [c.mac for c in tracker.current] == ["02:00:0b:ad:00:01", "02:00:0b:ad:00:02"]
    assert tracker.by_address[VIP4].mac == "02:00:0b:ad:00:02"
    assert tracker.by_address[VIP4].interface == "eth1"
    tracker.observe(conflicts.Claim(VIP4, ROGUE, "eth0"), 2.0, 102.0)
    assert tracker.by_address[VIP4].mac == "02:00:0b:ad:00:01"


def test_conflicts_expire_after_30s_unseen_and_come_back_as_new() -> None:
    tracker = conflicts.Tracker()
    claim = conflicts.Claim(VIP6, ROGUE, "eth0")
    tracker.observe(claim, 0.0, 100.0)
    tracker.observe(claim, 5.0, 105.0)
    assert tracker.next_expiry() == 35.0
    assert tracker.expire(34.9) == []
    (gone,) = tracker.expire(35.0)
    assert gone.count == 2 and tracker.current == () and tracker.by_address == {}
    assert tracker.next_expiry() is None
    again = tracker.observe(claim, 36.0, 136.0)  # reported at once: a new conflict
    assert again == conflicts.Conflict(VIP6, "02:00:0b:ad:00:01", "eth0", 136.0, 136.0, 1)


def test_a_claim_after_the_expiry_but_before_a_sweep_is_a_new_conflict() -> None:
    tracker = conflicts.Tracker()
    claim = conflicts.Claim(VIP4, ROGUE, "eth0")
    tracker.observe(claim, 0.0, 100.0)
    renewed = tracker.observe(claim, 31.0, 131.0)
    assert renewed is not None and (renewed.first_seen, renewed.count) == (131.0, 1)


def test_conflicts_on_released_addresses_or_interfaces_are_dropped() -> None:
    tracker = conflicts.Tracker()
    tracker.observe(conflicts.Claim(VIP4, ROGUE, "eth0"), 0.0, 0.0)
    tracker.observe(conflicts.Claim(VIP6, ROGUE, "eth1"), 0.0, 0.0)
    assert tracker.retain({VIP4: frozenset(), VIP6: frozenset()}) == []
    (dropped,) = tracker.retain({VIP4: frozenset(), VIP6: frozenset({"eth0"})})
    assert dropped.ip == VIP6
    (dropped,) = tracker.retain({})
    assert dropped.ip == VIP4 and tracker.by_address == {}


def test_published_views_are_snapshots() -> None:
    tracker = conflicts.Tracker()
    tracker.observe(conflicts.Claim(VIP4, ROGUE, "eth0"), 0.0, 0.0)
    before = tracker.by_address
    tracker.observe(conflicts.Claim(VIP6, ROGUE, "eth0"), 1.0, 1.0)
    tracker.retain({})
    assert list(before) == [VIP4]  # a reader holding the old view sees it unchanged
    with pytest.raises(TypeError):
        before[VIP6] = before[VIP4]  # type: ignore[index]


# --- the announcer: counters, gauge, callback, log ------------------------------------------------


@dataclass
class FakePort:
    name: str
    mac: bytes
    arp: bool = True
    ndp: bool = True
    sent: list[bytes] = field(default_factory=list)

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)

    def set_groups(self, groups: frozenset[bytes]) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def announcer(
    on_conflict: Callable[[conflicts.Conflict], None] | None = None,
) -> tuple[announcing.Announcer, FakePort, Clock]:
    clock = Clock()
    core = announcing.Announcer(
        on_conflict=on_conflict, clock=clock, wall_clock=lambda: 1.7e9 + clock.now
    )
    eth0 = FakePort("eth0", MAC0)
    core.set_ports({"eth0": eth0, "eth1": FakePort("eth1", MAC1)}, other_macs=[BRIDGE_MAC])
    core.set_owned({VIP4: (), VIP6: ()}, now=0.0)
    return core, eth0, clock


def scrape(stats: metrics.Stats) -> prometheus.Registry:
    registry = prometheus.Registry()
    registry.register(metrics.Collector(stats))
    return registry


COUNTER = "ironlb_speaker_l2_address_conflicts_total"
GAUGE = "ironlb_speaker_l2_address_conflict"


def test_claims_are_counted_reported_and_expire_from_the_gauge() -> None:
    reported: list[conflicts.Conflict] = []
    core, eth0, clock = announcer(reported.append)
    registry = scrape(core.stats)
    garp_request, garp_reply = packets.gratuitous_arp(ROGUE, VIP4)
    for offset in (0.0, 0.1, 4.0, 10.5):
        clock.now = 1000.0 + offset
        core.handle(eth0, garp_request)
        core.handle(eth0, garp_reply)
    core.handle(eth0, advertisement(ROGUE2, VIP6))
    assert eth0.sent == []  # a claim is never answered
    assert [(str(c.ip), c.mac, c.count) for c in reported] == [
        ("10.250.0.200", "02:00:0b:ad:00:01", 1),
        ("10.250.0.200", "02:00:0b:ad:00:01", 7),
        ("fd00:250::200", "02:00:0b:ad:00:02", 1),
    ]
    assert registry.get_sample_value(COUNTER, {"ip": "10.250.0.200", "interface": "eth0"}) == 8
    assert registry.get_sample_value(GAUGE, {"ip": "10.250.0.200", "mac": "02:00:0b:ad:00:01"})
    assert registry.get_sample_value(GAUGE, {"ip": "fd00:250::200", "mac": "02:00:0b:ad:00:02"})
    assert core.conflicts.by_address[VIP4].first_seen == 1.7e9 + 1000.0

    clock.now = 1000.0 + 10.5 + 30.0
    assert core.expire_conflicts() is None
    assert (
        registry.get_sample_value(GAUGE, {"ip": "10.250.0.200", "mac": "02:00:0b:ad:00:01"}) is None
    )
    assert core.conflicts.by_address == {}
    assert registry.get_sample_value(COUNTER, {"ip": "10.250.0.200", "interface": "eth0"}) == 8


def test_expiry_returns_when_the_next_conflict_expires() -> None:
    core, eth0, clock = announcer()
    core.handle(eth0, packets.gratuitous_arp(ROGUE, VIP4)[0])
    clock.now += 20.0
    core.handle(eth0, advertisement(ROGUE, VIP6))
    clock.now += 15.0
    assert core.expire_conflicts() == clock.now - 15.0 + 30.0
    assert list(core.conflicts.by_address) == [VIP6]


def test_releasing_an_address_drops_its_conflict_and_gauge() -> None:
    core, eth0, _ = announcer()
    registry = scrape(core.stats)
    core.handle(eth0, packets.gratuitous_arp(ROGUE, VIP4)[0])
    core.handle(eth0, advertisement(ROGUE, VIP6))
    core.set_owned({VIP6: ()}, now=1.0)
    assert list(core.conflicts.by_address) == [VIP6]
    assert core.stats.conflicting == (("fd00:250::200", "02:00:0b:ad:00:01"),)
    assert (
        registry.get_sample_value(GAUGE, {"ip": "10.250.0.200", "mac": "02:00:0b:ad:00:01"}) is None
    )
    # Not owned any more: a claim is none of our business.
    core.handle(eth0, packets.gratuitous_arp(ROGUE, VIP4)[0])
    assert list(core.conflicts.by_address) == [VIP6]


def test_requests_are_still_answered_and_never_claims() -> None:
    reported: list[conflicts.Conflict] = []
    core, eth0, _ = announcer(reported.append)
    core.handle(eth0, packets.arp_request(ROGUE, TOR4, VIP4))
    core.handle(
        eth0,
        packets.neighbor_solicitation(eth_src=ROGUE, source=TOR_LL, target=VIP6, source_mac=ROGUE),
    )
    assert len(eth0.sent) == 2 and reported == [] and core.stats.address_conflicts == {}
    # Our own frames, looped back through another port or sent from a bridge of ours.
    core.handle(eth0, packets.gratuitous_arp(MAC1, VIP4)[1])
    core.handle(eth0, advertisement(BRIDGE_MAC, VIP6))
    assert reported == [] and core.conflicts.current == ()


def test_a_failing_callback_does_not_break_the_read_path(caplog: pytest.LogCaptureFixture) -> None:
    def broken(conflict: conflicts.Conflict) -> None:
        raise RuntimeError("boom")

    core, eth0, _ = announcer(broken)
    core.handle(eth0, packets.gratuitous_arp(ROGUE, VIP4)[0])
    assert core.handle(eth0, packets.arp_request(TOR_MAC, TOR4, VIP4))
    assert len(eth0.sent) == 1 and VIP4 in core.conflicts.by_address
    assert any("on_conflict callback failed" in r.getMessage() for r in caplog.records)


def test_the_warning_uses_the_log_schema_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core, eth0, clock = announcer()
    caplog.set_level(logging.INFO, logger=announcing.__name__)
    for _ in range(5):
        core.handle(eth0, packets.gratuitous_arp(ROGUE, VIP4)[1])
        clock.now += 1.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    line = json.loads(logs.JsonFormatter().format(warnings[0]))
    assert line["level"] == "warning" and line["logger"] == "speaker.layer2.announcing"
    assert (line["ip"], line["mac"], line["interface"], line["count"]) == (
        "10.250.0.200",
        "02:00:0b:ad:00:01",
        "eth0",
        1,
    )
    assert line["since"] == 1.7e9 + 1000.0
    clock.now += 30.0
    core.expire_conflicts()
    (over,) = [r for r in caplog.records if r.getMessage() == "layer2 address conflict over"]
    assert json.loads(logs.JsonFormatter().format(over))["why"] == "no longer seen"


def test_metric_names_and_types() -> None:
    stats = metrics.Stats()
    stats.address_conflicts["10.250.0.200", "eth0"] += 3
    stats.conflicting = (("10.250.0.200", "02:00:0b:ad:00:01"),)
    text = scrape(stats).exposition().decode()
    assert "# TYPE ironlb_speaker_l2_address_conflicts_total counter" in text
    assert (
        'ironlb_speaker_l2_address_conflicts_total{interface="eth0",ip="10.250.0.200"} 3.0' in text
    )
    assert "# TYPE ironlb_speaker_l2_address_conflict gauge" in text
    assert (
        'ironlb_speaker_l2_address_conflict{ip="10.250.0.200",mac="02:00:0b:ad:00:01"} 1.0' in text
    )


# --- the asyncio shell: the expiry timer ----------------------------------------------------------


class QueuePort:
    """A port whose "socket" is one end of a socketpair: a byte written to the other end makes
    the loop call the announcer, which reads `frames` (read_frames is replaced in the test)."""

    def __init__(self, facts: interfaces.InterfaceFacts, eligible: interfaces.Eligibility) -> None:
        self.name, self.index, self.mac = facts.name, facts.index, facts.mac
        self.arp, self.ndp = eligible.arp, eligible.ndp
        self.reader, self.writer = socket.socketpair()
        self.sockets = [self.reader]
        self.frames: list[bytes] = []
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)

    def set_groups(self, groups: frozenset[bytes]) -> None:
        pass

    def deliver(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.writer.send(b"x")

    def take(self) -> list[bytes]:
        self.reader.recv(4096)
        frames, self.frames = self.frames, []
        return frames

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


async def test_layer2_announcer_reports_on_its_loop_and_expires_on_a_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    facts = fake_interfaces.facts("eth0", 2, MAC0)
    opened: list[QueuePort] = []

    def open_port(f: interfaces.InterfaceFacts, e: interfaces.Eligibility) -> QueuePort:
        opened.append(QueuePort(f, e))
        return opened[-1]

    monkeypatch.setattr(sockets, "read_frames", lambda sock: opened[0].take())
    loop = asyncio.get_running_loop()
    seen: list[tuple[conflicts.Conflict, asyncio.AbstractEventLoop]] = []
    l2 = announcing.Layer2Announcer(
        scan=lambda: [facts],
        open_port=open_port,  # type: ignore[arg-type]
        on_conflict=lambda c: seen.append((c, asyncio.get_running_loop())),
        tracker=conflicts.Tracker(expiry=0.3, report_interval=10.0),
    )
    async with l2:
        l2.set_owned({VIP4: ()})
        registry = scrape(l2.stats)
        opened[0].deliver(packets.gratuitous_arp(ROGUE, VIP4)[0])
        deadline = loop.time() + 5.0
        while not seen and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert [(c.ip, c.mac) for c, _ in seen] == [(VIP4, "02:00:0b:ad:00:01")]
        assert seen[0][1] is loop
        assert l2.conflicts()[VIP4].interface == "eth0"
        labels = {"ip": "10.250.0.200", "mac": "02:00:0b:ad:00:01"}
        assert registry.get_sample_value(GAUGE, labels) == 1.0
        while l2.conflicts() and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert l2.conflicts() == {}
        assert registry.get_sample_value(GAUGE, labels) is None


# --- hypothesis: claims on any frame --------------------------------------------------------------

macs = st.one_of(
    st.sampled_from((MAC0, MAC1, BRIDGE_MAC, ROGUE, packets.ZERO_MAC, packets.BROADCAST)),
    st.binary(min_size=6, max_size=6),
)
ipv4s: st.SearchStrategy[ipaddress.IPv4Address] = st.one_of(
    st.sampled_from((VIP4, VIP4B, TOR4)),
    st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1)),
)
ipv6s: st.SearchStrategy[ipaddress.IPv6Address] = st.one_of(
    st.sampled_from((VIP6, TOR_LL)), st.builds(ipaddress.IPv6Address, st.integers(0, 2**128 - 1))
)


@st.composite
def claims(draw: st.DrawFn) -> tuple[bytes, str, conflicts.Claim | None]:
    """A frame built from drawn fields, and the claim the definition says it makes."""
    interface = draw(st.sampled_from(("eth0", "eth1")))
    mac = draw(macs)
    if draw(st.booleans()):
        operation = draw(st.sampled_from((packets.ARP_REQUEST, packets.ARP_REPLY, 3)))
        sender, target = draw(ipv4s), draw(st.one_of(st.just(None), ipv4s))
        target = sender if target is None else target
        frame = arp(operation, mac, sender, target, target_mac=draw(macs), eth_dst=draw(macs))
        address: packets.IPAddress = sender
        claims = operation == packets.ARP_REPLY or (
            operation == packets.ARP_REQUEST and sender == target
        )
        claimant = mac
    else:
        address = draw(ipv6s)
        option = draw(st.one_of(st.none(), macs))
        hop_limit = draw(st.sampled_from((255, 64)))
        frame = advertisement(
            mac, address, option=option, no_option=option is None, hop_limit=hop_limit
        )
        claims = hop_limit == 255
        claimant = mac if option is None else option
    allowed = OWNED.get(address)
    claims = (
        claims
        and allowed is not None
        and (not allowed or interface in allowed)
        and claimant not in OURS
        and claimant != packets.ZERO_MAC
    )
    return frame, interface, conflicts.Claim(address, claimant, interface) if claims else None


@fuzzing.fuzz_settings(400)
@given(claims())
def test_detect_follows_the_definition(case: tuple[bytes, str, conflicts.Claim | None]) -> None:
    frame, interface, expected = case
    assert conflicts.detect(packets.parse(frame), interface, OURS, OWNED) == expected


@fuzzing.fuzz_settings(300)
@given(st.data())
def test_detect_never_raises_on_mutated_claims(data: st.DataObject) -> None:
    frame, _, _ = data.draw(claims())
    mutated = fuzzing.mutate(frame, data.draw)
    packet = fuzzing.feed("layer2 conflicts", packets.parse, mutated)
    claim = conflicts.detect(packet, "eth0", OURS, OWNED)
    if claim is not None:
        assert claim.ip in OWNED and claim.mac not in OURS and claim.mac != packets.ZERO_MAC


def test_a_spoofer_with_random_macs_is_bounded_in_memory_and_reports() -> None:
    """Every frame from a new MAC: per address at most MAX_MACS_PER_ADDRESS tracked and that many
    reports per interval; in all at most MAX_CONFLICTS tracked."""
    tracker = conflicts.Tracker()
    reports = 0
    for i in range(2000):
        mac = bytes((2, 0, 0, 0, i >> 8, i & 0xFF))
        if tracker.observe(conflicts.Claim(VIP4, mac, "eth0"), i * 0.001, 1e9 + i * 0.001):
            reports += 1
    assert len(tracker.current) == conflicts.MAX_MACS_PER_ADDRESS
    assert reports == conflicts.MAX_MACS_PER_ADDRESS  # all within one interval
    # The newest MAC stands for the address.
    assert tracker.by_address[VIP4].mac == "02:00:00:00:07:cf"
    # Past the interval, the address may be reported again.
    late = conflicts.Claim(VIP4, bytes((2, 0, 0, 0, 9, 9)), "eth0")
    assert tracker.observe(late, 20.0, 1e9 + 20.0) is not None
    # Many addresses: bounded in all.
    for n in range(conflicts.MAX_CONFLICTS * 2):
        address = ipaddress.ip_address(f"10.9.{n >> 8}.{n & 0xFF}")
        tracker.observe(conflicts.Claim(address, ROGUE, "eth0"), 30.0 + n, 1e9 + 30.0 + n)
    assert len(tracker.current) == conflicts.MAX_CONFLICTS
