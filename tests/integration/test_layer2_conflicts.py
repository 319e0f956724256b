"""Split brain on a real link: a rogue host claims an address the layer-2 runner answers for.

Two network namespaces joined by a veth pair (`ilbc-...`, deleted afterwards even on failure):
the owner runs `python -m speaker.layer2 serve` (a `Layer2Announcer` whose `on_conflict` the
runner records) and owns the addresses; the rogue claims them with the real tools: iputils
`arping -U` (gratuitous request) and `arping -A` (broadcast reply) for IPv4, and for IPv6 the
Linux kernel itself, which sends an unsolicited neighbour advertisement to all-nodes when it
configures an address with `ndisc_notify=1` (Debian's ndisc6 package has no `ndsend`). Plain
requests for the address (arping, ndisc6) are answered and must not be reported.

Needs root (network namespaces), like the other namespace tests, so it belongs to the e2e tier.
Waits are bounded polls; the IPv4 claims must be reported within one second.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from speaker.layer2 import gratuitous

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OWNER_IP = "10.233.0.1"
ROGUE_IP = "10.233.0.2"
GRATUITOUS_VIP = "10.233.0.200"  # claimed with arping -U
REPLY_VIP = "10.233.0.201"  # claimed with arping -A
VIP6 = "fd00:233::200"
STEP_TIMEOUT_S = 15.0
REPORT_WITHIN_S = 1.0
# The runner's announcements of an address it gains: one unsolicited NA per round.
ROUNDS = int(gratuitous.WINDOW_S / gratuitous.INTERVAL_S) + 1


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=30)


def eventually(predicate: Callable[[], bool], what: str, timeout: float) -> float:
    """Poll `predicate` until it holds; returns how long that took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout:.1f}s: {what}")


class Runner:
    """`python -m speaker.layer2 serve` in a namespace, driven over its stdin/stdout."""

    def __init__(self, namespace: str, log: Path) -> None:
        self.log = log
        with open(log, "ab") as stderr:
            self.process = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    namespace,
                    sys.executable,
                    "-m",
                    "speaker.layer2",
                    "serve",
                    "--scan-interval",
                    "0.5",
                    "--log-level",
                    "info",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                bufsize=0,
            )
        self._buffer = b""
        self.ready: dict[str, Any] = self._read()["ready"]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                raise AssertionError(f"layer-2 runner silent: {self.log.read_text()}")
            readable, _, _ = select.select([self.process.stdout], [], [], remaining)
            if readable:
                self._buffer += os.read(self.process.stdout.fileno(), 65536)
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        return self._read()

    def own(self, *addresses: str) -> None:
        assert self.ask({"owned": {a: [] for a in addresses}}) == {"applied": len(addresses)}

    def conflicts(self) -> dict[str, Any]:
        return self.ask({"conflicts": True})

    def reported(self, ip: str, mac: str) -> bool:
        """Both reports of (ip, mac): the callback was called and `conflicts()` holds it."""
        answer = self.conflicts()
        current = answer["conflicts"].get(ip)
        called = any(c["ip"] == ip and c["mac"] == mac for c in answer["reported"])
        return called and current is not None and current["mac"] == mac

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class Link:
    """The owner and rogue namespaces, each with an `eth0` on one veth pair."""

    def __init__(self, tag: str) -> None:
        self.owner, self.rogue = f"{tag}-owner", f"{tag}-rogue"

    def exec(self, namespace: str, *argv: str, check: bool = True) -> str:
        return run("ip", "netns", "exec", namespace, *argv, check=check).stdout

    def mac(self, namespace: str) -> str:
        (link,) = json.loads(run("ip", "-n", namespace, "-j", "link", "show", "eth0").stdout)
        return str(link["address"])

    def has_link_local(self, namespace: str) -> bool:
        """One that is no longer tentative (usable as a source)."""
        shown = ("addr", "show", "dev", "eth0", "scope", "link", "-tentative")
        out = run("ip", "-n", namespace, "-6", "-j", *shown)
        return any(info.get("addr_info") for info in json.loads(out.stdout or "[]"))


