"""The Helm chart: linted, rendered, checked by its schema, and installed into a real apiserver.

There is no kubelet or controller-manager here, so the Deployment and the DaemonSet are stored but
run no Pod; what is tested is what the chart itself decides: which objects exist, what they say,
what survives an upgrade and what an uninstall leaves behind. The control plane is this module's
own (see chart_support), so the chart's webhook never meets another test.
"""

from __future__ import annotations

import base64
import datetime
import re
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from controller import certs, webhook
from tests.integration import chart_support as cs

pytestmark = pytest.mark.integration

CRD_FILES = sorted(cs.CRDS.glob("*.yaml"))
CRD_NAMES = sorted(yaml.safe_load(p.read_text())["metadata"]["name"] for p in CRD_FILES)


@pytest.fixture(scope="module")
def offline() -> Iterator[cs.Tools]:
    """helm without a cluster (lint, template, package)."""
    with cs.helm_home() as env:
        yield cs.Tools(None, env)


@pytest.fixture(scope="module")
def cluster() -> Iterator[cs.Tools]:
    with cs.own_control_plane() as kubeconfig, cs.helm_home() as env:
        t = cs.Tools(kubeconfig, env)
        t.kubectl("create", "namespace", cs.NAMESPACE)
        yield t


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


# --- offline: lint, schema, CRDs, rendering --------------------------------------------------

