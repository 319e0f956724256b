"""`ironlb status --explain` against a real apiserver: its fetch shell end to end.

The objects a speaker and the controller would write are written by the test (a Service with its
address, a ServiceL2Status, a ConfigurationState with DataPathReady), and one speaker is stood in
for by `speaker.health`'s own HTTP server with a fixed verdict. One Node's speaker answers, the
other's is not given: its row comes from the API objects alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes
import pytest

from ironlb_cli import __main__ as cli
from ironlb_cli import schema
from ironlb_io import prometheus
from speaker import health

pytestmark = pytest.mark.integration

GROUP, VERSION = "metallb.io", "v1beta1"


@pytest.fixture
def nodes(kube_api: kubernetes.client.ApiClient, test_namespace: str) -> Iterator[list[str]]:
    """Two Nodes named after the test's namespace (Nodes are cluster-wide)."""
    core = kubernetes.client.CoreV1Api(kube_api)
    names = [f"{test_namespace}-a", f"{test_namespace}-b"]
    for name in names:
        body: Any = {"metadata": {"name": name}}
        core.create_node(body)
    try:
        yield names
    finally:
        for name in names:
            core.delete_node(name)


def test_explain_reads_the_speakers_verdict_and_falls_back_to_the_api(
    kube_api: kubernetes.client.ApiClient,
    kubeconfig: str,
    test_namespace: str,
    nodes: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns, (asked, unasked) = test_namespace, nodes
    key = f"{ns}/web"
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    service: Any = {
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }
    core.create_namespaced_service(ns, service)
    core.patch_namespaced_service_status(
        "web", ns, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}
    )
    for kind, plural, name, status in (
        (
            "ServiceL2Status",
            "servicel2statuses",
            f"l2-web-{unasked}",
            {"node": unasked, "serviceName": "web", "serviceNamespace": ns},
        ),
        (
            "ConfigurationState",
            "configurationstates",
            f"speaker-{unasked}",
            {
                "conditions": [
                    {
                        "type": "DataPathReady",
                        "status": "False",
                        "reason": "nodeCordoned",
                        "message": "the Node is cordoned (spec.unschedulable)",
                        "lastTransitionTime": "2024-01-01T00:00:00Z",
                    }
                ]
            },
        ),
    ):
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, plural, name, {"status": status}
        )

    verdict = {
        "node": asked,
        "service": key,
        "datapath": {"ready": True, "reason": None, "message": ""},
        "verdicts": [
            {
                "protocol": "layer2",
                "announcing": False,
                "reason": "notOwner",
                "message": f"{unasked} is elected",
                "ips": ["192.0.2.10"],
            }
        ],
        "conflicts": [],
    }

    def explain(service: str) -> Mapping[str, Any] | None:
        return verdict if service == key else None

    speaker = health.Server(0, prometheus.Registry(), list, "127.0.0.1", explain)
    try:
        base = [
            "status",
            f"--kubeconfig={kubeconfig}",
            f"--namespace={ns}",
            f"--speaker-metrics={asked}=http://127.0.0.1:{speaker.port}/metrics",
            "--explain",
        ]
        assert cli.main([*base, key, "-o", "json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert cli.main([*base, f"{ns}/missing"]) == 1
        missing = capsys.readouterr()
        assert cli.main([*base, key]) == 0
        text = capsys.readouterr().out
    finally:
        speaker.close()

    assert schema.check(document, schema.EXPLAIN) == []
    assert document["service"]["addresses"] == ["192.0.2.10"]
    assert document["service"]["state"] == "announced"
    rows = {n["name"]: n for n in document["nodes"]}
    assert set(rows) == {asked, unasked}
    assert rows[asked]["source"] == "speaker"
    assert rows[asked]["verdicts"][0]["reason"] == "notOwner"
    assert rows[unasked]["speaker"] == "not-given"
    assert [(v["protocol"], v["announcing"], v["source"]) for v in rows[unasked]["verdicts"]] == [
        ("layer2", True, "ServiceL2Status")
    ]
    assert rows[unasked]["datapath"] == {
        "ready": False,
        "reason": "nodeCordoned",
        "message": "the Node is cordoned (spec.unschedulable)",
        "source": "ConfigurationState",
    }
    assert f"Service {ns}/missing not found" in missing.err
    assert f"not announcing: notOwner ({unasked} is elected)" in text
    assert "announcing [ServiceL2Status]" in text
