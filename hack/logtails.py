"""The ends of the logs a failed lab test needs: speakers, ExaBGP, FRR, pod agents, kube-proxy,
the kubelet and the Pods' own logs, whichever were written while the test ran.

A test that fails in the lab says what it waited for; the reason is usually in a log that the
test did not read. The test tiers' conftest attaches `sections()` to the failure report, so a
red run in CI carries what a person would otherwise have to reproduce the failure to see.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

TAIL_LINES = 25
MAX_FILES = 14
MAX_LINE_CHARS = 400
READ_BYTES = 1 << 16  # from the end: enough for the lines wanted, even long ones
# Most telling first: what our processes said, then the data path under them, then the rest.
PRIORITY = (
    "speaker",
    "exabgp",
    "controller",
    "frr",
    "podagent",
    "loadgen",
    "kube-proxy",
    "kubelet",
    "pod-logs",
    "containerd",
)
# Always written and rarely the reason; their volume would push the telling ones out.
SKIPPED = ("audit", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class LogFile:
    path: Path
    modified: float
    size: int


def rank(path: Path) -> int:
    """Position of a log in PRIORITY by its path (lower first); unknown logs last."""
    text = str(path).lower()
    for i, word in enumerate(PRIORITY):
        if word in text:
            return i
    return len(PRIORITY)


def choose(files: Iterable[LogFile], since: float, limit: int = MAX_FILES) -> list[LogFile]:
    """The logs written at or after `since` (a test's start, wall clock), most telling first,
    the newest first within one kind; at most `limit`."""
    fresh = [
        f
        for f in files
        if f.modified >= since and f.size > 0 and not any(s in f.path.name for s in SKIPPED)
    ]
    fresh.sort(key=lambda f: (rank(f.path), -f.modified))
    return fresh[:limit]


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a file, read from its end (logs can be large)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max(lines * 1024, READ_BYTES)))
            data = f.read()
    except OSError as e:
        return f"(cannot read: {e})"
    kept = data.decode(errors="replace").splitlines()[-lines:]
    return "\n".join(line[:MAX_LINE_CHARS] for line in kept)


def find(roots: Sequence[Path]) -> list[LogFile]:
    """Every `*.log` file under the roots (missing roots are skipped)."""
    found: list[LogFile] = []
    for root in roots:
        if not root.exists():
            continue
        for path in root.rglob("*.log"):
            try:
                st = path.stat()
            except OSError:
                continue
            if path.is_file():
                found.append(LogFile(path, st.st_mtime, st.st_size))
    return found


def sections(roots: Sequence[Path], since: float) -> list[tuple[str, str]]:
    """(title, text) for each chosen log: the report sections of a failed test."""
    return [(f"log tail: {f.path}", tail(f.path)) for f in choose(find(roots), since)]