@pytest.fixture
def link(tmp_path: Path) -> Iterator[tuple[Link, Runner]]:
    if os.geteuid() != 0:
        pytest.fail("the split-brain test needs root (network namespaces)", pytrace=False)
    missing = [tool for tool in ("arping", "ndisc6") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run hack/setup", pytrace=False)
    net = Link(f"ilbc-t{os.getpid() % 100000}")
    created: list[str] = []
    runner: Runner | None = None
    try:
        for ns in (net.owner, net.rogue):
            run("ip", "netns", "add", ns)
            created.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        peer = ("peer", "eth0", "netns", net.rogue)
        run("ip", "-n", net.owner, "link", "add", "eth0", "type", "veth", *peer)
        for ns, address in ((net.owner, OWNER_IP), (net.rogue, ROGUE_IP)):
            run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
        # The runner answers NDP only on interfaces with a link-local address; ndisc6 sends
        # from the rogue's.
        for ns in (net.owner, net.rogue):
            ready = functools.partial(net.has_link_local, ns)
            eventually(ready, f"{ns} has a link-local address", 10.0)
        runner = Runner(net.owner, tmp_path / "layer2-owner.log")
        assert runner.ready == {"eth0": {"arp": True, "ndp": True}}, runner.ready
        yield net, runner
    finally:
        if runner is not None:
            runner.close()
        for ns in reversed(created):
            run("ip", "netns", "del", ns, check=False)


def test_plain_requests_are_answered_and_not_reported(link: tuple[Link, Runner]) -> None:
    net, owner = link
    owner.own(GRATUITOUS_VIP, VIP6)
    owner_mac = net.mac(net.owner)
    # Someone asking who has the address: the runner answers (so it has read the request)...
    out = net.exec(net.rogue, "arping", "-c", "1", "-w", "5", "-I", "eth0", GRATUITOUS_VIP)
    assert owner_mac.upper() in out.upper(), out
    out = net.exec(net.rogue, "ndisc6", "-1", "-r", "3", "-w", "1000", VIP6, "eth0")
    assert owner_mac.upper() in out.upper(), out
    # ... and reports nothing: requests are no claims.
    assert owner.conflicts() == {"conflicts": {}, "reported": []}
    assert owner.ask({"stats": True})["stats"]["responses_sent"] == {GRATUITOUS_VIP: 1, VIP6: 1}


def test_gratuitous_arp_from_a_rogue_is_reported_within_a_second(
    link: tuple[Link, Runner],
) -> None:
    net, owner = link
    owner.own(GRATUITOUS_VIP, REPLY_VIP)
    rogue_mac = net.mac(net.rogue)
    # A rogue host configures the address and announces it (arping needs it to be local).
    for vip in (GRATUITOUS_VIP, REPLY_VIP):
        run("ip", "-n", net.rogue, "addr", "add", f"{vip}/32", "dev", "eth0")
    net.exec(
        net.rogue, "arping", "-c", "1", "-U", "-s", GRATUITOUS_VIP, "-I", "eth0", GRATUITOUS_VIP
    )
    eventually(
        lambda: owner.reported(GRATUITOUS_VIP, rogue_mac),
        f"gratuitous ARP request: {GRATUITOUS_VIP} at {rogue_mac} reported",
        REPORT_WITHIN_S,
    )
    net.exec(net.rogue, "arping", "-c", "1", "-A", "-s", REPLY_VIP, "-I", "eth0", REPLY_VIP)
    eventually(
        lambda: owner.reported(REPLY_VIP, rogue_mac),
        f"broadcast ARP reply: {REPLY_VIP} at {rogue_mac} reported",
        REPORT_WITHIN_S,
    )
    answer = owner.conflicts()
    assert set(answer["conflicts"]) == {GRATUITOUS_VIP, REPLY_VIP}
    for conflict in answer["conflicts"].values():
        assert (conflict["mac"], conflict["interface"]) == (rogue_mac, "eth0")
        assert conflict["count"] >= 1 and conflict["first_seen"] <= conflict["last_seen"]
    # Once per (ip, mac) per report interval, however many claims follow.
    for _ in range(2):
        claim = ("-c", "1", "-U", "-s", GRATUITOUS_VIP, "-I", "eth0", GRATUITOUS_VIP)
        net.exec(net.rogue, "arping", *claim)
    eventually(
        lambda: owner.conflicts()["conflicts"][GRATUITOUS_VIP]["count"] >= 3,
        "the later claims counted",
        REPORT_WITHIN_S,
    )
    assert len(owner.conflicts()["reported"]) == 2
    # Releasing the address drops its conflict.
    owner.own(REPLY_VIP)
    assert set(owner.conflicts()["conflicts"]) == {REPLY_VIP}


def test_unsolicited_advertisement_from_a_rogue_is_reported(link: tuple[Link, Runner]) -> None:
    net, owner = link
    owner.own(VIP6)
    rogue_mac = net.mac(net.rogue)
    # The rogue's kernel configures the address: duplicate address detection (a solicitation
    # from ::, which is no claim and which the runner does not answer), then, with ndisc_notify,
    # an unsolicited advertisement to all-nodes (ff02::1).
    net.exec(net.rogue, "sysctl", "-qw", "net.ipv6.conf.eth0.ndisc_notify=1")
    # While the runner announces the address it gained, the rogue's duplicate address detection
    # hears it and gives up; a host configured after the burst goes ahead.
    eventually(
        lambda: owner.ask({"stats": True})["stats"]["gratuitous_sent"].get(VIP6, 0) >= ROUNDS,
        "the runner's announcements are over",
        gratuitous.WINDOW_S + STEP_TIMEOUT_S,
    )
    run("ip", "-n", net.rogue, "addr", "add", f"{VIP6}/128", "dev", "eth0")
    eventually(
        lambda: owner.reported(VIP6, rogue_mac),
        f"unsolicited advertisement: {VIP6} at {rogue_mac} reported",
        STEP_TIMEOUT_S,
    )
    (conflict,) = owner.conflicts()["reported"]
    assert (conflict["ip"], conflict["interface"]) == (VIP6, "eth0")
