"""hashicorp/memberlist as MetalLB's speaker runs it, as a standalone member process.

    python -m hack.memberlist_peer build     # into the cache; prints the binary's path

`hack/go/memberlist-peer` is a small Go program of ours around hashicorp/memberlist (the version
MetalLB's go.mod selects, MetalLB's LAN configuration and key derivation) that takes the command
line and prints the stdout events of `python -m speaker.membership`, so that bench.membership
runs either in the same harness. It is built from Go modules with one `go build`, cached in
`~/.cache/ironlb/memberlist-peer-<digest of its sources>/`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hack import cluster

SOURCE = Path(__file__).resolve().parent / "go" / "memberlist-peer"
FILES = ("go.mod", "go.sum", "main.go")
BINARY = "memberlist-peer"


class BuildError(RuntimeError):
    pass


def digest() -> str:
    h = hashlib.sha256()
    for name in FILES:
        h.update(name.encode() + b"\0" + (SOURCE / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def binary() -> Path:
    return cluster.CACHE / f"memberlist-peer-{digest()}" / BINARY


def ensure_built() -> Path:
    """The peer's binary, built if its sources changed or it is missing."""
    target = binary()
    if os.access(target, os.X_OK):
        return target
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain is needed to build the memberlist peer")
    print(f"memberlist-peer: go build into {target.parent}", file=sys.stderr, flush=True)
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed into place: never a half-written binary in the cache.
    staging = Path(tempfile.mkdtemp(prefix=".memberlist-peer-", dir=target.parent.parent))
    try:
        result = subprocess.run(
            ["go", "build", "-o", str(staging / BINARY), "."],
            cwd=SOURCE,
            capture_output=True,
            text=True,
            env={**os.environ, "CGO_ENABLED": "0"},
            timeout=900,
        )
        if result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines() or ["(no output)"]
            raise BuildError(f"go build of the memberlist peer failed: {lines[-1]}")
        staging.chmod(0o755)
        if target.parent.exists():
            shutil.rmtree(target.parent)
        staging.rename(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.memberlist_peer", description=__doc__)
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    try:
        print(ensure_built())
    except BuildError as e:
        print(f"memberlist-peer: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
