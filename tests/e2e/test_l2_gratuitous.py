"""Periodic gratuitous ARP / unsolicited NA (`--gratuitous-arp-interval`, MetalLB 0.16.2) end to
end: controller + three speakers in the lab, every speaker started with an interval of 1 s.

The witness is tcpdump on the ToR's LAN bridge: the ToR is the L2 client of the VIPs (it resolves
them for the client network it routes), and the one neighbour that hears every node's broadcasts.
The lab's client sits behind the ToR, where no ARP reaches. A gratuitous frame is told apart from
an answer to the ToR's own requests by its form: a broadcast ARP request or reply whose sender is
the VIP itself, or a neighbour advertisement to all-nodes (ff02::1) with the VIP as target.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from hack import deploy, objects, witness
from hack import lab as network_lab
from speaker import election
from speaker.layer2 import gratuitous

pytestmark = pytest.mark.e2e

POOL = "lab-l2"
INTERVAL_S = 1
# tcpdump stamps frames when they reach the ToR; the speaker's timer and a busy 2-core machine
# add their delays, so rounds are checked against the interval with this much room either way.
EARLY_S = 0.1
LATE_S = 1.0
BROADCAST = "ff:ff:ff:ff:ff:ff"
ALL_NODES = "33:33:00:00:00:01"


@pytest.fixture(scope="module")
def deployment(lab: network_lab.Lab) -> Iterator[deploy.Deployment]:
    objects.clear_configuration(lab)
    objects.apply(
        lab,
        objects.metallb(
            "IPAddressPool",
            POOL,
            {
                "addresses": [
                    f"{network_lab.L2_POOL_V4[0]}-{network_lab.L2_POOL_V4[1]}",
                    f"{network_lab.L2_POOL_V6[0]}-{network_lab.L2_POOL_V6[1]}",
                ]
            },
        ),
        objects.metallb("L2Advertisement", "lab-l2", {"ipAddressPools": [POOL]}),
    )
    try:
        flags = (f"--gratuitous-arp-interval={INTERVAL_S}",)
        with deploy.deployed(lab, speaker_flags=flags) as d:
            yield d
    finally:
        objects.clear_configuration(lab)


# --- the witness ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Frame:
    t: float  # wall-clock seconds, as tcpdump -tt prints them
    node: int | None  # the sender, by its MAC
    vip: str
    kind: str  # "request", "reply" (gratuitous ARP, both forms) or "na"


ARP_REQUEST = re.compile(r"Request who-has (\S+)(?: \([0-9a-f:]+\))? tell (\S+?),")
ARP_REPLY = re.compile(r"Reply (\S+) is-at ")
ADVERTISEMENT = re.compile(r"neighbor advertisement, tgt is (\S+?),")


def parse(line: str, macs: dict[str, int]) -> Frame | None:
    """A gratuitous frame from one line of `tcpdump -e -nn -tt`, else None."""
    fields = line.split()
    if len(fields) < 4:
        return None
    t, source, destination = float(fields[0]), fields[1].lower(), fields[3].rstrip(",").lower()
    if (found := ARP_REQUEST.search(line)) and found.group(1) == found.group(2):
        kind, vip = "request", found.group(1)
    elif (found := ARP_REPLY.search(line)) and destination == BROADCAST:
        kind, vip = "reply", found.group(1)
    elif (found := ADVERTISEMENT.search(line)) and destination == ALL_NODES:
        kind, vip = "na", str(ipaddress.ip_address(found.group(1)))
    else:
        return None  # an answer to the ToR's own request, or another kind of frame
    return Frame(t, macs.get(source), vip, kind)


class Capture:
    """tcpdump on the ToR's LAN bridge, of what the nodes send, written to a file (a pipe left
    unread for a minute could fill and stall it)."""

    def __init__(self, lab: network_lab.Lab, path: Path) -> None:
        self.macs = {lab.node_mac(i): i for i in range(1, lab.nodes + 1)}
        senders = " or ".join(f"ether src {mac}" for mac in self.macs)
        self.path = path
        self.errors = path.with_suffix(".err")
        self._out: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in stop()
        self._err: IO[bytes] = open(self.errors, "wb")  # noqa: SIM115 - closed in stop()
        self.process = lab.popen(
            network_lab.NS_TOR,
            "tcpdump", "-i", witness.TOR_LAN, "-nn", "-e", "-l", "-tt", "-Q", "in",
            f"({senders}) and (arp or (icmp6 and ip6[40] == 136))",
            stdout=self._out,
            stderr=self._err,
        )  # fmt: skip
        try:  # tcpdump says so on stderr once it captures
            objects.wait_until(
                "tcpdump to listen",
                lambda: "listening on" in self.errors.read_text(errors="replace"),
                timeout=15,
            )
        except AssertionError:
            self.stop()
            raise

    def frames(self) -> list[Frame]:
        text = self.path.read_text(errors="replace")
        found = (parse(line, self.macs) for line in text.splitlines() if line.strip())
        return [f for f in found if f is not None]

    def stop(self) -> list[Frame]:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)
        self._out.close()
        self._err.close()
        return self.frames()


@pytest.fixture
def capture(lab: network_lab.Lab, tmp_path: Path) -> Iterator[Capture]:
    running = Capture(lab, tmp_path / "tor-br0.txt")
    try:
        yield running
    finally:
        running.stop()


def of(frames: list[Frame], vip: str, kind: str, node: int | None = None) -> list[Frame]:
    return [
        f for f in frames if f.vip == vip and f.kind == kind and (node is None or f.node == node)
    ]


def times(frames: list[Frame]) -> list[float]:
    return sorted(f.t for f in frames)


def assert_every_interval(frames: list[Frame], what: str) -> None:
    """Consecutive rounds neither closer than the interval nor much further apart."""
    stamps = times(frames)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(stamps)]
    assert gaps, f"{what}: fewer than two rounds ({stamps})"
    assert min(gaps) >= INTERVAL_S - EARLY_S, f"{what}: rounds too close: {gaps}"
    assert max(gaps) <= INTERVAL_S + LATE_S, f"{what}: rounds missing: {gaps}"


# --- the speakers' side ------------------------------------------------------------------------


def expected_owner(lab: network_lab.Lab, vip: str) -> int:
    owner = election.owner(vip, lab.node_names)
    assert owner is not None
    return lab.node_names.index(owner) + 1


def gratuitous_sent(lab: network_lab.Lab, node: int, vip: str) -> float:
    """The node's `metallb_layer2_gratuitous_sent{ip=vip}`, scraped from the ToR."""
    url = f"http://{lab.node_v4(node)}:7473/metrics"
    result = lab.exec(
        network_lab.NS_TOR,
        sys.executable, "-m", "hack.httpcheck", "--body", "--timeout=2", url,
        env={"PYTHONPATH": str(network_lab.ROOT)},
        check=True,
    )  # fmt: skip
    [text] = json.loads(result.stdout)
    assert text is not None, f"no /metrics from node{node}"
    sample = re.search(
        rf'^metallb_layer2_gratuitous_sent\{{ip="{re.escape(vip)}"\}} (\S+)$', text, re.MULTILINE
    )
    return float(sample.group(1)) if sample else 0.0


