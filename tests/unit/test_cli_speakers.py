"""ironlb status without URLs: the speaker Pods found through the API, asked through the
apiserver's Pod proxy (ironlb_cli.speakers, and how an answer is read)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ironlb_cli import __main__ as cli
from ironlb_cli import speakers

NS = "metallb-system"


def pod(
    name: str,
    node: str | None = "n1",
    phase: str = "Running",
    port_name: str = "monitoring",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T12:00:00Z"
    spec: dict[str, Any] = {
        "containers": [{"name": "speaker", "ports": [{"name": port_name, "containerPort": 7473}]}]
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_one_running_speaker_per_node_is_asked_and_the_others_are_said() -> None:
    found, skipped = speakers.from_pods(
        [
            pod("s-b", "n2"),
            pod("s-a", "n1"),
            pod("s-old", "n1", deleting=True),  # being replaced: the running one answers
            pod("s-pending", "n3", phase="Pending"),
            pod("s-unscheduled", None),
            pod("s-noport", "n4", port_name="http"),
        ]
    )
    assert found == [
        speakers.Speaker("n1", NS, "s-a", 7473),
        speakers.Speaker("n2", NS, "s-b", 7473),
    ]
    assert skipped == [
        f"pod {NS}/s-old on n1: not running",
        f"pod {NS}/s-pending on n3: not running",
        f"pod {NS}/s-unscheduled: not scheduled on a node",
        f"pod {NS}/s-noport on n4: no container port 'monitoring'",
    ]


def test_a_second_running_pod_on_a_node_is_not_asked_twice() -> None:
    found, _ = speakers.from_pods([pod("s-1"), pod("s-2")])
    assert [s.pod for s in found] == ["s-1"]


def test_proxy_paths_carry_the_port_and_an_encoded_query() -> None:
    speaker = speakers.Speaker("n1", NS, "s-a", 7473)
    assert speaker.proxy_path("/metrics") == f"/api/v1/namespaces/{NS}/pods/s-a:7473/proxy/metrics"
    assert speaker.proxy_path("/explain", {"service": "app/web"}) == (
        f"/api/v1/namespaces/{NS}/pods/s-a:7473/proxy/explain?service=app%2Fweb"
    )


@pytest.mark.parametrize(
    ("status", "body", "document", "error"),
    [
        (200, json.dumps({"node": "n1"}).encode(), {"node": "n1"}, None),
        (200, b"# HELP x\nx 1\n", None,
         "the answer is not JSON: does this speaker serve /explain?"),
        (404, json.dumps({"error": "unknown Service app/web"}).encode(), None,
         "HTTP 404: unknown Service app/web"),
        (503, b"service unavailable", None, "HTTP 503: service unavailable"),
    ],
)  # fmt: skip
def test_an_answer_through_the_proxy_reads_like_one_asked_directly(
    status: int, body: bytes, document: Any, error: str | None
) -> None:
    probe = cli.proxied("pod x", "n1", status, body)
    assert (probe.document, probe.error, probe.status) == (document, error, status)
