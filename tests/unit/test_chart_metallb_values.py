"""The chart takes MetalLB's values files: `helm install -f` with MetalLB's own chart defaults
(0.15, 0.16) or with the settings MetalLB users commonly change renders and lints clean; the
MetalLB keys that apply reach the rendered objects; those that do not are named, in NOTES.txt
when leaving them unused is harmless and in a failed render when the user asked for something
ironlb cannot do; and our own keys stay strict, a misspelt one still failing the schema.

Offline: `helm template` and `helm lint`, no cluster. helm prints NOTES.txt only when it installs,
which needs an apiserver, so `notes()` renders it through a copy of the chart with one more
template that runs NOTES.txt's text through `tpl` with the same values and release.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from speaker.layer2 import interfaces
from tests.integration import chart_support as cs
from tests.integration.test_chart import by_kind, one

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metallb_values"
DEFAULTS_015 = FIXTURES / "defaults-0.15.yaml"
DEFAULTS_016 = FIXTURES / "defaults-0.16.yaml"
COMMON = FIXTURES / "common-settings.yaml"
CHART_DEFAULTS: dict[str, Any] = yaml.safe_load((cs.CHART / "values.yaml").read_text())
APP_VERSION = yaml.safe_load((cs.CHART / "Chart.yaml").read_text())["appVersion"]
NOTES_HEADING = "MetalLB values that ironlb does not use"
REFUSED_HEADING = "MetalLB values that ironlb cannot honour"

# Each case is a list of values files, applied in order as `helm install -f a -f b` would.
CASES: dict[str, list[Path]] = {
    "MetalLB 0.15 defaults": [DEFAULTS_015],
    "MetalLB 0.16 defaults": [DEFAULTS_016],
    "common settings": [COMMON],
    "0.15 defaults + common settings": [DEFAULTS_015, COMMON],
    "0.16 defaults + common settings": [DEFAULTS_016, COMMON],
}


def load(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(path.read_text())
    return values


def files(paths: list[Path]) -> list[str]:
    return [arg for path in paths for arg in ("-f", str(path))]


@pytest.fixture(scope="module")
def helm() -> Iterator[cs.Tools]:
    with cs.helm_home() as env:
        yield cs.Tools(None, env)


NOTES_PROBE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}
"""