VARIANTS = {
    "defaults": [],
    "cert-manager with an issuer": [
        "--set=webhook.certificate=cert-manager",
        "--set=webhook.certManager.issuerRef.kind=ClusterIssuer",
        "--set=webhook.certManager.issuerRef.name=ca",
    ],
    "cert-manager self-signed": ["--set=webhook.certificate=cert-manager"],
    "monitors": [
        "--set=prometheus.serviceMonitor.enabled=true",
        "--set=prometheus.podMonitor.enabled=true",
        "--set=prometheus.scrapeAnnotations=true",
        "--set=prometheus.serviceMonitor.interval=30s",
        "--set=prometheus.prometheusRule.enabled=true",
        "--set=prometheus.prometheusRule.addressPoolUsage.excludePools=^lab-",
    ],
    "no webhook, no rbac": ["--set=controller.webhookMode=disabled", "--set=rbac.create=false"],
    "speaker only, no memberlist": [
        "--set=controller.enabled=false",
        "--set=speaker.memberlist.enabled=false",
        "--set=speaker.layer2.enabled=false",
    ],
    "class, seeds, two replicas": [
        "--set=loadBalancerClass=example.com/ironlb",
        "--set=speaker.memberlist.seeds={10.0.0.1,10.0.0.2:7946}",
        "--set=controller.replicas=2",
        "--set=speaker.ignoreExcludeLB=true",
    ],
    # MetalLB's keys that render objects of their own (a values file of a MetalLB user).
    "network policies, prometheus rbac": [
        "--set=networkpolicies.enabled=true",
        "--set=networkpolicies.defaultDeny=true",
        "--set=prometheus.rbacPrometheus=true",
        "--set=prometheus.serviceAccount=prometheus",
        "--set=prometheus.namespace=monitoring",
        "--set=controller.revisionHistoryLimit=10",
    ],
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_strict_is_clean(offline: cs.Tools, variant: str) -> None:
    result = offline.helm("lint", "--strict", str(cs.CHART), *VARIANTS[variant])
    findings = [
        line for line in result.stdout.splitlines() if line.startswith(("[WARNING]", "[ERROR]"))
    ]
    assert findings == []
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


BAD_VALUES = {
    "log level": (
        {"speaker": {"logLevel": "loud"}},
        "at '/speaker/logLevel': value must be one of",
    ),
    "misspelt key": (
        {"controler": {"replicas": 2}},
        "additional properties 'controler' not allowed",
    ),
    "port range": (
        {"prometheus": {"metricsPort": 70000}},
        "at '/prometheus/metricsPort': maximum",
    ),
    "replicas type": (
        {"controller": {"replicas": "two"}},
        "at '/controller/replicas': got string, want integer",
    ),
    "zero replicas": ({"controller": {"replicas": 0}}, "at '/controller/replicas': minimum"),
    "certificate source": (
        {"webhook": {"certificate": "self-signed"}},
        "at '/webhook/certificate': value must be one of 'helm', 'cert-manager'",
    ),
    "relative key path": (
        {"speaker": {"memberlist": {"mlSecretKeyPath": "etc/key"}}},
        "at '/speaker/memberlist/mlSecretKeyPath'",
    ),
    "failure policy case": (
        {"crds": {"validationFailurePolicy": "fail"}},
        "at '/crds/validationFailurePolicy': value must be one of 'Fail', 'Ignore'",
    ),
    "alert threshold": (
        {
            "prometheus": {
                "prometheusRule": {"addressPoolUsage": {"thresholds": [{"percent": 150}]}}
            }
        },
        "at '/prometheus/prometheusRule/addressPoolUsage/thresholds/0/percent': maximum",
    ),
    "nested unknown key": (
        {"speaker": {"memberlist": {"port": 7946}}},
        "at '/speaker/memberlist': additional properties 'port' not allowed",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_rejects_bad_values(offline: cs.Tools, tmp_path: Path, case: str) -> None:
    values, message = BAD_VALUES[case]
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values))
    result = offline.helm("template", "x", str(cs.CHART), "-f", str(file), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr
    assert result.stdout == ""


def test_chart_crds_are_the_repository_crds(offline: cs.Tools, tmp_path: Path) -> None:
    """One copy: the chart's crds/ is a link to crds/, and the packaged chart carries the same
    bytes (helm follows the link when it packages)."""
    link = cs.CHART / "crds"
    assert link.is_symlink()
    assert link.resolve() == cs.CRDS.resolve()
    offline.helm("package", str(cs.CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("ironlb-*.tgz")
    with tarfile.open(archive) as tar:
        packaged = {
            Path(m.name).name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and m.name.startswith("ironlb/crds/")
        }
    assert packaged == {p.name: p.read_bytes() for p in CRD_FILES}
    rendered = offline.helm("template", "x", str(archive), "--include-crds").stdout
    crds = [
        d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "CustomResourceDefinition"
    ]
    assert sorted(d["metadata"]["name"] for d in crds) == CRD_NAMES


def test_webhook_configuration_is_the_controllers(offline: cs.Tools) -> None:
    """Paths, operations, rules and names as `controller.webhook.configuration` builds them."""
    objects = offline.render()
    rendered = one(objects, "ValidatingWebhookConfiguration")
    service = one(objects, "Service", "ironlb-webhook-service")
    expected = webhook.configuration(
        ca_bundle=b"", service=(cs.NAMESPACE, "ironlb-webhook-service", 443)
    )

    def without_ca(hooks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for hook in hooks:
            config = {k: v for k, v in hook["clientConfig"].items() if k != "caBundle"}
            out.append({**hook, "clientConfig": config})
        return out

    assert without_ca(rendered["webhooks"]) == without_ca(expected["webhooks"])
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]


def test_generated_webhook_certificate_serves_the_service_name(
    offline: cs.Tools, tmp_path: Path
) -> None:
    objects = offline.render()
    data = {
        k: base64.b64decode(v)
        for k, v in one(objects, "Secret", "ironlb-webhook-cert")["data"].items()
    }
    bundles = {
        h["clientConfig"]["caBundle"]
        for h in one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    }
    assert bundles == {base64.b64encode(data["ca.crt"]).decode()}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "ironlb-webhook-service.metallb-system.svc" in names.get_values_for_type(x509.DNSName)
    assert cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        days=365
    )
    # The files the controller mounts load as its serving certificate (the key matches).
    for name, content in data.items():
        (tmp_path / name).write_bytes(content)
    loaded = certs.load(
        str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), str(tmp_path / "ca.crt")
    )
    certs.server_context(loaded)


def test_cert_manager_and_disabled_webhook(offline: cs.Tools) -> None:
    managed = offline.render("--set=webhook.certificate=cert-manager")
    certificate = one(managed, "Certificate")
    assert certificate["spec"]["secretName"] == "ironlb-webhook-cert"
    assert "ironlb-webhook-service.metallb-system.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] == one(managed, "Issuer")["metadata"]["name"]
    configuration = one(managed, "ValidatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "metallb-system/ironlb-webhook"
    }
    assert all("caBundle" not in h["clientConfig"] for h in configuration["webhooks"])
    assert [s["metadata"]["name"] for s in by_kind(managed, "Secret")] == ["ironlb-memberlist"]

    off = offline.render("--set=controller.webhookMode=disabled")
    assert by_kind(off, "ValidatingWebhookConfiguration") == []
    assert "ironlb-webhook-service" not in [s["metadata"]["name"] for s in by_kind(off, "Service")]
    args = one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--webhook")]
    role = one(off, "Role", "ironlb-controller")
    # The configuration check still needs Secret names (dangling passwordSecret references),
    # and names only: list, never get or watch.
    assert [r["verbs"] for r in role["rules"] if "secrets" in r["resources"]] == [["list"]]


def test_offline_renders_make_fresh_secrets(offline: cs.Tools) -> None:
    """Without a cluster `lookup` finds nothing: every render makes a new key (so the key that
    an upgrade keeps is not a constant of the chart)."""
    first, second = offline.render(), offline.render()
    key = [one(o, "Secret", "ironlb-memberlist")["data"]["secretkey"] for o in (first, second)]
    assert key[0] != key[1]
    assert len(base64.b64decode(key[0])) == 32


def test_workloads_are_locked_down(offline: cs.Tools) -> None:
    objects = offline.render()
    controller = one(objects, "Deployment")["spec"]["template"]["spec"]
    speaker = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = controller["containers"]
    (s,) = speaker["containers"]
    assert controller["securityContext"]["runAsNonRoot"] is True
    assert controller["securityContext"]["runAsUser"] == 65534
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert speaker["hostNetwork"] is True
    assert s["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
    assert s["securityContext"]["allowPrivilegeEscalation"] is False
    assert s["securityContext"]["readOnlyRootFilesystem"] is True
    assert "privileged" not in s["securityContext"]
    env = {e["name"]: e for e in s["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    tolerated = {(t["key"], t["effect"]) for t in speaker["tolerations"]}
    assert ("node-role.kubernetes.io/control-plane", "NoSchedule") in tolerated
    for container in (c, s):
        assert container["resources"]["requests"]
    pdb = one(objects, "PodDisruptionBudget")
    assert (
        pdb["spec"]["selector"]["matchLabels"]
        == one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    )


# --- against the apiserver -------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        "defaults",
        "no webhook, no rbac",
        "speaker only, no memberlist",
        "class, seeds, two replicas",
        "network policies, prometheus rbac",
    ],
)
def test_rendered_manifests_pass_server_dry_run(cluster: cs.Tools, variant: str) -> None:
    """What `helm template` prints is accepted by a real apiserver (schemas, names, RBAC
    references), CRDs included; nothing is stored."""
    rendered = cluster.helm(
        "template",
        cs.RELEASE,
        str(cs.CHART),
        "--namespace",
        cs.NAMESPACE,
        "--include-crds",
        *VARIANTS[variant],
    ).stdout
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    applied = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(applied) == len([d for d in yaml.safe_load_all(rendered) if d])
    assert all(line.endswith("(server dry run)") for line in applied)


def metallb_crds(t: cs.Tools) -> list[str]:
    listed = t.get_json("customresourcedefinitions")
    return sorted(
        c["metadata"]["name"] for c in listed["items"] if c["spec"]["group"] == "metallb.io"
    )


def manifest(t: cs.Tools) -> list[dict[str, Any]]:
    out = t.helm("get", "manifest", cs.RELEASE, "-n", cs.NAMESPACE).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def exists(t: cs.Tools, ref: tuple[str, str, str]) -> bool:
    return t.kubectl("get", *cs.kubectl_ref(ref), check=False).returncode == 0


EXPECTED_OBJECTS = {
    ("ClusterRole", "ironlb:controller", ""),
    ("ClusterRole", "ironlb:speaker", ""),
    ("ClusterRoleBinding", "ironlb:controller", ""),
    ("ClusterRoleBinding", "ironlb:speaker", ""),
    ("ConfigMap", "metallb-excludel2", cs.NAMESPACE),
    ("DaemonSet", "ironlb-speaker", cs.NAMESPACE),
    ("Deployment", "ironlb-controller", cs.NAMESPACE),
    ("PodDisruptionBudget", "ironlb-controller", cs.NAMESPACE),
    ("Role", "ironlb-controller", cs.NAMESPACE),
    ("Role", "ironlb-speaker", cs.NAMESPACE),
    ("RoleBinding", "ironlb-controller", cs.NAMESPACE),
    ("RoleBinding", "ironlb-speaker", cs.NAMESPACE),
    ("Secret", "ironlb-memberlist", cs.NAMESPACE),
    ("Secret", "ironlb-webhook-cert", cs.NAMESPACE),
    ("Service", "ironlb-speaker-members", cs.NAMESPACE),
    ("Service", "ironlb-webhook-service", cs.NAMESPACE),
    ("ServiceAccount", "ironlb-controller", cs.NAMESPACE),
    ("ServiceAccount", "ironlb-speaker", cs.NAMESPACE),
    ("ValidatingWebhookConfiguration", "ironlb-webhook-configuration", ""),
}


def test_install_upgrade_uninstall(cluster: cs.Tools) -> None:
    """install creates the CRDs and every object; upgrade keeps both generated Secrets;
    uninstall removes the release's objects and keeps the CRDs and the objects stored in them;
    a reinstall after that starts with new Secrets."""
    assert metallb_crds(cluster) == []

    cluster.helm("install", cs.RELEASE, str(cs.CHART), "-n", cs.NAMESPACE)
    assert metallb_crds(cluster) == CRD_NAMES
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *[f"customresourcedefinitions/{n}" for n in CRD_NAMES],
    )
    objects = {cs.object_ref(o) for o in manifest(cluster)}
    assert objects == EXPECTED_OBJECTS
    missing = [ref for ref in sorted(objects) if not exists(cluster, ref)]
    assert missing == []
    key = cs.secret_data(cluster, "ironlb-memberlist")
    cert = cs.secret_data(cluster, "ironlb-webhook-cert")
    secret_uid = cluster.get_json("secret", "ironlb-memberlist", "-n", cs.NAMESPACE)["metadata"][
        "uid"
    ]

    cluster.helm(
        "upgrade",
        cs.RELEASE,
        str(cs.CHART),
        "-n",
        cs.NAMESPACE,
        "--set=controller.logLevel=debug",
        "--set=speaker.logLevel=debug",
    )
    deployment = cluster.get_json("deployment", "ironlb-controller", "-n", cs.NAMESPACE)
    assert "--log-level=debug" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert cs.secret_data(cluster, "ironlb-memberlist") == key
    assert cs.secret_data(cluster, "ironlb-webhook-cert") == cert
    assert (
        cluster.get_json("secret", "ironlb-memberlist", "-n", cs.NAMESPACE)["metadata"]["uid"]
        == secret_uid
    )
    configuration = cluster.get_json(
        "validatingwebhookconfigurations", "ironlb-webhook-configuration"
    )
    assert {h["clientConfig"]["caBundle"] for h in configuration["webhooks"]} == {
        base64.b64encode(cert["ca.crt"]).decode()
    }

    cluster.helm("uninstall", cs.RELEASE, "-n", cs.NAMESPACE)
    left = [ref for ref in sorted(objects) if exists(cluster, ref)]
    assert left == []
    assert metallb_crds(cluster) == CRD_NAMES

    # With the webhook gone a pool can be written; it must survive the next uninstall.
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "metallb.io/v1beta1",
                "kind": "IPAddressPool",
                "metadata": {"name": "kept", "namespace": cs.NAMESPACE},
                "spec": {"addresses": ["192.0.2.0/28"]},
            }
        ),
    )
    cluster.helm("install", cs.RELEASE, str(cs.CHART), "-n", cs.NAMESPACE)
    assert cs.secret_data(cluster, "ironlb-memberlist") != key
    assert cs.secret_data(cluster, "ironlb-webhook-cert")["ca.crt"] != cert["ca.crt"]
    cluster.helm("uninstall", cs.RELEASE, "-n", cs.NAMESPACE)
    assert metallb_crds(cluster) == CRD_NAMES
    pool = cluster.get_json("ipaddresspools.metallb.io", "kept", "-n", cs.NAMESPACE)
    assert pool["spec"]["addresses"] == ["192.0.2.0/28"]
    assert cluster.helm("list", "-A", "-q").stdout.strip() == ""


