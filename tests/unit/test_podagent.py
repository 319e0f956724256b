"""The lab's pod agent contains its failures (hack/podagent.py): a half-made sandbox is removed,
one Pod's error holds back only that Pod, and no error ends the agent. No command runs: `ip`
and the API are fakes."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import pytest

from hack import podagent


class FakeApi:
    """The apiserver: lists the node's Pods, records writes, refuses some with an error."""

    def __init__(self, items: list[dict[str, Any]], refuse: dict[str, int] | None = None):
        self.items = items
        self.refuse = refuse or {}  # path -> HTTP status
        self.writes: list[tuple[str, str]] = []

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        if method == "GET":
            return {"items": self.items}
        if path in self.refuse:
            raise podagent.ApiError(self.refuse[path], method, path, "pods not found")
        self.writes.append((method, path))
        return {}


class FakeProcess:
    pid = 4242

    def poll(self) -> int | None:
        return None


def listed(name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "echo", "args": ["--port=8080"]}]},
        "status": {"phase": "Running"},
    }


def running(name: str, uid: str) -> podagent.Running:
    return podagent.Running(
        uid=uid,
        namespace="ns",
        name=name,
        netns=f"ilb-pod-{uid[:8]}",
        veth=f"vp{uid[:8]}",
        addresses=["10.244.1.2"],
        args=[],
        probe=None,
        process=cast("subprocess.Popen[bytes]", FakeProcess()),
        started="2024-01-01T00:00:00Z",
        ready=True,
    )


def agent(api: FakeApi, tmp_path: Path) -> podagent.Agent:
    return podagent.Agent(
        "node1",
        cast(podagent.Api, api),
        tmp_path,
        ["10.244.1.0/24", "fd00:244:0:1::/64"],
        ["10.250.0.11", "fd00:250::11"],
    )


