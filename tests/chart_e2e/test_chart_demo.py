"""`hack/demo --chart` end to end: ironlb installed with helm onto three kubelet nodes, the
demo's summary as with processes, plus the chart's Pods listed.

The demo brings up and removes a lab of its own, so this module runs before any test of the
package asks for the `lab` fixture (modules run in name order: `test_chart_demo` comes first);
it takes the machine-wide lab lock itself, and the demo sees that a process above it holds it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hack import kubelet_node
from hack import lab as network_lab
from tests.e2e.test_demo import in_range, summary_value

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 900.0


@pytest.fixture(scope="module")
def no_lab(request: pytest.FixtureRequest) -> Iterator[None]:
    if network_lab.lock_holder() == os.getpid():
        pytest.fail("a lab is already up in this session; run tests/chart_e2e first", pytrace=False)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with network_lab.exclusive(waiting=reporter.write_line if reporter else None):
        yield


def test_the_chart_demo_runs_end_to_end(
    no_lab: None, record_property: Callable[[str, object], None]
) -> None:
    started = time.monotonic()
    run = subprocess.run(
        [str(ROOT / "hack" / "demo"), "--non-interactive", "--chart"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
    )
    took = time.monotonic() - started
    record_property("chart_demo_s", round(took, 1))
    print(f"MEASURED chart_demo_s = {took:.1f} s")
    output = run.stdout
    assert run.returncode == 0, f"{output[-5000:]}\n{run.stderr[-2000:]}"
    assert summary_value(output, "result") == "every step worked"
    addresses = summary_value(output, "addresses").split()
    v4 = [a for a in addresses if in_range(a, *network_lab.L2_POOL_V4)]
    assert len(v4) == 1 and len(addresses) == 3, addresses
    assert summary_value(output, "client source address") == "kept"
    assert summary_value(output, "BGP").endswith("via node1, node3")
    failover = summary_value(output, "failover time")
    owner, successor = re.findall(r"node\d+", failover)
    assert float(failover.split()[0]) > 0 and owner != successor
    # The chart's Pods, as `kubectl get pods -n metallb-system -o wide` showed them at the end.
    summary = output.split("Summary", 1)[1]
    listed = re.findall(r"^\s+(ironlb-(?:controller|speaker)-\S+)\s+\d/1\s+Running", summary, re.M)
    assert len([p for p in listed if "speaker" in p]) == 3, summary
    assert len([p for p in listed if "controller" in p]) == 1, summary
    # Everything the demo made is gone.
    assert network_lab.lab_namespaces() == []
    assert not (network_lab.DEFAULT_DIR / network_lab.MARKER).exists()
    assert kubelet_node.node_cgroups() == []