def test_install_rejects_bad_values_and_creates_nothing(cluster: cs.Tools, tmp_path: Path) -> None:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump({"speaker": {"memberlist": {"mlBindPort": "7946"}}}))
    result = cluster.helm(
        "install", "bad", str(cs.CHART), "-n", cs.NAMESPACE, "-f", str(file), check=False
    )
    assert result.returncode != 0
    # Helm installs a chart's crds/ before it checks the values, so the CRDs may be left from
    # a failed install (docs/install.md says so); nothing of the release itself is created.
    assert "at '/speaker/memberlist/mlBindPort': got string, want integer" in result.stderr
    assert cluster.helm("list", "-A", "-q").stdout.strip() == ""
    for ref in [
        ("ServiceAccount", "ironlb-controller", cs.NAMESPACE),
        ("Secret", "sh.helm.release.v1.bad.v1", cs.NAMESPACE),
    ]:
        assert not exists(cluster, ref)


def test_docs_name_the_chart_commands() -> None:
    """docs/install.md shows the commands these tests run (so the docs cannot drift)."""
    text = (cs.ROOT / "docs" / "install.md").read_text()
    for command in (
        "helm install ironlb charts/ironlb --namespace metallb-system --create-namespace",
        "helm upgrade ironlb charts/ironlb --namespace metallb-system",
        "helm uninstall ironlb --namespace metallb-system",
        "docker build --target controller",
        "docker build --target speaker",
    ):
        assert command in text, command
    assert "is linted, not built" in text


