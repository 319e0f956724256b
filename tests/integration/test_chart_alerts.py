"""The chart's PrometheusRule: rendered by helm, checked and unit-tested by promtool.

The input series are not typed in by hand: their names and labels come from scrapes of the
registries the controller and the speaker really serve, so renaming a metric (or an alert
depending on a series nobody exports) fails here. promtool is Debian's `prometheus` package;
without it this test fails, it never skips.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client import parser

from controller import allocator
from controller import metrics as controller_metrics
from ironlb_io import prometheus
from speaker import metrics as speaker_metrics
from speaker.bgp import metrics as bgp_metrics
from speaker.bgp import speaking
from tests.integration import chart_support as cs

pytestmark = pytest.mark.integration

SHIPPED = {
    "MetalLBStaleConfig",
    "MetalLBConfigNotLoaded",
    "MetalLBAddressPoolExhausted",
    "MetalLBAddressPoolUsage75Percent",
    "MetalLBAddressPoolUsage85Percent",
    "MetalLBAddressPoolUsage95Percent",
    "MetalLBBGPSessionDown",
}
# What Prometheus adds to every scraped sample.
CONTROLLER = {"job": "ironlb", "instance": "10.1.0.5:7472", "pod": "ironlb-controller-7d9f-abcde"}
SPEAKER = {"job": "ironlb", "instance": "10.0.0.11:7472", "pod": "ironlb-speaker-x2v9k"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: install Debian's `prometheus` package (hack/setup does)",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def offline() -> Iterator[cs.Tools]:
    with cs.helm_home() as env:
        yield cs.Tools(None, env)


# --- what our components export ----------------------------------------------------------------

Samples = dict[str, list[dict[str, str]]]  # metric name -> the label sets of its samples


def scraped(text: str) -> Samples:
    found: Samples = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(dict(sample.labels))
    return found


def controller_scrape() -> Samples:
    stats = controller_metrics.Metrics()
    stats.set_pools({"web": allocator.PoolCounters(3, 0, 7, 0, 10, 0)})
    stats.config_loaded.set(1)
    return scraped(stats.render().decode())


class _FakeSpeaker:
    """What the BGP collector reads from `speaking.Speaker`: one session, up."""

    def session_states(self) -> dict[str, speaking.Status]:
        return {"tor": speaking.Status("tor", "10.0.0.1", "up", None, 3, 4, 0, "")}

    def peers(self) -> dict[str, Any]:
        address = ipaddress.ip_address("10.0.0.1")
        return {"tor": types.SimpleNamespace(peer_address=address, peer_port=179)}

    def bfd_sessions(self) -> dict[str, Any]:
        return {}

    def bfd_stats(self) -> None:
        return None  # no peer with BFD, as `speaking.Speaker` says then


def speaker_scrape() -> Samples:
    registry = prometheus.Registry()
    registry.register(bgp_metrics.Collector(cast(speaking.Speaker, _FakeSpeaker())))
    agent_text = speaker_metrics.REGISTRY.exposition()
    text = agent_text + registry.exposition()
    return scraped(text.decode())


@pytest.fixture(scope="module")
def exported() -> dict[str, Samples]:
    return {"controller": controller_scrape(), "speaker": speaker_scrape()}


def series(samples: Samples, name: str, target: Mapping[str, str], **labels: str) -> str:
    """promtool's notation of a series our code exports, as Prometheus stores it."""
    assert name in samples, f"{name} is not exported"
    known = set().union(*(s.keys() for s in samples[name]))
    assert set(labels) == known, f"{name} has labels {sorted(known)}, not {sorted(labels)}"
    every = {**target, **labels}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(every.items())) + "}"


# --- the rendered rules ------------------------------------------------------------------------


def rules(offline: cs.Tools, *args: str) -> dict[str, Any]:
    objects = offline.render("--set=prometheus.prometheusRule.enabled=true", *args)
    found = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert len(found) == 1
    rule = found[0]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == cs.NAMESPACE
    return {"groups": rule["spec"]["groups"]}