def touch(lab: network_lab.Lab, vip: str) -> None:
    """Make the ToR resolve the VIP, as a client talking to it would."""
    lab.exec(network_lab.NS_TOR, "ping", "-4", "-c", "1", "-W", "1", vip)


# --- the tests -----------------------------------------------------------------------------------


def test_the_owner_announces_every_interval_and_no_other_node_does(
    lab: network_lab.Lab,
    deployment: deploy.Deployment,
    app_namespace: str,
    capture: Capture,
) -> None:
    objects.create_service(lab, app_namespace, "web", dual=True)
    objects.set_backends(lab, app_namespace, "web", [1, 2, 3])
    ips = objects.ingress(lab, app_namespace, "web", 2)
    v4, v6 = sorted(ips, key=lambda a: ":" in a)
    owner = expected_owner(lab, ips[0])  # as in MetalLB, ingress[0] elects for both
    objects.wait_equal("one ARP answer", lambda: witness.arp_macs(lab, v4), {lab.node_mac(owner)})
    objects.wait_equal("the NDP answer", lambda: witness.ndp_mac(lab, v6), lab.node_mac(owner))
    # Past the takeover burst: what follows is the periodic refresh alone.
    time.sleep(gratuitous.WINDOW_S + 0.5)
    before = {vip: gratuitous_sent(lab, owner, vip) for vip in (v4, v6)}
    started = time.time()
    time.sleep(6 * INTERVAL_S + 0.5)
    frames = capture.stop()
    after = {vip: gratuitous_sent(lab, owner, vip) for vip in (v4, v6)}
    frames = [f for f in frames if f.t >= started]

    requests, replies, adverts = (
        of(frames, v4, "request"),
        of(frames, v4, "reply"),
        of(frames, v6, "na"),
    )
    # Only the owner: a non-owner's frame would pull the ToR's entry to itself.
    assert {f.node for f in requests + replies + adverts} == {owner}, frames
    # About six rounds in 6.5 s, each both ARP forms and an NA to all-nodes.
    for what, sent in (("ARP", requests), ("NA", adverts)):
        assert len(sent) >= 4, f"{what}: {times(sent)}"
        assert_every_interval(sent, what)
    assert abs(len(replies) - len(requests)) <= 1, (times(requests), times(replies))
    # Counted as MetalLB counts them, frame by frame (the scrapes bracket the capture).
    assert after[v4] - before[v4] >= len(requests) + len(replies)
    assert after[v6] - before[v6] >= len(adverts)


