"""Real membership processes: join, SIGKILL, a cut link, graceful leave, keys and hostile datagrams.

Each member is `python -m speaker.membership`, read through the JSON lines it prints. The link-cut
test puts members in network namespaces (`ilbm-...`, deleted afterwards even on failure), so
this file needs root: it belongs to the e2e tier. No Kubernetes is involved. Waits are bounded
"eventually" limits, far above the expected times; speed is measured by bench/membership.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
LIVE = {"alive", "suspect"}
EVENTUALLY = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def eventually(predicate: Callable[[], bool], what: str, timeout: float = EVENTUALLY) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


class Member:
    def __init__(
        self,
        name: str,
        address: str,
        argv_prefix: list[str],
        args: list[str],
        command: tuple[str, ...] = (sys.executable, "-m", "speaker.membership"),
    ) -> None:
        self.name = name
        self.address = address
        self.view: dict[str, str] = {}
        self.events: list[dict[str, object]] = []
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [*argv_prefix, *command, f"--name={name}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self.lock:
                self.events.append(event)
                if event["event"] == "member":
                    self.view[str(event["member"])] = str(event["state"])

    def sees(self, name: str) -> str | None:
        with self.lock:
            return self.view.get(name)

    def saw(self, name: str, state: str) -> bool:
        with self.lock:
            return any(e.get("member") == name and e.get("state") == state for e in self.events)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_text("process-test-secret\n")
    return path


def loopback_group(members: list[Member], n: int, key_file: Path, *extra: str) -> list[Member]:
    ports = [free_port() for _ in range(n)]
    for i, port in enumerate(ports):
        seed = [f"--seed=127.0.0.1:{ports[0]}"] if i else []
        members.append(
            Member(
                f"n{i + 1}",
                f"127.0.0.1:{port}",
                [],
                [f"--bind=127.0.0.1:{port}", f"--key-file={key_file}", *seed, *extra],
            )
        )
    return members[-n:]


def all_see(group: list[Member], subject: str, states: set[str]) -> bool:
    return all(m.sees(subject) in states for m in group if m.name != subject)


def converged(group: list[Member]) -> bool:
    return all(all_see(group, m.name, LIVE) for m in group)


def test_members_join_and_a_sigkilled_member_is_declared_dead(
    members: list[Member], key_file: Path
) -> None:
    group = loopback_group(members, 4, key_file)
    eventually(lambda: converged(group), "4 members see each other")
    victim = group[2]
    victim.process.send_signal(signal.SIGKILL)
    others = [m for m in group if m is not victim]
    eventually(lambda: all_see(others, victim.name, {"dead"}), "all declare the victim dead")
    # Nobody else was harmed, and nobody saw a graceful leave that did not happen.
    assert all(not m.saw(victim.name, "left") for m in others)
    assert converged(others)


def test_the_memberlist_peer_runs_in_the_same_harness(
    members: list[Member], key_file: Path
) -> None:
    # bench.membership's other member process: hashicorp/memberlist as MetalLB runs it, with
    # our command line and events. Three on loopback form a group and declare a SIGKILLed one
    # dead; memberlist's LAN timings take seconds, hence the longer limit.
    from hack import memberlist_peer

    command = (str(memberlist_peer.ensure_built()),)
    ports = [free_tcp_port() for _ in range(3)]
    group = []
    for i, port in enumerate(ports):
        seed = [f"--seed=127.0.0.1:{ports[0]}"] if i else []
        args = [f"--bind=127.0.0.1:{port}", f"--key-file={key_file}", *seed]
        group.append(Member(f"g{i + 1}", f"127.0.0.1:{port}", [], args, command))
    members.extend(group)
    eventually(lambda: converged(group), "3 memberlist peers see each other")
    victim = group[1]
    victim.process.send_signal(signal.SIGKILL)
    others = [m for m in group if m is not victim]
    eventually(lambda: all_see(others, victim.name, {"dead"}), "memberlist declares it dead", 60)
    assert converged(others)


def test_graceful_leave_is_seen_as_left_and_exits_cleanly(
    members: list[Member], key_file: Path
) -> None:
    group = loopback_group(members, 3, key_file)
    eventually(lambda: converged(group), "3 members see each other")
    leaver = group[1]
    leaver.process.send_signal(signal.SIGTERM)
    assert leaver.process.wait(timeout=10) == 0
    others = [m for m in group if m is not leaver]
    eventually(lambda: all_see(others, leaver.name, {"left"}), "all see the leave")
    assert all(not m.saw(leaver.name, "dead") for m in others)
    assert any(e["event"] == "stopped" for e in leaver.events)


def test_restarted_member_rejoins(members: list[Member], key_file: Path) -> None:
    group = loopback_group(members, 3, key_file)
    eventually(lambda: converged(group), "3 members see each other")
    victim = group[2]
    victim.process.send_signal(signal.SIGKILL)
    eventually(lambda: all_see(group[:2], victim.name, {"dead"}), "victim declared dead")
    port = victim.address.rsplit(":", 1)[1]
    seed = group[0].address
    again = Member(
        victim.name,
        victim.address,
        [],
        [f"--bind=127.0.0.1:{port}", f"--key-file={key_file}", f"--seed={seed}"],
    )
    members.append(again)
    eventually(lambda: converged([group[0], group[1], again]), "the new process rejoins")


def test_members_with_different_keys_never_meet(
    members: list[Member], key_file: Path, tmp_path: Path
) -> None:
    other_key = tmp_path / "other"
    other_key.write_text("a different secret\n")
    group = loopback_group(members, 2, key_file)
    outsider_port = free_port()
    outsider = Member(
        "outsider",
        f"127.0.0.1:{outsider_port}",
        [],
        [
            f"--bind=127.0.0.1:{outsider_port}",
            f"--key-file={other_key}",
            f"--seed={group[0].address}",
        ],
    )
    members.append(outsider)
    eventually(lambda: converged(group), "the two members with the key meet")
    time.sleep(2)  # several join attempts by the outsider
    assert group[0].sees("outsider") is None and group[1].sees("outsider") is None
    assert outsider.sees("n1") is None


def test_key_rotation_while_running(members: list[Member], tmp_path: Path) -> None:
    files = [tmp_path / f"key{i}" for i in range(3)]
    for f in files:
        f.write_text("old\n")
    ports = [free_port() for _ in files]
    group = []
    for i, (f, port) in enumerate(zip(files, ports, strict=True)):
        seed = [f"--seed=127.0.0.1:{ports[0]}"] if i else []
        member = Member(
            f"r{i}",
            f"127.0.0.1:{port}",
            [],
            [
                f"--bind=127.0.0.1:{port}",
                f"--key-file={f}",
                "--key-reload-interval=0.2",
                *seed,
            ],
        )
        members.append(member)
        group.append(member)
    eventually(lambda: converged(group), "members meet under the old key")
    # Step 1: accept the new key everywhere; step 2: seal with it; step 3: forget the old one.
    # The files are rewritten one at a time, as a Secret update reaches kubelets one by one.
    for content in ("old\nnew\n", "new\nold\n", "new\n"):
        for f in files:
            f.write_text(content)
            time.sleep(0.3)
        time.sleep(0.5)
    time.sleep(1)
    assert converged(group)
    assert all(not m.saw(x.name, "dead") for m in group for x in group)
    # The running members really switched: a newcomer with only the new key joins, one with
    # only the old key does not.
    newcomers = []
    for name, secret in (("fresh", "new"), ("stale", "old")):
        path = tmp_path / name
        path.write_text(secret + "\n")
        port = free_port()
        member = Member(
            name,
            f"127.0.0.1:{port}",
            [],
            [f"--bind=127.0.0.1:{port}", f"--key-file={path}", f"--seed=127.0.0.1:{ports[0]}"],
        )
        members.append(member)
        newcomers.append(member)
    eventually(lambda: all_see(group, "fresh", LIVE), "a new-key member joins")
    time.sleep(1.5)
    assert all(m.sees("stale") is None for m in group)


def metric(port: int, name: str, labels: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(f"{name}{{{labels}}}"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{labels}}} not exported")


def test_hostile_datagrams_are_dropped_and_counted(members: list[Member], key_file: Path) -> None:
    # A socket of ours poses as the seed, to capture a genuine sealed datagram to replay.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as trap:
        trap.bind(("127.0.0.1", 0))
        trap.settimeout(EVENTUALLY)
        trap_address = f"127.0.0.1:{trap.getsockname()[1]}"
        port, metrics_port = free_port(), free_tcp_port()
        target = Member(
            "target",
            f"127.0.0.1:{port}",
            [],
            [
                f"--bind=127.0.0.1:{port}",
                f"--key-file={key_file}",
                f"--metrics-port={metrics_port}",
            ],
        )
        members.append(target)
        talker_port = free_port()
        talker = Member(
            "talker",
            f"127.0.0.1:{talker_port}",
            [],
            [f"--bind=127.0.0.1:{talker_port}", f"--key-file={key_file}", f"--seed={trap_address}"],
        )
        members.append(talker)
        genuine, _ = trap.recvfrom(65536)  # the talker's join, sealed
        destination = ("127.0.0.1", port)
        eventually(lambda: any(e["event"] == "started" for e in target.events), "target up")
        trap.sendto(genuine, destination)  # first time: accepted
        trap.sendto(genuine, destination)  # replayed
        trap.sendto(genuine[:-1], destination)  # truncated: fails authentication
        trap.sendto(genuine[:20], destination)  # shorter than the seal itself
        tampered = bytearray(genuine)
        tampered[-5] ^= 0xFF
        trap.sendto(bytes(tampered), destination)
        trap.sendto(b"P" + os.urandom(50), destination)  # plain text to an encrypted group
        trap.sendto(b"\x00" * 1500, destination)  # oversized
        for i in range(25):
            trap.sendto(b"E" + os.urandom(99), destination)  # sealed under a key nobody has
            trap.sendto(bytes([i]) + os.urandom(99), destination)  # no such mode at all

        def dropped(reason: str) -> float:
            return metric(
                metrics_port, "ironlb_memberlist_datagrams_dropped_total", f'reason="{reason}"'
            )

        eventually(lambda: dropped("replay") == 1, "the replay is counted")
        eventually(lambda: dropped("malformed") == 25, "all hostile datagrams are counted")
        assert dropped("auth") == 2
        assert dropped("truncated") == 1
        assert dropped("unauthenticated") == 1
        assert dropped("oversized") == 1
        assert dropped("unknown_key") == 25
        # The genuine datagram was a join from "talker": the target learnt of it.
        eventually(lambda: target.sees("talker") in LIVE, "the genuine datagram was used")
        assert target.process.poll() is None


def test_plain_mode_warns(members: list[Member]) -> None:
    port = free_port()
    member = Member("plain", f"127.0.0.1:{port}", [], [f"--bind=127.0.0.1:{port}"])
    members.append(member)
    eventually(lambda: any(e["event"] == "started" for e in member.events), "started")
    member.process.send_signal(signal.SIGTERM)
    member.process.wait(timeout=10)
    assert member.process.stderr is not None
    logs = [json.loads(line) for line in member.process.stderr.read().splitlines()]
    assert any(entry["level"] == "warning" and "NOT encrypted" in entry["msg"] for entry in logs)


# --- network namespaces: a real link cut --------------------------------------------------------


def ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


@pytest.fixture
def lan() -> Iterator[Callable[[int], list[str]]]:
    """A bridge namespace and n member namespaces on it; deleted afterwards, whatever happens."""
    if os.geteuid() != 0:
        pytest.fail("the link-cut test needs root (network namespaces)", pytrace=False)
    tag = f"ilbm-t{os.getpid() % 100000}"
    created: list[str] = []

    def make(n: int) -> list[str]:
        switch = f"{tag}-sw"
        ip("netns", "add", switch)
        created.append(switch)
        ip("-n", switch, "link", "add", "br0", "type", "bridge")
        ip("-n", switch, "link", "set", "br0", "up")
        names = []
        for i in range(n):
            ns = f"{tag}-{i}"
            ip("netns", "add", ns)
            created.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", f"p{i}", "netns", switch)
            ip("-n", switch, "link", "set", f"p{i}", "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"10.232.0.{i + 1}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            names.append(ns)
        return names

    try:
        yield make
    finally:
        for ns in reversed(created):
            ip("netns", "del", ns, check=False)


def test_member_whose_link_is_cut_is_declared_dead_and_returns(
    members: list[Member], key_file: Path, lan: Callable[[int], list[str]]
) -> None:
    namespaces = lan(4)
    group = []
    for i, ns in enumerate(namespaces):
        address = f"10.232.0.{i + 1}:7946"
        seed = ["--seed=10.232.0.1:7946"] if i else []
        member = Member(
            f"h{i}",
            address,
            ["ip", "netns", "exec", ns],
            [f"--bind={address}", f"--key-file={key_file}", *seed],
        )
        members.append(member)
        group.append(member)
    eventually(lambda: converged(group), "4 members in namespaces see each other")
    victim, victim_ns = group[1], namespaces[1]
    ip("-n", victim_ns, "link", "set", "eth0", "down")
    others = [m for m in group if m is not victim]
    eventually(lambda: all_see(others, victim.name, {"dead"}), "the cut member is declared dead")
    assert victim.process.poll() is None  # it is still running, only unreachable
    assert converged(others)
    ip("-n", victim_ns, "link", "set", "eth0", "up")
    eventually(lambda: converged(group), "it returns once the link is back")


def test_a_cut_link_moves_only_its_own_layer2_addresses_at_the_tor(key_file: Path) -> None:
    """Six members, each with the speaker's layer-2 server beside it owning what the election
    gives it from its own view; a link cut and restored once the others have it dead, then one
    held until the cut member has every other dead too (it then owns every address in its own
    view). The ToR's capture (every ARP reply on the bridge) says which addresses changed
    hands: only the cut member's, away and back."""
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces, raw sockets)", pytrace=False)
    from bench import membership, membership_l2

    with membership.group(f"t{os.getpid() % 10000}", 6, 250, key_file, []) as g:
        plane = membership_l2.Plane(g, 30, membership.PYTHON, str(ROOT))
        try:
            plane.start()
            short, aborted = membership_l2.cuts(plane, 1, EVENTUALLY)
            assert aborted is None
            long, aborted = membership_l2.cuts(plane, 1, EVENTUALLY, long=True)
            assert aborted is None
        finally:
            plane.stop()
    for moves in (short, long):
        assert moves.cuts == 1
        assert moves.victim_addresses > 0
        # Each away once and back once; the stand-in's takeover burst may still send one more
        # announcement after the victim's own (up to 1.1 s before it hears the victim is back):
        # at most one more round trip per address (docs/membership.md, "What a cut costs").
        assert 2 * moves.victim_addresses <= moves.victim <= 4 * moves.victim_addresses
        assert moves.collateral_while_cut == 0
        assert moves.collateral_after_restore == 0
        assert moves.unanswered == []
