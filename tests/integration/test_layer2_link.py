"""A raw port refuses to send while its link is down, both ways a link goes down: set down
(the kernel says ENETDOWN itself) and a lost carrier (the kernel takes the frame and drops it,
so the port reads the carrier). A takeover burst that cannot leave ends on it
(`Announcer.tick`)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Run inside the namespace: sends one gratuitous ARP per line read, prints the outcome.
PROBE = """
import errno, ipaddress, sys, time
from speaker.layer2 import interfaces, packets, sockets
facts = next(f for f in sockets.scan() if f.name == "l2a")
port = sockets.RawPort(facts, interfaces.Eligibility(arp=True, ndp=False))
frame = packets.gratuitous(facts.mac, ipaddress.IPv4Address("10.250.0.200"))[0]
for _ in sys.stdin:
    time.sleep(sockets.CARRIER_READ_S)  # past the carrier read's cache
    try:
        port.send(frame)
    except OSError as e:
        print("ENETDOWN" if e.errno == errno.ENETDOWN else f"errno {e.errno}", flush=True)
    else:
        print("sent", flush=True)
"""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def test_a_port_whose_link_is_down_refuses_to_send() -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root (a network namespace, raw sockets)", pytrace=False)
    ns = f"l2link-{uuid.uuid4().hex[:8]}"
    ip("netns", "add", ns)
    try:
        ip("-n", ns, "link", "add", "name", "l2a", "type", "veth", "peer", "name", "l2b")
        ip("-n", ns, "link", "set", "l2a", "up")
        ip("-n", ns, "link", "set", "l2b", "up")
        probe = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", PROBE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert probe.stdin is not None and probe.stdout is not None

        def send() -> str:
            assert probe.stdin is not None and probe.stdout is not None
            probe.stdin.write("\n")
            probe.stdin.flush()
            return probe.stdout.readline().strip()

        def sent_once_up() -> str:
            # A carrier comes back through the kernel's link watch, up to a second later.
            for _ in range(30):
                if (outcome := send()) == "sent":
                    break
            return outcome

        try:
            assert sent_once_up() == "sent"
            ip("-n", ns, "link", "set", "l2b", "down")  # the peer gone: no carrier on l2a
            assert send() == "ENETDOWN"
            ip("-n", ns, "link", "set", "l2b", "up")
            assert sent_once_up() == "sent"
            ip("-n", ns, "link", "set", "l2a", "down")  # set down on our side
            assert send() == "ENETDOWN"
            ip("-n", ns, "link", "set", "l2a", "up")
            assert sent_once_up() == "sent"
        finally:
            probe.stdin.close()
            probe.wait(timeout=10)
    finally:
        ip("netns", "del", ns)