@pytest.fixture(scope="module")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart whose extra template renders NOTES.txt as a ConfigMap's data."""
    chart = tmp_path_factory.mktemp("chart") / "ironlb"
    shutil.copytree(cs.CHART, chart)
    shutil.copy(cs.CHART / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(NOTES_PROBE)
    return chart


def notes(helm: cs.Tools, chart: Path, *args: str) -> str:
    out = helm.helm(
        "template", cs.RELEASE, str(chart), "--namespace", cs.NAMESPACE,
        "--show-only", "templates/zz-notes.yaml", *args,
    )  # fmt: skip
    text: str = yaml.safe_load(out.stdout)["data"]["notes"]
    return text


def note_lines(text: str) -> list[str]:
    """The lines under NOTES.txt's MetalLB heading, without their bullets."""
    if NOTES_HEADING not in text:
        return []
    section = text.split(NOTES_HEADING, 1)[1].splitlines()[1:]
    return [line.removeprefix("  * ") for line in section if line.startswith("  * ")]


def pod_spec(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, kind)["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name}"
    return found[0]


# --- MetalLB's values files install ----------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_metallb_values_render_ironlb(helm: cs.Tools, case: str) -> None:
    objects = helm.render(*files(CASES[case]))
    for kind, component in (("Deployment", "controller"), ("DaemonSet", "speaker")):
        spec = pod_spec(objects, kind)
        default = CHART_DEFAULTS[component]["image"]["repository"]
        # MetalLB's image (or a mirror of it) cannot run ironlb: ours takes its place.
        assert container(spec, component)["image"] == f"{default}:{APP_VERSION}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_strict_is_clean(helm: cs.Tools, case: str) -> None:
    result = helm.helm("lint", "--strict", str(cs.CHART), *files(CASES[case]))
    findings = [
        line for line in result.stdout.splitlines() if line.startswith(("[WARNING]", "[ERROR]"))
    ]
    assert findings == []
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def schema_node(schema: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The schema of `key` inside `schema`: None when `schema` is an object left open."""
    properties: dict[str, Any] = schema.get("properties", {})
    if key in properties:
        node: dict[str, Any] = properties[key]
        return node
    assert not properties and schema.get("additionalProperties") is not False, key
    return None


@pytest.mark.parametrize("fixture", [DEFAULTS_015, DEFAULTS_016, COMMON], ids=lambda p: p.stem)
def test_schema_lists_and_describes_metallb_keys(fixture: Path) -> None:
    """Every key of MetalLB's files is listed in the schema (not let through by an open object),
    and each one values.yaml lacks says in its description what becomes of it."""
    schema = yaml.safe_load((cs.CHART / "values.schema.json").read_text())
    undescribed: list[str] = []

    def walk(values: dict[str, Any], node: dict[str, Any], ours: Any, path: str) -> None:
        """`ours` is values.yaml's value at `path`; None below a key values.yaml lacks, whose
        description covers what lies under it."""
        for key, value in values.items():
            child = schema_node(node, key)
            if child is None:
                continue
            where = f"{path}{key}"
            own = isinstance(ours, dict) and key in ours
            if isinstance(ours, dict) and not own and not child.get("description"):
                undescribed.append(where)
            if isinstance(value, dict) and "properties" in child:
                walk(value, child, ours[key] if own else None, f"{where}.")

    walk(load(fixture), schema, CHART_DEFAULTS, "")
    assert undescribed == []


# --- honoured keys reach the objects ---------------------------------------------------------


def test_common_settings_reach_the_workloads(helm: cs.Tools) -> None:
    values = load(COMMON)
    objects = helm.render(*files([COMMON]))
    for kind, component in (("Deployment", "controller"), ("DaemonSet", "speaker")):
        wanted = values[component]
        workload = one(objects, kind)
        spec = pod_spec(objects, kind)
        assert workload["spec"]["revisionHistoryLimit"] == wanted["revisionHistoryLimit"]
        for toleration in wanted["tolerations"]:
            assert toleration in spec["tolerations"]
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", **wanted["nodeSelector"]}
        assert spec["priorityClassName"] == wanted["priorityClassName"]
        assert spec.get("affinity") == wanted.get("affinity")
        main = container(spec, component)
        for section, amounts in wanted["resources"].items():
            assert main["resources"][section] | amounts == main["resources"][section]
        assert f"--log-level={wanted['logLevel']}" in main["args"]
        extra = [c for c in spec["containers"] if c["name"] != component]
        assert extra == wanted["extraContainers"]
        assert spec["imagePullSecrets"] == values["imagePullSecrets"]
    speaker = container(pod_spec(objects, "DaemonSet"), "speaker")
    assert f"--ml-bind-port={values['speaker']['memberlist']['mlBindPort']}" in speaker["args"]
    controller = container(pod_spec(objects, "Deployment"), "controller")
    assert controller["imagePullPolicy"] == values["controller"]["image"]["pullPolicy"]


def test_metallb_016_defaults_keep_probes_on_the_metrics_port(helm: cs.Tools) -> None:
    """0.16's revisionHistoryLimit and metrics port apply; its separate health port does not
    (ironlb has none): the probes stay on the metrics port, which serves /healthz and /readyz."""
    values = load(DEFAULTS_016)
    objects = helm.render(*files([DEFAULTS_016]))
    port = values["prometheus"]["metricsPort"]
    for kind, component in (("Deployment", "controller"), ("DaemonSet", "speaker")):
        assert (
            one(objects, kind)["spec"]["revisionHistoryLimit"]
            == (values[component]["revisionHistoryLimit"])
        )
        main = container(pod_spec(objects, kind), component)
        assert f"--metrics-port={port}" in main["args"]
        monitoring = [p for p in main["ports"] if p["name"] == "monitoring"]
        assert [p["containerPort"] for p in monitoring] == [port]
        for probe in ("livenessProbe", "readinessProbe"):
            assert main[probe]["httpGet"]["port"] == "monitoring"
            assert main[probe]["periodSeconds"] == values[component][probe]["periodSeconds"]


def test_our_defaults_keep_their_revision_history(helm: cs.Tools) -> None:
    objects = helm.render()
    for kind, component in (("Deployment", "controller"), ("DaemonSet", "speaker")):
        assert (
            one(objects, kind)["spec"]["revisionHistoryLimit"]
            == (CHART_DEFAULTS[component]["revisionHistoryLimit"])
        )
    assert by_kind(objects, "NetworkPolicy") == []
    assert [
        r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-prometheus")
    ] == []


def test_service_monitors_carry_each_components_labels_and_prometheus_rbac(
    helm: cs.Tools,
) -> None:
    values = load(COMMON)
    prometheus = values["prometheus"]
    objects = helm.render(*files([COMMON]))
    for component in ("speaker", "controller"):
        monitor = one(objects, "ServiceMonitor", f"{cs.RELEASE}-{component}")
        own = prometheus["serviceMonitor"][component]
        assert (
            monitor["metadata"]["labels"] | own["additionalLabels"]
            == (monitor["metadata"]["labels"])
        )
        assert monitor["metadata"].get("annotations", {}) == own["annotations"]
        assert (
            monitor["spec"]["endpoints"][0]["interval"] == prometheus["serviceMonitor"]["interval"]
        )
        # Plain HTTP: MetalLB's tlsConfig would break the scrape.
        assert "tlsConfig" not in monitor["spec"]["endpoints"][0]
    binding = one(objects, "RoleBinding", f"{cs.RELEASE}-prometheus")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": prometheus["serviceAccount"],
            "namespace": prometheus["namespace"],
        }
    ]
    role = one(objects, "Role", binding["roleRef"]["name"])
    granted = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods", "services", "endpoints"} <= granted
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}


def test_pod_monitors_carry_metallbs_annotations(helm: cs.Tools, tmp_path: Path) -> None:
    override = tmp_path / "podmonitor.yaml"
    annotations = {"example.com/owner": "network-team"}
    override.write_text(
        yaml.safe_dump(
            {
                "prometheus": {
                    "serviceMonitor": {"enabled": False},
                    "podMonitor": {
                        "enabled": True,
                        "annotations": annotations,
                        "tlsConfig": {"insecureSkipVerify": True},
                    },
                }
            }
        )
    )
    objects = helm.render(*files([COMMON, override]))
    monitors = by_kind(objects, "PodMonitor")
    assert len(monitors) == 2
    for monitor in monitors:
        assert monitor["metadata"]["annotations"] == annotations
        assert "tlsConfig" not in monitor["spec"]["podMetricsEndpoints"][0]


def test_prometheus_rbac_needs_prometheus_service_account(helm: cs.Tools) -> None:
    """As in MetalLB's chart: rbacPrometheus (its default) with a monitor names the account."""
    result = helm.helm(
        "template", cs.RELEASE, str(cs.CHART), *files([DEFAULTS_016]),
        "--set", "prometheus.serviceMonitor.enabled=true", check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "prometheus.serviceAccount (Prometheus's ServiceAccount) must be set" in result.stderr


def test_network_policies(helm: cs.Tools) -> None:
    values = load(COMMON)
    objects = helm.render(*files([COMMON]))
    deny = one(objects, "NetworkPolicy", f"{cs.RELEASE}-default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    policy = one(objects, "NetworkPolicy", f"{cs.RELEASE}-controller")
    pods = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pods | policy["spec"]["podSelector"]["matchLabels"] == pods
    assert policy["spec"]["egress"] == [
        {"ports": [{"protocol": "TCP", "port": values["networkpolicies"]["apiPort"]}]}
    ]
    ingress = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    container_ports = {
        p["name"] for p in container(pod_spec(objects, "Deployment"), "controller")["ports"]
    }
    assert ingress == container_ports == {"monitoring", "webhook"}
    # Without the webhook, its port is closed too.
    objects = helm.render(*files([COMMON]), "--set", "controller.webhookMode=disabled")
    policy = one(objects, "NetworkPolicy", f"{cs.RELEASE}-controller")
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {
        "monitoring"
    }


def test_ironlb_images_are_kept(helm: cs.Tools) -> None:
    """Only MetalLB's images are replaced; any other repository and tag are the user's."""
    repository = "registry.example.com/ironlb/controller"
    objects = helm.render(
        *files([DEFAULTS_016]),
        f"--set=controller.image.repository={repository}",
        "--set=controller.image.tag=1.2.3",
    )
    assert container(pod_spec(objects, "Deployment"), "controller")["image"] == (
        f"{repository}:1.2.3"
    )


def test_a_limit_below_our_default_request_lowers_the_request(helm: cs.Tools) -> None:
    """MetalLB's example `limits: {memory: 100Mi}` merges into our requests (128Mi): the request
    follows the limit instead of making a pod the apiserver refuses."""
    limit = "100Mi"
    assert CHART_DEFAULTS["controller"]["resources"]["requests"]["memory"] != limit
    objects = helm.render(f"--set=controller.resources.limits.memory={limit}")
    resources = container(pod_spec(objects, "Deployment"), "controller")["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == limit
    assert (
        resources["requests"]["cpu"] == CHART_DEFAULTS["controller"]["resources"]["requests"]["cpu"]
    )


# --- keys that do not apply are named --------------------------------------------------------

# case -> (values files, --set arguments, the keys the notes must name)
NOTED: dict[str, tuple[list[Path], list[str], list[str]]] = {
    "0.15 FRR mode": (
        [DEFAULTS_015],
        [],
        ["speaker.frr.enabled:", "controller.image.repository:", "speaker.image.repository:"],
    ),
    "0.16 frr-k8s mode, health port, HTTPS metrics": (
        [DEFAULTS_016],
        [],
        [
            "frrk8s.enabled:",
            "controller.livenessProbe.port",
            "speaker.readinessProbe.port",
            "tls.*",
        ],
    ),
    "common settings": (
        [COMMON],
        [],
        [
            "speaker.frr.enabled:",
            "crds.enabled: false",
            "speaker.bgpDebounceTimeout:",
            "prometheus.serviceMonitor.speaker.tlsConfig",
            "prometheus.serviceMonitor.controller.tlsConfig",
        ],
    ),
    "subchart values alone": (
        [],
        ["--set=frr-k8s.prometheus.serviceMonitor.enabled=true"],
        ["frr-k8s:"],
    ),
    "command": (
        [],
        ["--set=controller.command=/controller"],
        ["controller.command:"],
    ),
}


@pytest.mark.parametrize("case", sorted(NOTED))
def test_notes_name_the_keys_ironlb_does_not_use(
    helm: cs.Tools, notes_chart: Path, case: str
) -> None:
    paths, sets, keys = NOTED[case]
    lines = note_lines(notes(helm, notes_chart, *files(paths), *sets))
    for key in keys:
        assert [line for line in lines if key in line], f"no note names {key}: {lines}"
    # Nothing that is honoured is reported as unused.
    for honoured in ("revisionHistoryLimit", "tolerations", "nodeSelector", "networkpolicies"):
        assert not [line for line in lines if honoured in line]


@pytest.mark.parametrize(
    ("sets", "name", "rendered"),
    [
        ([], f"{cs.RELEASE}-memberlist", True),
        (["--set=speaker.secretName=ml"], "ml", True),  # MetalLB's name for it
        (["--set=speaker.memberlist.existingSecret=mine"], "mine", False),  # GitOps: yours
        (["--set=speaker.secretName=ml", "--set=speaker.memberlist.existingSecret=mine"], "mine",
         False),
    ],
)  # fmt: skip
def test_the_membership_key_secret_is_named_as_asked(
    helm: cs.Tools, notes_chart: Path, sets: list[str], name: str, rendered: bool
) -> None:
    objects = helm.render(*sets)
    secrets = [o["metadata"]["name"] for o in by_kind(objects, "Secret")]
    assert (name in secrets) == rendered, secrets
    volumes = pod_spec(objects, "DaemonSet")["volumes"]
    assert name in [v.get("secret", {}).get("secretName") for v in volumes], volumes
    lines = note_lines(notes(helm, notes_chart, *sets))
    assert not [line for line in lines if "secretName" in line]


@pytest.mark.parametrize(
    ("sets", "patterns"),
    [
        ([], list(interfaces.DEFAULT_EXCLUDE)),
        (["--set=speaker.excludeInterfaces.enabled=true"], list(interfaces.DEFAULT_EXCLUDE)),
        (["--set=speaker.excludeInterfaces.enabled=false"], []),  # MetalLB: nothing excluded
    ],
)
def test_the_layer2_exclusions_are_metallbs_configmap_mounted_where_metallb_reads_it(
    helm: cs.Tools, sets: list[str], patterns: list[str]
) -> None:
    objects = helm.render(*sets)
    config_map = one(objects, "ConfigMap", "metallb-excludel2")
    data = yaml.safe_load(config_map["data"]["excludel2.yaml"])
    assert interfaces.parse_exclude_config(data) == tuple(patterns)
    spec = pod_spec(objects, "DaemonSet")
    [volume] = [
        v
        for v in spec["volumes"]
        if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    ]
    [mount] = [m for m in container(spec, "speaker")["volumeMounts"] if m["name"] == volume["name"]]
    assert f"{mount['mountPath']}/excludel2.yaml" == interfaces.EXCLUDE_CONFIG_PATH


def test_notes_say_nothing_of_metallb_for_our_own_values(helm: cs.Tools, notes_chart: Path) -> None:
    text = notes(helm, notes_chart)
    assert f"is installed in namespace {cs.NAMESPACE}" in text
    assert NOTES_HEADING not in text


def test_notes_give_the_port_the_probes_use(helm: cs.Tools, notes_chart: Path) -> None:
    values = load(DEFAULTS_016)
    lines = note_lines(notes(helm, notes_chart, *files([DEFAULTS_016])))
    [probes] = [line for line in lines if "livenessProbe.port" in line]
    assert f"({values['controller']['livenessProbe']['port']})" in probes
    assert f"prometheus.metricsPort ({values['prometheus']['metricsPort']})" in probes


# key that must be named -> values asking for what ironlb cannot do
REFUSED: dict[str, dict[str, Any]] = {
    "frrk8s.external": {"frrk8s": {"enabled": False, "external": True, "namespace": "frr-k8s"}},
    "prometheus.secureMetricsPort": {"prometheus": {"secureMetricsPort": 9120}},
    "tls.controllerMetricsTLSSecret": {"tls": {"controllerMetricsTLSSecret": "metrics-cert"}},
    "tls.speakerMetricsTLSSecret": {"tls": {"speakerMetricsTLSSecret": "metrics-cert"}},
    "tls.minVersion": {"tls": {"minVersion": "VersionTLS13"}},
    "tls.cipherSuites": {"tls": {"cipherSuites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}},
    "tls.curvePreferences": {"tls": {"curvePreferences": "29"}},
    "controller.tlsMinVersion": {"controller": {"tlsMinVersion": "VersionTLS13"}},
    "controller.tlsCipherSuites": {
        "controller": {"tlsCipherSuites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
    },
    "speaker.hostNetwork": {"speaker": {"hostNetwork": False}},
    "speaker.wanConfig": {"speaker": {"wanConfig": True}},
}


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_what_ironlb_cannot_do_fails_naming_the_key(
    helm: cs.Tools, tmp_path: Path, key: str
) -> None:
    override = tmp_path / "values.yaml"
    override.write_text(yaml.safe_dump(REFUSED[key]))
    # On top of MetalLB's defaults, which alone render (test_metallb_values_render_ironlb).
    result = helm.helm(
        "template", cs.RELEASE, str(cs.CHART), *files([DEFAULTS_016, override]), check=False
    )
    assert result.returncode != 0
    assert REFUSED_HEADING in result.stderr
    refused = result.stderr.split(REFUSED_HEADING, 1)[1]
    assert f"* {key}: " in refused
    assert "values don't meet the specifications of the schema" not in result.stderr
    assert result.stdout == ""


def test_every_refusal_is_listed_at_once(helm: cs.Tools, tmp_path: Path) -> None:
    override = tmp_path / "values.yaml"
    merged: dict[str, Any] = {}
    for values in REFUSED.values():
        for top, sub in values.items():
            merged.setdefault(top, {}).update(sub)
    override.write_text(yaml.safe_dump(merged))
    result = helm.helm("template", cs.RELEASE, str(cs.CHART), "-f", str(override), check=False)
    assert result.returncode != 0
    assert sorted(k for k in REFUSED if f"* {k}: " in result.stderr) == sorted(REFUSED)


# Values MetalLB also allows that ask for nothing ironlb lacks: they are not refused.
ACCEPTED = [
    "--set=speaker.gratuitousARPInterval=0",
    "--set=speaker.gratuitousARPInterval=null",
    "--set=tls.minVersion=VersionTLS12",
    "--set=controller.tlsMinVersion=VersionTLS12",
    "--set=speaker.excludeInterfaces.enabled=true",
    "--set=speaker.hostNetwork=true",
    "--set=speaker.wanConfig=false",
    "--set=frrk8s.external=false",
]


@pytest.mark.parametrize("setting", ACCEPTED)
def test_settings_ironlb_matches_are_accepted(helm: cs.Tools, setting: str) -> None:
    helm.render(setting)


# MetalLB 0.16.2's periodic gratuitous ARP / NDP: honoured, as the speaker's MetalLB flag.
GRATUITOUS_ARP_INTERVAL: list[tuple[Any, str | None]] = [
    (None, None),
    (0, None),
    (1, "--gratuitous-arp-interval=1"),
    (300, "--gratuitous-arp-interval=300"),
    # Large numbers from a values file are floats to Helm: still whole seconds on the flag.
    (2**31 - 1, "--gratuitous-arp-interval=2147483647"),
]


@pytest.mark.parametrize(("value", "flag"), GRATUITOUS_ARP_INTERVAL)
def test_gratuitous_arp_interval_reaches_the_speaker(
    helm: cs.Tools, tmp_path: Path, value: Any, flag: str | None
) -> None:
    override = tmp_path / "values.yaml"
    override.write_text(yaml.safe_dump({"speaker": {"gratuitousARPInterval": value}}))
    # On top of MetalLB's own values, as a MetalLB user sets it.
    objects = helm.render(*files([DEFAULTS_016, override]))
    args = container(pod_spec(objects, "DaemonSet"), "speaker")["args"]
    given = [a for a in args if a.startswith("--gratuitous-arp-interval")]
    assert given == ([] if flag is None else [flag])


def test_gratuitous_arp_interval_is_off_by_default(helm: cs.Tools) -> None:
    assert CHART_DEFAULTS["speaker"]["gratuitousARPInterval"] == 0
    args = container(pod_spec(helm.render(), "DaemonSet"), "speaker")["args"]
    assert not [a for a in args if a.startswith("--gratuitous-arp-interval")]


@pytest.mark.parametrize("value", [-1, "30s", 1.5, 2**31])
def test_gratuitous_arp_interval_is_whole_seconds(
    helm: cs.Tools, tmp_path: Path, value: Any
) -> None:
    """What MetalLB's speaker would refuse at start fails the install, at the key."""
    override = tmp_path / "values.yaml"
    override.write_text(yaml.safe_dump({"speaker": {"gratuitousARPInterval": value}}))
    result = helm.helm("template", cs.RELEASE, str(cs.CHART), "-f", str(override), check=False)
    assert result.returncode != 0
    assert "at '/speaker/gratuitousARPInterval'" in result.stderr
    assert result.stdout == ""


def speaker_pod_rules(objects: list[dict[str, Any]]) -> list[list[str]]:
    """The verbs on Pods of the speaker's Role."""
    return [
        rule["verbs"]
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"].endswith("-speaker")
        for rule in o["rules"]
        if "pods" in rule.get("resources", [])
    ]


def test_take_over_from_reaches_the_speaker_with_the_rbac_it_needs(
    helm: cs.Tools, tmp_path: Path
) -> None:
    """`speaker.takeOverFrom` (docs/migration.md): the flag, and a watch of Pods in the
    namespace; without it, the speaker may only read its own Pod."""
    selector = "app.kubernetes.io/name=metallb,app.kubernetes.io/component=speaker"
    override = tmp_path / "values.yaml"
    override.write_text(yaml.safe_dump({"speaker": {"takeOverFrom": selector}}))
    objects = helm.render(*files([override]))
    args = container(pod_spec(objects, "DaemonSet"), "speaker")["args"]
    assert [a for a in args if a.startswith("--take-over-from")] == [f"--take-over-from={selector}"]
    assert speaker_pod_rules(objects) == [["get", "list", "watch"]]
    plain = helm.render()
    args = container(pod_spec(plain, "DaemonSet"), "speaker")["args"]
    assert not [a for a in args if a.startswith("--take-over-from")]
    assert speaker_pod_rules(plain) == [["get"]]


@pytest.mark.parametrize("value", ["app in (metallb)", "app", 3])
def test_take_over_from_is_an_equality_selector(helm: cs.Tools, tmp_path: Path, value: Any) -> None:
    override = tmp_path / "values.yaml"
    override.write_text(yaml.safe_dump({"speaker": {"takeOverFrom": value}}))
    result = helm.helm("template", cs.RELEASE, str(cs.CHART), "-f", str(override), check=False)
    assert result.returncode != 0
    assert "at '/speaker/takeOverFrom'" in result.stderr


# --- our own keys stay strict ----------------------------------------------------------------

TYPOS: dict[str, tuple[dict[str, Any], str]] = {
    "misspelt speaker key": (
        {"speaker": {"revisionHistoryLimt": 3}},
        "at '/speaker': additional properties 'revisionHistoryLimt' not allowed",
    ),
    "misspelt top-level key": (
        {"frrk8": {"enabled": True}},
        "additional properties 'frrk8' not allowed",
    ),
    "misspelt FRR key": (
        {"speaker": {"frr": {"enabeld": True}}},
        "at '/speaker/frr': additional properties 'enabeld' not allowed",
    ),
    "misspelt monitor key": (
        {"prometheus": {"serviceMonitor": {"speaker": {"labels": {"a": "b"}}}}},
        "at '/prometheus/serviceMonitor/speaker': additional properties 'labels' not allowed",
    ),
    "history type": (
        {"controller": {"revisionHistoryLimit": "ten"}},
        "at '/controller/revisionHistoryLimit': got string, want integer",
    ),
    "api port range": (
        {"networkpolicies": {"apiPort": 0}},
        "at '/networkpolicies/apiPort': minimum",
    ),
    "extra containers type": (
        {"speaker": {"extraContainers": {"name": "x"}}},
        "at '/speaker/extraContainers': got object, want array",
    ),
}


@pytest.mark.parametrize("case", sorted(TYPOS))
def test_schema_still_refuses_typos(helm: cs.Tools, tmp_path: Path, case: str) -> None:
    values, message = TYPOS[case]
    override = tmp_path / "values.yaml"
    override.write_text(yaml.safe_dump(values))
    # A MetalLB values file loosens nothing: the typo sits on top of one.
    result = helm.helm(
        "template", cs.RELEASE, str(cs.CHART), *files([DEFAULTS_016, override]), check=False
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr
    assert result.stdout == ""
