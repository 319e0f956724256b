"""The ARP/NDP data plane in the lab, without Kubernetes.

Each node namespace runs `python -m speaker.layer2 serve` and is told on stdin which addresses it
owns. Witnesses on the ToR: arping, ndisc6, our raw prober (who answered, how fast), the kernel
neighbour table and tcpdump. Every node has the VIPs on `lo` (like kube-proxy IPVS) with strict
ARP, so traffic reaches whichever node the ToR resolved the VIP to, and only the speaker answers.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import lab as network_lab
from speaker.layer2 import gratuitous

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT)}
VIP4 = "10.250.0.200"
VIP6 = "fd00:250::200"
OTHER4 = "10.250.0.201"
STEP_TIMEOUT_S = 15.0


class Speaker:
    """The layer-2 runner in one node namespace, driven over its stdin/stdout."""

    def __init__(self, lab: network_lab.Lab, index: int) -> None:
        self.index = index
        self.mac = lab.node_mac(index)
        self.log = lab.directory / f"layer2-node{index}.log"
        with open(self.log, "ab") as log:
            self.process = lab.popen(
                f"node{index}",
                sys.executable,
                "-m",
                "speaker.layer2",
                "serve",
                "--log-level",
                "info",
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, **ENV},
                cwd=ROOT,
                bufsize=0,
            )
        self._buffer = b""
        self.ready = self._read()["ready"]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                raise AssertionError(f"node{self.index} runner silent: {self.log.read_text()}")
            readable, _, _ = select.select([self.process.stdout], [], [], remaining)
            if readable:
                self._buffer += os.read(self.process.stdout.fileno(), 65536)
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        return self._read()

    def own(self, owned: dict[str, list[str]]) -> None:
        """Own exactly these addresses; returns once the runner has applied them."""
        assert self._ask({"owned": owned}) == {"applied": len(owned)}

    def stats(self) -> dict[str, dict[str, int]]:
        stats: dict[str, dict[str, int]] = self._ask({"stats": True})["stats"]
        return stats

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def runners(lab: network_lab.Lab) -> Iterator[dict[int, Speaker]]:
    for i in range(1, lab.nodes + 1):
        for vip in (f"{VIP4}/32", f"{VIP6}/128"):
            lab.exec(f"node{i}", "ip", "addr", "add", vip, "dev", "lo", check=True)
    started: dict[int, Speaker] = {}
    try:
        for i in range(1, lab.nodes + 1):
            started[i] = Speaker(lab, i)
        yield started
    finally:
        for speaker in started.values():
            speaker.close()
        for i in range(1, lab.nodes + 1):
            for vip in (f"{VIP4}/32", f"{VIP6}/128"):
                lab.exec(f"node{i}", "ip", "addr", "del", vip, "dev", "lo")


@pytest.fixture
def speakers(lab: network_lab.Lab, runners: dict[int, Speaker]) -> dict[int, Speaker]:
    """The runners with nothing owned, and a ToR that has forgotten the VIPs."""
    for speaker in runners.values():
        speaker.own({})
    for vip in (VIP4, VIP6):
        lab.exec("tor", "ip", "neigh", "del", vip, "dev", "br0")
    return runners


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def write(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[{request.node.name}] {line}")

    return write


def probe(
    lab: network_lab.Lab,
    *addresses: str,
    count: int | None = None,
    window: float = 0.3,
    first: bool = False,
) -> dict[str, Any]:
    """Our prober on the ToR; with `first` each probe ends at its first answer."""
    args = ["probe", "-i", "br0", "--window", str(window), *addresses]
    if count is not None:
        args[1:1] = ["--count", str(count)]
    if first:
        args[1:1] = ["--first"]
    result = lab.exec("tor", sys.executable, "-m", "speaker.layer2", *args, env=ENV, timeout=600)
    assert result.returncode == 0, result.stderr
    probed: dict[str, Any] = json.loads(result.stdout)
    return probed


def responders(lab: network_lab.Lab, address: str, count: int = 3) -> list[list[str]]:
    return [p["macs"] for p in probe(lab, address, count=count)["probes"]]


def arping(lab: network_lab.Lab, address: str) -> list[str]:
    result = lab.exec("tor", "arping", "-b", "-c", "3", "-w", "4", "-I", "br0", address)
    return [m.lower() for m in re.findall(r"reply from \S+ \[([0-9A-Fa-f:]{17})\]", result.stdout)]


def ndisc(lab: network_lab.Lab, address: str) -> list[str]:
    result = lab.exec("tor", "ndisc6", "-n", "-r", "3", "-w", "500", address, "br0")
    return [
        m.lower()
        for m in re.findall(r"Target link-layer address: ([0-9A-Fa-f:]{17})", result.stdout)
    ]


def neighbour(lab: network_lab.Lab, address: str) -> str | None:
    shown = lab.exec("tor", "ip", "-j", "neigh", "show", address, "dev", "br0").stdout
    entries = json.loads(shown or "[]")
    return entries[0].get("lladdr") if entries else None


def wait_for_neighbour(lab: network_lab.Lab, address: str, mac: str) -> float | None:
    """Seconds until the ToR's entry for `address` shows `mac` (polled), None if it never did."""
    started = time.monotonic()
    while time.monotonic() - started < 8.0:
        if neighbour(lab, address) == mac:
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def test_arping_is_answered_by_exactly_the_owner(
    lab: network_lab.Lab, speakers: dict[int, Speaker]
) -> None:
    speakers[1].own({VIP4: []})
    speakers[2].own({OTHER4: []})  # a live speaker that owns something else stays quiet
    assert arping(lab, VIP4) == [lab.node_mac(1)] * 3
    assert responders(lab, VIP4) == [[lab.node_mac(1)]] * 3
    assert responders(lab, OTHER4) == [[lab.node_mac(2)]] * 3


