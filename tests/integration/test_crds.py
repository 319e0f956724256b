"""The metallb.io CRDs against a real kube-apiserver: what they accept, fill in and refuse.

Every manifest under tests/fixtures/crds/valid (ours, which between them use every field, and
MetalLB's documentation examples, unchanged) is applied with kubectl as a user would, then read
back through the API: what was written comes back, and MetalLB's defaults are filled in.

Every manifest under tests/fixtures/crds/invalid holds one mistake and is refused with HTTP 422 by
the schema or a CEL rule, and the refusal names the field a person has to change. Each file says
what it expects in header comments, which docs/validation.md tabulates:

    # invalid: what is wrong
    # field: the field path the apiserver must name (as in its Status causes)
    # message: a fragment of the apiserver's message
    # by: schema | CEL
    # on: create | update | status   (default create)

With `on: update` or `on: status`, every document but the last is created first, and the last one
is then sent as an update of the object (or of its status subresource).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
Obj = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
FIXTURES = ROOT / "tests" / "fixtures" / "crds"
VALID = sorted((FIXTURES / "valid").glob("*.yaml"))
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))
VALIDATION_DOC = ROOT / "docs" / "validation.md"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"

# MetalLB's defaults, written out here rather than read from our CRDs, so that a CRD that lost or
# changed a default fails. Keyed by (apiVersion, kind); values are spec fields.
METALLB_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("metallb.io/v1beta1", "IPAddressPool"): {"autoAssign": True, "avoidBuggyIPs": False},
    ("metallb.io/v1beta1", "BGPAdvertisement"): {
        "aggregationLength": 32,
        "aggregationLengthV6": 128,
    },
    ("metallb.io/v1beta2", "BGPPeer"): {
        "peerPort": 179,
        "disableMP": False,
        "dualStackAddressFamily": False,
    },
    # v1beta1 has no default of its own; the stored v1beta2 object's default shows through.
    ("metallb.io/v1beta1", "BGPPeer"): {"peerPort": 179},
}


def _crds() -> list[Obj]:
    return [d for p in sorted(CRDS.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def _plurals() -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> resource name, from the CRD manifests themselves."""
    found = {}
    for crd in _crds():
        names = crd["spec"]["names"]
        for version in crd["spec"]["versions"]:
            found[(f"{crd['spec']['group']}/{version['name']}", names["kind"])] = names["plural"]
    return found


PLURALS = _plurals()


class _KubectlYaml(yaml.SafeLoader):
    """YAML as kubectl reads it: PyYAML follows YAML 1.1, where 1234:1 (a BGP community) is the
    base-60 integer 74041, but kubectl's parser reads it as the string "1234:1"."""


_KubectlYaml.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (INT, FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_KubectlYaml.add_implicit_resolver(INT, re.compile(r"^[-+]?(0|[1-9][0-9]*)$"), list("-+0123456789"))
_KubectlYaml.add_implicit_resolver(
    FLOAT, re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"), list("-+.0123456789")
)


def _docs(path: Path) -> list[Obj]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_KubectlYaml) if d]


def _collection(obj: Obj) -> str:
    plural = PLURALS[(obj["apiVersion"], obj["kind"])]
    return f"/apis/{obj['apiVersion']}/namespaces/{obj['metadata']['namespace']}/{plural}"


def _path(obj: Obj, subresource: str = "") -> str:
    path = f"{_collection(obj)}/{obj['metadata']['name']}"
    return f"{path}/{subresource}" if subresource else path


@dataclass(frozen=True)
class Reply:
    status: int
    body: Obj
    warnings: tuple[str, ...]


