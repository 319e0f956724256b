"""The chart tier's fixtures: a lab whose two nodes run a real kubelet with containerd, and the
images built from the project's Dockerfile (hack/images.py), imported into each node.

One lab per package, torn down when the package ends (on failure, Ctrl-C and SIGTERM too): the
e2e tier's lab (3 nodes with the kubelet stand-in) is another lab with the same fixed names, so
this package runs first (`tests/chart_e2e` sorts before `tests/e2e`) and leaves the machine
before that one starts. Tests talk to the lab with `lab.kubectl` and `hack/objects.py`.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import images, processes
from hack import lab as network_lab

NODES = 2
KUBELET_NODES = (1, 2)


@pytest.fixture(scope="package")
def built() -> images.Built:
    """The images (from the cache when nothing they are built from changed)."""
    started = time.monotonic()
    try:
        result = images.build()
    except images.ImageError as e:
        pytest.fail(f"cannot build the images: {e}", pytrace=False)
    print(f"images ready in {time.monotonic() - started:.1f} s")
    return result


@pytest.fixture(scope="package")
def lab(request: pytest.FixtureRequest, built: images.Built) -> Iterator[network_lab.Lab]:
    if os.geteuid() != 0:
        pytest.fail("the chart tier needs root (namespaces, mounts, cgroups)", pytrace=False)
    if network_lab.lock_holder() == os.getpid():
        pytest.fail(
            "this session already holds another lab: run tests/chart_e2e before tests/e2e",
            pytrace=False,
        )
    base = Path(tempfile.mkdtemp(prefix="ironlb-chart-e2e-"))
    the_lab = network_lab.Lab(nodes=NODES, directory=base / "lab", kubelet_nodes=KUBELET_NODES)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    previous = signal.signal(signal.SIGTERM, processes.interrupt)
    try:
        with network_lab.exclusive(waiting=say):
            try:
                started = time.monotonic()
                try:
                    the_lab.up()
                except network_lab.LabError as e:
                    pytest.fail(f"cannot start the lab: {e}", pytrace=False)
                say(f"lab with kubelet nodes up in {time.monotonic() - started:.1f} s")
                yield the_lab
            finally:
                started = time.monotonic()
                the_lab.down()
                say(f"lab down in {time.monotonic() - started:.1f} s")
    except network_lab.LabError as e:
        pytest.fail(f"lab: {e}", pytrace=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(autouse=True)
def healthy_nodes(request: pytest.FixtureRequest) -> None:
    if "lab" in request.fixturenames:
        request.getfixturevalue("lab").repair_nodes()
