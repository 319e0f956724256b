"""`Lab.repair_nodes` (hack/lab.py), run before every e2e test, starts again a pod agent that
has exited, and says so. No command runs: the lab's `ip` and process calls are fakes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hack import lab as network_lab


def test_a_dead_pod_agent_is_started_again_and_the_lab_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = network_lab.Lab(nodes=3, directory=tmp_path, kubelet_nodes=(3,))
    monkeypatch.setattr(network_lab, "_ip_batch", lambda *args: None)
    monkeypatch.setattr(lab, "exec", lambda *args, **kwargs: None)
    alive = {1: 101}  # node2's agent has exited; node3 runs a kubelet, not an agent
    asked: list[int] = []

    def pod_agent_pid(index: int) -> int | None:
        asked.append(index)
        return alive.get(index)

    started: list[int] = []
    monkeypatch.setattr(lab, "pod_agent_pid", pod_agent_pid)
    monkeypatch.setattr(lab, "_start_pod_agent", started.append)
    lab.pod_agent_log("node2").write_text('{"msg": "running pods"}\nKeyError: \'spec\'\n\n')

    lab.repair_nodes()

    assert asked == [1, 2]
    assert started == [2]
    assert capsys.readouterr().err == (
        "lab: the pod agent of node2 has exited; starting it again"
        " (its log ended: KeyError: 'spec')\n"
    )


def test_a_pod_agent_pid_is_only_a_running_agent(tmp_path: Path) -> None:
    lab = network_lab.Lab(nodes=1, directory=tmp_path)
    assert lab.pod_agent_pid(1) is None  # no pid file
    # A pid file naming a live process that is not an agent (this test's own: pids are reused).
    (tmp_path / "node1" / "podagent.pid").write_text(str(os.getpid()))
    assert lab.pod_agent_pid(1) is None
