"""`ironlb status --explain`'s pure part: speakers' verdicts and API objects -> one row per node."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ironlb_cli import __main__ as cli
from ironlb_cli import explain_view as ev
from ironlb_cli import render, schema
from ironlb_cli import status_view as sv
from ironlb_io import prometheus
from speaker import health
from tests.unit.test_status_view import MS, bgpstatus, l2ad, l2status, node, pool, svc

KEY = "app/web"
URL = "http://10.0.0.1{}:7473/explain?service=app%2Fweb"


def answer(
    node_name: str,
    *verdicts: dict[str, Any],
    ready: bool = True,
    reason: str | None = None,
    message: str = "",
    conflicts: tuple[dict[str, Any], ...] = (),
) -> ev.SpeakerExplain:
    return {
        "node": node_name,
        "service": KEY,
        "datapath": {"ready": ready, "reason": reason, "message": message},
        "verdicts": list(verdicts),  # type: ignore[arg-type]
        "conflicts": list(conflicts),  # type: ignore[arg-type]
    }


def verdict(
    protocol: str, announcing: bool, reason: str | None = None, message: str = "", *ips: str
) -> dict[str, Any]:
    return {
        "protocol": protocol,
        "announcing": announcing,
        "reason": reason,
        "message": message,
        "ips": list(ips or ("10.1.0.1",)),
    }


def probe(index: int, document: Any = None, **fields: Any) -> ev.Probe:
    return ev.Probe(URL.format(index), document=document, **fields)


def state(node_name: str, status: str, reason: str = "", message: str = "") -> Any:
    condition = {"type": "DataPathReady", "status": status, "reason": reason, "message": message}
    other = {"type": "configReconcilerValid", "status": "True", "reason": "Reconciled"}
    return {
        "metadata": {"name": f"speaker-{node_name}", "namespace": MS},
        "status": {"conditions": [other, condition]},
    }


def explain(
    *,
    probes: tuple[ev.Probe, ...] = (),
    states: list[Any] | None = None,
    services: tuple[Any, ...] = (),
    nodes: tuple[Any, ...] = (),
    **status: Any,
) -> ev.ExplainView:
    inputs = sv.Inputs(
        config={"IPAddressPool": [pool("lab", "10.1.0.0/24")], "L2Advertisement": [l2ad("l2")]},
        services=services or (svc("web", "10.1.0.1", pool="lab", policy="Local"),),
        nodes=nodes or (node(1), node(2), node(3)),
        **status,
    )
    return ev.build(ev.Inputs(KEY, inputs, [] if states is None else states, probes))


def conforms(view: ev.ExplainView) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(json.dumps(render.explain_json(view)))
    assert schema.check(document, schema.EXPLAIN) == []
    return document


def rows(view: ev.ExplainView) -> dict[str, ev.NodeExplain]:
    return {n.name: n for n in view.nodes}


# --- the speakers' verdicts ---------------------------------------------------------------------


def test_each_speakers_verdict_per_protocol_becomes_its_nodes_row() -> None:
    v = explain(
        probes=(
            probe(1, answer("node1", verdict("layer2", False, "notOwner", "node2 is elected"))),
            probe(
                2,
                answer(
                    "node2",
                    verdict("layer2", True),
                    verdict("bgp", True, None, "to peers tor"),
                ),
            ),
            probe(
                3,
                answer(
                    "node3",
                    verdict("layer2", False, "kubeProxyNotReady", "kube-proxy /healthz: 503"),
                    ready=False,
                    reason="kubeProxyNotReady",
                    message="kube-proxy /healthz: 503",
                ),
            ),
        )
    )
    assert (v.service.namespace, v.service.name, v.service.addresses) == (
        "app",
        "web",
        ("10.1.0.1",),
    )
    assert (v.service.pool, v.service.traffic_policy) == ("lab", "Local")
    assert v.protocols == ("layer2", "bgp")
    by = rows(v)
    assert [n.source for n in v.nodes] == ["speaker"] * 3
    assert by["node1"].verdicts == (
        ev.VerdictView("layer2", False, "notOwner", "node2 is elected", ("10.1.0.1",), "speaker"),
    )
    assert [x.protocol for x in by["node2"].verdicts] == ["layer2", "bgp"]
    assert by["node3"].datapath == ev.DataPathView(
        False, "kubeProxyNotReady", "kube-proxy /healthz: 503", "speaker"
    )
    text = render.explain_text(v)
    assert "not announcing: notOwner (node2 is elected)" in text
    assert "announcing (to peers tor)" in text
    assert "not ready: kubeProxyNotReady (kube-proxy /healthz: 503)" in text
    # node1 has no BGP verdict: BGP does not apply there.
    node1_line = next(line for line in text.splitlines() if line.startswith("  node1"))
    assert "  -  " in node1_line
    assert "CONFLICT" not in text
    document = conforms(v)
    assert document["nodes"][0]["verdicts"][0]["reason"] == "notOwner"
    assert document["service"]["state"] == "not-announced"


def test_unknown_reasons_and_protocols_are_shown_verbatim() -> None:
    v = explain(
        probes=(
            probe(
                1,
                answer(
                    "node1",
                    verdict("layer2", False, "someReasonFromTheFuture", "newer speaker"),
                    verdict("vxlan", True),
                    ready=False,
                    reason="nodeDrainedByMagic",
                ),
            ),
        )
    )
    assert v.protocols == ("layer2", "vxlan")
    text = render.explain_text(v)
    assert "not announcing: someReasonFromTheFuture (newer speaker)" in text
    assert "not ready: nodeDrainedByMagic" in text
    assert "VXLAN" in text
    conforms(v)


def test_a_conflict_stands_out() -> None:
    rogue = {
        "ip": "10.1.0.1",
        "mac": "aa:bb:cc:dd:ee:ff",
        "interface": "eth0",
        "last_seen_s_ago": 0.4,
    }
    v = explain(probes=(probe(1, answer("node1", verdict("layer2", True), conflicts=(rogue,))),))
    assert rows(v)["node1"].conflicts == (
        ev.ConflictView("10.1.0.1", "aa:bb:cc:dd:ee:ff", "eth0", 0.4),
    )
    text = render.explain_text(v)
    assert (
        "CONFLICT node1: 10.1.0.1 answered by aa:bb:cc:dd:ee:ff on eth0, last seen 0.4 s ago"
        in text
    )
    assert "CONFLICT x1" in text
    assert conforms(v)["nodes"][0]["conflicts"][0]["lastSeenSecondsAgo"] == 0.4


def test_verdict_ips_are_shown_when_they_are_not_all_the_services() -> None:
    v = explain(
        services=(svc("web", "10.1.0.1", "fd00:1::1", pool="lab"),),
        probes=(
            probe(
                1,
                answer(
                    "node1",
                    verdict("layer2", True, None, "", "10.1.0.1"),
                    verdict("bgp", False, "noMatchingAdvertisement", "", "10.1.0.1", "fd00:1::1"),
                ),
            ),
        ),
    )
    layer2, bgp = (
        render.verdict_cell(rows(v)["node1"], p, v.service.addresses) for p in v.protocols
    )
    assert layer2 == "announcing [10.1.0.1]"
    assert bgp == "not announcing: noMatchingAdvertisement"


# --- where the speaker did not answer: the API, never a guess -----------------------------------


def test_without_a_speaker_the_api_says_who_announces_and_the_data_path() -> None:
    v = explain(
        l2_statuses=[l2status("web", "node1", "eth0"), l2status("other", "node2")],
        bgp_statuses=[bgpstatus("web", "node1", "tor")],
        states=[
            state("node1", "True", "Ready"),
            state("node2", "False", "nodeCordoned", "the Node is cordoned (spec.unschedulable)"),
        ],
    )
    by = rows(v)
    assert by["node1"].speaker == "not-given"
    assert by["node1"].source == "api"
    assert by["node1"].verdicts == (
        ev.VerdictView("layer2", True, None, "on eth0", (), "ServiceL2Status"),
        ev.VerdictView("bgp", True, None, "to peers tor", (), "ServiceBGPStatus"),
    )
    assert by["node1"].datapath == ev.DataPathView(True, "Ready", "", "ConfigurationState")
    # node2: a status object of another Service says nothing of this one.
    assert by["node2"].verdicts == ()
    assert by["node2"].datapath.ready is False
    assert by["node3"].source == "none"
    text = render.explain_text(v)
    assert "announcing (on eth0) [ServiceL2Status]" in text
    assert "ready [ConfigurationState]" in text
    assert "not ready: nodeCordoned (the Node is cordoned (spec.unschedulable))" in text
    node3 = next(line for line in text.splitlines() if line.startswith("  node3"))
    assert node3.count("unknown (speaker not scraped)") == 3  # layer2, bgp, data path
    assert "--speaker-metrics" in text
    document = conforms(v)
    assert document["nodes"][2]["datapath"] == {
        "ready": None,
        "reason": None,
        "message": "",
        "source": "none",
    }


def test_an_unreachable_or_unknowing_speaker_falls_back_to_the_api_and_says_why() -> None:
    v = explain(
        probes=(
            ev.Probe(URL.format(1), "node1", error="connection refused"),
            ev.Probe(URL.format(2), "node2", status=404, error="HTTP 404: unknown Service app/web"),
            ev.Probe(URL.format(3), "node3", status=200, error="the answer is not JSON"),
        ),
        l2_statuses=[l2status("web", "node1")],
    )
    by = rows(v)
    assert [by[n].speaker for n in ("node1", "node2", "node3")] == ["error", "no-verdict", "error"]
    assert by["node1"].verdicts[0].source == "ServiceL2Status"
    text = render.explain_text(v)
    assert "unknown (speaker has no verdict)" in text
    assert "API (speaker unreachable)" in text
    assert f"node1: connection refused ({URL.format(1)})" in text
    assert "node2: HTTP 404: unknown Service app/web" in text
    conforms(v)


def test_unreadable_configuration_states_leave_the_data_path_unknown_and_say_so() -> None:
    inputs = sv.Inputs(services=[svc("web", "10.1.0.1")], nodes=[node(1)])
    v = ev.build(ev.Inputs(KEY, inputs, None, ()))
    assert rows(v)["node1"].datapath.source == "none"
    assert any("ConfigurationStates could not be read" in p for p in v.problems)


@pytest.mark.parametrize(
    ("document", "error"),
    [
        (["not", "an", "object"], "not a JSON object"),
        ({"node": "node1", "service": "app/other", "verdicts": []}, "about app/other"),
        ({"node": "node1", "service": KEY}, "no verdicts"),
    ],
)
def test_an_answer_that_is_no_verdict_about_the_service_is_an_error(
    document: Any, error: str
) -> None:
    v = explain(probes=(ev.Probe(URL.format(1), "node1", document=document, status=200),))
    n = rows(v)["node1"]
    assert n.speaker == "error"
    assert n.error is not None and error in n.error
    conforms(v)


def test_fields_of_the_wrong_type_read_as_unknown() -> None:
    document = {
        "node": "node1",
        "service": KEY,
        "datapath": {"ready": "yes", "reason": 7},
        "verdicts": [
            {"protocol": "layer2", "announcing": "maybe", "ips": ["10.1.0.1", 3]},
            {"announcing": True},  # no protocol: nothing to show
            "junk",
        ],
        "conflicts": [{"ip": "10.1.0.1", "last_seen_s_ago": float("inf")}, None],
    }
    v = explain(probes=(probe(1, document),))
    n = rows(v)["node1"]
    assert n.verdicts == (ev.VerdictView("layer2", None, None, "", ("10.1.0.1",), "speaker"),)
    assert n.datapath == ev.DataPathView(None, "7", "", "speaker")
    assert n.conflicts[0] == ev.ConflictView("10.1.0.1", "", "", None)
    assert render.verdict_cell(n, "layer2", ("10.1.0.1",)) == "unknown"
    conforms(v)


# --- which node a speaker is --------------------------------------------------------------------


def test_a_speaker_is_its_own_word_else_the_name_given_else_its_address() -> None:
    v = explain(
        probes=(
            # No name given, the URL is a port-forward: the answer says node1.
            ev.Probe("http://127.0.0.1:7473/explain", document=answer("node1")),
            # Given as node3 but says node2: the speaker knows which node it runs on.
            ev.Probe("http://x:1/explain", "node3", document=answer("node2")),
            # No document: the URL's host is node3's address.
            ev.Probe("http://[fd00::13]:7473/explain", error="timed out"),
            ev.Probe("http://elsewhere:7473/explain", error="timed out"),
        )
    )
    by = rows(v)
    assert (by["node1"].speaker, by["node2"].speaker, by["node3"].speaker) == (
        "answered",
        "answered",
        "error",
    )
    assert any("given as node node3, the speaker says it is node2" in p for p in v.problems)
    assert (
        "http://elsewhere:7473/explain: cannot tell which node this speaker runs on;"
        " give it as NODE=URL"
    ) in v.problems


def test_a_speaker_on_no_node_gets_a_row_and_a_second_answer_for_a_node_is_ignored() -> None:
    v = explain(
        probes=(
            probe(1, answer("node1", verdict("layer2", True))),
            probe(1, answer("node1", verdict("layer2", False, "notOwner"))),
            ev.Probe("http://x:1/explain", document=answer("ghost", verdict("layer2", True))),
        )
    )
    by = rows(v)
    assert by["node1"].verdicts[0].announcing is True
    assert not by["ghost"].is_node and by["node1"].is_node
    assert "ghost (no such Node)" in render.explain_text(v)
    assert f"{URL.format(1)}: node node1 was already asked; ignored" in v.problems
    assert [n.name for n in v.nodes] == ["ghost", "node1", "node2", "node3"]


# --- the Service itself -------------------------------------------------------------------------


def test_a_missing_service_is_an_error() -> None:
    with pytest.raises(ev.ServiceNotFound, match="Service app/web not found"):
        explain(services=(svc("other", "10.1.0.2"),))


def test_a_service_ironlb_does_not_handle_is_an_error_that_says_why() -> None:
    with pytest.raises(ev.ServiceNotFound, match="it is type ClusterIP"):
        explain(services=(svc("web", kind="ClusterIP"),))
    with pytest.raises(ev.ServiceNotFound, match="loadBalancerClass other"):
        explain(services=(svc("web", lb_class="other"),))


def test_a_pending_service_says_why() -> None:
    v = explain(services=(svc("web"),))
    assert v.service.state == "pending"
    assert "<pending>" in render.explain_text(v)
    assert "why: " in render.explain_text(v)
    conforms(v)


def test_the_explain_schema_rejects_what_is_wrong() -> None:
    document = conforms(explain(probes=(probe(1, answer("node1", verdict("layer2", True))),)))
    document["nodes"][0]["verdicts"][0]["announcing"] = "yes"
    document["nodes"][0]["speaker"] = "maybe"
    del document["service"]["pool"]
    errors = schema.check(document, schema.EXPLAIN)
    assert "$.nodes[0].verdicts[0].announcing: str is not boolean/null" in errors
    assert any(e.startswith("$.nodes[0].speaker:") for e in errors)
    assert "$.service: missing 'pool'" in errors


anything = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
documents = st.fixed_dictionaries(
    {},
    optional={
        "node": anything | st.sampled_from(["node1", "node2"]),
        "service": anything | st.just(KEY),
        "datapath": anything,
        "verdicts": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "protocol": anything | st.sampled_from(["layer2", "bgp"]),
                    "announcing": anything,
                    "reason": anything,
                    "message": anything,
                    "ips": anything,
                },
            )
            | anything,
            max_size=3,
        ),
        "conflicts": anything,
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=st.lists(documents | anything, max_size=3))
def test_any_answers_give_a_view_that_conforms_and_renders(answers: list[Any]) -> None:
    v = explain(probes=tuple(probe(i, a) for i, a in enumerate(answers)))
    conforms(v)
    assert isinstance(render.explain_text(v), str)


# --- the command line's own parsing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics_url", "expected"),
    [
        ("http://10.0.0.11:7473/metrics", "http://10.0.0.11:7473/explain?service=app%2Fweb"),
        ("http://[fd00::1]:7473/metrics?x=1", "http://[fd00::1]:7473/explain?service=app%2Fweb"),
        (
            "https://api:6443/api/v1/namespaces/ms/pods/speaker-x:7473/proxy/metrics",
            "https://api:6443/api/v1/namespaces/ms/pods/speaker-x:7473/proxy/explain"
            "?service=app%2Fweb",
        ),
        ("http://10.0.0.11:7473/stats", None),
    ],
)
def test_the_explain_url_is_the_metrics_url_with_explain(
    metrics_url: str, expected: str | None
) -> None:
    assert ev.explain_url(metrics_url, KEY) == expected


def test_explain_takes_one_namespace_and_name() -> None:
    args = cli.parse_args(["status", "--explain", "app/web", "--speaker-metrics", "n1=10.0.0.1:1"])
    assert args.explain == "app/web"
    for bad in ("web", "app/", "/web", "a/b/c"):
        with pytest.raises(SystemExit):
            cli.parse_args(["status", "--explain", bad])


# --- the fetch shell against a real speaker HTTP port -------------------------------------------


def test_asking_a_speaker_over_http_reads_its_verdict_or_says_why_not() -> None:
    verdicts = {KEY: answer("node1", verdict("layer2", True))}
    registry = prometheus.Registry()
    speaker = health.Server(0, registry, list, "127.0.0.1", verdicts.get)
    older = health.Server(0, registry, list, "127.0.0.1")  # serves no verdicts
    try:
        metrics = f"http://127.0.0.1:{speaker.port}/metrics"
        found = cli.ask("node1", metrics, KEY, 5.0)
        assert (found.status, found.error) == (200, None)
        assert found.url == f"http://127.0.0.1:{speaker.port}/explain?service=app%2Fweb"
        assert found.document == verdicts[KEY]

        unknown = cli.ask("node1", metrics, "app/other", 5.0)
        assert (unknown.status, unknown.error) == (404, "HTTP 404: unknown Service app/other")

        none = cli.ask("node1", f"http://127.0.0.1:{older.port}/metrics", KEY, 5.0)
        assert none.status == 404

        odd = cli.ask("node1", f"http://127.0.0.1:{speaker.port}/stats", KEY, 5.0)
        assert odd.error is not None and "/metrics URL" in odd.error
    finally:
        speaker.close()
        older.close()
    refused = cli.ask("node1", metrics, KEY, 5.0)
    assert refused.status is None and refused.error


def test_a_speaker_older_than_explain_answers_metrics_which_is_no_verdict() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetricsOnly)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        found = cli.ask(None, f"http://127.0.0.1:{server.server_port}/metrics", KEY, 5.0)
    finally:
        server.shutdown()
        server.server_close()
    assert found.status == 200 and found.document is None
    assert found.error is not None and "does this speaker serve /explain?" in found.error


class _MetricsOnly(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"metallb_k8s_client_config_stale_bool 0\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass
