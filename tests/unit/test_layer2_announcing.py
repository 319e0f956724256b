"""The announcer's level-triggered state on fake ports and a fake clock; the metrics it exposes."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from dataclasses import dataclass, field

import pytest

from ironlb_io import prometheus
from speaker.layer2 import announcing, gratuitous, interfaces, metrics, packets, responding
from tests.unit import fake_interfaces

MAC0 = packets.mac_bytes("02:00:0a:fa:00:0b")
MAC1 = packets.mac_bytes("02:00:0a:fa:01:0b")
TOR_MAC = packets.mac_bytes("02:00:0a:fa:00:01")
TOR4 = ipaddress.IPv4Address("10.250.0.1")
TOR_LL = ipaddress.IPv6Address("fe80::1")
VIP4 = ipaddress.IPv4Address("10.250.0.200")
VIP4B = ipaddress.IPv4Address("10.250.0.201")
VIP6 = ipaddress.IPv6Address("fd00:250::200")


@dataclass
class FakePort:
    name: str
    mac: bytes
    arp: bool = True
    ndp: bool = True
    sent: list[bytes] = field(default_factory=list)
    groups: frozenset[bytes] = frozenset()
    fail: bool = False
    down: bool = False  # the link is down: the kernel refuses with ENETDOWN

    def send(self, frame: bytes) -> None:
        if self.down:
            raise OSError(errno.ENETDOWN, "Network is down")
        if self.fail:
            raise OSError(errno.ENOBUFS, "No buffer space available")
        self.sent.append(frame)

    def set_groups(self, groups: frozenset[bytes]) -> None:
        self.groups = groups

    def take(self) -> list[packets.Packet | None]:
        frames, self.sent = self.sent, []
        return [packets.parse(f) for f in frames]


def setup() -> tuple[announcing.Announcer, FakePort, FakePort]:
    core = announcing.Announcer()
    eth0, eth1 = FakePort("eth0", MAC0), FakePort("eth1", MAC1)
    core.set_ports({"eth0": eth0, "eth1": eth1})
    return core, eth0, eth1


def who_has(address: ipaddress.IPv4Address) -> bytes:
    return packets.arp_request(TOR_MAC, TOR4, address)


def solicit(address: ipaddress.IPv6Address) -> bytes:
    return packets.neighbor_solicitation(
        eth_src=TOR_MAC, source=TOR_LL, target=address, source_mac=TOR_MAC
    )


def test_gaining_sends_both_garp_forms_and_an_na_on_every_allowed_port_at_once() -> None:
    core, eth0, eth1 = setup()
    gained, lost = core.set_owned({VIP4: (), VIP6: ("eth1",)}, now=0.0)
    assert (gained, lost) == (frozenset({VIP4, VIP6}), frozenset())
    assert core.schedule.next_due() == 0.0
    core.tick(0.0)
    sent0, sent1 = eth0.take(), eth1.take()
    assert [(p.operation, p.sender_ip) for p in sent0 if isinstance(p, packets.Arp)] == [
        (packets.ARP_REQUEST, VIP4),
        (packets.ARP_REPLY, VIP4),
    ]
    assert not any(isinstance(p, packets.NeighborAdvertisement) for p in sent0)
    na = [p for p in sent1 if isinstance(p, packets.NeighborAdvertisement)]
    assert [(p.target, p.override, p.solicited, p.target_mac) for p in na] == [
        (VIP6, True, False, MAC1)
    ]
    assert len(sent1) == 3  # 2 ARP + 1 NA
    assert core.stats.gratuitous_sent == {str(VIP4): 4, str(VIP6): 1}


def test_gratuitous_rounds_repeat_on_the_clock_and_stop_on_loss() -> None:
    core, eth0, _ = setup()
    core.set_owned({VIP4: ("eth0",)}, now=10.0)
    core.tick(10.0)
    rounds = [10.0]
    assert len(eth0.take()) == 2
    while (due := core.schedule.next_due()) is not None:
        assert core.tick(due) == core.schedule.next_due()
        assert len(eth0.take()) == 2
        rounds.append(round(due, 2))
    assert rounds == [10.0, 11.1, 12.2, 13.3, 14.4]

    core.set_owned({VIP4B: ("eth0",)}, now=20.0)
    eth0.take()
    core.set_owned({}, now=20.5)
    assert core.schedule.next_due() is None
    assert core.tick(21.1) is None
    assert eth0.take() == []


def test_a_burst_that_cannot_leave_because_the_link_is_down_ends() -> None:
    """Cut off, a takeover made from a stale view is not carried on once the link is back; a
    transient error (ENOBUFS) or a link down on only one of the ports does not end it."""
    core, eth0, eth1 = setup()
    core.set_owned({VIP4: ("eth0",), VIP4B: ()}, now=0.0)
    eth0.down = True
    core.tick(0.0)
    assert core.schedule.pending() == frozenset({VIP4B})  # eth1 took VIP4B's frames
    assert eth0.take() == [] and len(eth1.take()) == 2
    eth0.down = False
    core.tick(1.1)
    # VIP4's burst is over; VIP4B's goes on, on both ports now.
    assert {p.sender_ip for p in eth0.take() if isinstance(p, packets.Arp)} == {VIP4B}
    assert len(eth1.take()) == 2
    eth1.fail = True
    core.tick(2.2)
    assert core.schedule.pending() == frozenset({VIP4B})  # a transient error: still on
    eth1.fail = False
    eth0.take()
    # Announced again once back (the return path): a new burst on the link that is up now.
    assert core.announce_again([VIP4], 3.0) == frozenset({VIP4})
    core.tick(3.0)
    assert {p.sender_ip for p in eth0.take() if isinstance(p, packets.Arp)} == {VIP4}


def test_unchanged_ownership_sends_nothing_and_changed_interfaces_announce_again() -> None:
    core, eth0, eth1 = setup()
    core.set_owned({VIP4: ("eth0",)}, now=0.0)
    core.tick(0.0)
    eth0.take()
    assert core.set_owned({VIP4: ("eth0",)}, now=0.4) == (frozenset(), frozenset())
    core.tick(0.4)
    assert eth0.take() == [] and eth1.take() == []
    gained, _ = core.set_owned({VIP4: ("eth0", "eth1")}, now=0.5)
    assert gained == frozenset({VIP4})
    # Still inside the first burst: the window is extended, the next round comes at 1.1 s.
    core.tick(1.1)
    assert len(eth0.take()) == 2 and len(eth1.take()) == 2


def test_requests_are_answered_only_while_owned() -> None:
    core, eth0, _ = setup()
    core.set_owned({VIP4: (), VIP6: ()}, now=0.0)
    eth0.take()
    decision = core.handle(eth0, who_has(VIP4))
    assert isinstance(decision, responding.Answer)
    (reply,) = eth0.take()
    assert isinstance(reply, packets.Arp)
    assert (reply.sender_mac, reply.sender_ip, reply.eth_dst) == (MAC0, VIP4, TOR_MAC)
    assert isinstance(core.handle(eth0, solicit(VIP6)), responding.Answer)
    (na,) = eth0.take()
    assert isinstance(na, packets.NeighborAdvertisement) and na.solicited

    core.set_owned({VIP6: ()}, now=1.0)
    assert core.handle(eth0, who_has(VIP4)) == responding.Ignore(responding.Reason.NOT_OWNER, VIP4)
    assert eth0.take() == []
    assert core.stats.requests_received == {str(VIP4): 1, str(VIP6): 1}
    assert core.stats.responses_sent == {str(VIP4): 1, str(VIP6): 1}


def test_interface_restriction_applies_to_answers() -> None:
    core, eth0, eth1 = setup()
    core.set_owned({VIP4: ("eth1",)}, now=0.0)
    assert core.handle(eth0, who_has(VIP4)) == responding.Ignore(
        responding.Reason.WRONG_INTERFACE, VIP4
    )
    assert isinstance(core.handle(eth1, who_has(VIP4)), responding.Answer)


def test_failed_send_counts_the_request_but_not_a_response() -> None:
    core, eth0, _ = setup()
    core.set_owned({VIP4: ()}, now=0.0)
    eth0.fail = True
    assert isinstance(core.handle(eth0, who_has(VIP4)), responding.Answer)
    assert core.stats.requests_received[str(VIP4)] == 1
    assert core.stats.responses_sent[str(VIP4)] == 0


def test_solicited_node_groups_follow_owned_v6_addresses_per_interface() -> None:
    core, eth0, eth1 = setup()
    other = ipaddress.IPv6Address("fd00:251::200")  # same low 24 bits -> same group as VIP6
    core.set_owned({VIP6: ("eth0",), other: (), VIP4: ()}, now=0.0)
    group = packets.multicast_mac(packets.solicited_node(VIP6))
    assert group == packets.multicast_mac(packets.solicited_node(other))
    # All-nodes too, where another machine's unsolicited advertisement would go.
    joined = frozenset({group, announcing.ALL_NODES_MAC})
    assert packets.mac_bytes("33:33:00:00:00:01") == announcing.ALL_NODES_MAC
    assert eth0.groups == joined and eth1.groups == joined
    core.set_owned({VIP6: ("eth0",)}, now=1.0)
    assert eth0.groups == joined and eth1.groups == frozenset()
    core.set_owned({}, now=2.0)
    assert eth0.groups == frozenset()


def test_ports_without_arp_or_ndp_get_no_frames_of_that_kind() -> None:
    core = announcing.Announcer()
    v6only = FakePort("eth0", MAC0, arp=False)
    v4only = FakePort("eth1", MAC1, ndp=False)
    core.set_ports({"eth0": v6only, "eth1": v4only})
    core.set_owned({VIP4: (), VIP6: ()}, now=0.0)
    core.tick(0.0)
    assert v6only.sent and v4only.sent
    assert all(isinstance(p, packets.NeighborAdvertisement) for p in v6only.take())
    assert all(isinstance(p, packets.Arp) for p in v4only.take())
    assert v4only.groups == frozenset()


def test_a_large_takeover_is_announced_in_batches() -> None:
    core, eth0, _ = setup()
    many: dict[packets.IPAddress, tuple[str, ...]] = {
        ipaddress.IPv4Address("10.254.0.0") + i: ("eth0",) for i in range(100)
    }
    core.set_owned(many, now=0.0)
    assert core.tick(0.0, limit=64) == 0.0  # more are due right away
    assert len(eth0.take()) == 2 * 64
    assert core.tick(0.0, limit=64) == 1.1
    assert len(eth0.take()) == 2 * 36
    assert core.stats.gratuitous_sent.total() == 200


def test_new_ports_get_the_current_groups() -> None:
    core = announcing.Announcer()
    core.set_owned({VIP6: ()}, now=0.0)
    late = FakePort("eth0", MAC0)
    core.set_ports({"eth0": late})
    assert late.groups == frozenset(
        {packets.multicast_mac(packets.solicited_node(VIP6)), announcing.ALL_NODES_MAC}
    )


def test_metrics_use_metallb_names_and_ip_labels() -> None:
    stats = metrics.Stats()
    stats.requests_received["10.250.0.200"] += 3
    stats.responses_sent["10.250.0.200"] += 2
    stats.gratuitous_sent["fd00:250::200"] += 5
    registry = prometheus.Registry()
    registry.register(metrics.Collector(stats))
    text = registry.exposition().decode()
    assert 'metallb_layer2_requests_received{ip="10.250.0.200"} 3.0' in text
    assert 'metallb_layer2_responses_sent{ip="10.250.0.200"} 2.0' in text
    assert 'metallb_layer2_gratuitous_sent{ip="fd00:250::200"} 5.0' in text
    # MetalLB's names carry no `_total`; our own typed counter of malformed frames does.
    assert not [line for line in text.splitlines() if "metallb_" in line and "_total" in line]
    assert "ironlb_speaker_malformed_layer2_frames_total 0.0" in text


# --- periodic gratuitous announcements (--gratuitous-arp-interval) -----------------------------


def refreshing(interval: float) -> tuple[announcing.Announcer, FakePort, FakePort]:
    core = announcing.Announcer(refresh=gratuitous.Refresh(interval))
    eth0, eth1 = FakePort("eth0", MAC0), FakePort("eth1", MAC1)
    core.set_ports({"eth0": eth0, "eth1": eth1})
    return core, eth0, eth1


def run_until(core: announcing.Announcer, until: float) -> list[float]:
    """Wake the announcer exactly when it asks (as its timer does) up to `until`; returns the
    times at which it was woken."""
    woken = []
    while (due := core.next_due()) is not None and due <= until:
        core.tick(due)
        woken.append(round(due, 2))
    return woken


def test_without_an_interval_nothing_follows_the_burst() -> None:
    core, _, _ = setup()
    core.set_owned({VIP4: ("eth0",)}, now=0.0)
    assert run_until(core, 3600.0) == [0.0, 1.1, 2.2, 3.3, 4.4]
    assert core.next_due() is None
    assert core.stats.gratuitous_sent == {str(VIP4): 10}


def test_every_owned_address_is_announced_every_interval_after_its_burst() -> None:
    core, eth0, eth1 = refreshing(30.0)
    core.set_owned({VIP4: ("eth0",), VIP6: ()}, now=0.0)
    assert run_until(core, 100.0) == [0.0, 1.1, 2.2, 3.3, 4.4, 34.4, 64.4, 94.4]
    sent0, sent1 = eth0.take(), eth1.take()
    # Each round as on takeover: both ARP forms on the allowed port, an NA on every port.
    arp0 = [p for p in sent0 if isinstance(p, packets.Arp)]
    assert len(arp0) == 2 * 8 and {p.sender_ip for p in arp0} == {VIP4}
    assert not any(isinstance(p, packets.Arp) for p in sent1)
    for sent, mac in ((sent0, MAC0), (sent1, MAC1)):
        na = [p for p in sent if isinstance(p, packets.NeighborAdvertisement)]
        assert [(p.target, p.override, p.solicited, p.target_mac) for p in na] == [
            (VIP6, True, False, mac)
        ] * 8
    # Counted as MetalLB counts them: in metallb_layer2_gratuitous_sent, per frame.
    assert core.stats.gratuitous_sent == {str(VIP4): 2 * 8, str(VIP6): 2 * 8}


def test_an_interval_shorter_than_the_burst_spacing_never_collides_with_it() -> None:
    core, eth0, _ = refreshing(1.0)
    sent_at: list[float] = []
    core.set_owned({VIP4: ("eth0",)}, now=0.0)
    while (due := core.next_due()) is not None and due <= 8.0:
        core.tick(due)
        if eth0.take():
            sent_at.append(round(due, 2))
    assert sent_at == [0.0, 1.1, 2.2, 3.3, 4.4, 5.4, 6.4, 7.4]


def test_a_lost_address_gets_no_periodic_frame_after_failover() -> None:
    """The stale-announcement case: once another node owns the address, a periodic frame from
    this one would move the neighbours' entries back here."""
    core, eth0, eth1 = refreshing(2.0)
    core.set_owned({VIP4: (), VIP4B: ()}, now=0.0)
    run_until(core, 8.5)  # burst, then periodic rounds at 6.4 and 8.4
    eth0.take(), eth1.take()
    assert core.next_due() == pytest.approx(10.4)
    # Failover at 10.0: VIP4 moves to another node, just before its round is due.
    core.set_owned({VIP4B: ()}, now=10.0)
    assert core.refresh.pending() == frozenset({VIP4B})
    for now in (10.4, 12.4, 14.4, 100.0):
        core.tick(now)
    sent = [p for p in eth0.take() + eth1.take() if isinstance(p, packets.Arp)]
    assert sent and {p.sender_ip for p in sent} == {VIP4B}
    before = core.stats.gratuitous_sent[str(VIP4)]
    core.set_owned({}, now=101.0)
    assert core.next_due() is None
    assert core.tick(1000.0) is None
    assert eth0.take() == [] and eth1.take() == []
    assert core.stats.gratuitous_sent[str(VIP4)] == before


