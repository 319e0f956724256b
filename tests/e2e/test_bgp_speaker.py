"""BGP mode end to end: real speakers (`python -m speaker.bgp`, ExaBGP, our BFD) in the lab's node
namespaces, peering with the ToR's FRR. Witnesses are the ToR's kernel FIB, vtysh JSON and a
packet capture. Timings are measured and reported (`record_property`), never asserted.

Every test undoes what it changed on the shared ToR (extra neighbors, passwords, BFD) and stops
its speakers, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import lab as network_lab
from hack import witness

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TOR_V4 = str(network_lab.TOR_LAN_V4)
TOR_V6 = str(network_lab.TOR_LAN_V6)
TOR_ASN = network_lab.TOR_ASN


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")
        time.sleep(step)


def tor_view(lab: network_lab.Lab, prefix: str) -> str:
    """What the ToR knows of a prefix, in words: its FIB nexthops, its BGP paths (from whom,
    nexthop, stale or not) and the state of every BGP session it has."""
    try:
        paths = [
            f"{p.get('peer', {}).get('peerId', '?')} via "
            f"{','.join(h.get('ip', '?') for h in p.get('nexthops', []))}"
            f"{' (stale)' if p.get('stale') else ''}{' (best)' if p.get('bestpath') else ''}"
            for p in bgp_path(lab, prefix)
        ]
        summary = json.loads(lab.vtysh("show bgp summary json", check=False).stdout or "{}")
        sessions = sorted(
            f"{address}={n.get('state', '?')}"
            for family in summary.values()
            if isinstance(family, dict)
            for address, n in (family.get("peers") or {}).items()
        )
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return f"(the ToR could not be read: {e})"
    return (
        f"FIB {sorted(witness.fib(lab, prefix))}; BGP paths {paths or 'none'}; "
        f"sessions {sorted(set(sessions)) or 'none'}"
    )


def wait_fib(
    lab: network_lab.Lab,
    prefix: str,
    want: set[str],
    what: str,
    timeout: float = 20.0,
    step: float = 0.05,
) -> None:
    """Wait until the ToR's FIB has exactly `want` as nexthops of `prefix`; when it gives up, it
    says what the ToR had instead."""
    try:
        wait_for(what, lambda: witness.fib(lab, prefix) == want, timeout, step)
    except AssertionError as e:
        raise AssertionError(
            f"{e}: wanted {prefix} via {sorted(want)}; {tor_view(lab, prefix)}"
        ) from None


class Speaker:
    """One `python -m speaker.bgp` inside a node namespace, spoken to in JSON lines."""

    def __init__(self, lab: network_lab.Lab, index: int, log_dir: Path) -> None:
        self.lab = lab
        self.index = index
        self.ns = network_lab.node_namespace(index)
        self.address = str(lab.node_v4(index))
        self.address6 = str(lab.node_v6(index))
        self.stderr_path = log_dir / f"speaker-node{index}-{time.monotonic_ns()}.log"
        self._stderr = self.stderr_path.open("w")
        self.proc = lab.popen(
            self.ns,
            sys.executable,
            "-m",
            "speaker.bgp",
            "--node-name",
            f"node{index}",
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.latest: dict[str, Any] = {}
        self.history: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event["event"] == "status":
                with self._lock:
                    self.latest = event["sessions"]
                    self.history.append((time.monotonic(), event["sessions"]))
            self.events.put(event)

    def send(self, **message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, kind: str, timeout: float = 30.0, **message: Any) -> dict[str, Any]:
        self.send(**message)
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"node{self.index}: no {kind!r} answer") from None
            if event["event"] == kind:
                return event
            if event["event"] == "error":
                raise AssertionError(f"node{self.index}: {event['message']}")

    def set_peers(self, *peers: dict[str, Any]) -> list[str]:
        problems: list[str] = self.request("peers", peers=list(peers))["problems"]
        return problems

    def announce(self, *addresses: str, **ad: Any) -> None:
        anns = [{"address": a, "advertisements": [ad]} for a in addresses]
        self.request("routes", announcements=anns)

    def sessions(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.latest)

    def session(self, name: str) -> dict[str, Any]:
        return self.sessions().get(name, {})

    def wait_state(
        self, name: str, bgp: str | None = None, bfd: str | None = None, timeout: float = 20.0
    ) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            s = self.session(name)
            if bgp is not None and s.get("bgp") != bgp:
                return None
            if bfd is not None and s.get("bfd") != bfd:
                return None
            return s or None

        try:
            return wait_for(f"node{self.index} {name} bgp={bgp} bfd={bfd}", ok, timeout)  # type: ignore[no-any-return]
        except AssertionError as e:
            # Our side's last report of the session (state, reason, restarts) says why.
            raise AssertionError(f"{e}; the speaker reports {self.session(name)}") from None

    def stayed_up(self, name: str, since: float) -> bool:
        """No status report since `since` showed session `name` anything but up."""
        with self._lock:
            seen = [sessions.get(name, {}) for t, sessions in self.history if t >= since]
        return (
            all(session.get("bgp") == "up" for session in seen)
            and self.session(name).get("bgp") == "up"
        )

    def pids(self) -> dict[str, int]:
        return self.request("pids", pids=True)["pids"]  # type: ignore[no-any-return]

    def metrics(self) -> str:
        return self.request("metrics", metrics=True)["text"]  # type: ignore[no-any-return]

    def close(self, timeout: float = 30.0) -> float:
        """Graceful shutdown; returns how long it took."""
        started = time.monotonic()
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.send(close=True)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._stderr.close()
        return time.monotonic() - started


def report(record_property: Callable[[str, object], None], name: str, seconds: float) -> None:
    """A measured duration: recorded for junit and printed (shown with -rA or -s)."""
    record_property(name, round(seconds, 3))
    print(f"MEASURED {name} = {seconds:.3f} s")


def peer(name: str, address: str, my_asn: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "myASN": my_asn,
        "peerASN": TOR_ASN,
        "peerAddress": address,
        "holdTime": 3,
        **extra,
    }


def node_asn(index: int) -> int:
    return 64510 + index


@pytest.fixture
def speakers(lab: network_lab.Lab, tmp_path: Path) -> Iterator[Callable[[int], Speaker]]:
    started: list[Speaker] = []

    def start(index: int) -> Speaker:
        s = Speaker(lab, index, tmp_path)
        started.append(s)
        return s

    try:
        yield start
    finally:
        for s in started:
            s.close()


@pytest.fixture
def tor(lab: network_lab.Lab) -> Iterator[Callable[..., None]]:
    """Change the ToR's bgpd/bfdd config for one test; `undo` commands run afterwards."""
    undo: list[list[str]] = []

    def configure(commands: list[str], revert: list[str]) -> None:
        undo.append(revert)
        lab.vtysh("configure terminal", *commands)

    try:
        yield configure
    finally:
        failed = []
        for commands in reversed(undo):
            result = lab.vtysh("configure terminal", *commands, check=False)
            if result.returncode != 0:
                failed.append(f"{commands}: {result.stdout}{result.stderr}")
        assert not failed, f"could not restore the ToR: {failed}"