def test_the_old_owner_falls_silent_once_the_address_moves(
    lab: network_lab.Lab,
    deployment: deploy.Deployment,
    app_namespace: str,
    capture: Capture,
) -> None:
    """A node that stops owning an address (its speaker still running) sends no periodic frame
    for it from then on: one would take the traffic back from the new owner."""
    objects.create_service(lab, app_namespace, "local", local=True, dual=True)
    objects.set_backends(lab, app_namespace, "local", [1])
    ips = objects.ingress(lab, app_namespace, "local", 2)
    v4, v6 = sorted(ips, key=lambda a: ":" in a)
    objects.wait_equal("node1 to answer", lambda: witness.arp_macs(lab, v4), {lab.node_mac(1)})
    touch(lab, v4)  # the ToR holds an entry for the VIP, as when clients talk to it
    assert witness.neighbour_mac(lab, v4) == lab.node_mac(1)
    # The capture began before the takeover: its five burst rounds, then periodic ones.
    time.sleep(gratuitous.WINDOW_S + 3 * INTERVAL_S)
    refreshed = capture.frames()
    for what, sent in (
        ("ARP", of(refreshed, v4, "request", 1)),
        ("NA", of(refreshed, v6, "na", 1)),
    ):
        assert len(sent) >= 7, f"node1 {what} before the move: {times(sent)}"

    # The only local endpoint moves to node2: so does the address, node1's speaker running on.
    objects.set_backends(lab, app_namespace, "local", [2])
    objects.wait_equal("only node2 to answer", lambda: witness.arp_macs(lab, v4), {lab.node_mac(2)})
    # node1 no longer answers, so it has let the address go: nothing from it may follow.
    moved = time.time()
    time.sleep(gratuitous.WINDOW_S + 3 * INTERVAL_S)  # node2's burst, then its refresh
    frames = capture.stop()

    stale = [f for f in frames if f.node == 1 and f.vip in (v4, v6) and f.t >= moved]
    assert stale == [], f"node1 still announced after the move: {stale}"
    assert not [f for f in frames if f.node == 3 and f.vip in (v4, v6)]
    # node2 took over (its burst moved the ToR's entry) and keeps refreshing.
    for what, sent in (
        ("ARP", of(frames, v4, "request", 2)),
        ("NA", of(frames, v6, "na", 2)),
    ):
        late = [f for f in sent if f.t >= moved]
        assert len(late) >= 3, f"node2 {what}: {times(sent)}"
        assert_every_interval(late, f"node2 {what}")
    # What a stale frame would have broken: the ToR's entry stays with the new owner.
    assert witness.neighbour_mac(lab, v4) == lab.node_mac(2)
