"""The real speaker process when what it needs at start is missing: it keeps running, says why in
its log and its /readyz, and recovers by itself.

Each speaker is `python -m speaker` with membership on 127.0.0.1, without layer 2 or BGP (no raw
sockets, no ExaBGP here), against the session's apiserver or one that is not there. Every
process is stopped at the end, even on failure; waits are bounded polls.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hack import pki

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EVENTUALLY_S = 60.0
UNRESOLVABLE = "no-such-host.invalid:7946"


def free_port(kind: socket.SocketKind) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def eventually(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENTUALLY_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {EVENTUALLY_S:.0f}s: {what}")


class Speaker:
    def __init__(self, name: str, kubeconfig: str, namespace: str, *flags: str) -> None:
        self.name = name
        self.metrics_port = free_port(socket.SOCK_STREAM)
        self.ml_port = free_port(socket.SOCK_DGRAM)
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "speaker",
                f"--node-name={name}",
                f"--kubeconfig={kubeconfig}",
                f"--namespace={namespace}",
                f"--metrics-port={self.metrics_port}",
                "--ml-bind-addr=127.0.0.1",
                f"--ml-bind-port={self.ml_port}",
                "--no-layer2",
                "--no-bgp",
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = {"msg": line.rstrip()}
            with self._lock:
                self.lines.append(parsed)

    def logged(self, message: str) -> list[dict[str, Any]]:
        with self._lock:
            return [line for line in self.lines if line.get("msg") == message]

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def output(self) -> str:
        with self._lock:
            return "\n".join(json.dumps(line) for line in self.lines[-40:])


@pytest.fixture
def speakers() -> Iterator[Callable[..., Speaker]]:
    started: list[Speaker] = []

    def start(name: str, kubeconfig: str, namespace: str, *flags: str) -> Speaker:
        speaker = Speaker(name, kubeconfig, namespace, *flags)
        started.append(speaker)
        return speaker

    try:
        yield start
    finally:
        for speaker in started:
            speaker.stop()


def test_unresolvable_seeds_keep_the_speaker_running_and_not_ready_until_found(
    speakers: Callable[..., Speaker], kubeconfig: str, test_namespace: str
) -> None:
    lonely = speakers("lonely", kubeconfig, test_namespace, f"--ml-seeds={UNRESOLVABLE}")
    eventually(
        lambda: lonely.get("/readyz") == (503, "seeds_unresolved\n"),
        "lonely listed the cluster, and waits for its seeds only",
    )
    failures = lonely.logged("membership seeds do not resolve; retrying")
    assert len(failures) == 1, lonely.output()
    assert failures[0]["level"] == "warning"
    assert failures[0]["seeds"] == UNRESOLVABLE
    assert failures[0]["error"]
    assert lonely.get("/healthz") == (200, "ok\n")
    status, metrics = lonely.get("/metrics")
    assert status == 200 and "metallb_k8s_client_config_loaded_bool 1.0" in metrics
    assert lonely.running(), lonely.output()

    # A speaker whose seed is a name that resolves (to lonely) joins it; lonely is found.
    finder = speakers(
        "finder", kubeconfig, test_namespace, f"--ml-seeds=localhost:{lonely.ml_port}"
    )
    eventually(lambda: finder.get("/readyz") == (200, "ok\n"), "finder ready")
    assert len(finder.logged("membership seeds resolved")) == 1, finder.output()
    eventually(lambda: lonely.get("/readyz") == (200, "ok\n"), "lonely ready once found")
    assert lonely.logged("membership now decides which speakers are alive"), lonely.output()
    # However many retries happened meanwhile, the failure was logged once.
    assert len(lonely.logged("membership seeds do not resolve; retrying")) == 1, lonely.output()
    assert lonely.running() and finder.running()


def test_an_apiserver_that_is_not_there_yet_is_waited_for(
    speakers: Callable[..., Speaker], tmp_path: Path
) -> None:
    closed = free_port(socket.SOCK_STREAM)
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "gone",
                        "cluster": {
                            "server": f"https://127.0.0.1:{closed}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    alone = speakers("alone", str(config), "metallb-system")
    eventually(
        lambda: alone.get("/readyz") == (503, "apiserver_unreachable\n"), "apiserver reported"
    )
    eventually(lambda: len(alone.logged("cannot list the cluster state; retrying")) >= 1, "logged")
    assert alone.get("/healthz") == (200, "ok\n")
    status, metrics = alone.get("/metrics")
    assert status == 200 and "metallb_k8s_client_config_loaded_bool 0.0" in metrics
    assert alone.running(), alone.output()
    assert len(alone.logged("cannot list the cluster state; retrying")) == 1, alone.output()


def _kubeconfig_with(source: str, path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    """The session's kubeconfig with some of its cluster's and user's fields replaced."""
    config = json.loads(Path(source).read_text())
    config["clusters"][0]["cluster"].update(cluster)
    config["users"][0]["user"].update(user)
    path.write_text(json.dumps(config))
    return str(path)


def test_a_wrong_or_expired_certificate_is_said_clearly_and_retried(
    speakers: Callable[..., Speaker], kubeconfig: str, tmp_path: Path
) -> None:
    """Neither a server certificate we do not trust (signed by another CA) nor our own expired
    client certificate makes the speaker exit: it says which, in its log once and in /readyz,
    and keeps retrying (a mounted Secret may be renewed under it)."""
    config = json.loads(Path(kubeconfig).read_text())
    ca_file = Path(config["clusters"][0]["cluster"]["certificate-authority"])
    other, _, _ = pki.make_ca("not-the-cluster-ca")
    pki.write(tmp_path / "other-ca.crt", other.cert_pem)
    untrusted = speakers(
        "untrusted",
        _kubeconfig_with(
            kubeconfig,
            tmp_path / "untrusted",
            {"certificate-authority": str(tmp_path / "other-ca.crt")},
            {},
        ),
        "metallb-system",
    )
    ca_key = serialization.load_pem_private_key((ca_file.parent / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca_file.read_bytes())
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    stale = pki.issue(
        ca_key, ca_cert, "ironlb-admin", organization="system:masters", client=True, expired=True
    )
    pki.write(tmp_path / "stale.crt", stale.cert_pem)
    pki.write(tmp_path / "stale.key", stale.key_pem, private=True)
    expired = speakers(
        "expired",
        _kubeconfig_with(
            kubeconfig,
            tmp_path / "expired",
            {},
            {
                "client-certificate": str(tmp_path / "stale.crt"),
                "client-key": str(tmp_path / "stale.key"),
            },
        ),
        "metallb-system",
    )
    eventually(
        lambda: untrusted.get("/readyz") == (503, "apiserver_certificate_invalid\n"),
        "an untrusted server certificate reported",
    )
    eventually(
        lambda: expired.get("/readyz") == (503, "apiserver_refused\n"),
        "an expired client certificate reported",
    )
    time.sleep(3.0)  # a few retries (0.5 s, 1 s, 2 s ...): none may add a line
    (said,) = untrusted.logged("cannot list the cluster state; retrying")
    assert "certificate" in said["error"] and "verify failed" in said["error"], said
    (said,) = expired.logged("cannot list the cluster state; retrying")
    assert said["error"].startswith("401"), said
    for speaker in (untrusted, expired):
        assert speaker.running(), speaker.output()
        assert speaker.get("/healthz") == (200, "ok\n")