def test_regaining_starts_a_burst_then_the_refresh_again() -> None:
    core, _, _ = refreshing(10.0)
    core.set_owned({VIP4: ("eth0",)}, now=0.0)
    run_until(core, 20.0)
    core.set_owned({}, now=20.0)
    core.set_owned({VIP4: ("eth0",)}, now=30.0)  # this node owns it again
    assert run_until(core, 50.0) == [30.0, 31.1, 32.2, 33.3, 34.4, 44.4]


def test_changed_interfaces_announce_at_once_and_push_the_next_round() -> None:
    core, eth0, eth1 = refreshing(10.0)
    core.set_owned({VIP4: ("eth0",)}, now=0.0)
    run_until(core, 15.0)  # periodic round at 14.4
    eth0.take()
    core.set_owned({VIP4: ("eth0", "eth1")}, now=16.0)
    assert run_until(core, 30.0) == [16.0, 17.1, 18.2, 19.3, 20.4]
    assert core.next_due() == pytest.approx(30.4)
    assert len(eth1.take()) == 2 * 5


def test_takeover_rounds_go_first_when_a_batch_is_full() -> None:
    core, eth0, _ = refreshing(5.0)
    old = ipaddress.IPv4Address("10.254.1.0")
    core.set_owned({old: ("eth0",)}, now=0.0)
    run_until(core, 4.5)
    eth0.take()
    # At 9.4 the old address's periodic round is due; 3 addresses are taken over then too.
    new: dict[packets.IPAddress, tuple[str, ...]] = {
        ipaddress.IPv4Address("10.254.0.0") + i: ("eth0",) for i in range(3)
    }
    core.set_owned({old: ("eth0",), **new}, now=9.4)
    assert core.tick(9.4, limit=2) == 9.4  # more are due at once
    first = {p.sender_ip for p in eth0.take() if isinstance(p, packets.Arp)}
    assert len(first) == 2 and first < set(new)
    assert core.tick(9.4, limit=2) == pytest.approx(10.5)
    second = {p.sender_ip for p in eth0.take() if isinstance(p, packets.Arp)}
    assert second == (set(new) - first) | {old}


