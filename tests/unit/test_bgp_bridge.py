"""ExaBGP's API helper, run for real: it hands the pipes over, and never outlives ExaBGP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from speaker.bgp import bridge
from tests.unit.child_processes import marked_environment, run_scenario


def test_orphaned_when_the_parent_changed_or_is_not_exabgp() -> None:
    exabgp, speaker = 500, 400
    assert not bridge.orphaned(exabgp, exabgp, speaker)
    # ExaBGP died between the helper's start and PR_SET_PDEATHSIG: no signal will come.
    assert bridge.orphaned(exabgp, speaker, speaker)
    assert bridge.orphaned(exabgp, 1, speaker)
    # ExaBGP died before the helper even started: its parent was the speaker, or init, from the
    # start, and never changes.
    assert bridge.orphaned(speaker, speaker, speaker)
    assert bridge.orphaned(1, 1, speaker)


def test_a_helper_whose_exabgp_is_already_gone_hands_nothing_over_and_exits() -> None:
    # Started by the listening process itself, as if ExaBGP had died and left it to the speaker.
    with (
        tempfile.TemporaryDirectory(prefix="ilb-") as tmp,
        marked_environment() as env,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener,
    ):
        path = str(Path(tmp) / "api.sock")
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(20)
        helper = subprocess.Popen(
            [sys.executable, "-I", bridge.__file__, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(20)
                _data, fds, _flags, _addr = socket.recv_fds(conn, 64, 2)
            for fd in fds:
                os.close(fd)
            # Before: it handed the pipes over and became `sleep infinity`, for good.
            returncode = helper.wait(timeout=20)
        finally:
            helper.kill()
            helper.wait()
            for pipe in (helper.stdin, helper.stdout, helper.stderr):
                if pipe is not None:
                    pipe.close()
    assert (fds, returncode) == ([], 1)


def test_the_helper_hands_the_pipes_over_and_dies_with_exabgp() -> None:
    script = """
        import shutil, signal, socket, subprocess, tempfile, time

        tmp = tempfile.mkdtemp(prefix="ilb-")
        path = tmp + "/api.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(20)
        # An "ExaBGP": starts the helper on two pipes, as ExaBGP does, and waits.
        exa = subprocess.Popen(
            [sys.executable, "-c", "import os, signal, subprocess, sys; "
             "p = subprocess.Popen([sys.executable, '-I', sys.argv[1], sys.argv[2]], "
             "stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=os.setpgrp); "
             "print(p.pid, flush=True); signal.pause()", BRIDGE, path],
            start_new_session=True, stdout=subprocess.PIPE,
        )
        helper = int(exa.stdout.readline())
        conn, _ = listener.accept()
        conn.settimeout(20)
        _data, fds, _flags, _addr = socket.recv_fds(conn, 64, 2)
        handed = len(fds)

        def argv():
            return open(f"/proc/{helper}/cmdline").read().split("\\0")[:2]

        deadline = time.monotonic() + 20
        while argv()[0] != "sleep" and time.monotonic() < deadline:
            time.sleep(0.02)
        sleeping = argv()
        exa.kill()
        exa.wait()
        # PR_SET_PDEATHSIG ends the helper, which comes to us (the subreaper) to be reaped.
        deadline = time.monotonic() + 20
        while child_states().get(helper) != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        _pid, status = os.waitpid(helper, os.WNOHANG)
        listener.close()
        shutil.rmtree(tmp)
        print(json.dumps({
            "handed": handed,
            "sleeping": sleeping,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        }))
    """
    result = run_scenario(script.replace("BRIDGE", repr(bridge.__file__)))
    assert result == {"handed": 2, "sleeping": ["sleep", "infinity"], "signal": 15}