def bgp_path(lab: network_lab.Lab, prefix: str) -> list[dict[str, Any]]:
    family = "ipv6" if ":" in prefix else "ipv4"
    shown = json.loads(lab.vtysh(f"show bgp {family} unicast {prefix} json").stdout or "{}")
    return list(shown.get("paths", []))


def neighbor(lab: network_lab.Lab, address: str) -> dict[str, Any]:
    shown = json.loads(lab.vtysh(f"show bgp neighbors {address} json", check=False).stdout or "{}")
    return dict(shown.get(address, {}))


def uptime(lab: network_lab.Lab, address: str) -> float | None:
    """Seconds the ToR's session with `address` has been Established (None if it is not)."""
    n = neighbor(lab, address)
    if n.get("bgpState") != "Established":
        return None
    return int(n["bgpTimerUpMsec"]) / 1000


def undisturbed(
    lab: network_lab.Lab, s: Speaker, name: str, address: str, since: float, uptime_then: float
) -> bool:
    """The session was not reset since `since`: on our side it never left Established, and the
    ToR's uptime grew with the clock (FRR's uptime has whole-second steps, vtysh is slow under
    load: 2 s of slack)."""
    now = uptime(lab, address)
    return (
        s.stayed_up(name, since)
        and now is not None
        and now >= uptime_then + (time.monotonic() - since) - 2.0
    )


