"""ironlb_io.kube without a server: credentials, paths, error classes; controller.operator's
kopf settings, logging and command line."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from controller import __main__ as entry
from controller import operator
from ironlb_io import kube, logs


def kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any]) -> Path:
    path = tmp_path / "config"
    context = {"cluster": "c", "user": "u", "namespace": "n"}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": context}],
                "current-context": "x",
            }
        )
    )
    return path


def test_kubeconfig_with_relative_certificate_paths(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {"client-certificate": "admin.crt", "client-key": "/abs/admin.key"},
        {"server": "https://127.0.0.1:6443/", "certificate-authority": "ca.crt"},
    )
    creds = kube.from_kubeconfig(path)
    assert creds.server == "https://127.0.0.1:6443"
    assert creds.ca_file == str(tmp_path / "ca.crt")
    assert creds.cert_file == str(tmp_path / "admin.crt")
    assert creds.key_file == "/abs/admin.key"
    assert creds.namespace == "n"
    assert creds.bearer() is None


def test_kubeconfig_with_inline_data_and_a_token(tmp_path: Path) -> None:
    ca = base64.b64encode(b"CA PEM").decode()
    path = kubeconfig(
        tmp_path,
        {"token": "secret-token"},
        {"server": "https://h:1", "certificate-authority-data": ca},
    )
    creds = kube.from_kubeconfig(path)
    assert creds.ca_file is not None
    assert Path(creds.ca_file).read_bytes() == b"CA PEM"
    assert Path(creds.ca_file).stat().st_mode & 0o077 == 0
    assert creds.bearer() == "secret-token"


def test_token_file_is_read_on_every_use(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one\n")
    path = kubeconfig(tmp_path, {"tokenFile": "token"}, {"server": "https://h:1"})
    creds = kube.from_kubeconfig(path)
    assert creds.bearer() == "one"
    (tmp_path / "token").write_text("two")
    assert creds.bearer() == "two"


def test_bad_kubeconfigs_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(kube.ConfigError, match="cannot read"):
        kube.from_kubeconfig(tmp_path / "missing")
    (tmp_path / "empty").write_text("{}")
    with pytest.raises(kube.ConfigError, match="no current context"):
        kube.from_kubeconfig(tmp_path / "empty")


def test_load_prefers_the_flag_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = kubeconfig(tmp_path, {}, {"server": "https://flag:1"})
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    env = kubeconfig(env_dir, {}, {"server": "https://env:1"})
    monkeypatch.setenv("KUBECONFIG", f"{env}:/nowhere")
    assert kube.load(str(flag)).server == "https://flag:1"
    assert kube.load(None).server == "https://env:1"


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/x/services/y/status", "services/status"),
        ("/api/v1/namespaces/x/events", "events"),
        ("/api/v1/services", "services"),
        ("/apis/metallb.io/v1beta1/namespaces/m/ipaddresspools/p/status", "ipaddresspools/status"),
        ("/apis/coordination.k8s.io/v1/namespaces/m/leases/l", "leases"),
        ("/api/v1/namespaces/x", "namespaces"),
    ],
)
def test_resource_of(path: str, resource: str) -> None:
    assert kube.resource_of(path) == resource


def test_paths() -> None:
    assert kube.core_path("services", "ns", "a b") == "/api/v1/namespaces/ns/services/a%20b"
    assert kube.core_path("namespaces") == "/api/v1/namespaces"
    assert (
        kube.group_path("metallb.io", "v1beta1", "ipaddresspools", "m", "p")
        == "/apis/metallb.io/v1beta1/namespaces/m/ipaddresspools/p"
    )


def test_api_error_classes() -> None:
    assert kube.ApiError(0, "Unavailable", "").retryable
    assert kube.ApiError(503, "", "").retryable and kube.ApiError(429, "", "").retryable
    assert not kube.ApiError(422, "Invalid", "").retryable
    assert kube.ApiError(404, "", "").not_found and kube.ApiError(409, "", "").conflict


# --- ironlb_io.logs, controller.operator ---------------------------------------------------------


def test_json_log_lines_carry_fields_and_object_references() -> None:
    record = logging.LogRecord("ironlb.x", logging.WARNING, __file__, 1, "hello %s", ("you",), None)
    record.service = "ns/a"
    record.count = 3
    record.k8s_ref = {"namespace": "ns", "name": "a"}
    record.settings = object()  # kopf attaches its settings; never dumped
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["msg"] == "hello you" and line["level"] == "warning"
    assert line["service"] == "ns/a" and line["count"] == 3
    assert line["object"] == "ns/a"
    assert "settings" not in line and "k8s_ref" not in line
    assert line["ts"].endswith("+00:00")


def test_kopf_settings_write_nothing_onto_objects() -> None:
    s = operator.settings()
    assert s.posting.enabled is False
    assert s.peering.standalone is True
    body = kopf.Body({"metadata": {"name": "x", "annotations": {}}, "spec": {}})
    patch = kopf.Patch()
    s.persistence.progress_storage.store(key="h", record={"started": "now"}, body=body, patch=patch)
    s.persistence.progress_storage.touch(body=body, patch=patch, value="x")
    s.persistence.progress_storage.purge(key="h", body=body, patch=patch)
    s.persistence.diffbase_storage.store(body=body, patch=patch, essence={"spec": {}})
    assert dict(patch) == {}
    assert s.persistence.progress_storage.fetch(key="h", body=body) is None
    assert s.persistence.diffbase_storage.fetch(body=body) is None


def test_only_watching_handlers_are_registered() -> None:
    creds = kube.Credentials(server="https://h:1")
    registry = operator.registry(object(), creds)  # type: ignore[arg-type]
    assert len(registry._watching.get_all_handlers()) == 3
    assert registry._changing.get_all_handlers() == []
    assert registry._spawning.get_all_handlers() == []


def test_command_line() -> None:
    options = entry.parse_args(
        ["--lb-class=x", "--metrics-port=0", "--lease-duration=3", "--log-level=debug"]
    )
    assert options.lb_class == "x" and options.metrics_port == 0
    assert options.lease_duration == 3 and options.log_level == "debug"
    assert options.namespace == "metallb-system" and options.webhook_port == 0
    with pytest.raises(SystemExit):
        entry.parse_args(["--lease-duration=0"])


@pytest.mark.parametrize(
    ("leading", "rebuilt", "reachable", "want"),
    [
        (False, False, True, True),  # a standby waiting for the Lease: serves the webhook
        (False, False, False, False),  # a standby the apiserver does not answer
        (True, False, True, False),  # the leader rebuilding the cluster state
        (True, True, True, True),
        (False, True, False, True),  # a leader whose renewal is late: still a healthy process
    ],
)
def test_readiness_does_not_wait_for_leadership(
    leading: bool, rebuilt: bool, reachable: bool, want: bool
) -> None:
    assert operator.ready(leading=leading, rebuilt=rebuilt, reachable=reachable) is want
