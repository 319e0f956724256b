"""Container images without a registry: built here, imported into each node's containerd.

    hack/images build        # build (or find in the cache) every image; print names and sizes
    hack/images list         # what the cache holds
    hack/images clean        # remove the cache and buildah's storage for it

Four images, each cached by the hash of its inputs (rebuilt only when those change):

- `ironlb.local/python:3.11-bookworm-<h>`: the base, a minimal Debian made with `mmdebstrap`
  (the essential set plus python3, python3-venv, ca-certificates; no documentation, no apt
  lists), passed to the Dockerfile as `PYTHON_IMAGE`.
- `ironlb.local/controller:<h>` and `ironlb.local/speaker:<h>`: the project's own `Dockerfile`
  built with `buildah bud`. The build machine's pip configuration and CA bundle (pip may need
  them to reach PyPI) are mounted for the build's RUN steps, read-only, never copied in.
- `ironlb.local/pause:3.10.2`: the Pod sandbox, `build/pause/linux/pause.c` of the Kubernetes
  release in the Go module cache, compiled with `gcc -static`, alone in an image.
- `ironlb.local/echo:latest`: the lab's echo server (`hack/echo.py`) on the base, for backend
  Pods on kubelet nodes (`hack/objects.py` makes them).

buildah keeps its storage under the cache (`--root`), so nothing lands in the machine's own
container storage; each image is saved as an OCI archive that `import_into` hands to a node's
containerd (`ctr -n k8s.io images import`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from hack import cluster as local_cluster

ROOT = Path(__file__).resolve().parent.parent
CACHE = local_cluster.CACHE / "images"
STORAGE = CACHE / "storage"
ARCHIVES = CACHE / "archives"
RUNROOT = Path("/run/ironlb-buildah")

REGISTRY = "ironlb.local"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# Paths dpkg does not unpack into the base: documentation and translations (copyrights stay).
BASE_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
PAUSE_TAG = "3.10.2"
ECHO_IMAGE = f"{REGISTRY}/echo:latest"
# What the Dockerfile's COPY lines take from the build context (see .dockerignore).
DOCKERFILE_INPUTS = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
    "ironlb",
    "controller",
    "speaker",
    "ironlb_cli",
)
# The build machine's pip configuration and CA bundle, mounted for RUN steps when present.
HOST_MOUNTS = (Path("/etc/pip.conf"), Path("/etc/ssl/certs/ca-certificates.crt"))
REQUIRED = ("buildah", "mmdebstrap", "gcc", "ctr")


class ImageError(Exception):
    """A failure a person can act on; its message is one line."""


def log(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Image:
    """One built image: its reference and the OCI archive it is saved in."""

    name: str  # e.g. ironlb.local/speaker:0123456789ab
    archive: Path
    # Its name in buildah's storage, when that differs (the echo image is saved as `:latest`).
    stored: str = ""

    @property
    def repository(self) -> str:
        return self.name.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.name.rsplit(":", 1)[1]


@dataclasses.dataclass(frozen=True)
class Built:
    """Every image the lab's kubelet nodes need."""

    base: Image
    controller: Image
    speaker: Image
    pause: Image
    echo: Image

    @property
    def for_nodes(self) -> list[Image]:
        return [self.pause, self.controller, self.speaker, self.echo]


# --- hashing the inputs ---------------------------------------------------------------------------


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and "__pycache__" not in p.parts
                and p.suffix != ".pyc"
                and not any(part.endswith(".egg-info") for part in p.parts)
            )
        elif path.is_file():
            out.append(path)
    return out


def digest(*parts: str | bytes | Path | Iterable[Path]) -> str:
    """A short hash of strings, bytes and files' relative paths and contents."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, str):
            h.update(part.encode() + b"\0")
        elif isinstance(part, bytes):
            h.update(part + b"\0")
        else:
            for f in _files([part] if isinstance(part, Path) else part):
                rel = f.relative_to(ROOT) if f.is_relative_to(ROOT) else f
                h.update(str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


# --- running the tools ----------------------------------------------------------------------------


def _run(argv: Sequence[str], what: str, timeout: float = 1800, cwd: Path | None = None) -> str:
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ImageError(f"{what}: {e}") from e
    if result.returncode != 0:
        lines = [ln for ln in (result.stderr or result.stdout).strip().splitlines() if ln.strip()]
        raise ImageError(f"{what} failed: {(lines or ['(no output)'])[-1][:300]}")
    return result.stdout


def buildah(*args: str) -> list[str]:
    """buildah on the cache's own storage (never the machine's /var/lib/containers)."""
    return [
        "buildah",
        "--root", str(STORAGE),
        "--runroot", str(RUNROOT),
        "--storage-driver", "overlay",
        *args,
    ]  # fmt: skip


def check_tools() -> None:
    missing = [t for t in REQUIRED if shutil.which(t) is None]
    if missing:
        raise ImageError(
            f"missing {', '.join(missing)}: run hack/setup "
            "(Debian: buildah mmdebstrap gcc containerd)"
        )


def _exists(name: str) -> bool:
    result = subprocess.run(
        buildah("inspect", "--type", "image", name), capture_output=True, text=True
    )
    return result.returncode == 0


def _save(name: str) -> Path:
    """The image as an OCI archive in the cache (written once per name)."""
    ARCHIVES.mkdir(parents=True, exist_ok=True)
    path = ARCHIVES / (name.split("/", 1)[1].replace(":", "_") + ".tar")
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    _run(buildah("push", "--quiet", name, f"oci-archive:{tmp}:{name}"), f"saving {name}")
    tmp.rename(path)
    return path


def size(name: str) -> str:
    """The image's size as buildah reports it (its layers, uncompressed)."""
    return _run(buildah("images", "--format", "{{.Size}}", name), f"sizing {name}").strip()