def _call(
    api: kubernetes.client.ApiClient, method: str, path: str, body: Obj | None = None
) -> Reply:
    """One raw API request; errors come back as values so tests can look at them."""
    params = api.param_serialize(
        method,
        path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    # The client hands back every HTTP status as a response; it raises only when no request could
    # be made, which should fail the test anyway.
    resp: Any = api.call_api(*params)
    data = resp.read()
    warnings = tuple(resp.headers.getlist("Warning"))
    return Reply(resp.status, json.loads(data or b"{}"), warnings)


def _create(api: kubernetes.client.ApiClient, obj: Obj) -> Reply:
    body = copy.deepcopy(obj)
    body.pop("status", None)
    return _call(api, "POST", _collection(obj), body)


def _get(api: kubernetes.client.ApiClient, obj: Obj, api_version: str | None = None) -> Obj:
    target = dict(obj, apiVersion=api_version or obj["apiVersion"])
    reply = _call(api, "GET", _path(target))
    assert reply.status == 200, reply.body
    return reply.body


def _put_status(api: kubernetes.client.ApiClient, obj: Obj) -> Reply:
    current = _get(api, obj)
    current["status"] = copy.deepcopy(obj["status"])
    return _call(api, "PUT", _path(obj, "status"), current)


def _put(api: kubernetes.client.ApiClient, obj: Obj) -> Reply:
    current = _get(api, obj)
    body = copy.deepcopy(obj)
    body.pop("status", None)
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return _call(api, "PUT", _path(obj), body)


def _delete_all(api: kubernetes.client.ApiClient, docs: list[Obj]) -> None:
    for obj in docs:
        reply = _call(api, "DELETE", _path(obj))
        assert reply.status in (200, 202, 404), reply.body


@pytest.fixture
def cleanup(kube_api: kubernetes.client.ApiClient) -> Iterator[list[Obj]]:
    """Objects a test appends here are deleted afterwards (and before, if a run left them)."""
    created: list[Obj] = []
    yield created
    _delete_all(kube_api, created)


def _assert_contains(expected: Any, got: Any, where: str = "") -> None:
    """Everything in `expected` is in `got`, unchanged (lists compare whole)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), f"{where}: expected an object, got {got!r}"
        for key, value in expected.items():
            assert key in got, f"{where}.{key} missing from what the apiserver returned"
            _assert_contains(value, got[key], f"{where}.{key}")
    else:
        assert got == expected, f"{where}: wrote {expected!r}, read back {got!r}"


# --- valid manifests -------------------------------------------------------------------------


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_manifest_applies_unchanged_and_reads_back_with_defaults(
    path: Path, kubectl: Kubectl, kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    docs = _docs(path)
    _delete_all(kube_api, docs)
    cleanup.extend(docs)
    kubectl("apply", "-f", str(path))
    for obj in docs:
        if "status" in obj:
            reply = _put_status(kube_api, obj)
            assert reply.status == 200, reply.body
        got = _get(kube_api, obj)
        _assert_contains(obj.get("spec", {}), got.get("spec", {}), "spec")
        _assert_contains(obj.get("status", {}), got.get("status", {}), "status")
        for field, value in METALLB_DEFAULTS.get((obj["apiVersion"], obj["kind"]), {}).items():
            if field not in obj.get("spec", {}):
                assert got["spec"].get(field) == value, (field, got["spec"])


def _schema_fields(schema: Obj, prefix: str) -> Iterator[str]:
    """Dotted paths of the fields of a schema; a label selector counts as one field."""
    props = schema.get("properties")
    if props is None and "items" in schema:
        yield from _schema_fields(schema["items"], prefix)
        return
    if not props or {"matchLabels", "matchExpressions"} <= props.keys():
        yield prefix
        return
    for name, sub in props.items():
        yield from _schema_fields(sub, f"{prefix}.{name}")


def _object_fields(value: Any, prefix: str) -> Iterator[str]:
    yield prefix
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _object_fields(sub, f"{prefix}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _object_fields(item, prefix)


def test_valid_fixtures_use_every_field_of_every_kind_and_version() -> None:
    used: dict[tuple[str, str], set[str]] = {}
    for path in VALID:
        for obj in _docs(path):
            key = (obj["apiVersion"], obj["kind"])
            for part in ("spec", "status"):
                used.setdefault(key, set()).update(_object_fields(obj.get(part, {}), part))
    missing = {}
    for crd in _crds():
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            props = version["schema"]["openAPIV3Schema"]["properties"]
            fields = {
                f
                for part in ("spec", "status")
                for f in _schema_fields(props.get(part, {}), part)
                if f != part
            }
            unused = fields - used.get(key, set())
            if unused:
                missing[key] = sorted(unused)
    assert not missing


# --- invalid manifests -----------------------------------------------------------------------


@dataclass(frozen=True)
class Invalid:
    path: Path
    what: str
    field: str
    message: str
    by: str
    on: str
    docs: tuple[Obj, ...]


HEADER = re.compile(r"^#\s*(invalid|field|message|by|on):\s*(.*?)\s*$")


def load_invalid(path: Path) -> Invalid:
    headers: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = HEADER.match(line)
        if match:
            headers[match.group(1)] = match.group(2)
    missing = {"invalid", "field", "message", "by"} - headers.keys()
    assert not missing, f"{path.name}: header lines missing: {sorted(missing)}"
    assert headers["by"] in ("schema", "CEL"), path.name
    on = headers.get("on", "create")
    assert on in ("create", "update", "status"), path.name
    docs = tuple(_docs(path))
    assert len(docs) == (1 if on == "create" else 2), f"{path.name}: wrong number of documents"
    return Invalid(
        path, headers["invalid"], headers["field"], headers["message"], headers["by"], on, docs
    )


CASES = [load_invalid(p) for p in INVALID]


def _refuse(api: kubernetes.client.ApiClient, case: Invalid) -> Reply:
    *setup, bad = case.docs
    for obj in setup:
        reply = _create(api, obj)
        assert reply.status == 201, f"setup object refused: {reply.body.get('message')}"
        if "status" in obj:
            reply = _put_status(api, obj)
            assert reply.status == 200, f"setup status refused: {reply.body.get('message')}"
    if case.on == "create":
        return _create(api, bad)
    if case.on == "update":
        return _put(api, bad)
    return _put_status(api, bad)


def test_there_are_at_least_40_invalid_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c.path.stem for c in CASES])
def test_invalid_object_is_refused_naming_the_field(
    case: Invalid, kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    _delete_all(kube_api, list(case.docs))
    cleanup.extend(case.docs)
    reply = _refuse(kube_api, case)
    message = reply.body.get("message", "")
    assert reply.status == 422, f"expected 422, got {reply.status}: {message}"
    causes = reply.body.get("details", {}).get("causes", [])
    assert case.field in [c.get("field") for c in causes], (case.field, causes)
    assert f"{case.field}: " in message, message
    assert case.message in message, message


CREATE_CASES = [c for c in CASES if c.on == "create"]


@pytest.mark.parametrize("case", CREATE_CASES, ids=[c.path.stem for c in CREATE_CASES])
def test_kubectl_apply_of_invalid_manifest_prints_the_field(
    case: Invalid, kubectl: Kubectl, kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    _delete_all(kube_api, list(case.docs))
    cleanup.extend(case.docs)
    result = kubectl("apply", "-f", str(case.path), check=False)
    assert result.returncode != 0
    assert f"{case.field}: " in result.stderr, result.stderr
    assert case.message in result.stderr, result.stderr


def test_validation_doc_lists_every_invalid_case() -> None:
    text = VALIDATION_DOC.read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    for case in CASES:
        row = [r for r in rows if f"`{case.path.name}`" in r]
        assert len(row) == 1, f"{case.path.name} not tabulated once in {VALIDATION_DOC.name}"
        assert f"`{case.field}`" in row[0] and case.by in row[0], row[0]


# --- address entries against a reference -------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    text: str
    valid: bool


def _spellings(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> st.SearchStrategy[str]:
    if addr.version == 4:
        return st.just(str(addr))
    return st.sampled_from([str(addr), addr.exploded, str(addr).upper()])


@st.composite
def _addresses(draw: st.DrawFn, version: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    bits = 32 if version == 4 else 128
    # Mostly addresses close together, so that ranges test every bit position, not just the top.
    base = draw(st.integers(0, 2**bits - 1))
    if version == 6 and draw(st.booleans()):
        base &= ~((1 << 64) - 1)  # zeros to compress into "::"
    return ipaddress.ip_address(base) if version == 4 else ipaddress.IPv6Address(base)


@st.composite
def _entries(draw: st.DrawFn) -> Entry:
    """An address entry and whether MetalLB accepts it (mixed-family ranges: we refuse them)."""
    version = draw(st.sampled_from([4, 6]))
    bits = 32 if version == 4 else 128
    start = draw(_addresses(version))
    if draw(st.booleans()):
        length = draw(st.integers(0, bits + 2))
        return Entry(f"{draw(_spellings(start))}/{length}", length <= bits)
    if draw(st.integers(0, 9)) == 0:
        end: ipaddress.IPv4Address | ipaddress.IPv6Address = draw(_addresses(10 - version))
    else:
        delta = draw(st.integers(-(2**20), 2**20) | st.integers(-(2**bits), 2**bits))
        end = type(start)(min(max(int(start) + delta, 0), 2**bits - 1))
    dash = draw(st.sampled_from(["-", " - ", "- ", "\t-"]))
    text = f"{draw(_spellings(start))}{dash}{draw(_spellings(end))}"
    return Entry(text, start.version == end.version and int(start) <= int(end))


def _refused_entries(api: kubernetes.client.ApiClient, texts: list[str]) -> set[int]:
    pool = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "reference", "namespace": "metallb-system"},
        "spec": {"addresses": texts},
    }
    reply = _call(api, "POST", _collection(pool) + "?dryRun=All", pool)
    if reply.status == 201:
        return set()
    assert reply.status == 422, reply.body
    refused = set()
    for cause in reply.body["details"]["causes"]:
        match = re.fullmatch(r"spec\.addresses\[(\d+)\]", cause.get("field", ""))
        assert match, cause
        refused.add(int(match.group(1)))
    return refused


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_entries(), min_size=1, max_size=40, unique_by=lambda e: e.text))
def test_address_entries_are_judged_like_metallb(
    kube_api: kubernetes.client.ApiClient, entries: list[Entry]
) -> None:
    refused = _refused_entries(kube_api, [e.text for e in entries])
    wrong = [e for i, e in enumerate(entries) if (i not in refused) != e.valid]
    assert not wrong


def test_a_pool_of_1000_ipv6_ranges_fits_the_cel_budget(
    kube_api: kubernetes.client.ApiClient,
) -> None:
    """The costliest entries, as many as the schema allows: the apiserver must still judge them."""
    texts = [f"2001:db8:{i:x}::1:0 - 2001:db8:{i:x}::2:ffff" for i in range(1000)]
    assert _refused_entries(kube_api, texts) == set()
    texts[999] = "2001:db8:3e7::2:ffff - 2001:db8:3e7::1:0"
    assert _refused_entries(kube_api, texts) == {999}


# --- BGPPeer versions --------------------------------------------------------------------------


def _peer(api_version: str, name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": f"metallb.io/{api_version}",
        "kind": "BGPPeer",
        "metadata": {"name": name, "namespace": "metallb-system"},
        "spec": spec,
    }


def test_v1beta1_peer_is_served_with_a_deprecation_warning(
    kube_api: kubernetes.client.ApiClient, kubectl: Kubectl, cleanup: list[Obj]
) -> None:
    peer = _peer("v1beta1", "deprecated", myASN=64512, peerASN=64513, peerAddress="10.0.0.1")
    _delete_all(kube_api, [peer])
    cleanup.append(peer)
    reply = _create(kube_api, peer)
    assert reply.status == 201, reply.body
    assert any("deprecated" in w and "v1beta2" in w for w in reply.warnings), reply.warnings
    result = kubectl("get", "bgppeers.v1beta1.metallb.io", "-n", "metallb-system")
    assert "deprecated" in result.stderr


def test_v1beta1_peer_reads_back_as_the_same_v1beta2_peer(
    kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    spec = {
        "myASN": 64512,
        "peerASN": 64513,
        "peerAddress": "172.30.0.3",
        "sourceAddress": "172.30.0.2",
        "holdTime": "90s",
        "keepaliveTime": "30s",
        "routerID": "10.0.0.1",
        "nodeSelectors": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
        ],
        "password": "secret",
        "bfdProfile": "fast",
        "ebgpMultiHop": True,
    }
    peer = _peer("v1beta1", "converted", **spec)
    _delete_all(kube_api, [peer])
    cleanup.append(peer)
    assert _create(kube_api, peer).status == 201
    as_v1beta2 = _get(kube_api, peer, "metallb.io/v1beta2")
    assert as_v1beta2["apiVersion"] == "metallb.io/v1beta2"
    assert as_v1beta2["spec"] == {
        **spec,
        "peerPort": 179,
        "disableMP": False,
        "dualStackAddressFamily": False,
    }


def test_v1beta2_only_fields_are_not_shown_through_v1beta1(
    kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    peer = _peer(
        "v1beta2",
        "newer",
        myASN=64512,
        peerASN=64513,
        peerAddress="10.0.0.9",
        vrf="red",
        connectTime="5s",
        enableGracefulRestart=True,
    )
    _delete_all(kube_api, [peer])
    cleanup.append(peer)
    assert _create(kube_api, peer).status == 201
    as_v1beta1 = _get(kube_api, peer, "metallb.io/v1beta1")
    assert as_v1beta1["spec"] == {
        "myASN": 64512,
        "peerASN": 64513,
        "peerAddress": "10.0.0.9",
        "peerPort": 179,
    }
    # ... and they are still there in the stored object.
    assert _get(kube_api, peer)["spec"]["vrf"] == "red"


def test_enable_graceful_restart_may_be_set_at_creation_and_kept(
    kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    """The immutability rule refuses changes only: unrelated updates still go through."""
    peer = _peer(
        "v1beta2",
        "graceful",
        myASN=64512,
        peerASN=64513,
        peerAddress="10.0.0.2",
        enableGracefulRestart=True,
    )
    _delete_all(kube_api, [peer])
    cleanup.append(peer)
    assert _create(kube_api, peer).status == 201
    peer["spec"]["holdTime"] = "30s"
    reply = _put(kube_api, peer)
    assert reply.status == 200, reply.body.get("message")


# --- printer columns --------------------------------------------------------------------------


def _table(output: str) -> list[list[str]]:
    """kubectl's table, split on runs of two or more spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


def test_kubectl_get_ipaddresspools_shows_the_pool_columns(
    kubectl: Kubectl, kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    pool = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "columns", "namespace": "metallb-system"},
        "spec": {"addresses": ["192.168.10.0/24", "fc00::/124"], "avoidBuggyIPs": True},
        "status": {"assignedIPv4": 3, "assignedIPv6": 0, "availableIPv4": 253, "availableIPv6": 16},
    }
    _delete_all(kube_api, [pool])
    cleanup.append(pool)
    assert _create(kube_api, pool).status == 201
    assert _put_status(kube_api, pool).status == 200

    table = _table(kubectl("get", "ipaddresspools", "-n", "metallb-system", "columns").stdout)
    assert table[0] == ["NAME", "AUTO ASSIGN", "AVOID BUGGY IPS", "ADDRESSES", "AGE"]
    assert table[1][:4] == ["columns", "true", "true", '["192.168.10.0/24","fc00::/124"]']

    wide = _table(
        kubectl("get", "ipaddresspools", "-n", "metallb-system", "columns", "-o", "wide").stdout
    )
    assert wide[0][4:8] == ["ASSIGNED IPV4", "ASSIGNED IPV6", "AVAILABLE IPV4", "AVAILABLE IPV6"]
    assert wide[1][4:8] == ["3", "0", "253", "16"]