async def test_the_layer2_announcer_arms_its_timer_for_the_periodic_rounds() -> None:
    """The asyncio shell wakes for periodic rounds too (no sleeping: the timer is looked at)."""
    l2 = announcing.Layer2Announcer(scan=list, gratuitous_interval=30.0)
    l2.core.schedule = gratuitous.Schedule(window=0.0)  # a burst of one round
    async with l2:
        loop = asyncio.get_running_loop()
        l2.set_owned({VIP4: ()})
        timer = l2._gratuitous_timer
        assert timer is not None and timer.when() <= loop.time()
        timer.cancel()
        l2._fire()  # the burst's one round; the next wake-up is the periodic one
        timer = l2._gratuitous_timer
        assert timer is not None
        assert timer.when() == pytest.approx(loop.time() + 30.0, abs=1.0)
        l2.set_owned({})
        assert l2._gratuitous_timer is None


@dataclass
class OpenedPort(FakePort):
    """A port as `Layer2Announcer` opens one: with the interface's index and no sockets."""

    index: int = 0
    sockets: tuple[object, ...] = ()

    def close(self) -> None:
        pass


def facts(name: str, index: int, *, up: bool = True) -> interfaces.InterfaceFacts:
    return fake_interfaces.facts(name, index, MAC0 if index == 2 else MAC1, up=up)


