"""hack/loadgen against hack/echo on the loopback: what it counts, and that it stops."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import loadgen

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Here:
    """A lab whose namespaces are this one: `popen` runs the command as is."""

    def popen(self, ns: str, *argv: str, **kwargs: Any) -> subprocess.Popen[Any]:
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(list(argv), cwd=ROOT, **kwargs)


@pytest.fixture
def echo() -> Iterator[tuple[int, int]]:
    port, health, stream = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "hack.echo", "--pod", "p1", "--node", "n1", f"--port={port}",
         f"--health-port={health}", f"--stream-port={stream}"],
        cwd=ROOT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", stream), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port, stream
    finally:
        process.kill()
        process.wait()


def test_targets_parse_in_both_families() -> None:
    assert loadgen.parse_target("10.0.0.1:80") == ("10.0.0.1", 80)
    assert loadgen.parse_target("[fd00::1]:8082") == ("fd00::1", 8082)
    assert loadgen.target_text("fd00::1", 80) == "[fd00::1]:80"
    with pytest.raises(argparse.ArgumentTypeError):
        loadgen.parse_target("10.0.0.1")


def test_answers_failures_and_streams_are_counted(echo: tuple[int, int]) -> None:
    port, stream = echo
    closed = free_port()
    with loadgen.LoadGen(
        Here(),
        [("127.0.0.1", port), ("127.0.0.1", closed)],
        duration=1.0,
        rate=40,
        streams=2,
        stream_port=stream,
    ) as running:
        report = running.result()
    assert report["requests_total"] == 40
    good = report["targets"][f"127.0.0.1:{port}"]
    bad = report["targets"][f"127.0.0.1:{closed}"]
    assert (good["ok"], good["failed"], good["nodes"]) == (20, 0, {"n1": 20})
    assert (bad["ok"], bad["failures"]) == (0, {"refused": 20})
    assert report["requests_failed"] == 20 and len(report["first_failures"]) == 20
    assert report["streams_total"] == 2 and report["streams_broken"] == 0
    assert all(s["lines"] > 0 and s["nodes"] == ["n1"] for s in report["streams"])


def test_stop_ends_the_load_early_with_a_report(echo: tuple[int, int]) -> None:
    port, _ = echo
    with loadgen.LoadGen(Here(), [("127.0.0.1", port)], duration=60.0, rate=20) as running:
        time.sleep(0.5)
        report = running.stop()
        assert running.process is not None and running.process.poll() is not None
    assert 0 < report["requests_total"] < 60 * 20
    assert report["requests_failed"] == 0 and report["duration_s"] < 60


def test_a_stream_cut_by_the_server_is_a_break_and_opens_again(echo: tuple[int, int]) -> None:
    # A one-line server: every stream it serves ends after its first line.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(0.2)
    with loadgen.LoadGen(
        Here(), [("127.0.0.1", echo[0])], duration=2.0, rate=5, streams=1, stream_port=port
    ) as running:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"p1 n1 0\n")
        report = running.result()
    server.close()
    (only,) = report["streams"]
    assert only["opened"] >= 2 and only["broken"] >= 1 and set(only["breaks"]) <= {"closed"}


def test_arp_owner_changes_count_moves_between_answers_not_silences() -> None:
    from hack import hitless

    a, b = ["02:00:00:00:00:0a"], ["02:00:00:00:00:0b"]
    assert hitless.owner_changes([a, [], a, [], a]) == 0
    assert hitless.owner_changes([[], a, a]) == 0
    assert hitless.owner_changes([a, [], b, a]) == 2


def test_only_resets_at_a_move_of_traffic_are_explained() -> None:
    """hack.hitless.unexplained_failures: a reset within the window around a move the ToR saw
    is a handshake caught by it; anything else, or a failure not kept in detail, is not."""
    from hack import hitless, objects

    vips = hitless.Vips("ns", ["10.0.0.1", "fd00::1"], ["10.0.0.2"])
    l2 = loadgen.target_text("10.0.0.1", objects.SERVICE_PORT)
    l2_v6 = loadgen.target_text("fd00::1", objects.SERVICE_PORT)
    bgp = loadgen.target_text("10.0.0.2", objects.SERVICE_PORT)

    def report(failures: list[dict[str, Any]], counted: int) -> dict[str, Any]:
        targets = {t: {"failed": 0} for t in (l2, l2_v6, bgp)}
        targets[l2]["failed"] = counted
        return {"started_monotonic": 100.0, "first_failures": failures, "targets": targets}

    at_move = {"t": 5.2, "target": l2, "kind": "reset"}
    late = {"t": 7.0, "target": l2, "kind": "reset"}
    timeout = {"t": 5.1, "target": l2, "kind": "timeout"}
    stream = {"t": 5.0, "target": "10.0.0.1:8082", "kind": "reset"}  # a stream's, not counted
    other = {"t": 1.0, "target": bgp, "kind": "reset"}
    moves = [105.0]
    assert hitless.unexplained_failures(report([at_move, stream, other], 1), vips.l2, moves) == []
    assert hitless.unexplained_failures(report([at_move, late], 2), vips.l2, moves) == [late]
    assert hitless.unexplained_failures(report([timeout], 1), vips.l2, moves) == [timeout]
    assert hitless.unexplained_failures(report([at_move], 1), vips.l2, []) == [at_move]
    assert hitless.unexplained_failures(report([at_move], 3), vips.l2, moves) == [
        {"kind": "not kept in detail", "count": 2}
    ]
