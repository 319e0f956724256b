"""The demo as a user runs it: `hack/demo --non-interactive` end to end, then interrupted.

Only one lab can exist on a machine. When this session already runs one (another e2e module used
the `lab` fixture first), the demo is pointed at it with `--lab-dir` and must leave it as it was;
when it does not, the demo brings up and removes its own lab, as on a fresh machine. Either way
the summary's claims are checked against what the lab allows (addresses inside the pools it
configured, a measured failover time), and the clean-up is checked from outside.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hack import deploy, objects, processes
from hack import lab as network_lab
from ironlb import annotations as keys

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "hack" / "demo"
NS = "metallb-system"
RUN_TIMEOUT_S = 600.0
# The demo's clean-up waits up to 120 s for kube-controller-manager to empty its namespace, and
# then stops ironlb gracefully: this bound is for a demo that hangs, not for a slow one.
CLEAN_UP_TIMEOUT_S = 300.0
TERMINATE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def borrowed(request: pytest.FixtureRequest) -> Iterator[network_lab.Lab | None]:
    """The session's lab if this session holds the lab lock, else None (the demo makes its own).

    Without a lab of its own the module still takes the lab lock, waiting like the `lab` fixture
    for another session to finish, so that the demo's time limits measure the demo, not the
    wait. The demo sees that a process above it holds the lock and does not wait for it.
    """
    if network_lab.lock_holder() == os.getpid():
        lab: network_lab.Lab = request.getfixturevalue("lab")
        # Modules that ran before leave their configuration; the demo refuses to mix with it.
        objects.clear_configuration(lab)
        yield lab
        return
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with network_lab.exclusive(waiting=reporter.write_line if reporter else None):
        yield None


def argv(lab: network_lab.Lab | None) -> list[str]:
    extra = [] if lab is None else ["--lab-dir", str(lab.directory)]
    return [str(DEMO), "--non-interactive", *extra]


def assert_cleaned_up(lab: network_lab.Lab | None) -> None:
    if lab is None:
        assert network_lab.lab_namespaces() == []
        assert not (network_lab.DEFAULT_DIR / network_lab.MARKER).exists()
        return
    pools = json.loads(lab.kubectl("get", "ipaddresspools", "-n", NS, "-o", "json"))["items"]
    assert [p["metadata"]["name"] for p in pools] == []
    services = json.loads(lab.kubectl("get", "services", "-n", "demo", "-o", "json"))["items"]
    assert services == []
    # The demo's own: modules that ran before may leave statuses of their Services (their
    # speakers stopped while the namespaces went), which are not the demo's to remove.
    statuses = lab.kubectl(
        "get", "servicel2statuses,servicebgpstatuses", "-n", NS, "-o", "name",
        "-l", f"{keys.STATUS_SERVICE_NAMESPACE}=demo",
    )  # fmt: skip
    assert statuses.strip() == ""
    assert not any(ns.startswith("ilb-pod-") for ns in network_lab.lab_namespaces())
    for ns in lab.node_namespaces:
        # What the lab itself runs in a node stays; nothing of the demo's.
        left = [_cmdline(pid) for pid in lab.status()[ns]]
        assert all("kube-proxy" in c or "hack.podagent" in c for c in left), left


def _cmdline(pid: int) -> str:
    return " ".join(processes.argv(pid) or [])


def summary_value(output: str, key: str) -> str:
    parts = re.split(r"^== \d+\. Summary$", output, flags=re.MULTILINE)
    assert len(parts) == 2, f"no summary:\n{output[-3000:]}"
    found = re.search(rf"^\s+{re.escape(key)}: (.*)$", parts[1], re.MULTILINE)
    assert found, f"no {key!r} in the summary:\n{parts[1]}"
    return found.group(1).strip()


def in_range(address: str, low: object, high: object) -> bool:
    ip = ipaddress.ip_address(address)
    first, last = ipaddress.ip_address(str(low)), ipaddress.ip_address(str(high))
    return ip.version == first.version and int(first) <= int(ip) <= int(last)


def test_the_demo_runs_end_to_end_and_reports_what_it_measured(
    borrowed: network_lab.Lab | None, record_property: Callable[[str, object], None]
) -> None:
    started = time.monotonic()
    run = subprocess.run(
        argv(borrowed),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
    )
    took = time.monotonic() - started
    record_property("demo_s", round(took, 1))
    print(f"MEASURED demo_s = {took:.1f} s")
    output = run.stdout
    assert run.returncode == 0, f"{output[-4000:]}\n{run.stderr[-2000:]}"
    assert summary_value(output, "result") == "every step worked"

    addresses = summary_value(output, "addresses").split()
    v4 = [a for a in addresses if in_range(a, *network_lab.L2_POOL_V4)]
    v6 = [a for a in addresses if in_range(a, *network_lab.L2_POOL_V6)]
    routed = [a for a in addresses if ipaddress.ip_address(a) in network_lab.BGP_POOL_V4]
    assert (len(v4), len(v6), len(routed), len(addresses)) == (1, 1, 1, 3), addresses
    assert summary_value(output, "client source address") == "kept"
    assert summary_value(output, "BGP").endswith("via node1, node3")
    # The policy experiment: with Cluster the backend sees a node's address, with Local the
    # client's; only the nodes with a local endpoint (node1, node3) say 200 to the ToR.
    cluster_seen = ipaddress.ip_address(summary_value(output, "source address (Cluster)"))
    node_addresses = {
        address
        for i in range(1, 4)
        for address in (network_lab.node_v4(i), network_lab.pod_gateway_v4(i))
    }
    assert cluster_seen in node_addresses
    assert summary_value(output, "source address (Local)") == str(network_lab.CLIENT_V4)
    assert summary_value(output, "healthCheckNodePort") == "node1=200 node2=503 node3=200"

    failover = summary_value(output, "failover time")
    seconds = float(failover.split()[0])
    owner, successor = re.findall(r"node\d+", failover)
    assert seconds > 0 and owner != successor
    record_property("demo_failover_s", seconds)
    print(f"MEASURED demo_failover_s = {seconds:.3f} s")
    # The steps a user is promised, in order.
    titles = re.findall(r"^== \d+\. (.*)$", output, re.MULTILINE)
    assert [t.split(":")[0].split(" ")[0] for t in titles] == [
        "A", "ironlb", "MetalLB's", "Two", "Layer", "BGP", "A", "externalTrafficPolicy",
        "ironlb", "Failover", "Summary",
    ]  # fmt: skip
    assert_cleaned_up(borrowed)


def _waited(process: subprocess.Popen[str], timeout: float) -> bool:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def stop(process: subprocess.Popen[str], borrowed: network_lab.Lab | None) -> None:
    """End a demo that did not end by itself the way a CI job is cancelled (SIGTERM: it stops
    what it started), then SIGKILL. Its speakers and controller lead process groups of their own:
    a demo killed outright leaves them running in a borrowed lab, holding the ports the next
    module's speakers bind, so they are stopped here too."""
    if process.poll() is None:
        process.terminate()
        if not _waited(process, TERMINATE_TIMEOUT_S):
            process.kill()
            process.wait(10)
    if borrowed is not None:
        deploy.stop_leftovers(borrowed)


