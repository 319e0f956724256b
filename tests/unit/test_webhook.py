"""The admission webhook's decisions, its AdmissionReview handling, its config and its certs.

Requests are AdmissionReview dicts as the apiserver sends them; the current objects come from a
fake lister, so no cluster and no sockets are involved.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from cryptography import x509
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import certs, webhook

NS = "metallb-system"


def obj(kind: str, name: str, spec: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    version = "v1beta2" if kind == "BGPPeer" else "v1beta1"
    return {
        "apiVersion": f"metallb.io/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pool(name: str, *cidrs: str) -> dict[str, Any]:
    return obj("IPAddressPool", name, {"addresses": list(cidrs)})


def peer(name: str, address: str = "10.0.0.1", **spec: Any) -> dict[str, Any]:
    return obj("BGPPeer", name, {"myASN": 64500, "peerASN": 64501, "peerAddress": address, **spec})


def admission(
    operation: str,
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    uid: str = "0f0e-1",
) -> dict[str, Any]:
    subject = new or old
    assert subject is not None
    group, version = subject["apiVersion"].split("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": subject["kind"]},
            "resource": {
                "group": group,
                "version": version,
                "resource": subject["kind"].lower() + "s",
            },
            "name": subject["metadata"]["name"],
            "namespace": subject["metadata"]["namespace"],
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": new,
            "oldObject": old,
            "dryRun": False,
        },
    }


class FakeLister:
    def __init__(self, *objects: dict[str, Any], secrets: Sequence[str] = ()) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {}
        for o in objects:
            self.objects.setdefault(o["kind"], []).append(o)
        self.objects["Secret"] = [{"metadata": {"name": s}} for s in secrets]
        self.calls: list[str] = []

    async def __call__(self, kind: str) -> Sequence[Mapping[str, Any]]:
        self.calls.append(kind)
        return self.objects.get(kind, [])


async def verdict_for(review: dict[str, Any], lister: Any) -> webhook.Verdict:
    return await webhook.review(review["request"], lister, NS)


# --- Decisions ---


async def test_overlapping_pool_is_denied_with_the_field_and_the_other_pool() -> None:
    lister = FakeLister(pool("existing", "192.168.10.0/24"))
    verdict = await verdict_for(
        admission("CREATE", pool("new", "10.0.0.0/8", "192.168.10.128/25")), lister
    )
    assert not verdict.allowed and verdict.code == 403
    assert verdict.message.startswith(
        "IPAddressPool/new: spec.addresses[1]: 192.168.10.128/25 overlaps"
    )
    assert "'existing'" in verdict.message
    assert set(lister.calls) == set(webhook.LISTED_KINDS)


async def test_disjoint_pool_is_allowed_without_warnings() -> None:
    verdict = await verdict_for(
        admission("CREATE", pool("new", "10.0.0.0/24")), FakeLister(pool("a", "10.0.1.0/24"))
    )
    assert verdict == webhook.Verdict(allowed=True)


async def test_update_replaces_its_namesake() -> None:
    old = pool("a", "10.0.0.0/24")
    new = pool("a", "10.0.0.0/25")
    verdict = await verdict_for(admission("UPDATE", new, old), FakeLister(old))
    assert verdict.allowed


async def test_update_into_an_overlap_is_denied() -> None:
    old = pool("a", "10.0.0.0/24")
    verdict = await verdict_for(
        admission("UPDATE", pool("a", "10.0.1.0/24"), old),
        FakeLister(old, pool("b", "10.0.1.128/25")),
    )
    assert not verdict.allowed and "IPAddressPool/a: spec.addresses[0]" in verdict.message


async def test_metadata_only_update_is_not_blocked_by_an_old_conflict() -> None:
    old = pool("a", "10.0.0.0/24")
    lister = FakeLister(old, pool("b", "10.0.0.0/24"))  # the overlap predates the webhook
    new = {**old, "metadata": {**old["metadata"], "finalizers": ["x"], "annotations": {"k": "v"}}}
    assert await verdict_for(admission("UPDATE", new, old), lister) == webhook.Verdict(allowed=True)
    relabelled = {**old, "metadata": {**old["metadata"], "labels": {"tier": "x"}}}
    assert not (await verdict_for(admission("UPDATE", relabelled, old), lister)).allowed


async def test_bad_syntax_is_denied_naming_the_field() -> None:
    verdict = await verdict_for(
        admission("CREATE", pool("p", "10.0.0.0/24", "10.0.0.300/32")), FakeLister()
    )
    assert not verdict.allowed
    assert (
        verdict.message == "IPAddressPool/p: spec.addresses[1]: '10.0.0.300/32' is not a valid CIDR"
    )


async def test_dangling_reference_is_allowed_with_a_warning() -> None:
    ad = obj("L2Advertisement", "l2", {"ipAddressPools": ["not-yet"]})
    verdict = await verdict_for(admission("CREATE", ad), FakeLister())
    assert verdict.allowed
    (warning,) = verdict.warnings
    assert warning.startswith("L2Advertisement/l2: spec.ipAddressPools[0]: IPAddressPool 'not-yet'")


async def test_missing_bfd_profile_and_secret_are_warnings() -> None:
    new = peer("r", bfdProfile="fast", passwordSecret={"name": "pw"})
    verdict = await verdict_for(admission("CREATE", new), FakeLister())
    assert verdict.allowed
    assert [w.split(":")[1].strip() for w in verdict.warnings] == [
        "spec.bfdProfile",
        "spec.passwordSecret.name",
    ]
    present = FakeLister(obj("BFDProfile", "fast", {}), secrets=["pw"])
    assert await verdict_for(admission("CREATE", new), present) == webhook.Verdict(allowed=True)


async def test_wrong_namespace_is_denied() -> None:
    for kind, spec in [
        ("IPAddressPool", {"addresses": ["10.0.0.0/24"]}),
        ("BFDProfile", {}),
        ("Community", {}),
    ]:
        verdict = await verdict_for(
            admission("CREATE", obj(kind, "x", spec, namespace="default")), FakeLister()
        )
        assert not verdict.allowed
        assert verdict.message == "resource must be created in metallb-system namespace"


async def test_deleting_a_used_bfd_profile_is_denied() -> None:
    profile = obj("BFDProfile", "fast", {})
    lister = FakeLister(
        profile, peer("r1", bfdProfile="fast"), peer("r0", "10.0.0.2", bfdProfile="fast")
    )
    verdict = await verdict_for(admission("DELETE", old=profile), lister)
    assert not verdict.allowed
    assert verdict.message == "failed to delete BFDProfile fast, used by BGPPeer r0, r1"
    unused = FakeLister(profile, peer("r1", bfdProfile="slow"))
    assert (await verdict_for(admission("DELETE", old=profile), unused)).allowed


async def test_other_deletes_are_allowed() -> None:
    used = pool("p", "10.0.0.0/24")
    lister = FakeLister(used, obj("L2Advertisement", "l2", {"ipAddressPools": ["p"]}))
    assert (await verdict_for(admission("DELETE", old=used), lister)).allowed


async def test_existing_bad_objects_do_not_block_unrelated_requests() -> None:
    lister = FakeLister(
        pool("a", "10.0.0.0/24"),
        pool("b", "10.0.0.0/24"),  # overlaps a: created before the webhook existed
        obj("IPAddressPool", "broken", {"addresses": ["nonsense"]}),
    )
    verdict = await verdict_for(admission("CREATE", pool("c", "10.9.0.0/24")), lister)
    assert verdict == webhook.Verdict(allowed=True)


async def test_duplicate_peer_is_denied_and_disjoint_nodes_allowed() -> None:
    lister = FakeLister(peer("r1", nodeSelectors=[{"matchLabels": {"rack": "1"}}]))
    same = await verdict_for(admission("CREATE", peer("r2")), lister)
    assert not same.allowed and "BGPPeer/r2: spec.peerAddress: duplicate peer" in same.message
    other_rack = peer("r2", nodeSelectors=[{"matchLabels": {"rack": "2"}}])
    assert (await verdict_for(admission("CREATE", other_rack), lister)).allowed


async def test_peer_disable_mp_warns() -> None:
    verdict = await verdict_for(admission("CREATE", peer("r", disableMP=True)), FakeLister())
    assert verdict.allowed
    assert verdict.warnings == (
        "BGPPeer/r: spec.disableMP is deprecated; use spec.dualStackAddressFamily",
    )


async def test_bgp_advertisement_rules() -> None:
    lister = FakeLister(
        pool("p", "10.0.0.0/28"),
        obj("BGPAdvertisement", "first", {"localPref": 100}),
    )
    narrow = obj("BGPAdvertisement", "agg", {"aggregationLength": 26, "localPref": 100})
    verdict = await verdict_for(admission("CREATE", narrow), lister)
    assert (
        not verdict.allowed
        and "spec.aggregationLength: invalid aggregation length 26" in verdict.message
    )
    conflicting = obj("BGPAdvertisement", "second", {"localPref": 200})
    verdict = await verdict_for(admission("CREATE", conflicting), lister)
    assert not verdict.allowed and "BGPAdvertisement/second: spec.localPref" in verdict.message
    community = obj("BGPAdvertisement", "c", {"localPref": 100, "communities": ["99999999:1"]})
    verdict = await verdict_for(admission("CREATE", community), lister)
    assert not verdict.allowed and "invalid community value" in verdict.message


async def test_duplicate_alias_is_denied() -> None:
    lister = FakeLister(obj("Community", "c1", {"communities": [{"name": "gold", "value": "1:1"}]}))
    new = obj("Community", "c2", {"communities": [{"name": "gold", "value": "1:2"}]})
    verdict = await verdict_for(admission("CREATE", new), lister)
    assert (
        not verdict.allowed and "duplicate definition of community alias 'gold'" in verdict.message
    )


async def test_status_kinds_are_not_judged() -> None:
    status = obj("ServiceL2Status", "l2-x", {}, namespace="anywhere")
    assert (await verdict_for(admission("CREATE", status), FakeLister())).allowed


async def test_lister_failure_denies_with_internal_error() -> None:
    async def broken(kind: str) -> Sequence[Mapping[str, Any]]:
        raise ConnectionError("apiserver unreachable")

    verdict = await verdict_for(admission("CREATE", pool("p", "10.0.0.0/24")), broken)
    assert not verdict.allowed and verdict.code == 500
    assert "internal error: apiserver unreachable" in verdict.message


async def test_slow_lister_times_out_and_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    never = asyncio.Event()

    async def stuck(kind: str) -> Sequence[Mapping[str, Any]]:
        await never.wait()
        return []

    # A zero timeout makes wait_for give up at once: no real waiting in a unit test.
    monkeypatch.setattr(webhook, "LIST_TIMEOUT_SECONDS", 0)
    verdict = await verdict_for(admission("CREATE", pool("p", "10.0.0.0/24")), stuck)
    assert not verdict.allowed and verdict.code == 500


def test_decide_is_robust_to_odd_requests() -> None:
    assert webhook.decide({}, {}, NS).allowed  # no kind: not ours
    no_object = {
        "kind": {"kind": "IPAddressPool"},
        "operation": "CREATE",
        "name": "p",
        "namespace": NS,
    }
    assert webhook.decide(no_object, {}, NS).code == 400
    garbage = {**no_object, "object": {"metadata": {"name": "p", "namespace": NS}, "spec": [[]]}}
    assert not webhook.decide(garbage, {}, NS).allowed
    assert webhook.decide({**no_object, "operation": "CONNECT"}, {}, NS).allowed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=15,
)
KINDS = [
    "IPAddressPool",
    "L2Advertisement",
    "BGPAdvertisement",
    "BGPPeer",
    "BFDProfile",
    "Community",
]


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]),
    spec=json_values,
    old_spec=json_values,
    existing=st.lists(st.tuples(st.sampled_from(KINDS), json_values), max_size=4),
)
def test_decide_never_fails_internally(
    kind: str, operation: str, spec: Any, old_spec: Any, existing: list[tuple[str, Any]]
) -> None:
    """Whatever the request and whatever exists, the answer is a verdict, never an exception."""
    new = obj(kind, "x", {})
    new["spec"] = spec
    old = obj(kind, "x", {})
    old["spec"] = old_spec
    current: dict[str, list[Any]] = {}
    for n, (k, raw) in enumerate(existing):
        other = obj(k, f"o{n}", {})
        other["spec"] = raw
        current.setdefault(k, []).append(other)
    request = admission(operation, new, old)["request"]
    verdict = webhook.decide(request, current, NS)
    assert isinstance(verdict, webhook.Verdict)
    assert verdict.allowed or verdict.message


# --- AdmissionReview over bytes ---


async def test_answer_round_trip() -> None:
    body = json.dumps(admission("CREATE", pool("p", "10.0.0.0/24"), uid="abc")).encode()
    status, reply = await webhook.answer(body, FakeLister(), NS)
    assert status == 200
    assert reply == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc", "allowed": True},
    }


async def test_answer_denial_and_warnings_shape() -> None:
    lister = FakeLister(pool("a", "10.0.0.0/24"))
    body = json.dumps(admission("CREATE", pool("b", "10.0.0.0/24"))).encode()
    _, reply = await webhook.answer(body, lister, NS)
    response = reply["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
    assert "IPAddressPool/b" in response["status"]["message"]
    body = json.dumps(
        admission("CREATE", obj("BGPAdvertisement", "x", {"peers": ["nobody"]}))
    ).encode()
    _, reply = await webhook.answer(body, lister, NS)
    assert reply["response"]["allowed"] is True
    assert reply["response"]["warnings"] == [
        "BGPAdvertisement/x: spec.peers[0]: BGPPeer 'nobody' does not exist (or is invalid)"
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"kind": "Pod"}',
        json.dumps(
            {
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1beta1",
                "request": {"uid": "x"},
            }
        ).encode(),
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}',
    ],
)
async def test_bad_bodies_get_400(body: bytes) -> None:
    status, reply = await webhook.answer(body, FakeLister(), NS)
    assert status == 400 and "error" in reply


def test_app_serves_metallb_paths() -> None:
    app = webhook.make_app(FakeLister(), NS)
    paths = {r.get_info().get("path") for r in app.router.resources()}
    assert set(webhook.PATHS.values()) <= paths
    assert "/validate-metallb-io-v1beta1-ipaddresspool" in paths
    assert "/validate-metallb-io-v1beta2-bgppeer" in paths
    assert {"/validate", "/healthz"} <= paths


# --- ValidatingWebhookConfiguration ---


def test_configuration_with_url() -> None:
    config = webhook.configuration(
        ca_bundle=b"PEM", url="https://127.0.0.1:9443/", timeout_seconds=5
    )
    assert config["kind"] == "ValidatingWebhookConfiguration"
    hooks = {h["rules"][0]["resources"][0]: h for h in config["webhooks"]}
    assert set(hooks) == {
        "ipaddresspools",
        "l2advertisements",
        "bgpadvertisements",
        "bgppeers",
        "bfdprofiles",
        "communities",
    }
    pools = hooks["ipaddresspools"]
    assert pools["clientConfig"] == {
        "caBundle": base64.b64encode(b"PEM").decode(),
        "url": "https://127.0.0.1:9443/validate-metallb-io-v1beta1-ipaddresspool",
    }
    assert pools["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert pools["rules"][0]["apiGroups"] == ["metallb.io"]
    assert (pools["sideEffects"], pools["failurePolicy"], pools["timeoutSeconds"]) == (
        "None",
        "Fail",
        5,
    )
    assert pools["admissionReviewVersions"] == ["v1"]
    assert hooks["bfdprofiles"]["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]
    assert hooks["bgppeers"]["rules"][0]["apiVersions"] == ["v1beta1", "v1beta2"]
    assert len({h["name"] for h in config["webhooks"]}) == 6


def test_configuration_with_service_and_selector() -> None:
    selector = {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    config = webhook.configuration(
        ca_bundle=b"PEM", service=(NS, "ironlb-webhook", 443), namespace_selector=selector
    )
    hook = config["webhooks"][0]
    assert hook["clientConfig"]["service"] == {
        "namespace": NS,
        "name": "ironlb-webhook",
        "path": "/validate-metallb-io-v1beta1-ipaddresspool",
        "port": 443,
    }
    assert hook["namespaceSelector"] == selector


def test_configuration_needs_exactly_one_target() -> None:
    with pytest.raises(ValueError):
        webhook.configuration(ca_bundle=b"")
    with pytest.raises(ValueError):
        webhook.configuration(ca_bundle=b"", url="https://x", service=(NS, "s", 443))


# --- Certificates ---


def test_generated_certificate_chains_to_its_ca() -> None:
    now = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    bundle = certs.generate(["127.0.0.1", "ironlb-webhook.metallb-system.svc"], now=now)
    ca = x509.load_pem_x509_certificate(bundle.ca_pem)
    cert = x509.load_pem_x509_certificate(bundle.cert_pem)
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["ironlb-webhook.metallb-system.svc"]
    assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
    assert cert.not_valid_after_utc == now + certs.DEFAULT_VALIDITY
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert "PRIVATE KEY" not in repr(bundle)
    certs.server_context(bundle)  # the key matches the certificate


def test_certificates_differ_every_time() -> None:
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    assert (
        certs.generate(["localhost"], now=now).ca_pem
        != certs.generate(["localhost"], now=now).ca_pem
    )


def test_certificate_needs_a_host() -> None:
    with pytest.raises(ValueError):
        certs.generate([], now=datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC))