# --- the images -----------------------------------------------------------------------------------


def build_base() -> Image:
    key = digest(SUITE, *BASE_PACKAGES, *BASE_EXCLUDES)
    name = f"{REGISTRY}/python:3.11-{SUITE}-{key}"
    if not _exists(name):
        started = time.monotonic()
        log(f"making the Debian {SUITE} base with mmdebstrap ({', '.join(BASE_PACKAGES)})")
        with tempfile.TemporaryDirectory(prefix="ironlb-base-") as tmp:
            tarball = Path(tmp) / "rootfs.tar"
            argv = [
                "mmdebstrap",
                "--quiet",
                "--variant=essential",
                f"--include={','.join(BASE_PACKAGES)}",
                '--aptopt=Apt::Install-Recommends "false"',
                *(f"--dpkgopt={opt}" for opt in BASE_EXCLUDES),
                # No package lists, apt caches or logs in the image.
                '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/* '
                '"$1"/var/log/* "$1"/usr/share/doc-base',
                SUITE,
                str(tarball),
            ]
            _run(argv, "mmdebstrap", timeout=1200)
            container = _run(buildah("from", "scratch"), "buildah from scratch").strip()
            try:
                _run(buildah("add", container, str(tarball), "/"), "adding the base file system")
                _run(
                    buildah(
                        "config",
                        "--env", "LANG=C.UTF-8",
                        "--env", "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--cmd", "python3",
                        container,
                    ),
                    "configuring the base",
                )  # fmt: skip
                _run(buildah("commit", "--quiet", "--rm", container, name), "committing the base")
            except BaseException:
                subprocess.run(buildah("rm", container), capture_output=True)
                raise
        log(f"base {name} in {time.monotonic() - started:.0f} s")
    return Image(name, Path())


def build_components(base: Image) -> tuple[Image, Image]:
    key = digest(base.name, [ROOT / p for p in DOCKERFILE_INPUTS])
    built = []
    for target in ("speaker", "controller"):
        name = f"{REGISTRY}/{target}:{key}"
        if not _exists(name):
            started = time.monotonic()
            mounts = []
            for path in HOST_MOUNTS:
                if path.is_file():
                    mounts += ["-v", f"{path.resolve()}:{path}:ro"]
            log(f"buildah bud --target {target} (Dockerfile, PYTHON_IMAGE={base.name})")
            _run(
                buildah(
                    "bud",
                    "--quiet",
                    "--layers",
                    "--pull-never",
                    "--network", "host",
                    "--build-arg", f"PYTHON_IMAGE={base.name}",
                    *mounts,
                    "--target", target,
                    "-t", name,
                    "-f", str(ROOT / "Dockerfile"),
                    str(ROOT),
                ),
                f"building the {target} image",
            )  # fmt: skip
            log(f"{name} in {time.monotonic() - started:.0f} s")
        built.append(Image(name, _save(name)))
    speaker, controller = built
    return controller, speaker


def pause_source() -> Path:
    """pause.c of the Kubernetes release whose binaries the lab runs (in the Go module cache)."""
    gomodcache = os.environ.get("GOMODCACHE") or ""
    if not gomodcache and shutil.which("go"):
        gomodcache = _run(["go", "env", "GOMODCACHE"], "go env").strip()
    candidates = [Path(gomodcache)] if gomodcache else []
    candidates.append(Path.home() / "go" / "pkg" / "mod")
    relative = Path(f"k8s.io/kubernetes@v{local_cluster.KUBERNETES_VERSION}/build/pause/linux")
    for base in candidates:
        if (base / relative / "pause.c").is_file():
            return base / relative / "pause.c"
    raise ImageError(
        f"no {relative}/pause.c in the Go module cache: run `hack/cluster install` first"
    )