# --- tests ------------------------------------------------------------------------------------


def test_ecmp_v4_and_v6_and_withdraw(
    lab: network_lab.Lab,
    speakers: Callable[[int], Speaker],
    record_property: Callable[[str, object], None],
) -> None:
    nodes = [speakers(1), speakers(2)]
    for s in nodes:
        assert (
            s.set_peers(
                peer("tor", TOR_V4, node_asn(s.index)), peer("tor6", TOR_V6, node_asn(s.index))
            )
            == []
        )
        s.announce("10.252.0.10", "fd00:252::10")
    for s in nodes:
        s.wait_state("tor", bgp="up")
        s.wait_state("tor6", bgp="up")
    v4 = {n.address for n in nodes}
    v6 = {n.address6 for n in nodes}
    wait_fib(lab, "10.252.0.10/32", v4, "ECMP /32")
    wait_fib(lab, "fd00:252::10/128", v6, "ECMP /128")
    (path,) = [
        p for p in bgp_path(lab, "10.252.0.10/32") if p["peer"]["peerId"] == nodes[0].address
    ]
    assert path["origin"] == "IGP"
    assert path["aspath"]["string"] == str(node_asn(1))

    started = time.monotonic()
    nodes[0].announce()  # node1 withdraws everything
    wait_fib(
        lab,
        "10.252.0.10/32",
        {nodes[1].address},
        "node1 nexthop gone",
        step=0.005,
    )
    report(record_property, "withdraw_to_fib_s", time.monotonic() - started)
    wait_fib(lab, "fd00:252::10/128", {nodes[1].address6}, "node1 v6 nexthop gone")
    text = nodes[1].metrics()
    assert f'metallb_bgp_session_up{{peer="{TOR_V4}:179"}} 1.0' in text
    assert f'metallb_bgp_announced_prefixes_total{{peer="[{TOR_V6}]:179"}} 1.0' in text
    assert f'metallb_bgp_pending_prefixes_total{{peer="[{TOR_V6}]:179"}} 1.0' in text
    assert 'metallb_bgp_updates_total{peer="10.250.0.1:179"}' in text


def test_communities_and_local_pref_over_ibgp(
    lab: network_lab.Lab, speakers: Callable[[int], Speaker], tor: Callable[..., None]
) -> None:
    node = lab.node_v4(3)
    tor(
        [
            "router bgp 64500",
            *network_lab.leave_tor_group(str(node)),
            f"neighbor {node} remote-as internal",
            f"neighbor {node} timers 1 3",
            "address-family ipv4 unicast",
            f"neighbor {node} activate",
        ],
        ["router bgp 64500", *network_lab.tor_group_member(str(node))],
    )
    s = speakers(3)
    assert (
        s.set_peers(
            {
                "name": "tor-ibgp",
                "myASN": TOR_ASN,
                "peerASN": TOR_ASN,
                "peerAddress": TOR_V4,
                "holdTime": 3,
            }
        )
        == []
    )
    s.announce(
        "10.252.0.20", localPref=150, communities=["1111:2222", "65535:65282", "large:123:9999:123"]
    )
    s.wait_state("tor-ibgp", bgp="up")
    (path,) = wait_for("route at the ToR", lambda: bgp_path(lab, "10.252.0.20/32"))
    assert path["locPrf"] == 150
    assert path["community"]["list"] == ["1111:2222", "noAdvertise"]
    assert path["largeCommunity"]["list"] == ["123:9999:123"]
    assert path["peer"]["type"] == "internal"


