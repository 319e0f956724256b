"""Parsing of raw metallb.io objects: MetalLB's defaults and per-object rules, and robustness.

The manifests below are the examples of MetalLB's configuration documentation; they must parse
unchanged and come out with MetalLB's defaults. The property tests feed arbitrary JSON values and
mutations of those manifests: every input either parses or yields Problems, never an exception.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ironlb import addresses, annotations, model, parsing, selectors
from ironlb.problems import Problem

DOCS_MANIFESTS = """
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: first-pool, namespace: metallb-system}
spec:
  addresses:
  - 192.168.10.0/24
  - 192.168.9.1-192.168.9.5
  - fc00:f853:0ccd:e799::/124
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: expensive, namespace: metallb-system}
spec:
  addresses: [42.176.25.64/30]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: ippool-ns-service-alloc-sample, namespace: metallb-system}
spec:
  addresses: [192.168.20.0/24]
  avoidBuggyIPs: true
  serviceAllocation:
    priority: 50
    namespaces: [namespace-a, namespace-b]
    namespaceSelectors:
    - matchLabels: {foo: bar}
    serviceSelectors:
    - matchExpressions:
      - {key: app, operator: In, values: [bar]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: example, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: tiered-zones, namespace: metallb-system}
spec:
  ipAddressPools: [production-pool]
  interfaces: [eth0, eth1]
  nodeSelectors:
  - matchLabels: {kubernetes.io/hostname: NodeA}
  - matchLabels: {kubernetes.io/hostname: NodeB}
  preferredNodeSelectors:
  - weight: 100
    preference:
      matchLabels: {zone: primary}
  - weight: 50
    preference:
      matchLabels: {zone: secondary}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: example, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: local, namespace: metallb-system}
spec:
  ipAddressPools: [first-pool]
  aggregationLength: 32
  localPref: 100
  communities: [65535:65282, vpn-only]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: external, namespace: metallb-system}
spec:
  ipAddressPools: [first-pool]
  aggregationLength: 24
  peers: [PeerA, PeerB]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: production-services, namespace: metallb-system}
spec:
  ipAddressPools: [first-pool]
  localPref: 200
  serviceSelectors:
  - matchLabels: {environment: production}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: sample, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64501
  peerAddress: 10.0.0.1
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: example, namespace: metallb-system}
spec:
  myASN: 64512
  peerASN: 64512
  peerAddress: 172.30.0.3
  peerPort: 180
  sourceAddress: 172.30.0.2
  vrf: red
  bfdProfile: testbfdprofile
  nodeSelectors:
  - matchLabels: {rack: frontend}
    matchExpressions:
    - {key: network-speed, operator: NotIn, values: [slow]}
  - matchExpressions:
    - {key: kubernetes.io/hostname, operator: In, values: [hostA, hostB]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: local-asn, namespace: metallb-system}
spec:
  myASN: 64512
  peerASN: 64520
  peerAddress: 172.30.0.3
  localASN: 65410
  enableGracefulRestart: true
  holdTime: 1m30s
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: testbfdprofile, namespace: metallb-system}
spec:
  receiveInterval: 380
  transmitInterval: 270
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec:
  communities:
  - {name: vpn-only, value: "1234:1"}
  - {name: NO_ADVERTISE, value: "65535:65282"}