def test_ctrl_c_stops_the_demo_and_cleans_up(borrowed: network_lab.Lab | None) -> None:
    # A person's Ctrl-C reaches the demo however this suite was started: a non-interactive shell
    # starts background jobs with SIGINT ignored, children inherit that, and Python then installs
    # no handler for it (the demo ran to its end). A handler here is reset to the default at exec.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            argv(borrowed),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert process.stdout is not None
    stdout = process.stdout
    seen: list[str] = []
    creating = threading.Event()

    # A thread reads every line as it comes: reading a line per `select` of the pipe lags behind
    # the demo (lines already in the reader's buffer are invisible to `select`).
    def read() -> None:
        for line in stdout:
            seen.append(line)
            if "Two Services" in line:
                creating.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # Interrupt once ironlb runs in the lab and Services are being created.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not creating.wait(0.2):
            assert time.monotonic() < deadline and process.poll() is None, "".join(seen)
        process.send_signal(signal.SIGINT)
        stopped = _waited(process, CLEAN_UP_TIMEOUT_S)
        reader.join(30)
    finally:
        stop(process, borrowed)
    output = "".join(seen)
    assert stopped, f"the demo still ran {CLEAN_UP_TIMEOUT_S:.0f} s after Ctrl-C:\n{output[-3000:]}"
    assert process.returncode == 130, output[-3000:]
    assert "interrupted" in output
    assert "cleaning up" in output
    took = re.search(r"^   cleaning up: ([0-9.]+) s$", output, re.MULTILINE)
    print(f"MEASURED demo_clean_up_s = {took.group(1) if took else None} s")
    assert_cleaned_up(borrowed)