def test_ndisc6_is_answered_by_exactly_the_owner(
    lab: network_lab.Lab, speakers: dict[int, Speaker]
) -> None:
    speakers[3].own({VIP6: []})
    assert ndisc(lab, VIP6) == [lab.node_mac(3)]
    assert responders(lab, VIP6) == [[lab.node_mac(3)]] * 3


def test_the_tor_routes_client_traffic_to_the_owner_v4_and_v6(
    lab: network_lab.Lab, speakers: dict[int, Speaker]
) -> None:
    speakers[2].own({VIP4: [], VIP6: []})
    for vip in (VIP4, VIP6):
        result = lab.exec("client", "ping", "-c", "2", "-W", "2", vip)
        assert result.returncode == 0, result.stdout
        assert neighbour(lab, vip) == lab.node_mac(2)


@pytest.mark.parametrize("vip", [VIP4, VIP6])
def test_moving_ownership_moves_the_tors_existing_entry(
    lab: network_lab.Lab,
    speakers: dict[int, Speaker],
    report: Callable[[str], None],
    vip: str,
) -> None:
    speakers[1].own({vip: []})
    assert lab.exec("client", "ping", "-c", "1", "-W", "2", vip).returncode == 0
    assert neighbour(lab, vip) == lab.node_mac(1)
    # Failover: the old owner lets go, the new one takes over; nobody flushes the ToR.
    speakers[1].own({})
    speakers[2].own({vip: []})
    moved = wait_for_neighbour(lab, vip, lab.node_mac(2))
    assert moved is not None, f"ToR still has {neighbour(lab, vip)} for {vip}"
    report(f"ToR entry for {vip} moved to node2 after {moved * 1000:.0f} ms")
    assert lab.exec("client", "ping", "-c", "1", "-W", "2", vip).returncode == 0
    assert neighbour(lab, vip) == lab.node_mac(2)


@pytest.mark.parametrize("vip", [VIP4, VIP6])
def test_a_released_address_is_not_answered_from_the_next_request_on(
    lab: network_lab.Lab, speakers: dict[int, Speaker], vip: str
) -> None:
    speakers[1].own({vip: []})
    assert responders(lab, vip, count=1) == [[lab.node_mac(1)]]
    speakers[1].own({})
    assert responders(lab, vip, count=3) == [[], [], []]


