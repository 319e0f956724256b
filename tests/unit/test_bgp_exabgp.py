"""ExaBGP's process: started armed with PR_SET_PDEATHSIG, and leaving nothing behind when killed.

A fake `exabgp` executable stands in for ExaBGP: it starts the helper of the configuration it is
given, on two pipes, as ExaBGP does, and waits.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from speaker.bgp import exabgp
from tests.unit.child_processes import marked_environment, run_scenario

FAKE_EXABGP = """\
import os, re, shlex, signal, subprocess, sys

conf = open(sys.argv[2]).read()
helper = shlex.split(re.search(r"run (.*);", conf).group(1))
subprocess.Popen(helper, stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=os.setpgrp)
print("fake exabgp: helper started", flush=True)
while True:
    signal.pause()
"""


def test_the_child_only_calls_prctl_resolved_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # In the forked child of a threaded speaker, loading a library could hang on a loader lock.
    calls: list[tuple[Any, ...]] = []

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a library loaded in the forked child")

    monkeypatch.setattr(ctypes, "CDLL", no_loading)
    monkeypatch.setattr(exabgp, "_prctl", lambda *args: calls.append(args), raising=False)
    exabgp._die_with_parent()
    assert calls == [(1, signal.SIGTERM, 0, 0, 0)]


def test_exabgp_is_started_armed_with_pr_set_pdeathsig() -> None:
    read_it = (
        "import ctypes; v = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)"  # PR_GET_PDEATHSIG
    )
    with marked_environment() as env:
        done = subprocess.run(
            [sys.executable, "-c", read_it],
            preexec_fn=exabgp._die_with_parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    assert done.stdout.strip() == str(int(signal.SIGTERM))


# The start both scenarios share; `started()` gives a Process whose ExaBGP is the fake.
STARTED = """
        import asyncio, ipaddress
        from speaker.bgp import exabgp, peers

        async def started():
            peer = peers.Peer(
                name="tor", my_asn=64512, peer_asn=64500,
                peer_address=ipaddress.ip_address("10.250.0.1"),
            )
            options = exabgp.Options(node_name="node", exabgp=FAKE, start_timeout=20)
            process = exabgp.Process(peer, options, lambda event: None)
            await process.start()
            return process
"""


def run_with_fake_exabgp(tmp_path: Path, script: str) -> Any:
    """`script` run by `run_scenario` after STARTED, with the fake standing in for ExaBGP."""
    fake = tmp_path / "exabgp"
    fake.write_text(f"#!{sys.executable}\n{FAKE_EXABGP}")
    fake.chmod(0o755)
    return run_scenario((STARTED + script).replace("FAKE", repr(str(fake))))


def test_a_killed_exabgp_leaves_no_process_behind(tmp_path: Path) -> None:
    script = """
        import time

        async def main():
            process = await started()
            started_states = sorted(child_states().values())
            # SIGKILL: ExaBGP cannot stop its helper; PR_SET_PDEATHSIG does, and the helper,
            # inherited by us (PID 1 in the container, the subreaper here), exits.
            await process.kill()
            deadline = time.monotonic() + 5
            while "S" in child_states().values() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return {
                "started": started_states,
                "exited": process.exited.is_set(),
                "left": child_states(),
            }

        print(json.dumps(asyncio.run(main())))
    """
    result = run_with_fake_exabgp(tmp_path, script)
    # Before: {"...": ..., "left": {"<the helper's pid>": "Z"}}, for good.
    assert result == {"started": ["S"], "exited": True, "left": {}}


def test_killing_an_exabgp_that_already_exited_leaves_its_exit_status_to_the_owner(
    tmp_path: Path,
) -> None:
    script = """
        import signal

        if sys.version_info < (3, 12):
            # Reaped in the loop's own thread, as by default from Python 3.12 on: while this
            # coroutine runs, nothing else reaps ExaBGP, so the race is decided, not left to luck.
            asyncio.set_child_watcher(asyncio.PidfdChildWatcher())

        async def main():
            process = await started()
            # ExaBGP is killed (by a first kill(), say) and has exited, but the loop has not yet
            # seen it: waitid with WNOWAIT waits for the exit and leaves the status in place.
            os.kill(process.pid, signal.SIGKILL)
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
            await process.kill()
            return {"returncode": process.returncode}

        print(json.dumps(asyncio.run(main())))
    """
    result = run_with_fake_exabgp(tmp_path, script)
    # Before: 255, as asyncio reports a child whose status someone else took (subprocess's
    # poll() inside kill() reaped it).
    assert result == {"returncode": -signal.SIGKILL}
