"""`exabgp validate` (the real CLI, a process) accepts every configuration the renderer makes.

The unit tier parses the same files in-process with ExaBGP's loader; this runs the command an
operator would, with the environment the speaker gives ExaBGP.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from speaker.bgp import bridge, exabgp, rendering
from tests.unit import test_bgp_rendering as cases

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", sorted(cases.PEERS))
def test_exabgp_validate(name: str, tmp_path: Path) -> None:
    helper = (sys.executable, "-I", bridge.__file__, str(tmp_path / "api.sock"))
    conf = tmp_path / f"{name}.conf"
    conf.write_text(rendering.config(cases.PEERS[name], helper, node_name="node1"))
    options = exabgp.Options(node_name="node1")
    result = subprocess.run(
        [options.exabgp, "validate", "--neighbor", str(conf)],
        env=exabgp.environment(options),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_exabgp_validate_rejects_a_broken_file(tmp_path: Path) -> None:
    # The check above can fail: a hold time ExaBGP refuses makes `validate` exit non-zero.
    helper = (sys.executable, "-I", bridge.__file__, str(tmp_path / "api.sock"))
    text = rendering.config(cases.PEERS["ebgp-basic"], helper, node_name="node1")
    conf = tmp_path / "broken.conf"
    conf.write_text(text.replace("hold-time 90;", "hold-time 2;"))
    options = exabgp.Options(node_name="node1")
    result = subprocess.run(
        [options.exabgp, "validate", str(conf)],
        env=exabgp.environment(options),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