async def test_the_interfaces_answering_follow_each_scan() -> None:
    """What the agent compares an L2Advertisement's interfaces with (MetalLB's
    announcer.GetInterfaces): unknown before the first scan, then the eligible interfaces
    with a port open, replaced whole by each scan."""
    scanned = [facts("eth0", 2), facts("eth1", 3)]

    def open_port(f: interfaces.InterfaceFacts, e: interfaces.Eligibility) -> OpenedPort:
        return OpenedPort(f.name, f.mac, e.arp, e.ndp, index=f.index)

    l2 = announcing.Layer2Announcer(
        scan=lambda: list(scanned),
        open_port=open_port,  # type: ignore[arg-type]
        scan_interval=3600.0,
    )
    assert l2.answering is None
    async with l2:
        assert l2.answering == frozenset({"eth0", "eth1"})
        scanned[1] = facts("eth1", 3, up=False)
        l2.rescan()
        assert l2.answering == frozenset({"eth0"})


def test_announcing_again_starts_a_burst_for_owned_addresses_only() -> None:
    core, eth0, _ = setup()
    core.set_owned({VIP4: ()}, now=0.0)
    due = core.next_due()
    while due is not None:  # the burst of the gain runs out
        due = core.tick(due)
    eth0.take()
    again = core.announce_again([VIP4, VIP4B], now=20.0)
    assert again == frozenset({VIP4})  # VIP4B is not ours to announce
    assert core.next_due() == 20.0
    core.tick(20.0)
    sent = [p for p in eth0.take() if isinstance(p, packets.Arp)]
    assert {p.sender_ip for p in sent} == {VIP4}