def test_listed_interfaces_are_honoured(lab: network_lab.Lab, speakers: dict[int, Speaker]) -> None:
    speakers[1].own({VIP4: ["eth1"]})  # node1 has no eth1
    assert responders(lab, VIP4, count=1) == [[]]
    speakers[1].own({VIP4: ["eth0"]})
    assert responders(lab, VIP4, count=1) == [[lab.node_mac(1)]]


def test_gratuitous_burst_on_the_wire(
    lab: network_lab.Lab, speakers: dict[int, Speaker], report: Callable[[str], None]
) -> None:
    mac = lab.node_mac(3)
    before = speakers[3].stats()["gratuitous_sent"]
    capture = lab.popen(
        "tor",
        "tcpdump", "-i", "br0", "-nn", "-e", "-l", "-tt", "-Q", "in",
        f"ether src {mac} and (arp or (icmp6 and ip6[40] == 136))",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        time.sleep(1.0)  # tcpdump needs a moment before it captures
        speakers[3].own({VIP4: [], VIP6: []})
        time.sleep(6.5)
    finally:
        capture.terminate()
        out, _ = capture.communicate(timeout=10)
    lines = [line for line in out.splitlines() if line.strip()]
    requests = [line for line in lines if "Request who-has 10.250.0.200 tell 10.250.0.200" in line]
    replies = [line for line in lines if "Reply 10.250.0.200 is-at" in line]
    adverts = [line for line in lines if "neighbor advertisement, tgt is fd00:250::200" in line]
    assert (len(requests), len(replies), len(adverts)) == (5, 5, 5), out
    assert all("ff:ff:ff:ff:ff:ff" in line for line in requests + replies)
    assert all("> 33:33:00:00:00:01" in line for line in adverts)
    times = [float(line.split()[0]) for line in requests]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Each repeat must clear Linux's 1 s neighbour locktime.
    assert all(gap >= 1.0 for gap in gaps), gaps
    report("gratuitous rounds at +" + ", +".join(f"{t - times[0]:.2f}" for t in times) + " s")
    after = speakers[3].stats()["gratuitous_sent"]
    sent = {vip: after.get(vip, 0) - before.get(vip, 0) for vip in (VIP4, VIP6)}
    assert sent == {VIP4: 10, VIP6: 5}


def test_metrics_count_requests_and_responses(
    lab: network_lab.Lab, speakers: dict[int, Speaker]
) -> None:
    before = speakers[2].stats()
    speakers[2].own({VIP4: []})
    probe(lab, VIP4, count=4)
    after = speakers[2].stats()
    for key in ("requests_received", "responses_sent"):
        assert after[key].get(VIP4, 0) - before[key].get(VIP4, 0) == 4


def test_reply_latency_with_1000_owned_addresses(
    lab: network_lab.Lab, speakers: dict[int, Speaker], report: Callable[[str], None]
) -> None:
    v4 = [str(ipaddress.IPv4Address("10.254.0.0") + i) for i in range(1000)]
    v6 = [str(ipaddress.IPv6Address("fd00:254::") + i) for i in range(1000)]
    speakers[3].own({address: [] for address in v4 + v6})
    # Steady state: the takeover's gratuitous rounds (3,000 frames each) are over.
    time.sleep(gratuitous.WINDOW_S + 0.5)
    for family, addresses, baseline in (
        ("ARP", v4, str(lab.node_v4(3))),
        ("NDP", v6, str(lab.node_v6(3))),
    ):
        measured = probe(lab, *addresses, window=0.05, first=True)
        answered = {tuple(p["macs"]) for p in measured["probes"]}
        assert answered == {(lab.node_mac(3),)}, f"{family}: {answered}"
        kernel = probe(lab, baseline, count=300, window=0.05, first=True)["summary"]
        s = measured["summary"]
        assert s["answered"] == 1000
        report(
            f"{family} reply latency, 1000 probes over 1000 owned (+1000 other-family): "
            f"median {s['median_ms']:.3f} ms, p99 {s['p99_ms']:.3f} ms, max {s['max_ms']:.3f} ms; "
            f"kernel for the node's own address: median {kernel['median_ms']:.3f} ms, "
            f"p99 {kernel['p99_ms']:.3f} ms"
        )