def test_md5_session_and_wrong_password(
    lab: network_lab.Lab, speakers: Callable[[int], Speaker], tor: Callable[..., None]
) -> None:
    node = lab.node_v4(3)
    secret = "s3cr3t;\"q\"'x'"
    tor(
        [
            "router bgp 64500",
            *network_lab.leave_tor_group(str(node)),
            f"neighbor {node} remote-as external",
            f"neighbor {node} timers 1 3",
            f"neighbor {node} password {secret}",
            "address-family ipv4 unicast",
            f"neighbor {node} activate",
        ],
        ["router bgp 64500", *network_lab.tor_group_member(str(node))],
    )
    s = speakers(3)
    plain = peer("tor6", TOR_V6, node_asn(3))
    md5 = peer("tor-md5", TOR_V4, node_asn(3), password=secret)
    assert s.set_peers(plain, md5) == []
    s.announce("10.252.0.21")
    s.wait_state("tor-md5", bgp="up")
    s.wait_state("tor6", bgp="up")
    wait_fib(lab, "10.252.0.21/32", {str(node)}, "route over the MD5 session")
    assert neighbor(lab, str(node)).get("bgpState") == "Established"
    wait_for("tor6 established", lambda: uptime(lab, s.address6) is not None)
    since, v6_uptime = time.monotonic(), uptime(lab, s.address6)
    assert v6_uptime is not None
    v6_pid = s.pids()["tor6"]

    # Same peer, wrong password: its session goes and never comes back; tor6 is untouched.
    assert s.set_peers(plain, {**md5, "password": "wrong"}) == []
    wait_for("MD5 session gone", lambda: s.session("tor-md5").get("bgp") != "up")
    wait_fib(lab, "10.252.0.21/32", set(), "route withdrawn")
    time.sleep(4)  # several connect attempts (ToR connect timer 1 s, hold 3 s)
    assert s.session("tor-md5").get("bgp") != "up"
    assert neighbor(lab, str(node)).get("bgpState") != "Established"
    assert s.session("tor6")["bgp"] == "up"
    assert undisturbed(lab, s, "tor6", s.address6, since, v6_uptime)
    assert s.pids()["tor6"] == v6_pid


def test_bad_peers_do_not_disturb_a_working_one(
    lab: network_lab.Lab, speakers: Callable[[int], Speaker]
) -> None:
    s = speakers(1)
    good = peer("tor", TOR_V4, node_asn(1))
    assert s.set_peers(good) == []
    s.announce("10.252.0.22")
    s.wait_state("tor", bgp="up")
    wait_fib(lab, "10.252.0.22/32", {s.address}, "route")
    wait_for("established", lambda: uptime(lab, s.address) is not None)
    since, then = time.monotonic(), uptime(lab, s.address)
    assert then is not None
    pid = s.pids()["tor"]

    bad = [
        peer("refuses", TOR_V4, node_asn(1), peerPort=1179),  # nothing listens there: RST
        peer("unreachable", "10.250.0.99", node_asn(1)),  # nobody answers ARP
        peer("wrong-password", TOR_V6, node_asn(1), password="nobody-expects-this"),
    ]
    assert s.set_peers(good, *bad) == []
    wait_for(
        "bad peers running",
        lambda: all(s.session(p["name"]).get("bgp") not in (None, "idle", "starting") for p in bad),
    )
    time.sleep(5)
    states = s.sessions()
    assert {p["name"]: states[p["name"]]["bgp"] != "up" for p in bad} == {
        p["name"]: True for p in bad
    }
    assert states["tor"]["bgp"] == "up"
    assert witness.fib(lab, "10.252.0.22/32") == {s.address}

    assert s.set_peers(good) == []
    assert set(s.sessions()) == {"tor"}
    assert undisturbed(lab, s, "tor", s.address, since, then)
    assert s.pids()["tor"] == pid
    assert s.session("tor")["restarts"] == 0