async def test_a_link_event_rescans_at_once_and_a_port_back_up_announces_nothing_itself() -> None:
    """Links going down and up are seen from a link event, not only at the periodic scan. A
    takeover burst with its link down ends, and the port back up sends nothing by itself: our
    view from while we were cut off is stale (what we hold goes again through the return
    path, `election.to_announce_again`, once the port is open)."""
    scanned = [facts("eth0", 2)]
    opened: list[OpenedPort] = []
    events, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    events.setblocking(False)

    def open_port(f: interfaces.InterfaceFacts, e: interfaces.Eligibility) -> OpenedPort:
        opened.append(OpenedPort(f.name, f.mac, e.arp, e.ndp, index=f.index))
        return opened[-1]

    async def link_event() -> None:
        kernel.send(b"RTM_NEWLINK")
        for _ in range(100):  # bounded: 100 x 10 ms
            await asyncio.sleep(0.01)
            if l2._link_rescan is None and not events_pending():
                return

    def events_pending() -> bool:
        try:
            return bool(events.recv(1, socket.MSG_PEEK))
        except BlockingIOError:
            return False

    l2 = announcing.Layer2Announcer(
        scan=lambda: list(scanned),
        open_port=open_port,  # type: ignore[arg-type]
        scan_interval=3600.0,  # the periodic scan never comes within this test
        link_events=lambda: events,
    )
    try:
        async with l2:
            assert l2.answering == frozenset({"eth0"})
            scanned[0] = facts("eth0", 2, up=False)
            await link_event()
            assert l2.answering == frozenset()  # closed at the event
            l2.set_owned({VIP4: [], VIP4B: []})  # gained while cut off: a burst nobody hears
            l2._fire()
            assert l2.core.next_due() is None  # so it ends
            scanned[0] = facts("eth0", 2)
            await link_event()
            assert l2.answering == frozenset({"eth0"}) and len(opened) == 2
            assert l2.core.next_due() is None
            assert opened[1].take() == []
            l2.announce_again([VIP4])  # the return path
            l2._fire()
            sent = [p for p in opened[1].take() if isinstance(p, packets.Arp)]
            assert {p.sender_ip for p in sent} == {VIP4}
    finally:
        kernel.close()