"""


def docs_objects() -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(DOCS_MANIFESTS) if o]


def doc(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in docs_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1
    return found[0]


def ok(kind: str, obj: Mapping[str, Any]) -> Any:
    value, problems = parsing.parse(kind, obj)
    assert problems == []
    assert value is not None
    return value


def net(text: str) -> addresses.AddressRange:
    parsed = addresses.parse_range(text)
    assert isinstance(parsed, addresses.AddressRange)
    return parsed


# --- MetalLB's documented manifests and defaults ----------------------------------------------


def test_every_docs_manifest_parses() -> None:
    for obj in docs_objects():
        ok(obj["kind"], obj)


def test_pool_defaults_and_address_forms() -> None:
    pool = ok(model.IP_ADDRESS_POOL, doc("IPAddressPool", "first-pool"))
    assert pool.name == "first-pool"
    assert pool.namespace == "metallb-system"
    assert pool.addresses == (
        net("192.168.10.0/24"),
        net("192.168.9.1-192.168.9.5"),
        net("fc00:f853:ccd:e799::/124"),
    )
    assert pool.auto_assign is True
    assert pool.avoid_buggy_ips is False
    assert pool.service_allocation is None
    assert pool.families == {4, 6}


def test_pool_service_allocation() -> None:
    pool = ok(model.IP_ADDRESS_POOL, doc("IPAddressPool", "ippool-ns-service-alloc-sample"))
    assert pool.avoid_buggy_ips is True
    allocation = pool.service_allocation
    assert allocation is not None
    assert allocation.priority == 50
    assert allocation.namespaces == ("namespace-a", "namespace-b")
    assert allocation.namespace_selectors == (selectors.LabelSelector((("foo", "bar"),)),)
    (service_selector,) = allocation.service_selectors
    assert service_selector.matches({"app": "bar"})
    assert not service_selector.matches({"app": "foo"})


def test_pool_auto_assign_false() -> None:
    assert ok(model.IP_ADDRESS_POOL, doc("IPAddressPool", "expensive")).auto_assign is False


def test_empty_service_allocation_is_present_not_absent() -> None:
    obj = {
        "metadata": {"name": "p"},
        "spec": {"addresses": ["10.0.0.0/30"], "serviceAllocation": {}},
    }
    assert ok(model.IP_ADDRESS_POOL, obj).service_allocation == model.ServiceAllocation()


def test_l2_advertisement_defaults_select_everything() -> None:
    ad = ok(model.L2_ADVERTISEMENT, doc("L2Advertisement", "example"))
    assert ad == model.L2Advertisement(
        name=model.L2AdvertisementName("example"), namespace="metallb-system"
    )
    assert ad.all_interfaces
    any_pool = model.IPAddressPool(model.PoolName("whatever"), (net("10.0.0.0/24"),))
    assert ad.selects(any_pool)


def test_l2_advertisement_fields() -> None:
    ad = ok(model.L2_ADVERTISEMENT, doc("L2Advertisement", "tiered-zones"))
    assert ad.ip_address_pools == ("production-pool",)
    assert ad.interfaces == ("eth0", "eth1")
    assert not ad.all_interfaces
    assert len(ad.node_selectors) == 2
    assert [p.weight for p in ad.preferred_node_selectors] == [100, 50]
    assert ad.preferred_node_selectors[1].preference.matches({"zone": "secondary"})
    assert ad.selects(model.IPAddressPool(model.PoolName("production-pool"), (net("10.0.0.0/24"),)))
    assert not ad.selects(model.IPAddressPool(model.PoolName("other"), (net("10.0.0.0/24"),)))


def test_bgp_advertisement_defaults() -> None:
    ad = ok(model.BGP_ADVERTISEMENT, doc("BGPAdvertisement", "example"))
    assert (ad.aggregation_length, ad.aggregation_length_v6, ad.local_pref) == (32, 128, 0)
    assert ad.communities == ad.peers == ad.ip_address_pools == ()


def test_bgp_advertisement_fields() -> None:
    local = ok(model.BGP_ADVERTISEMENT, doc("BGPAdvertisement", "local"))
    assert local.local_pref == 100
    assert local.communities == (
        model.BGPCommunity(large=False, values=(65535, 65282)),
        model.CommunityRef(model.AliasName("vpn-only")),
    )
    external = ok(model.BGP_ADVERTISEMENT, doc("BGPAdvertisement", "external"))
    assert external.aggregation_length == 24
    assert external.peers == ("PeerA", "PeerB")
    production = ok(model.BGP_ADVERTISEMENT, doc("BGPAdvertisement", "production-services"))
    assert production.service_selectors[0].matches({"environment": "production"})


def test_bgp_peer_defaults() -> None:
    peer = ok(model.BGP_PEER, doc("BGPPeer", "sample"))
    assert peer.my_asn == 64500 and peer.peer_asn == 64501
    assert peer.peer_address == ipaddress.ip_address("10.0.0.1")
    assert peer.peer_port == 179
    assert peer.hold_time is None and peer.keepalive_time is None and peer.connect_time is None
    assert peer.node_selectors == ()
    assert peer.password == "" and peer.password_secret is None and peer.bfd_profile is None
    assert not (peer.ebgp_multi_hop or peer.enable_graceful_restart or peer.disable_mp)
    assert peer.vrf == "" and not peer.is_ibgp


def test_bgp_peer_fields() -> None:
    peer = ok(model.BGP_PEER, doc("BGPPeer", "example"))
    assert peer.peer_port == 180
    assert peer.source_address == ipaddress.ip_address("172.30.0.2")
    assert peer.vrf == "red"
    assert peer.bfd_profile == "testbfdprofile"
    assert peer.is_ibgp
    first, second = peer.node_selectors
    assert first.matches({"rack": "frontend"})
    assert not first.matches({"rack": "frontend", "network-speed": "slow"})
    assert second.matches({"kubernetes.io/hostname": "hostB"})
    other = ok(model.BGP_PEER, doc("BGPPeer", "local-asn"))
    assert other.local_asn == 65410 and other.enable_graceful_restart
    # A lone holdTime derives keepalive = hold / 3, as MetalLB's parseTimers does.
    assert (other.hold_time, other.keepalive_time) == (90.0, 30.0)


def test_bgp_peer_v1beta1_parses_with_port_default() -> None:
    obj = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "BGPPeer",
        "metadata": {"name": "old", "namespace": "metallb-system"},
        "spec": {
            "myASN": 64512,
            "peerASN": 64513,
            "peerAddress": "fd00::1",
            "peerPort": 0,
            "holdTime": "0s",
            "keepaliveTime": "0s",
            "nodeSelectors": [
                {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}
            ],
        },
    }
    peer = ok(model.BGP_PEER, obj)
    assert peer.peer_port == 179
    assert peer.peer_address == ipaddress.ip_address("fd00::1")
    assert (peer.hold_time, peer.keepalive_time) == (0.0, 0.0)
    assert peer.node_selectors[0].matches({"a": "y"})


def test_bfd_profile_leaves_unset_values_unset() -> None:
    profile = ok(model.BFD_PROFILE, doc("BFDProfile", "testbfdprofile"))
    assert (profile.receive_interval, profile.transmit_interval) == (380, 270)
    assert profile.detect_multiplier is None and profile.echo_interval is None
    assert profile.minimum_ttl is None and not profile.echo_mode and not profile.passive_mode


def test_community_aliases() -> None:
    community = ok(model.COMMUNITY, doc("Community", "communities"))
    assert [(a.name, str(a.value)) for a in community.communities] == [
        ("vpn-only", "1234:1"),
        ("NO_ADVERTISE", "65535:65282"),
    ]


def test_status_kinds() -> None:
    l2 = ok(
        model.SERVICE_L2_STATUS,
        {
            "metadata": {
                "name": "l2-abc",
                "namespace": "metallb-system",
                "labels": {"metallb.io/node": "n1"},
            },
            "status": {
                "node": "n1",
                "serviceName": "web",
                "serviceNamespace": "default",
                "interfaces": [{"name": "eth0"}],
            },
        },
    )
    assert (l2.node, l2.service_name, l2.service_namespace, l2.interfaces) == (
        "n1",
        "web",
        "default",
        ("eth0",),
    )
    assert l2.labels == (("metallb.io/node", "n1"),)
    bgp = ok(
        model.SERVICE_BGP_STATUS,
        {"metadata": {"name": "bgp-x"}, "status": {"node": "n2", "peers": ["p1", "p2"]}},
    )
    assert bgp.peers == ("p1", "p2") and bgp.node == "n2"


# --- Per-object rules: a bad field gives a Problem naming that field --------------------------


def pool(**spec: Any) -> dict[str, Any]:
    return {
        "kind": "IPAddressPool",
        "metadata": {"name": "p"},
        "spec": {"addresses": ["10.0.0.0/24"], **spec},
    }


def bgpadv(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "a"}, "spec": spec}


def peer(**spec: Any) -> dict[str, Any]:
    base = {"myASN": 64500, "peerASN": 64501, "peerAddress": "10.0.0.1"}
    base.update(spec)
    return {"metadata": {"name": "r"}, "spec": {k: v for k, v in base.items() if v is not None}}


def sel(**labels: str) -> dict[str, Any]:
    return {"matchLabels": labels}


BAD_OBJECTS: list[tuple[str, str, dict[str, Any], str, str]] = [
    # (test id, kind, object, field with the Problem, words in its message)
    (
        "no name",
        "IPAddressPool",
        {"spec": {"addresses": ["10.0.0.0/24"]}, "metadata": {}},
        "metadata.name",
        "required",
    ),
    (
        "no metadata",
        "IPAddressPool",
        {"spec": {"addresses": ["10.0.0.0/24"]}},
        "metadata",
        "required",
    ),
    (
        "wrong kind",
        "IPAddressPool",
        {**pool(), "kind": "BGPPeer"},
        "kind",
        "expected IPAddressPool",
    ),
    (
        "no addresses",
        "IPAddressPool",
        {"metadata": {"name": "p"}, "spec": {}},
        "spec.addresses",
        "no prefixes",
    ),
    ("empty addresses", "IPAddressPool", pool(addresses=[]), "spec.addresses", "no prefixes"),
    (
        "bad cidr",
        "IPAddressPool",
        pool(addresses=["10.0.0.0/24", "10.0.0.0/33"]),
        "spec.addresses[1]",
        "not a valid CIDR",
    ),
    (
        "range backwards",
        "IPAddressPool",
        pool(addresses=["10.0.0.9-10.0.0.1"]),
        "spec.addresses[0]",
        "after its end",
    ),
    (
        "range mixed",
        "IPAddressPool",
        pool(addresses=["10.0.0.1-fc00::1"]),
        "spec.addresses[0]",
        "mixes",
    ),
    (
        "single address",
        "IPAddressPool",
        pool(addresses=["10.0.0.1"]),
        "spec.addresses[0]",
        "10.0.0.1/32",
    ),
    ("address not str", "IPAddressPool", pool(addresses=[7]), "spec.addresses[0]", "string"),
    ("autoAssign str", "IPAddressPool", pool(autoAssign="yes"), "spec.autoAssign", "true or false"),
    (
        "dup namespace",
        "IPAddressPool",
        pool(serviceAllocation={"namespaces": ["a", "a"]}),
        "spec.serviceAllocation.namespaces[1]",
        "duplicate",
    ),
    (
        "dup ns selector",
        "IPAddressPool",
        pool(serviceAllocation={"namespaceSelectors": [sel(a="1"), sel(a="1")]}),
        "spec.serviceAllocation.namespaceSelectors[1]",
        "duplicate",
    ),
    (
        "bad operator",
        "IPAddressPool",
        pool(
            serviceAllocation={
                "serviceSelectors": [{"matchExpressions": [{"key": "k", "operator": "Is"}]}]
            }
        ),
        "spec.serviceAllocation.serviceSelectors[0].matchExpressions[0].operator",
        "not one of",
    ),
    (
        "dup expression",
        "IPAddressPool",
        pool(
            serviceAllocation={
                "serviceSelectors": [
                    {
                        "matchExpressions": [
                            {"key": "k", "operator": "Exists"},
                            {"key": "k", "operator": "Exists"},
                        ]
                    }
                ]
            }
        ),
        "spec.serviceAllocation.serviceSelectors[0].matchExpressions[1]",
        "duplicate",
    ),
    (
        "priority str",
        "IPAddressPool",
        pool(serviceAllocation={"priority": "1"}),
        "spec.serviceAllocation.priority",
        "integer",
    ),
    (
        "dup pool name",
        "L2Advertisement",
        {"metadata": {"name": "l"}, "spec": {"ipAddressPools": ["a", "a"]}},
        "spec.ipAddressPools[1]",
        "duplicate",
    ),
    (
        "weight 0",
        "L2Advertisement",
        {
            "metadata": {"name": "l"},
            "spec": {"preferredNodeSelectors": [{"weight": 0, "preference": {}}]},
        },
        "spec.preferredNodeSelectors[0].weight",
        "out of range",
    ),
    (
        "no preference",
        "L2Advertisement",
        {"metadata": {"name": "l"}, "spec": {"preferredNodeSelectors": [{"weight": 3}]}},
        "spec.preferredNodeSelectors[0].preference",
        "required",
    ),
    (
        "dup node selector",
        "L2Advertisement",
        {"metadata": {"name": "l"}, "spec": {"nodeSelectors": [sel(a="b"), sel(a="b")]}},
        "spec.nodeSelectors[1]",
        "duplicate",
    ),
    (
        "aggregation 33",
        "BGPAdvertisement",
        bgpadv(aggregationLength=33),
        "spec.aggregationLength",
        "out of range",
    ),
    (
        "aggregation 0",
        "BGPAdvertisement",
        bgpadv(aggregationLength=0),
        "spec.aggregationLength",
        "out of range",
    ),
    (
        "aggregation v6 129",
        "BGPAdvertisement",
        bgpadv(aggregationLengthV6=129),
        "spec.aggregationLengthV6",
        "out of range",
    ),
    (
        "localPref negative",
        "BGPAdvertisement",
        bgpadv(localPref=-1),
        "spec.localPref",
        "out of range",
    ),
    ("localPref bool", "BGPAdvertisement", bgpadv(localPref=True), "spec.localPref", "integer"),
    (
        "community section",
        "BGPAdvertisement",
        bgpadv(communities=["1:2", "99999999:1"]),
        "spec.communities[1]",
        "invalid section",
    ),
    (
        "community large",
        "BGPAdvertisement",
        bgpadv(communities=["lar:123:9999:123"]),
        "spec.communities[0]",
        "expected community to be of format large",
    ),
    (
        "community dup",
        "BGPAdvertisement",
        bgpadv(communities=["1:2", "1:2"]),
        "spec.communities[1]",
        "duplicate",
    ),
    ("dup peers", "BGPAdvertisement", bgpadv(peers=["x", "x"]), "spec.peers[1]", "duplicate"),
    (
        "selectors vs aggregation",
        "BGPAdvertisement",
        bgpadv(aggregationLength=24, serviceSelectors=[sel(a="b")]),
        "spec.aggregationLength",
        "mutually exclusive",
    ),
    (
        "selectors vs aggregation v6",
        "BGPAdvertisement",
        bgpadv(aggregationLengthV6=64, serviceSelectors=[sel(a="b")]),
        "spec.aggregationLengthV6",
        "mutually exclusive",
    ),
    ("myASN 0", "BGPPeer", peer(myASN=0), "spec.myASN", "missing local ASN"),
    ("myASN missing", "BGPPeer", peer(myASN=None), "spec.myASN", "required"),
    ("myASN too big", "BGPPeer", peer(myASN=2**32), "spec.myASN", "out of range"),
    ("no peer ASN", "BGPPeer", peer(peerASN=None), "spec.peerASN", "missing peer ASN"),
    ("both ASNs", "BGPPeer", peer(dynamicASN="external"), "spec.peerASN", "both"),
    (
        "bad dynamicASN",
        "BGPPeer",
        peer(peerASN=None, dynamicASN="sometimes"),
        "spec.dynamicASN",
        "invalid dynamicASN",
    ),
    (
        "multihop ibgp",
        "BGPPeer",
        peer(peerASN=64500, ebgpMultiHop=True),
        "spec.ebgpMultiHop",
        "iBGP",
    ),
    (
        "bad address",
        "BGPPeer",
        peer(peerAddress="10.0.0.300"),
        "spec.peerAddress",
        "invalid BGPPeer address",
    ),
    (
        "zoned address",
        "BGPPeer",
        peer(peerAddress="fe80::1%eth0"),
        "spec.peerAddress",
        "invalid BGPPeer address",
    ),
    (
        "no address",
        "BGPPeer",
        peer(peerAddress=None),
        "spec.peerAddress",
        "no peerAddress or interface",
    ),
    ("address and interface", "BGPPeer", peer(interface="eth0"), "spec.interface", "both"),
    ("bad source", "BGPPeer", peer(sourceAddress="me"), "spec.sourceAddress", "source IP"),
    ("bad router id", "BGPPeer", peer(routerID="1.2.3"), "spec.routerID", "router ID"),
    ("port too big", "BGPPeer", peer(peerPort=16385), "spec.peerPort", "out of range"),
    ("hold 2s", "BGPPeer", peer(holdTime="2s"), "spec.holdTime", "0 or >= 3s"),
    (
        "keepalive > hold",
        "BGPPeer",
        peer(holdTime="9s", keepaliveTime="10s"),
        "spec.keepaliveTime",
        "greater than holdTime",
    ),
    (
        "keepalive derives hold < 3",
        "BGPPeer",
        peer(keepaliveTime="900ms"),
        "spec.holdTime",
        "0 or >= 3s",
    ),
    ("hold not a duration", "BGPPeer", peer(holdTime="90"), "spec.holdTime", "not a duration"),
    ("hold number", "BGPPeer", peer(holdTime=90), "spec.holdTime", "duration string"),
    ("hold negative", "BGPPeer", peer(holdTime="-3s"), "spec.holdTime", "negative"),
    ("connect fraction", "BGPPeer", peer(connectTime="1500ms"), "spec.connectTime", "whole number"),
    ("connect too long", "BGPPeer", peer(connectTime="65536s"), "spec.connectTime", "1..65535"),
    (
        "password and secret",
        "BGPPeer",
        peer(password="x", passwordSecret={"name": "s"}),
        "spec.passwordSecret",
        "both",
    ),
    (
        "dup node selectors",
        "BGPPeer",
        peer(nodeSelectors=[sel(a="b"), sel(a="b")]),
        "spec.nodeSelectors[1]",
        "duplicate",
    ),
    (
        "bfd interval",
        "BFDProfile",
        {"metadata": {"name": "b"}, "spec": {"receiveInterval": 9}},
        "spec.receiveInterval",
        "out of range",
    ),
    (
        "bfd multiplier",
        "BFDProfile",
        {"metadata": {"name": "b"}, "spec": {"detectMultiplier": 256}},
        "spec.detectMultiplier",
        "out of range",
    ),
    (
        "bfd ttl",
        "BFDProfile",
        {"metadata": {"name": "b"}, "spec": {"minimumTtl": 0}},
        "spec.minimumTtl",
        "out of range",
    ),
    (
        "bfd echo str",
        "BFDProfile",
        {"metadata": {"name": "b"}, "spec": {"echoMode": "true"}},
        "spec.echoMode",
        "true or false",
    ),
    (
        "community value",
        "Community",
        {
            "metadata": {"name": "c"},
            "spec": {"communities": [{"name": "x", "value": "99999999:1"}]},
        },
        "spec.communities[0].value",
        "invalid section",
    ),
    (
        "community alias as value",
        "Community",
        {"metadata": {"name": "c"}, "spec": {"communities": [{"name": "x", "value": "other"}]}},
        "spec.communities[0].value",
        "not a community value",
    ),
    (
        "community no name",
        "Community",
        {"metadata": {"name": "c"}, "spec": {"communities": [{"value": "1:1"}]}},
        "spec.communities[0].name",
        "required",
    ),
    (
        "labels not strings",
        "IPAddressPool",
        {**pool(), "metadata": {"name": "p", "labels": {"a": 1}}},
        "metadata.labels",
        "map of strings",
    ),
    (
        "spec not object",
        "BGPAdvertisement",
        {"metadata": {"name": "a"}, "spec": [1]},
        "spec",
        "object",
    ),
]


@pytest.mark.parametrize(
    ("kind", "obj", "field", "words"),
    [case[1:] for case in BAD_OBJECTS],
    ids=[case[0] for case in BAD_OBJECTS],
)
def test_bad_field_gives_problem(kind: str, obj: dict[str, Any], field: str, words: str) -> None:
    value, problems = parsing.parse(kind, obj)
    assert value is None
    matching = [p for p in problems if p.field == field]
    assert matching, f"no problem at {field}: {problems}"
    assert any(words in p.message for p in matching), matching
    assert all(p.kind == kind and not p.transient for p in problems)


def test_problem_names_the_object() -> None:
    _, problems = parsing.parse_ipaddresspool(pool(addresses=["10.0.0.0/24", "nope"]))
    assert [str(p) for p in problems] == [
        "IPAddressPool/p: spec.addresses[1]: 'nope' is not a CIDR or a range"
    ]


def test_all_problems_of_an_object_are_reported_at_once() -> None:
    _, problems = parsing.parse_bgppeer(peer(myASN=0, peerAddress="x", peerPort=99999))
    assert {p.field for p in problems} == {"spec.myASN", "spec.peerAddress", "spec.peerPort"}


def test_peer_with_interface_or_dynamic_asn() -> None:
    unnumbered = ok(
        model.BGP_PEER,
        peer(peerAddress=None, interface="eth1", peerASN=None, dynamicASN="internal"),
    )
    assert unnumbered.interface == "eth1" and unnumbered.peer_address is None
    assert unnumbered.dynamic_asn == "internal" and unnumbered.is_ibgp


def test_peer_password_secret_and_timers() -> None:
    parsed = ok(
        model.BGP_PEER,
        peer(passwordSecret={"name": "s", "namespace": "x"}, keepaliveTime="10s", connectTime="5s"),
    )
    assert parsed.password_secret == "s"
    assert (parsed.hold_time, parsed.keepalive_time, parsed.connect_time) == (30.0, 10.0, 5.0)
    assert "hunter2" not in repr(ok(model.BGP_PEER, peer(password="hunter2")))


def test_service_selectors_with_default_aggregation_is_fine() -> None:
    ad = ok(model.BGP_ADVERTISEMENT, bgpadv(aggregationLength=32, serviceSelectors=[sel(a="b")]))
    assert ad.aggregation_length == 32


def test_unknown_kind() -> None:
    value, problems = parsing.parse("Frobnicator", {})
    assert value is None and problems[0].field == "kind"


# --- Scalar syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("0", 0.0),
        ("0s", 0.0),
        (".5s", 0.5),
        ("2h45m", 9900.0),
        ("1500us", 0.0015),
        ("1500\u00b5s", 0.0015),
        ("10ns", 1e-8),
        ("-1s", -1.0),
        ("+3s", 3.0),
    ],
)
def test_duration(text: str, seconds: float) -> None:
    assert parsing.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "90", "1e3s", "s", "1 s", "1d", "--1s", "1.s.", "1m 30s", "\u0661s"]
)
def test_not_a_duration(text: str) -> None:
    assert isinstance(parsing.parse_duration(text), str)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:2", model.BGPCommunity(False, (1, 2))),
        ("65535:65282", model.BGPCommunity(False, (65535, 65282))),
        ("large:123:9999:123", model.BGPCommunity(True, (123, 9999, 123))),
        ("large:4294967295:0:1", model.BGPCommunity(True, (4294967295, 0, 1))),
        ("vpn-only", model.CommunityRef(model.AliasName("vpn-only"))),
        ("a:b:c", model.CommunityRef(model.AliasName("a:b:c"))),
    ],
)
def test_community_value(text: str, expected: object) -> None:
    assert parsing.parse_community_value(text) == expected


@pytest.mark.parametrize(
    "text", ["65536:1", "1:-1", "1:+1", "a:1", "large:1:2:4294967296", "big:1:2:3", "", "1:\u0662"]
)
def test_bad_community_value(text: str) -> None:
    assert isinstance(parsing.parse_community_value(text), str)


def test_community_order_is_metallbs() -> None:
    legacy = model.BGPCommunity(False, (1, 2))  # sorts as (1<<16|2):0:0
    small_large = model.BGPCommunity(True, (65537, 0, 0))
    big_large = model.BGPCommunity(True, (65538, 0, 1))
    assert sorted([big_large, legacy, small_large]) == [small_large, legacy, big_large]


# --- parse_config --------------------------------------------------------------------------------


def test_parse_config_keeps_every_good_object() -> None:
    objects: dict[str, list[Any]] = {}
    for obj in docs_objects():
        objects.setdefault(obj["kind"], []).append(obj)
    objects["IPAddressPool"].insert(0, pool(addresses=["bogus"]) | {"metadata": {"name": "bad"}})
    objects["BGPPeer"].append("not even an object")
    objects["Secret"] = [{"metadata": {"name": "bgp-password"}}, {"metadata": {"name": "other"}}]
    config, problems = parsing.parse_config(objects)
    assert [p.name for p in config.pools] == [
        "expensive",
        "first-pool",
        "ippool-ns-service-alloc-sample",
    ]
    assert [p.name for p in config.bgp_peers] == ["example", "local-asn", "sample"]
    assert len(config.l2_advertisements) == 2 and len(config.bgp_advertisements) == 4
    assert len(config.bfd_profiles) == 1 and len(config.communities) == 1
    assert config.secret_names == {"bgp-password", "other"}
    assert {(p.kind, p.name) for p in problems} == {("IPAddressPool", "bad"), ("BGPPeer", "")}


def test_parse_config_is_independent_of_list_order() -> None:
    objects = docs_objects()
    by_kind: dict[str, list[Any]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    reversed_by_kind = {k: list(reversed(v)) for k, v in reversed(list(by_kind.items()))}
    assert parsing.parse_config(by_kind) == parsing.parse_config(reversed_by_kind)


def test_parse_config_ignores_status_kinds_and_flags_unknown_ones() -> None:
    config, problems = parsing.parse_config(
        {"ServiceL2Status": [{"metadata": {"name": "x"}}], "Pod": [{}]}
    )
    assert config == model.Config()
    assert [(p.kind, p.field) for p in problems] == [("Pod", "kind")]


def test_config_resolves_community_aliases() -> None:
    by_kind: dict[str, list[Any]] = {}
    for obj in docs_objects():
        by_kind.setdefault(obj["kind"], []).append(obj)
    config, _ = parsing.parse_config(by_kind)
    local = next(a for a in config.bgp_advertisements if a.name == "local")
    assert [str(c) for c in config.resolve_communities(local)] == ["65535:65282", "1234:1"]


# --- Robustness: nothing raises ------------------------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
)
interesting_strings = st.sampled_from(
    [
        "10.0.0.0/24",
        "fc00::/64",
        "1.2.3.4-1.2.3.9",
        "1:2",
        "large:1:2:3",
        "90s",
        "",
        ":",
        "In",
        "Exists",
        "a",
    ]
)
json_values = st.recursive(
    json_scalars | interesting_strings,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=10) | interesting_strings, children, max_size=4)
    ),
    max_leaves=25,
)
KEYS = [
    "metadata",
    "name",
    "spec",
    "addresses",
    "autoAssign",
    "serviceAllocation",
    "priority",
    "namespaces",
    "namespaceSelectors",
    "serviceSelectors",
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "ipAddressPools",
    "ipAddressPoolSelectors",
    "nodeSelectors",
    "interfaces",
    "preferredNodeSelectors",
    "weight",
    "preference",
    "aggregationLength",
    "aggregationLengthV6",
    "localPref",
    "communities",
    "peers",
    "myASN",
    "peerASN",
    "dynamicASN",
    "peerAddress",
    "interface",
    "holdTime",
    "keepaliveTime",
    "connectTime",
    "passwordSecret",
    "bfdProfile",
    "value",
    "status",
    "labels",
    "node",
]
object_like = st.recursive(
    json_scalars | interesting_strings,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS), children, max_size=5)
    ),
    max_leaves=30,
)


def assert_parses_or_problems(kind: str, obj: Any) -> None:
    value, problems = parsing.parse(kind, obj)
    assert all(isinstance(p, Problem) for p in problems)
    if value is None:
        assert problems, "no value and no problem"
    else:
        assert problems == []
        hash(value)  # immutable all the way down


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(parsing.PARSERS)), obj=json_values | object_like)
def test_any_value_parses_or_gives_problems(kind: str, obj: Any) -> None:
    assert_parses_or_problems(kind, obj)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def mutate(obj: Any, path: tuple[Any, ...], action: str, replacement: Any) -> Any:
    if not path:
        return replacement
    clone = copy.deepcopy(obj)
    parent = clone
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "wrap":
        parent[last] = [parent[last]]
    else:
        parent[last] = replacement
    return clone


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_docs_manifests_parse_or_give_problems(data: st.DataObject) -> None:
    obj = data.draw(st.sampled_from(docs_objects()))
    path = data.draw(st.sampled_from(paths(obj)))
    action = data.draw(
        st.sampled_from(["replace", "delete", "wrap"]) if path else st.just("replace")
    )
    replacement = data.draw(json_values)
    assert_parses_or_problems(obj["kind"], mutate(obj, path, action, replacement))


CHECKS: list[Callable[[str], object]] = [
    parsing.parse_duration,
    parsing.parse_community_value,
    addresses.parse_ip,
]


@settings(max_examples=200)
@given(text=st.text(alphabet="0123456789.:-+smhnuµ large/abcdef%", max_size=20))
def test_scalar_parsers_never_raise(text: str) -> None:
    for check in CHECKS:
        check(text)


# --- Service annotations ---


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        ({}, None),
        ({"metallb.universe.tf/address-pool": "old"}, "old"),
        ({"metallb.io/address-pool": "new"}, "new"),
        ({"metallb.io/address-pool": "new", "metallb.universe.tf/address-pool": "old"}, "new"),
        ({"metallb.io/address-pool": "", "metallb.universe.tf/address-pool": "old"}, ""),
    ],
)
def test_new_annotation_name_wins(present: dict[str, str], expected: str | None) -> None:
    assert annotations.read(present, annotations.ADDRESS_POOL) == expected
    assert annotations.has(present, annotations.ADDRESS_POOL) == (expected is not None)


def test_empty_sharing_key_is_still_present_and_legacy_keys_are_listed() -> None:
    svc = {
        "metallb.universe.tf/allow-shared-ip": "",
        "metallb.universe.tf/loadBalancerIPs": "1.2.3.4",
    }
    assert annotations.has(svc, annotations.ALLOW_SHARED_IP)
    assert annotations.read(svc, annotations.ALLOW_SHARED_IP) == ""
    assert annotations.read(None, annotations.LOAD_BALANCER_IPS) is None
    assert annotations.deprecated_keys(svc) == [
        "metallb.universe.tf/allow-shared-ip",
        "metallb.universe.tf/loadBalancerIPs",
    ]
    assert annotations.IP_ALLOCATED_FROM_POOL == "metallb.io/ip-allocated-from-pool"