def build_pause() -> Image:
    source = pause_source()
    name = f"{REGISTRY}/pause:{PAUSE_TAG}"
    key = digest(source.read_bytes())
    stamp = CACHE / "pause.key"
    if not _exists(name) or not stamp.exists() or stamp.read_text() != key:
        log(f"pause from {source.parent.parent.parent.parent.name}: gcc -Os -static")
        with tempfile.TemporaryDirectory(prefix="ironlb-pause-") as tmp:
            binary = Path(tmp) / "pause"
            version = f"v{local_cluster.KUBERNETES_VERSION}"
            _run(
                ["gcc", "-Os", "-static", "-Wall", "-Werror", f"-DVERSION={version}",
                 "-o", str(binary), str(source)],
                "compiling pause",
            )  # fmt: skip
            _run(["strip", str(binary)], "stripping pause")
            container = _run(buildah("from", "scratch"), "buildah from scratch").strip()
            try:
                _run(buildah("copy", "--chmod", "0755", container, str(binary), "/pause"), "copy")
                _run(
                    buildah(
                        "config",
                        "--entrypoint", '["/pause"]',
                        "--user", "65535:65535",
                        container,
                    ),
                    "configuring pause",
                )  # fmt: skip
                _run(buildah("commit", "--quiet", "--rm", container, name), "committing pause")
            except BaseException:
                subprocess.run(buildah("rm", container), capture_output=True)
                raise
        (ARCHIVES / (name.split("/", 1)[1].replace(":", "_") + ".tar")).unlink(missing_ok=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        stamp.write_text(key)
    return Image(name, _save(name))


def build_echo(base: Image) -> Image:
    source = ROOT / "hack" / "echo.py"
    key = digest(base.name, source)
    tagged = f"{REGISTRY}/echo:{key}"
    if not _exists(tagged):
        container = _run(buildah("from", "--pull-never", base.name), "buildah from").strip()
        try:
            _run(buildah("copy", container, str(source), "/opt/echo/echo.py"), "copying echo")
            # The Pod names itself and its node through the downward API (hack/objects.py).
            script = 'exec python3 /opt/echo/echo.py --pod "$POD_NAME" --node "$NODE_NAME" "$@"'
            _run(
                buildah(
                    "config",
                    "--entrypoint", json.dumps(["/bin/sh", "-c", script, "echo"]),
                    "--cmd", "[]",
                    "--env", "PYTHONUNBUFFERED=1",
                    "--user", "65534:65534",
                    container,
                ),
                "configuring echo",
            )  # fmt: skip
            _run(buildah("commit", "--quiet", "--rm", container, tagged), "committing echo")
        except BaseException:
            subprocess.run(buildah("rm", container), capture_output=True)
            raise
    # The Pods name `ironlb.local/echo:latest`; the archive is per content.
    archive = ARCHIVES / f"echo_{key}.tar"
    if not archive.exists():
        ARCHIVES.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        _run(buildah("push", "--quiet", tagged, f"oci-archive:{tmp}:{ECHO_IMAGE}"), "saving echo")
        tmp.rename(archive)
    return Image(ECHO_IMAGE, archive, tagged)


def build() -> Built:
    """Every image, from the cache where its inputs are unchanged."""
    check_tools()
    CACHE.mkdir(parents=True, exist_ok=True)
    RUNROOT.mkdir(parents=True, exist_ok=True)
    base = build_base()
    controller, speaker = build_components(base)
    pause, echo = build_pause(), build_echo(base)
    return Built(base=base, controller=controller, speaker=speaker, pause=pause, echo=echo)


def import_into(address: Path, images: Sequence[Image]) -> None:
    """Import OCI archives into the containerd listening on `address` (namespace k8s.io)."""
    for image in images:
        _run(
            [
                "ctr", "--address", str(address), "-n", "k8s.io",
                "images", "import", "--no-unpack=false", str(image.archive),
            ],
            f"importing {image.name}",
            timeout=600,
        )  # fmt: skip


def clean() -> None:
    """Remove the cache (buildah's storage included)."""
    if STORAGE.exists():
        subprocess.run(buildah("rm", "--all"), capture_output=True)
        subprocess.run(buildah("rmi", "--all", "--force"), capture_output=True)
    shutil.rmtree(CACHE, ignore_errors=True)
    shutil.rmtree(RUNROOT, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/images", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build what is not cached; print names and sizes")
    sub.add_parser("clean", help="remove the image cache")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            started = time.monotonic()
            built = build()
            for image in (built.base, built.controller, built.speaker, built.pause, built.echo):
                print(f"{image.name}\t{size(image.stored or image.name)}")
            log(f"ready in {time.monotonic() - started:.1f} s")
        elif args.command == "clean":
            clean()
    except ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