def alerts(groups: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups["groups"] for r in g["rules"] if "alert" in r}


def expand(text: str, labels: Mapping[str, str], value: str = "") -> str:
    """Our annotations use only `{{ $labels.x }}` and `{{ $value | humanize }}`."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)
    return text.replace("{{ $value | humanize }}", value)


def expected(
    rule: Mapping[str, Any], series_labels: Mapping[str, str], value: str = ""
) -> dict[str, Any]:
    labels = {**series_labels, **rule.get("labels", {})}
    annotations = {k: expand(v, series_labels, value) for k, v in rule["annotations"].items()}
    return {"exp_labels": labels, "exp_annotations": annotations}


def run_promtool(tmp_path: Path, groups: Mapping[str, Any], tests: list[dict[str, Any]]) -> str:
    tool = promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(dict(groups), sort_keys=False))
    check = subprocess.run(
        [tool, "check", "rules", str(tmp_path / "rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run(
        [tool, "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "SUCCESS" in output
    return output


# --- tests -------------------------------------------------------------------------------------


def test_default_values_ship_metallbs_alerts_on_series_we_export(
    offline: cs.Tools, exported: dict[str, Samples]
) -> None:
    groups = rules(offline)
    shipped = alerts(groups)
    assert set(shipped) == SHIPPED
    names = set(exported["controller"]) | set(exported["speaker"])
    for name, rule in shipped.items():
        used = set(re.findall(r"\bmetallb_\w+", rule["expr"]))
        assert used, name
        assert used <= names, f"{name} reads {sorted(used - names)}, which nothing exports"
        assert rule["for"] == "1m"
        assert rule["labels"]["severity"] in ("warning", "critical")
    assert shipped["MetalLBAddressPoolUsage95Percent"]["labels"]["severity"] == "critical"


def test_no_rule_unless_enabled(offline: cs.Tools) -> None:
    objects = offline.render()
    assert [o for o in objects if o["kind"] == "PrometheusRule"] == []


def test_values_switch_alerts_and_set_their_labels(offline: cs.Tools) -> None:
    groups = rules(
        offline,
        "--set=prometheus.prometheusRule.staleConfig.enabled=false",
        "--set=prometheus.prometheusRule.addressPoolUsage.enabled=false",
        "--set=prometheus.prometheusRule.bgpSessionDown.labels.severity=page",
        "--set=prometheus.prometheusRule.additionalLabels.release=kube-prometheus",
        "--set-json=prometheus.prometheusRule.extraAlerts="
        '[{"alert":"Extra","expr":"vector(1)","labels":{"severity":"info"}}]',
    )
    shipped = alerts(groups)
    assert set(shipped) == {
        "MetalLBConfigNotLoaded",
        "MetalLBAddressPoolExhausted",
        "MetalLBBGPSessionDown",
        "Extra",
    }
    assert shipped["MetalLBBGPSessionDown"]["labels"] == {"severity": "page"}
    rendered = [
        o
        for o in offline.render(
            "--set=prometheus.prometheusRule.enabled=true",
            "--set=prometheus.prometheusRule.additionalLabels.release=kube-prometheus",
        )
        if o["kind"] == "PrometheusRule"
    ]
    assert rendered[0]["metadata"]["labels"]["release"] == "kube-prometheus"


def test_promtool_fires_each_alert_on_our_series(
    offline: cs.Tools, exported: dict[str, Samples], tmp_path: Path
) -> None:
    groups = rules(offline)
    shipped = alerts(groups)
    c, s = exported["controller"], exported["speaker"]
    total, in_use = "metallb_allocator_addresses_total", "metallb_allocator_addresses_in_use_total"
    standby = {**CONTROLLER, "pod": "ironlb-controller-7d9f-fghij", "instance": "10.1.0.6:7472"}
    inputs = [
        # Configuration: the controller is stale, a speaker never loaded.
        (series(c, "metallb_k8s_client_config_stale_bool", CONTROLLER), "1x10"),
        (series(s, "metallb_k8s_client_config_stale_bool", SPEAKER), "0x10"),
        (series(c, "metallb_k8s_client_config_loaded_bool", CONTROLLER), "1x10"),
        (series(s, "metallb_k8s_client_config_loaded_bool", SPEAKER), "0x10"),
        # Pools: full (100 %), busy (90 %), calm (10 %); a second replica repeats one pool.
        (series(c, total, CONTROLLER, pool="full"), "10x10"),
        (series(c, in_use, CONTROLLER, pool="full"), "10x10"),
        (series(c, total, CONTROLLER, pool="busy"), "100x10"),
        (series(c, in_use, CONTROLLER, pool="busy"), "90x10"),
        (series(c, total, standby, pool="busy"), "100x10"),
        (series(c, in_use, standby, pool="busy"), "90x10"),
        (series(c, total, CONTROLLER, pool="calm"), "100x10"),
        (series(c, in_use, CONTROLLER, pool="calm"), "10x10"),
        # BGP: one session down, one up.
        (series(s, "metallb_bgp_session_up", SPEAKER, peer="10.0.0.1:179"), "0x10"),
        (series(s, "metallb_bgp_session_up", SPEAKER, peer="[fd00::1]:179"), "1x10"),
    ]

    def fired(alert: str, *instances: tuple[Mapping[str, str], str]) -> dict[str, Any]:
        return {
            "eval_time": "5m",
            "alertname": alert,
            "exp_alerts": [expected(shipped[alert], labels, value) for labels, value in instances],
        }

    at_5m = [
        fired("MetalLBStaleConfig", (CONTROLLER, "")),
        fired("MetalLBConfigNotLoaded", (SPEAKER, "")),
        fired("MetalLBAddressPoolExhausted", ({"pool": "full"}, "")),
        fired(
            "MetalLBAddressPoolUsage75Percent", ({"pool": "busy"}, "90"), ({"pool": "full"}, "100")
        ),
        fired(
            "MetalLBAddressPoolUsage85Percent", ({"pool": "busy"}, "90"), ({"pool": "full"}, "100")
        ),
        fired("MetalLBAddressPoolUsage95Percent", ({"pool": "full"}, "100")),
        fired(
            "MetalLBBGPSessionDown",
            ({**SPEAKER, "peer": "10.0.0.1:179"}, ""),
        ),
    ]
    # Nothing fires before its minute has passed.
    too_early = [{"eval_time": "30s", "alertname": name, "exp_alerts": []} for name in SHIPPED]
    tests = [
        {
            "interval": "1m",
            "input_series": [{"series": name, "values": values} for name, values in inputs],
            "alert_rule_test": [*too_early, *at_5m],
        }
    ]
    assert {t["alertname"] for t in at_5m} == SHIPPED
    run_promtool(tmp_path, groups, tests)


def test_promtool_excluded_pools_never_alert(
    offline: cs.Tools, exported: dict[str, Samples], tmp_path: Path
) -> None:
    groups = rules(
        offline,
        "--set=prometheus.prometheusRule.addressPoolExhausted.excludePools=^scratch-.*",
        "--set=prometheus.prometheusRule.addressPoolUsage.excludePools=^scratch-.*",
    )
    shipped = alerts(groups)
    c = exported["controller"]
    total, in_use = "metallb_allocator_addresses_total", "metallb_allocator_addresses_in_use_total"
    inputs = [
        (series(c, total, CONTROLLER, pool="scratch-1"), "4x10"),
        (series(c, in_use, CONTROLLER, pool="scratch-1"), "4x10"),
        (series(c, total, CONTROLLER, pool="web"), "4x10"),
        (series(c, in_use, CONTROLLER, pool="web"), "4x10"),
    ]
    pool_alerts = sorted(n for n in SHIPPED if "AddressPool" in n)
    checks = [
        {
            "eval_time": "5m",
            "alertname": name,
            "exp_alerts": [expected(shipped[name], {"pool": "web"}, "100")],
        }
        for name in pool_alerts
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": [{"series": name, "values": values} for name, values in inputs],
            "alert_rule_test": checks,
        }
    ]
    run_promtool(tmp_path, groups, tests)
