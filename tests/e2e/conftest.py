"""The e2e tier's fixtures: one network lab (3 nodes) per session, always torn down.

The lab brings its own control plane inside `ilb-cp`, separate from the integration tier's, so
`control_plane` is overridden here: the `kubeconfig`, `kube_api` and `kubectl` fixtures of
tests/conftest.py then talk to the lab's apiserver. Our CRDs and the metallb-system namespace are
applied by the lab itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import lab as network_lab
from hack import objects, processes

NODES = 3


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest) -> Iterator[network_lab.Lab]:
    if os.geteuid() != 0:
        pytest.fail("the e2e tier needs root (network namespaces, raw sockets)", pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="ironlb-e2e-"))
    the_lab = network_lab.Lab(nodes=NODES, directory=base / "lab")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    # pytest tears fixtures down on KeyboardInterrupt but not on SIGTERM (CI cancelling a job).
    previous = signal.signal(signal.SIGTERM, processes.interrupt)
    try:
        # One lab per machine: a concurrent session waits for this one instead of clobbering it.
        with network_lab.exclusive(waiting=say):
            try:
                started = time.monotonic()
                try:
                    the_lab.up()
                except network_lab.LabError as e:
                    pytest.fail(f"cannot start the lab: {e}", pytrace=False)
                say(f"lab up in {time.monotonic() - started:.1f} s")
                yield the_lab
            finally:
                the_lab.down()
    except network_lab.LabError as e:
        pytest.fail(f"lab: {e}", pytrace=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def control_plane(lab: network_lab.Lab) -> Path:
    """The lab's kubeconfig for the root namespace (overrides the integration tier's cluster)."""
    return lab.kubeconfig


@pytest.fixture(scope="session")
def lab_kubeconfig(lab: network_lab.Lab) -> Path:
    return lab.kubeconfig


@pytest.fixture(autouse=True)
def healthy_nodes(request: pytest.FixtureRequest) -> None:
    """Every e2e test starts with the lab's nodes wired as `up` made them."""
    if "lab" in request.fixturenames:
        request.getfixturevalue("lab").repair_nodes()


@pytest.fixture
def app_namespace(lab: network_lab.Lab, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace named after the test (unique for parametrized variants), deleted afterwards
    with all it holds by kube-controller-manager, as in a cluster."""
    module = request.node.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")[:12]
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:30].strip("-")
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]
    with objects.namespace(lab, f"{module}-{slug}-{digest}".replace("_", "-")) as name:
        yield name