def test_killed_exabgp_is_restarted_and_routes_return(
    lab: network_lab.Lab,
    speakers: Callable[[int], Speaker],
    record_property: Callable[[str, object], None],
) -> None:
    s = speakers(2)
    assert s.set_peers(peer("tor", TOR_V4, node_asn(2))) == []
    s.announce("10.252.0.23", "10.252.0.24")
    wait_fib(lab, "10.252.0.24/32", {s.address}, "routes")
    pid = s.pids()["tor"]
    started = time.monotonic()
    lab.exec(s.ns, "kill", "-9", str(pid), check=True)
    wait_fib(lab, "10.252.0.24/32", set(), "routes gone", step=0.01)
    gone = time.monotonic() - started
    wait_for(
        "routes back",
        lambda: (
            witness.fib(lab, "10.252.0.23/32") == {s.address}
            and witness.fib(lab, "10.252.0.24/32") == {s.address}
        ),
        step=0.01,
    )
    back = time.monotonic() - started
    report(record_property, "kill9_routes_gone_s", gone)
    report(record_property, "kill9_routes_back_s", back)
    assert s.pids()["tor"] != pid
    assert s.session("tor")["restarts"] == 1


def test_bfd_link_cut_drops_the_nexthop(
    lab: network_lab.Lab,
    speakers: Callable[[int], Speaker],
    tor: Callable[..., None],
    record_property: Callable[[str, object], None],
) -> None:
    tor(
        [
            "bfd",
            "profile ironlb-fast",
            "receive-interval 300",
            "transmit-interval 300",
            "detect-multiplier 3",
            "exit",
            "exit",
            "router bgp 64500",
            "neighbor nodes bfd",
            "neighbor nodes bfd profile ironlb-fast",
        ],
        [
            "router bgp 64500",
            "no neighbor nodes bfd profile ironlb-fast",
            "no neighbor nodes bfd",
            "exit",
            "bfd",
            "no profile ironlb-fast",
        ],
    )
    bfd = {"receiveInterval": 300, "transmitInterval": 300, "detectMultiplier": 3}
    nodes = [speakers(1), speakers(2)]
    for s in nodes:
        assert s.set_peers(peer("tor", TOR_V4, node_asn(s.index), bfd=bfd)) == []
        s.announce("10.252.0.30")
    for s in nodes:
        s.wait_state("tor", bgp="up", bfd="up", timeout=30)
    both = {n.address for n in nodes}
    wait_fib(lab, "10.252.0.30/32", both, "ECMP")

    def tor_bfd_up() -> bool:
        peers = json.loads(lab.vtysh("show bfd peers json").stdout or "[]")
        return {p["peer"] for p in peers if p.get("status") == "up"} >= both

    wait_for("ToR BFD up", tor_bfd_up)
    cut = nodes[0]
    try:
        started = time.monotonic()
        lab.exec(cut.ns, "ip", "link", "set", "eth0", "down", check=True)
        wait_for(
            "cut node's nexthop gone",
            lambda: witness.fib(lab, "10.252.0.30/32") == {nodes[1].address},
            timeout=10,
            step=0.005,
        )
        elapsed = time.monotonic() - started
        report(record_property, "bfd_link_cut_to_fib_s", elapsed)
        # Our side noticed too and tore the BGP session down instead of waiting for hold time.
        cut.wait_state("tor", bfd="down", timeout=5)
        wait_for("our BGP torn down", lambda: cut.session("tor").get("bgp") != "up", timeout=5)
    finally:
        lab.exec(cut.ns, "ip", "link", "set", "eth0", "up", check=True)
    cut.wait_state("tor", bgp="up", bfd="up", timeout=30)
    wait_fib(lab, "10.252.0.30/32", both, "nexthop back", timeout=20)
    text = cut.metrics()
    assert f'metallb_bfd_session_up{{peer="{TOR_V4}"}} 1.0' in text
    assert f'metallb_bfd_session_down_events{{peer="{TOR_V4}"}} 1.0' in text