# --- images ----------------------------------------------------------------------------------
# No container engine runs here: the Dockerfile is linted and its build context checked instead.

DOCKERFILE = cs.ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore matching: `**` any depth, `*` within one name."""
    pattern = pattern.strip("/")
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts))


def in_context(path: str) -> bool:
    """Whether .dockerignore lets `path` (relative, with /) into the build context; a pattern
    that matches a directory matches everything below it, and the last match wins."""
    rules = []
    for line in (cs.ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, dockerignore_regex(line.lstrip("!"))))
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negated, regex in rules:
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negated
    return not excluded


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.fail("hadolint is missing: run hack/setup (it is a dev dependency)", pytrace=False)
    result = cs.run([str(hadolint), "--failure-threshold", "style", str(DOCKERFILE)], check=False)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_dockerfile_targets_run_the_entry_points_as_nobody() -> None:
    project = tomllib.loads((cs.ROOT / "pyproject.toml").read_text())["project"]
    stages: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for word, args in instructions():
        if word == "FROM":
            image, _, name = args.partition(" AS ")
            current = name.strip() or image
            stages[current] = []
            assert not image.endswith(":latest")
        else:
            stages.setdefault(current, []).append((word, args))
    for target, script in (("controller", "ironlb-controller"), ("speaker", "ironlb-speaker")):
        assert script in project["scripts"]
        steps = stages[target]
        users = [args for word, args in steps if word == "USER"]
        assert users and users[-1].split(":")[0] not in ("0", "root")
        assert ("ENTRYPOINT", f'["{script}"]') in steps
    # ExaBGP comes with the project's dependencies, which the build stage installs.
    assert any(d.startswith("exabgp") for d in project["dependencies"])
    assert any("pip install" in a and "/src" in a for w, a in stages["build"] if w == "RUN")


def test_build_context_has_what_the_build_copies_and_nothing_else() -> None:
    tracked = cs.run(["git", "-C", str(cs.ROOT), "ls-files"]).stdout.split()
    context = {p for p in tracked if in_context(p)}
    copied = [
        args.split()[:-1]
        for word, args in instructions()
        if word == "COPY" and not args.startswith("--from")
    ]
    for sources in copied:
        for source in sources:
            source = source.rstrip("/")
            assert any(p == source or p.startswith(source + "/") for p in context), source
    project = tomllib.loads((cs.ROOT / "pyproject.toml").read_text())
    assert project["project"]["readme"] in context
    packages = project["tool"]["setuptools"]["packages"]["find"]["include"]
    top = {p.split("/")[0] for p in context if p.endswith("__init__.py")}
    assert {p.rstrip("*") for p in packages} <= top
    assert top <= {p.split("/")[0] for s in copied for p in s}
    for outside in ("tests", "charts", "hack", "docs", "bench", "crds", ".ci"):
        assert not [p for p in context if p.startswith(outside + "/")], outside
    for never in (".venv/bin/python", ".git/HEAD", "ironlb/__pycache__/model.cpython-311.pyc"):
        assert not in_context(never)
