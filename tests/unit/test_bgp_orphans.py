"""Orphans reparented to the speaker: which children count as such, and reaping them for real."""

from __future__ import annotations

from speaker.bgp import orphans
from tests.unit.child_processes import run_scenario


def test_stat_is_read_past_a_command_name_with_parentheses_and_spaces() -> None:
    stat = b"4242 (sl) e (p) Z 17 4242 900 0 -1 4228108 0 0 0 0\n"
    assert orphans.parse_stat(stat) == (4242, "Z", 17, 900)
    assert orphans.parse_stat(b"garbage") is None


def test_only_a_child_in_another_session_that_it_does_not_lead_is_an_orphan() -> None:
    own_session = 100
    # Started by us, in our session: its status is for whoever waits for it.
    assert not orphans.is_orphan(orphans.Child(pid=200, state="Z", session=100), own_session)
    # Started by us in a session of its own, like ExaBGP: the same.
    assert not orphans.is_orphan(orphans.Child(pid=300, state="Z", session=300), own_session)
    # ExaBGP's bridge, inherited when ExaBGP died.
    assert orphans.is_orphan(orphans.Child(pid=301, state="Z", session=300), own_session)


def test_reap_takes_an_inherited_zombie_and_leaves_our_own_children_alone() -> None:
    result = run_scenario(
        """
        import subprocess, time
        from speaker.bgp import orphans

        own = subprocess.Popen(["sh", "-c", "exit 3"])
        leader = subprocess.Popen(["sh", "-c", "exit 4"], start_new_session=True)
        # An "ExaBGP" whose child outlives it and then exits: inherited by us, a zombie.
        exa = subprocess.Popen(
            [sys.executable, "-c", "import os, subprocess; "
             "p = subprocess.Popen(['sleep', '0.2'], preexec_fn=os.setpgrp); print(p.pid)"],
            start_new_session=True, stdout=subprocess.PIPE,
        )
        orphan = int(exa.stdout.readline())
        exa.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = child_states()
            if states.get(own.pid) == states.get(leader.pid) == states.get(orphan) == "Z":
                break
            time.sleep(0.02)
        reaped = orphans.reap()
        print(json.dumps({
            "reaped": reaped == [orphan],
            "own": own.wait(timeout=5),
            "leader": leader.wait(timeout=5),
            "left": child_states(),
        }))
        """
    )
    assert result == {"reaped": True, "own": 3, "leader": 4, "left": {}}


def test_collect_kills_and_reaps_a_helper_its_exabgp_left_alive() -> None:
    result = run_scenario(
        """
        import asyncio, signal, subprocess
        from speaker.bgp import orphans

        # An "ExaBGP" whose helper never armed PR_SET_PDEATHSIG.
        exa = subprocess.Popen(
            [sys.executable, "-c", "import os, signal, subprocess; "
             "p = subprocess.Popen(['sleep', '30'], preexec_fn=os.setpgrp); "
             "print(p.pid, flush=True); signal.pause()"],
            start_new_session=True, stdout=subprocess.PIPE,
        )
        helper = int(exa.stdout.readline())
        exa.kill()
        exa.wait()
        reaped = asyncio.run(orphans.collect(exa.pid, grace=0.1, timeout=10))
        print(json.dumps({"reaped": reaped == [helper], "left": child_states()}))
        """
    )
    assert result == {"reaped": True, "left": {}}