@contextlib.contextmanager
def capturing_bgp(lab: network_lab.Lab, pcap: Path, address: str) -> Iterator[None]:
    """tcpdump on the ToR's bridge writes `address`'s BGP session to `pcap` while the body
    runs (started a second before it: tcpdump attaches), and is stopped even on failure."""
    dump = lab.popen(
        network_lab.NS_TOR,
        "tcpdump",
        "-i",
        "br0",
        "-U",
        "-w",
        str(pcap),
        f"tcp port 179 and host {address}",
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # tcpdump attaches
        yield
    finally:
        dump.terminate()
        dump.wait(5)


def test_graceful_shutdown_withdraws_before_closing(
    lab: network_lab.Lab,
    speakers: Callable[[int], Speaker],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    s = speakers(2)
    assert s.set_peers(peer("tor", TOR_V4, node_asn(2), enableGracefulRestart=True)) == []
    s.announce("10.252.0.40")
    s.wait_state("tor", bgp="up")
    wait_fib(lab, "10.252.0.40/32", {s.address}, "route")
    pcap = tmp_path / "bgp.pcap"
    with capturing_bgp(lab, pcap, s.address):
        took = s.close()
        report(record_property, "graceful_close_s", took)
        assert s.proc.returncode == 0
        # Gone at once although graceful restart was negotiated: withdrawn, not left stale.
        wait_fib(lab, "10.252.0.40/32", set(), "route gone", timeout=2)
        # tcpdump may lag on a busy machine: wait until the close itself is in the file.
        wait_for("the close in the capture", lambda: bgp_stream_from(pcap, s.address)[1], 10, 0.2)
    messages, closed_at = bgp_stream_from(pcap, s.address)
    withdrawals = [t for t, kind, withdrawn in messages if kind == 2 and withdrawn]
    assert withdrawals, messages
    # ExaBGP closes a graceful-restart session with a bare FIN (no NOTIFICATION, so that the
    # peer would keep the routes stale): the withdrawal must be on the wire before that FIN.
    assert closed_at is not None and withdrawals[0] < closed_at
    assert all(kind != 2 or withdrawn for t, kind, withdrawn in messages if t > withdrawals[0])


def test_graceful_shutdown_without_graceful_restart_is_one_cease(
    lab: network_lab.Lab,
    speakers: Callable[[int], Speaker],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """Without graceful restart the peer drops every route of a session that ends, so a close
    withdraws nothing: one NOTIFICATION (Cease), then the connection closes, and the routes are
    gone from the ToR and stay gone (ExaBGP reconnects after a teardown; it must be stopped
    before it can announce them again)."""
    s = speakers(2)
    assert s.set_peers(peer("tor", TOR_V4, node_asn(2))) == []
    addresses = [f"10.252.0.{i}" for i in range(42, 47)]
    s.announce(*addresses)
    s.wait_state("tor", bgp="up")
    wait_for("routes", lambda: all(witness.fib(lab, f"{a}/32") == {s.address} for a in addresses))
    pcap = tmp_path / "bgp.pcap"
    with capturing_bgp(lab, pcap, s.address):
        took = s.close()
        report(record_property, "cease_close_s", took)
        assert s.proc.returncode == 0

        def gone() -> bool:
            return all(witness.fib(lab, f"{a}/32") == set() for a in addresses)

        wait_for("routes gone", gone, timeout=2)
        wait_for("the close in the capture", lambda: bgp_stream_from(pcap, s.address)[1], 10, 0.2)
        time.sleep(1.0)
        assert gone(), "routes came back after the close"
    messages, closed_at = bgp_stream_from(pcap, s.address)
    notifications = [t for t, kind, _ in messages if kind == 3]
    assert notifications, messages
    assert closed_at is not None and notifications[0] <= closed_at
    assert not [m for m in messages if m[1] == 2 and m[2]], "withdrawals were sent"


def test_graceful_restart_keeps_routes_across_a_speaker_restart(
    lab: network_lab.Lab, speakers: Callable[[int], Speaker]
) -> None:
    """With enableGracefulRestart, a restarting speaker leaves its routes with the ToR (stale,
    still in its FIB: no gap); the next speaker's End-of-RIB, sent after its routes, refreshes
    what it announces again and purges what it does not. The ToR's FIB is watched over netlink,
    so no change in between can go unseen."""
    kept, dropped = "10.252.0.44", "10.252.0.45"
    gr = peer("tor", TOR_V4, node_asn(2), enableGracefulRestart=True)
    first = speakers(2)
    assert first.set_peers(gr) == []
    first.announce(kept, dropped)
    first.wait_state("tor", bgp="up")
    wait_fib(lab, f"{dropped}/32", {first.address}, "routes")
    wait_fib(lab, f"{kept}/32", {first.address}, "routes")
    watcher = witness.start_fib_watcher(lab, [f"{kept}/32", f"{dropped}/32"])
    try:
        wait_for("the watcher's first dump", lambda: list(witness.printed(watcher)), 10)
        first.request("closed", close=True, restarting=True)
        assert first.proc.wait(10) == 0
        # The session is gone, the routes are not: FRR keeps them as stale.
        wait_for(
            "the session down",
            lambda: neighbor(lab, first.address).get("bgpState") != "Established",
        )
        wait_for(
            "stale paths",
            lambda: (
                all(p.get("stale") for p in bgp_path(lab, f"{kept}/32"))
                and bgp_path(lab, f"{kept}/32")
            ),
        )
        assert witness.fib(lab, f"{kept}/32") == {first.address}
        second = speakers(2)
        assert second.set_peers(gr) == []
        second.announce(kept)
        second.wait_state("tor", bgp="up")
        # End-of-RIB: the route announced again is fresh, the other one is purged.
        wait_fib(lab, f"{dropped}/32", set(), "the dropped route purged")
        paths = bgp_path(lab, f"{kept}/32")
        assert paths and not any(p.get("stale") for p in paths), paths
        assert witness.fib(lab, f"{kept}/32") == {first.address}
        changes = [e for e in witness.printed(watcher) if "d" in e]
    finally:
        watcher.kill()
        watcher.wait(5)
    # Over the whole restart, the kept route never left the FIB nor changed its next hop.
    assert not [e for e in changes if e["d"] == f"{kept}/32" and e["v"] != [first.address]], changes
    assert [e["v"] for e in changes if e["d"] == f"{dropped}/32"][-1:] == [[]], changes


def bgp_stream_from(pcap: Path, source: str) -> tuple[list[tuple[float, int, bool]], float | None]:
    """(time, type, carries withdrawals) of each BGP message `source` sent, and when it sent
    its FIN or RST."""
    from scapy.all import IP, TCP, rdpcap  # type: ignore[import-untyped]

    segments: dict[int, tuple[float, bytes]] = {}
    closed_at: float | None = None
    for p in rdpcap(str(pcap)):
        if IP not in p or TCP not in p or p[IP].src != source:
            continue
        tcp = p[TCP]
        if tcp.flags & 0x05 and closed_at is None:  # FIN or RST
            closed_at = float(p.time)
        # The IP total length bounds the payload: short frames carry Ethernet padding.
        size = int(p[IP].len) - int(p[IP].ihl) * 4 - int(tcp.dataofs) * 4
        payload = bytes(tcp.payload)[:size]
        if payload:
            segments.setdefault(int(tcp.seq), (float(p.time), payload))
    out: list[tuple[float, int, bool]] = []
    buffer, when = b"", 0.0
    for seq in sorted(segments):
        when, payload = segments[seq]
        buffer += payload
        while len(buffer) >= 19:
            length, kind = int.from_bytes(buffer[16:18], "big"), buffer[18]
            if len(buffer) < length:
                break
            body = buffer[19:length]
            withdrawn = kind == 2 and int.from_bytes(body[:2], "big") > 0
            out.append((when, kind, withdrawn))
            buffer = buffer[max(length, 19) :]
    return out, closed_at


def test_dual_stack_session_carries_ipv6_with_explicit_next_hop(
    lab: network_lab.Lab, speakers: Callable[[int], Speaker]
) -> None:
    s = speakers(3)
    dual = peer(
        "tor-dual", TOR_V4, node_asn(3), dualStackAddressFamily=True, ipv6NextHop=s.address6
    )
    assert s.set_peers(dual) == []
    s.announce("10.252.0.50", "fd00:252::50")
    s.wait_state("tor-dual", bgp="up")
    wait_fib(lab, "10.252.0.50/32", {s.address}, "v4 route")
    wait_fib(lab, "fd00:252::50/128", {s.address6}, "v6 route over the v4 session")
    s.announce("10.252.0.50")
    wait_fib(lab, "fd00:252::50/128", set(), "v6 route withdrawn")
    assert witness.fib(lab, "10.252.0.50/32") == {s.address}