def test_kubectl_get_bgppeers_shows_the_peer_columns(
    kubectl: Kubectl, kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    peer = _peer(
        "v1beta2",
        "columns",
        myASN=64512,
        peerASN=64513,
        peerAddress="10.0.0.3",
        bfdProfile="fast",
        ebgpMultiHop=True,
    )
    _delete_all(kube_api, [peer])
    cleanup.append(peer)
    assert _create(kube_api, peer).status == 201
    table = _table(kubectl("get", "bgppeers", "-n", "metallb-system", "columns").stdout)
    assert table[0] == ["NAME", "ADDRESS", "ASN", "MY ASN", "BFD PROFILE", "MULTI HOPS", "AGE"]
    assert table[1][:6] == ["columns", "10.0.0.3", "64513", "64512", "fast", "true"]


@pytest.mark.parametrize("kind", ["ServiceL2Status", "ServiceBGPStatus"])
def test_kubectl_get_status_objects_shows_node_and_service(
    kind: str, kubectl: Kubectl, kube_api: kubernetes.client.ApiClient, cleanup: list[Obj]
) -> None:
    obj: Obj = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "columns", "namespace": "metallb-system"},
        "spec": {},
        "status": {"node": "node-7", "serviceName": "web", "serviceNamespace": "shop"},
    }
    _delete_all(kube_api, [obj])
    cleanup.append(obj)
    assert _create(kube_api, obj).status == 201
    assert _put_status(kube_api, obj).status == 200
    plural = PLURALS[(obj["apiVersion"], kind)]
    table = _table(kubectl("get", plural, "-n", "metallb-system", "columns").stdout)
    assert table[0] == ["NAME", "NODE", "SERVICE NAME", "SERVICE NAMESPACE", "AGE"]
    assert table[1][:4] == ["columns", "node-7", "web", "shop"]


@pytest.mark.parametrize(
    ("plural", "header"),
    [
        (
            "l2advertisements",
            ["NAME", "IPADDRESSPOOLS", "IPADDRESSPOOL SELECTORS", "INTERFACES", "AGE"],
        ),
        (
            "bgpadvertisements",
            ["NAME", "IPADDRESSPOOLS", "IPADDRESSPOOL SELECTORS", "PEERS", "AGE"],
        ),
    ],
)
def test_kubectl_get_advertisements_shows_the_pools(
    plural: str,
    header: list[str],
    kubectl: Kubectl,
    kube_api: kubernetes.client.ApiClient,
    cleanup: list[Obj],
) -> None:
    kind = {"l2advertisements": "L2Advertisement", "bgpadvertisements": "BGPAdvertisement"}[plural]
    ad = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "columns", "namespace": "metallb-system"},
        "spec": {"ipAddressPools": ["pool-a", "pool-b"]},
    }
    _delete_all(kube_api, [ad])
    cleanup.append(ad)
    assert _create(kube_api, ad).status == 201
    table = _table(kubectl("get", plural, "-n", "metallb-system", "columns").stdout)
    assert table[0] == header
    assert table[1][:2] == ["columns", '["pool-a","pool-b"]']
