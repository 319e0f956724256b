"""Which logs a failed lab test shows, and how much of each (hack/logtails.py)."""

from __future__ import annotations

from pathlib import Path

from hack import logtails
from hack.logtails import LogFile


def test_only_logs_written_since_the_start_most_telling_first() -> None:
    files = [
        LogFile(Path("/lab/logs/kube-proxy-node1.log"), 105.0, 10),
        LogFile(Path("/lab/logs/speaker-node2.log"), 101.0, 10),
        LogFile(Path("/lab/logs/speaker-node1.log"), 103.0, 10),
        LogFile(Path("/tmp/frr/frr.log"), 102.0, 10),
        LogFile(Path("/lab/logs/podagent-node1.log"), 99.0, 10),  # before the test
        LogFile(Path("/lab/logs/controller.log"), 104.0, 0),  # empty
        LogFile(Path("/lab/cp/kube-apiserver-audit.log"), 106.0, 10),  # always written
        LogFile(Path("/lab/logs/something.log"), 107.0, 10),
    ]
    chosen = [f.path.name for f in logtails.choose(files, since=100.0)]
    assert chosen == [
        "speaker-node1.log",
        "speaker-node2.log",
        "frr.log",
        "kube-proxy-node1.log",
        "something.log",
    ]


def test_at_most_limit_files() -> None:
    files = [LogFile(Path(f"/lab/logs/speaker-node{i}.log"), 200.0 + i, 1) for i in range(30)]
    assert len(logtails.choose(files, since=0.0, limit=3)) == 3


def test_tail_reads_the_last_lines_and_cuts_long_ones(tmp_path: Path) -> None:
    log = tmp_path / "speaker.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)) + "x" * 5000 + "\n")
    text = logtails.tail(log, lines=3)
    assert text.splitlines()[:2] == ["line 998", "line 999"]
    assert len(text.splitlines()[2]) == logtails.MAX_LINE_CHARS


def test_sections_find_logs_under_the_roots(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "speaker-node1.log").write_text("started\nbgp tor: session up\n")
    (tmp_path / "logs" / "notes.txt").write_text("not a log\n")
    sections = logtails.sections([tmp_path, tmp_path / "missing"], since=0.0)
    assert [(title.endswith("speaker-node1.log"), text) for title, text in sections] == [
        (True, "started\nbgp tor: session up")
    ]


def test_unreadable_log_says_so(tmp_path: Path) -> None:
    assert logtails.tail(tmp_path / "gone.log").startswith("(cannot read:")
