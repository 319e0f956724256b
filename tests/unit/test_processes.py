"""hack.processes.argv: a running process's arguments, read from /proc/<pid>/cmdline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hack import processes


def test_argv_of_this_process_is_the_interpreters() -> None:
    argv = processes.argv(os.getpid())
    assert argv == sys.orig_argv
    assert "python" in Path(argv[0]).name


def test_argv_keeps_spaces_empty_arguments_and_replaces_undecodable_bytes() -> None:
    code = "import time; print(flush=True); time.sleep(60)"
    argv: list[str | bytes] = [sys.executable, "-c", code, "a b", "", b"\xff", ""]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as child:
        try:
            # Running, not just exec'd: until execve has built the new image's stack, the
            # command line reads empty.
            assert child.stdout is not None
            child.stdout.readline()
            assert processes.argv(child.pid) == [
                sys.executable, "-c", code, "a b", "", "\ufffd", "",
            ]  # fmt: skip
        finally:
            child.kill()


def test_a_zombie_has_no_arguments() -> None:
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while processes.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert processes.argv(child.pid) == []  # exited, not yet reaped
    finally:
        child.wait()


def test_a_pid_that_does_not_exist_has_none() -> None:
    # Pids are below pid_max: this one is never given.
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert processes.argv(pid_max) is None