def logged(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# --- one Pod's error is that Pod's ---------------------------------------------------------------


def test_a_status_write_refused_for_one_pod_does_not_stop_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # web-a was deleted between the LIST and its status PATCH: 404.
    api = FakeApi(
        [listed("web-a", "aaaaaaaa-1"), listed("web-b", "bbbbbbbb-2")],
        refuse={"/api/v1/namespaces/ns/pods/web-a/status": 404},
    )
    pods = agent(api, tmp_path)
    for pod in (running("web-a", "aaaaaaaa-1"), running("web-b", "bbbbbbbb-2")):
        pods.pods[pod.uid] = pod

    pods.tick()

    assert api.writes == [("PATCH", "/api/v1/namespaces/ns/pods/web-b/status")]
    assert set(pods.failing) == {"aaaaaaaa-1"}
    [entry] = logged(capsys)
    assert entry["level"] == "error"
    assert entry["msg"] == "pod failed, retrying"
    assert entry["pod"] == "ns/web-a"
    assert "HTTP 404" in entry["error"]


def test_a_failing_pod_is_retried_after_a_delay_that_doubles_up_to_a_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = agent(FakeApi([]), tmp_path)
    turns = 0

    def fail() -> None:
        nonlocal turns
        turns += 1
        raise OSError("Resource temporarily unavailable")

    now, delays = 0.0, []
    for _ in range(7):
        pods.contained("uid-1", "ns/web", now, fail)
        failing = pods.failing["uid-1"]
        delays.append(failing.delay_s)
        pods.contained("uid-1", "ns/web", failing.retry_at - 0.01, fail)  # too early: left alone
        now = failing.retry_at
    assert delays == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert turns == 7
    assert len(logged(capsys)) == 7

    pods.contained("uid-1", "ns/web", 100.0, lambda: None)
    assert pods.failing == {}


def test_a_pod_gone_from_the_list_forgets_its_failures(tmp_path: Path) -> None:
    pods = agent(FakeApi([]), tmp_path)
    pods.failing["gone"] = podagent.Failing(2.0, 1e9)
    pods.tick()
    assert pods.failing == {}


# --- start() can be tried again ------------------------------------------------------------------


class FakeIp:
    """`subprocess.run` for `ip`: records every command, fails those matching `fail_on` once."""

    def __init__(self, fail_on: str) -> None:
        self.fail_on = fail_on
        self.commands: list[str] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        command = " ".join(argv)
        self.commands.append(command)
        if self.fail_on and self.fail_on in command and kwargs.get("check"):
            self.fail_on = ""
            raise subprocess.CalledProcessError(2, argv, "", "RTNETLINK answers: No buffer space")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_a_sandbox_that_fails_halfway_is_removed_so_the_next_start_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ip = FakeIp(fail_on="-batch")
    monkeypatch.setattr(subprocess, "run", ip)
    pods = agent(FakeApi([]), tmp_path)
    monkeypatch.setattr(pods, "_spawn", lambda netns, name, args: FakeProcess())
    item = listed("web", "cafe0123-4567")

    with pytest.raises(subprocess.CalledProcessError):
        pods.start(item)
    made = ip.commands.index("ip netns add ilb-pod-cafe0123")
    failed = next(i for i, c in enumerate(ip.commands) if "-batch" in c)
    assert "ip netns del ilb-pod-cafe0123" in ip.commands[failed:]
    assert "ip link del vpcafe0123" in ip.commands[failed:]
    assert made < failed
    assert pods.pods == {}

    pods.start(item)
    assert set(pods.pods) == {"cafe0123-4567"}


def test_a_process_that_cannot_start_leaves_no_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ip = FakeIp(fail_on="")
    monkeypatch.setattr(subprocess, "run", ip)
    pods = agent(FakeApi([]), tmp_path)

    def no_fork(netns: str, name: str, args: list[str]) -> FakeProcess:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(pods, "_spawn", no_fork)
    with pytest.raises(BlockingIOError):
        pods.start(listed("web", "cafe0123-4567"))
    assert ip.commands[-3:] == [
        "ip netns pids ilb-pod-cafe0123",
        "ip netns del ilb-pod-cafe0123",
        "ip link del vpcafe0123",
    ]
    assert pods.pods == {}


# --- the agent goes on ---------------------------------------------------------------------------


def test_no_error_ends_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = agent(FakeApi([]), tmp_path)
    errors: list[Exception] = [RuntimeError("no free pod address on this node"), KeyError("spec")]

    def tick() -> None:
        if errors:
            raise errors.pop(0)
        pods.stopping = True

    sleeps: list[float] = []
    monkeypatch.setattr(pods, "tick", tick)
    monkeypatch.setattr(time, "sleep", sleeps.append)

    pods.run()

    assert sleeps == [0.2, 0.4, podagent.TICK_S]
    first, second = logged(capsys)
    assert first["msg"] == "tick failed, retrying"
    assert first["error"] == "RuntimeError: no free pod address on this node"
    # Not an I/O error: a bug, so the log says where.
    assert second["error"] == "KeyError: 'spec'"
    assert "Traceback" in second["traceback"]


def test_pods_run_by_their_maker_are_left_alone(tmp_path: Path) -> None:
    """MetalLB's stand-in speaker Pods are bound to the node but run by the lab itself: the
    agent neither starts nor reports them, while it still serves the node's other Pods."""
    theirs = listed("metallb-speaker-node1", "cccccccc-3")
    theirs["spec"]["schedulerName"] = podagent.RUN_BY_THEIR_MAKER
    api = FakeApi([theirs, listed("web-b", "bbbbbbbb-2")])
    pods = agent(api, tmp_path)
    pods.pods["bbbbbbbb-2"] = running("web-b", "bbbbbbbb-2")
    pods.tick()
    assert api.writes == [("PATCH", "/api/v1/namespaces/ns/pods/web-b/status")]
    assert set(pods.pods) == {"bbbbbbbb-2"} and pods.failing == {}
