"""The conformance corpus: small cases of metallb.io objects and Services, applied in turn to a
cluster under ironlb and under MetalLB (`hack/conformance.py` runs and compares them).

Each case is plain data: steps of Kubernetes manifests. They are written in Python rather than
as YAML files for three reasons: every address is computed from the lab's own pool constants
(`hack/lab.py`), so no case can stray outside the lab's ranges and a change of plan moves them
all; a Service's backends are the lab's real Pods (`objects.pod`), built the one way the other
tiers build them; and PyYAML would read an unquoted community such as `1234:1` as a base-60
integer (docs/validation.md). `tests/unit/test_conformance.py` checks every manifest.

The cases were grown from MetalLB v0.15.2's own tests (controller/controller_test.go,
internal/allocator/allocator_test.go, internal/config/config_test.go, speaker/*_test.go) and
the behaviours of its end-to-end suite; they are ours, written against the lab. Rules they
follow so that an outcome does not depend on timing:
* the configuration comes in a step of its own, before any Service (a Service handled while
  only some pools exist could take an address the full configuration would not give it);
* Services that compete for addresses come one step at a time; Services that cannot compete
  (explicit addresses, certain failures, different pools) may share a step;
* where the announcing node is observed, the address is requested explicitly, so the election's
  input is fixed, and the backends are declared, so the run waits for them to be ready;
* only fields MetalLB v0.15.2 serves (its L2Advertisement has no serviceSelectors nor
  preferredNodeSelectors; a strict apply would refuse them there and the case would compare
  the CRDs instead of the behaviour).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from hack import conformance, objects
from hack import lab as network_lab

METALLB_NAMESPACE = objects.METALLB_NAMESPACE
NAMESPACE_PREFIX = "cf-"
MY_ASN = objects.NODE_ASN  # the nodes' AS in every lab BGP test
HOLD_TIME = "3s"  # no keepaliveTime: MetalLB's native BGP refuses one

Manifest = dict[str, Any]

# --- addresses, all inside the lab's pools ----------------------------------------------------


Address = TypeVar("Address", ipaddress.IPv4Address, ipaddress.IPv6Address)


def _inside(address: Address, first: Address, last: Address) -> str:
    if not first <= address <= last:
        raise ValueError(f"{address} is outside the lab's range {first}-{last}")
    return str(address)


def l2v4(offset: int) -> str:
    """The `offset`-th address of the lab's L2 IPv4 range (10.250.0.200 + offset)."""
    first, last = network_lab.L2_POOL_V4
    return _inside(first + offset, first, last)


def l2v6(offset: int) -> str:
    first, last = network_lab.L2_POOL_V6
    return _inside(first + offset, first, last)


def l2v4_range(first: int, last: int) -> str:
    return f"{l2v4(first)}-{l2v4(last)}"


def l2v6_range(first: int, last: int) -> str:
    return f"{l2v6(first)}-{l2v6(last)}"


def l2v4_cidr(offset: int, prefix: int) -> str:
    network = ipaddress.IPv4Network(f"{l2v4(offset)}/{prefix}")  # strict: must be aligned
    l2v4(offset + network.num_addresses - 1)
    return str(network)


def bgpv4(offset: int) -> str:
    net = network_lab.BGP_POOL_V4
    return _inside(net.network_address + offset, net.network_address, net.broadcast_address)


def bgpv4_cidr(offset: int, prefix: int) -> str:
    network = ipaddress.IPv4Network(f"{bgpv4(offset)}/{prefix}")
    bgpv4(offset + network.num_addresses - 1)
    return str(network)


def bgpv6_cidr(offset: int, prefix: int) -> str:
    net = network_lab.BGP_POOL_V6
    start = _inside(net.network_address + offset, net.network_address, net.broadcast_address)
    network = ipaddress.IPv6Network(f"{start}/{prefix}")
    _inside(network.broadcast_address, net.network_address, net.broadcast_address)
    return str(network)


# --- manifests ----------------------------------------------------------------------------------


def namespace_name(case: str, suffix: str = "") -> str:
    return f"{NAMESPACE_PREFIX}{case}{'-' + suffix if suffix else ''}"


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Manifest:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def pool(
    name: str,
    *addresses: str,
    auto_assign: bool | None = None,
    avoid_buggy_ips: bool = False,
    allocation: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    namespace: str = METALLB_NAMESPACE,
) -> Manifest:
    spec: dict[str, Any] = {"addresses": list(addresses)}
    if auto_assign is not None:
        spec["autoAssign"] = auto_assign
    if avoid_buggy_ips:
        spec["avoidBuggyIPs"] = True
    if allocation is not None:
        spec["serviceAllocation"] = dict(allocation)
    manifest = objects.metallb("IPAddressPool", name, spec)
    if labels:
        manifest["metadata"]["labels"] = dict(labels)
    manifest["metadata"]["namespace"] = namespace
    return manifest


def l2_advertisement(name: str, pools: Sequence[str] = (), **spec: Any) -> Manifest:
    body = {**({"ipAddressPools": list(pools)} if pools else {}), **spec}
    return objects.metallb("L2Advertisement", name, body)


def bgp_advertisement(name: str, pools: Sequence[str], **spec: Any) -> Manifest:
    # Always names its pools: an advertisement without pools selects every pool.
    return objects.metallb("BGPAdvertisement", name, {"ipAddressPools": list(pools), **spec})


def peer(name: str, **spec: Any) -> Manifest:
    return objects.tor_peer(name, hold_time=HOLD_TIME, **spec)


def hostname(node: int) -> dict[str, Any]:
    """A label selector for one lab node."""
    return {"matchLabels": {"kubernetes.io/hostname": network_lab.node_name(node)}}


def service(
    namespace: str,
    name: str,
    *,
    port: int = objects.SERVICE_PORT,
    app: str | None = None,
    local: bool = False,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    load_balancer_ip: str | None = None,
    load_balancer_class: str | None = None,
    family_policy: str | None = None,
    families: Sequence[str] = (),
    service_type: str = "LoadBalancer",
) -> Manifest:
    """A Service selecting the Pods of app `app` (default: its name), one TCP port."""
    spec: dict[str, Any] = {
        "type": service_type,
        "selector": {"app": app or name},
        "ports": [{"port": port, "protocol": "TCP", "targetPort": objects.ECHO_PORT}],
    }
    if service_type in ("LoadBalancer", "NodePort"):
        spec["externalTrafficPolicy"] = "Local" if local else "Cluster"
    if load_balancer_ip is not None:
        spec["loadBalancerIP"] = load_balancer_ip
    if load_balancer_class is not None:
        spec["loadBalancerClass"] = load_balancer_class
    if family_policy is not None:
        spec["ipFamilyPolicy"] = family_policy
    if families:
        spec["ipFamilies"] = list(families)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def backends(namespace: str, app: str, *nodes: int) -> tuple[Manifest, ...]:
    """One ready echo Pod of `app` on each of `nodes` (the lab's Pods, `objects.pod`)."""
    return tuple(objects.pod(namespace, app, node) for node in nodes)


IPS = "metallb.io/loadBalancerIPs"
POOL = "metallb.io/address-pool"
SHARED = "metallb.io/allow-shared-ip"
LEGACY_POOL = "metallb.universe.tf/address-pool"


def _config(ns: Sequence[Manifest], *config: Manifest) -> conformance.Step:
    return conformance.Step("configuration", (*ns, *config))


# --- allocation ---------------------------------------------------------------------------------


def auto_lowest_free() -> conformance.Case:
    ns = namespace_name("auto-lowest-free")
    return conformance.Case(
        "auto-lowest-free",
        "automatic allocation takes the lowest free address of the pool "
        "(allocator_test TestPoolAllocation)",
        (
            _config([namespace(ns)], pool("pool-a", l2v4_range(0, 3))),
            conformance.Step("first Service", (service(ns, "a"),)),
            conformance.Step("second Service", (service(ns, "b"),)),
        ),
        quick=True,
    )


def range_order() -> conformance.Case:
    ns = namespace_name("range-order")
    return conformance.Case(
        "range-order",
        "the lowest free address in spec.addresses order, not in numeric order "
        "(getFreeIPsFromPool walks pool.CIDR in order)",
        (
            _config([namespace(ns)], pool("ordered", l2v4_range(10, 11), l2v4_cidr(0, 31))),
            conformance.Step("first Service", (service(ns, "a"),)),
            conformance.Step("second Service", (service(ns, "b"),)),
            conformance.Step("third Service", (service(ns, "c"),)),
        ),
    )


def avoid_buggy_ips() -> conformance.Case:
    ns = namespace_name("avoid-buggy-ips")
    return conformance.Case(
        "avoid-buggy-ips",
        "avoidBuggyIPs skips .0 and .255 and counts them out of availableIPv4 "
        "(allocator_test 's3 cannot grab a 0 buggy IP')",
        (
            _config([namespace(ns)], pool("buggy", bgpv4_cidr(0, 30), avoid_buggy_ips=True)),
            conformance.Step("first Service", (service(ns, "a"),)),
            conformance.Step("second Service", (service(ns, "b"),)),
        ),
    )


def avoid_buggy_single_address() -> conformance.Case:
    ns = namespace_name("avoid-buggy-single-address")
    return conformance.Case(
        "avoid-buggy-single-address",
        "a pool whose only entries are one .255 and one usable address, avoidBuggyIPs: "
        "the counters MetalLB's poolCount gives a single-address CIDR of a buggy address",
        (
            _config(
                [namespace(ns)],
                pool("edge", bgpv4_cidr(255, 32), bgpv4_cidr(1, 32), avoid_buggy_ips=True),
            ),
            conformance.Step("a Service", (service(ns, "a"),)),
        ),
    )


def exhausted_pool_recycles() -> conformance.Case:
    ns = namespace_name("exhausted-pool-recycles")
    a = service(ns, "a")
    return conformance.Case(
        "exhausted-pool-recycles",
        "an exhausted pool leaves the next Service pending; deleting the holder hands it over "
        "(controller_test TestDeleteRecyclesIP)",
        (
            _config([namespace(ns)], pool("one", l2v4_cidr(0, 32))),
            conformance.Step("holder", (a,)),
            conformance.Step("waiting", (service(ns, "b"),)),
            conformance.Step("holder deleted", delete=(a,)),
        ),
    )


def exhausted_pool_type_change() -> conformance.Case:
    ns = namespace_name("exhausted-pool-type-change")
    return conformance.Case(
        "exhausted-pool-type-change",
        "a holder turned NodePort loses its address (status cleared) and the waiting Service "
        "gets it; turned back, it waits in turn (controller_test 'former LoadBalancer, now "
        "NodePort', e2e assignment)",
        (
            _config([namespace(ns)], pool("one", l2v4_cidr(0, 32))),
            conformance.Step("holder", (service(ns, "a"),)),
            conformance.Step("waiting", (service(ns, "b"),)),
            conformance.Step(
                "holder becomes NodePort", (service(ns, "a", service_type="NodePort"),)
            ),
            conformance.Step("holder back to LoadBalancer", (service(ns, "a"),)),
        ),
    )


def request_ip() -> conformance.Case:
    ns = namespace_name("request-ip")
    return conformance.Case(
        "request-ip",
        "an address asked for by annotation or by spec.loadBalancerIP, then an automatic one "
        "(controller_test 'request specific IP', '... via custom annotation')",
        (
            _config([namespace(ns)], pool("pool-a", l2v4_range(0, 7))),
            conformance.Step(
                "requested addresses",
                (
                    service(ns, "by-annotation", annotations={IPS: l2v4(5)}),
                    service(ns, "by-spec", load_balancer_ip=l2v4(6)),
                ),
            ),
            conformance.Step("automatic", (service(ns, "automatic"),)),
        ),
    )


def request_ip_refused() -> conformance.Case:
    ns = namespace_name("request-ip-refused")
    return conformance.Case(
        "request-ip-refused",
        "requests MetalLB turns down with a Warning: both spellings, outside every pool, not an "
        "address, two of one family, an IP of another pool than the one named, an unknown pool "
        "(controller_test 'request IP from both ...', 'request infeasible IP', 'request "
        "invalid IP via custom annotation', 'request two IPs from same ip family', "
        "'incompatible ip and address pool annotations', 'unknown pool requested')",
        (
            _config(
                [namespace(ns)],
                pool("pool-a", l2v4_range(0, 3)),
                pool("pool-b", l2v4_range(10, 11)),
            ),
            conformance.Step(
                "requests",
                (
                    service(ns, "both", annotations={IPS: l2v4(1)}, load_balancer_ip=l2v4(1)),
                    service(ns, "outside", annotations={IPS: l2v4(40)}),
                    service(ns, "not-an-ip", annotations={IPS: "not-an-ip"}),
                    service(ns, "two-v4", annotations={IPS: f"{l2v4(1)},{l2v4(2)}"}),
                    service(ns, "pool-mismatch", annotations={IPS: l2v4(1), POOL: "pool-b"}),
                    service(ns, "unknown-pool", annotations={POOL: "no-such-pool"}),
                ),
            ),
        ),
    )


def address_pool_annotation() -> conformance.Case:
    ns = namespace_name("address-pool-annotation")
    return conformance.Case(
        "address-pool-annotation",
        "metallb.io/address-pool draws from a pool with autoAssign false; the deprecated "
        "spelling works with a deprecatedAnnotation Warning; automatic allocation never uses "
        "that pool (controller_test 'request IP from specific pool')",
        (
            _config(
                [namespace(ns)],
                pool("auto", l2v4_range(0, 3)),
                pool("manual", l2v4_range(10, 13), auto_assign=False),
            ),
            conformance.Step("named pool", (service(ns, "named", annotations={POOL: "manual"}),)),
            conformance.Step(
                "legacy spelling", (service(ns, "legacy", annotations={LEGACY_POOL: "manual"}),)
            ),
            conformance.Step("automatic", (service(ns, "automatic"),)),
        ),
    )


def address_pool_switch() -> conformance.Case:
    ns = namespace_name("address-pool-switch")
    return conformance.Case(
        "address-pool-switch",
        "changing metallb.io/address-pool moves the Service to the new pool "
        "(controller_test 'switch to a different specific pool')",
        (
            _config(
                [namespace(ns)],
                pool("pool-a", l2v4_range(0, 3)),
                pool("pool-b", l2v4_range(10, 13)),
            ),
            conformance.Step("in pool-a", (service(ns, "web", annotations={POOL: "pool-a"}),)),
            conformance.Step("to pool-b", (service(ns, "web", annotations={POOL: "pool-b"}),)),
        ),
    )


def auto_assign_false() -> conformance.Case:
    ns = namespace_name("auto-assign-false")
    return conformance.Case(
        "auto-assign-false",
        "with only an autoAssign: false pool, automatic allocation fails and an explicit "
        "request succeeds (controller_test 'loadBalancerIP ... autoAssign=false pool')",
        (
            _config([namespace(ns)], pool("manual", l2v4_range(0, 3), auto_assign=False)),
            conformance.Step(
                "automatic and requested",
                (
                    service(ns, "automatic"),
                    service(ns, "requested", annotations={IPS: l2v4(2)}),
                ),
            ),
        ),
    )


def two_unrestricted_pools() -> conformance.Case:
    ns = namespace_name("two-unrestricted-pools")
    return conformance.Case(
        "two-unrestricted-pools",
        "two unrestricted auto-assign pools: which one a Service draws from (MetalLB: Go map "
        "order; ironlb: by name)",
        (
            _config(
                [namespace(ns)],
                pool("alpha", l2v4_range(0, 1)),
                pool("beta", l2v4_range(10, 11)),
            ),
            conformance.Step("a Service", (service(ns, "web"),)),
        ),
    )


def pool_changes() -> conformance.Case:
    ns = namespace_name("pool-changes")
    first = pool("first", l2v4_range(0, 7))
    return conformance.Case(
        "pool-changes",
        "a pool shrunk under a Service (ClearAssignment, a new address), a pool added (no "
        "move), the Service's pool deleted (moves to the other) "
        "(controller_test TestControllerReassign, 'invalid IP assigned')",
        (
            _config([namespace(ns)], first),
            conformance.Step("a Service", (service(ns, "web"),)),
            conformance.Step("pool shrunk", (pool("first", l2v4_range(4, 7)),)),
            conformance.Step("second pool", (pool("second", l2v4_range(20, 23)),)),
            conformance.Step("first pool deleted", delete=(first,)),
        ),
    )


# --- sharing ------------------------------------------------------------------------------------


def share_same_key() -> conformance.Case:
    ns = namespace_name("share-same-key")
    return conformance.Case(
        "share-same-key",
        "same sharing key, different ports: the lowest compatible address is shared before a "
        "free one (allocator_test 's3 takes the same IP as s4')",
        (
            _config([namespace(ns)], pool("shared", l2v4_range(0, 3))),
            conformance.Step("first, key k", (service(ns, "a", annotations={SHARED: "k"}),)),
            conformance.Step("no key", (service(ns, "b"),)),
            conformance.Step(
                "key k, other port", (service(ns, "c", port=81, annotations={SHARED: "k"}),)
            ),
        ),
        quick=True,
    )


def share_port_conflict() -> conformance.Case:
    ns = namespace_name("share-port-conflict")
    return conformance.Case(
        "share-port-conflict",
        "same sharing key and the same port: no sharing, the next free address "
        "(allocator_test 's3 can't share with s4 (port conflict)')",
        (
            _config([namespace(ns)], pool("shared", l2v4_range(0, 1))),
            conformance.Step("first", (service(ns, "a", annotations={SHARED: "k"}),)),
            conformance.Step("same port", (service(ns, "b", annotations={SHARED: "k"}),)),
        ),
    )


def share_refused() -> conformance.Case:
    ns = namespace_name("share-refused")
    return conformance.Case(
        "share-refused",
        "one address held with key k by an externalTrafficPolicy Local Service: another key, "
        "another selector (Local), and a Cluster Service cannot share it "
        "(allocator_test 'wrong sharing key', 'wrong backend key')",
        (
            _config([namespace(ns)], pool("one", l2v4_cidr(0, 32))),
            conformance.Step("holder", (service(ns, "a", local=True, annotations={SHARED: "k"}),)),
            conformance.Step(
                "incompatible",
                (
                    service(ns, "other-key", port=81, annotations={SHARED: "other"}),
                    service(ns, "other-backends", port=82, local=True, annotations={SHARED: "k"}),
                    service(ns, "cluster-policy", port=83, annotations={SHARED: "k"}),
                ),
            ),
        ),
    )


def share_requested_ip() -> conformance.Case:
    ns = namespace_name("share-requested-ip")
    return conformance.Case(
        "share-requested-ip",
        "two Services asking for the same address with the same key and different ports both "
        "get it",
        (
            _config([namespace(ns)], pool("shared", l2v4_range(0, 3))),
            conformance.Step(
                "both",
                (
                    service(ns, "http", annotations={IPS: l2v4(2), SHARED: "web"}),
                    service(ns, "https", port=443, annotations={IPS: l2v4(2), SHARED: "web"}),
                ),
            ),
        ),
    )


# --- dual stack ---------------------------------------------------------------------------------


def dual_stack_families() -> conformance.Case:
    ns = namespace_name("dual-stack-families")
    return conformance.Case(
        "dual-stack-families",
        "a dual-stack pool: RequireDualStack and PreferDualStack get one address of each "
        "family, single-stack IPv6 and IPv4 one (controller_test 'simple dual-stack "
        "LoadBalancer', '... with PreferDualStack policy')",
        (
            _config([namespace(ns)], pool("dual", l2v4_range(0, 3), l2v6_range(0, 3))),
            conformance.Step(
                "require", (service(ns, "require", family_policy="RequireDualStack"),)
            ),
            conformance.Step("prefer", (service(ns, "prefer", family_policy="PreferDualStack"),)),
            conformance.Step("ipv6", (service(ns, "ipv6", families=["IPv6"]),)),
            conformance.Step("ipv4", (service(ns, "ipv4"),)),
        ),
    )


def dual_stack_single_family_pools() -> conformance.Case:
    ns = namespace_name("dual-stack-single-family-pools")
    return conformance.Case(
        "dual-stack-single-family-pools",
        "pools of one family each: RequireDualStack fails, PreferDualStack gets its primary "
        "family (AdditionalAssignFailed after), IPv6-first PreferDualStack gets IPv6 "
        "(controller_test 'request IP from single-stack ipv4 pool with PreferDualStack')",
        (
            _config(
                [namespace(ns)],
                pool("only-v4", l2v4_range(0, 3)),
                pool("only-v6", l2v6_range(0, 3)),
            ),
            conformance.Step(
                "require and ipv4-first prefer",
                (
                    service(ns, "require", family_policy="RequireDualStack"),
                    service(ns, "prefer", family_policy="PreferDualStack"),
                ),
            ),
            conformance.Step(
                "ipv6-first prefer",
                (
                    service(
                        ns, "prefer-v6", family_policy="PreferDualStack", families=["IPv6", "IPv4"]
                    ),
                ),
            ),
        ),
    )


def dual_stack_requests() -> conformance.Case:
    ns = namespace_name("dual-stack-requests")
    return conformance.Case(
        "dual-stack-requests",
        "requested addresses against the Service's families: both families for "
        "RequireDualStack (granted), only IPv4 for RequireDualStack, IPv6 for an IPv4 Service "
        "(Warnings) (controller_test 'request dual-stack loadbalancer IPs via custom "
        "annotation', 'request IP from wrong ip-family')",
        (
            _config([namespace(ns)], pool("dual", l2v4_range(0, 3), l2v6_range(0, 3))),
            conformance.Step(
                "requests",
                (
                    service(
                        ns,
                        "both",
                        family_policy="RequireDualStack",
                        annotations={IPS: f"{l2v4(1)},{l2v6(1)}"},
                    ),
                    service(
                        ns, "v4-only", family_policy="RequireDualStack", annotations={IPS: l2v4(2)}
                    ),
                    service(ns, "wrong-family", annotations={IPS: l2v6(3)}),
                ),
            ),
        ),
    )


# --- service allocation -------------------------------------------------------------------------


def namespace_pinned_pool() -> conformance.Case:
    team, other = (namespace_name("namespace-pinned-pool", s) for s in ("team", "other"))
    return conformance.Case(
        "namespace-pinned-pool",
        "a pool for a listed namespace serves that namespace first, the others use the "
        "unrestricted pool (allocator_test 'pool pinned on same/different namespace')",
        (
            _config(
                [namespace(team), namespace(other)],
                pool(
                    "team",
                    l2v4_range(0, 1),
                    allocation={"namespaces": [team], "priority": 10},
                ),
                pool("general", l2v4_range(10, 11)),
            ),
            conformance.Step("one Service in each", (service(team, "web"), service(other, "web"))),
        ),
    )


def namespace_selector_priority() -> conformance.Case:
    gold, plain = (namespace_name("namespace-selector-priority", s) for s in ("gold", "plain"))
    gold_selector = [{"matchLabels": {"tier": "gold"}}]
    return conformance.Case(
        "namespace-selector-priority",
        "of two pools selecting a namespace by label, the lower priority value wins; when the "
        "namespace loses the label its Service moves (controller_test 'namespace specific ip "
        "pool', e2e 'pool with namespace selector')",
        (
            _config(
                [namespace(gold, {"tier": "gold"}), namespace(plain)],
                pool(
                    "low",
                    l2v4_range(0, 1),
                    allocation={"namespaceSelectors": gold_selector, "priority": 20},
                ),
                pool(
                    "high",
                    l2v4_range(10, 11),
                    allocation={"namespaceSelectors": gold_selector, "priority": 10},
                ),
                pool("general", l2v4_range(20, 21)),
            ),
            conformance.Step("gold Service", (service(gold, "web"),)),
            conformance.Step("plain Service", (service(plain, "web"),)),
            conformance.Step("label removed", (namespace(gold, {"tier": "none"}),)),
        ),
    )


def service_selector_pool() -> conformance.Case:
    ns = namespace_name("service-selector-pool")
    return conformance.Case(
        "service-selector-pool",
        "a pool selecting Services by label serves them; an unlabelled Service uses the "
        "unrestricted pool and keeps its address when labelled later "
        "(allocator_test 'pool pinned with same/different service label')",
        (
            _config(
                [namespace(ns)],
                pool(
                    "web",
                    l2v4_range(0, 1),
                    allocation={"serviceSelectors": [{"matchLabels": {"tier": "web"}}]},
                ),
                pool("general", l2v4_range(10, 11)),
            ),
            conformance.Step("labelled", (service(ns, "front", labels={"tier": "web"}),)),
            conformance.Step("unlabelled", (service(ns, "back"),)),
            conformance.Step("labelled later", (service(ns, "back", labels={"tier": "web"}),)),
        ),
    )


def pinned_pool_exhausted_fallback() -> conformance.Case:
    ns = namespace_name("pinned-pool-exhausted-fallback")
    return conformance.Case(
        "pinned-pool-exhausted-fallback",
        "when the namespace's own pool is full, the next Service falls back to the "
        "unrestricted pool (Allocator.Allocate: pinned pools, then all pools)",
        (
            _config(
                [namespace(ns)],
                pool("team", l2v4_cidr(0, 32), allocation={"namespaces": [ns]}),
                pool("general", l2v4_range(10, 11)),
            ),
            conformance.Step("first", (service(ns, "a"),)),
            conformance.Step("second", (service(ns, "b"),)),
        ),
    )


def priority_only_allocation() -> conformance.Case:
    ns = namespace_name("priority-only-allocation")
    return conformance.Case(
        "priority-only-allocation",
        "serviceAllocation with only a priority selects every Service, so that pool is tried "
        "before the unrestricted one (addressPoolServiceAllocationsFromCR: labels.Everything)",
        (
            _config(
                [namespace(ns)],
                pool("preferred", l2v4_range(0, 1), allocation={"priority": 5}),
                pool("general", l2v4_range(10, 11)),
            ),
            conformance.Step("a Service", (service(ns, "web"),)),
        ),
    )


def namespace_selector_matches_nothing() -> conformance.Case:
    ns = namespace_name("namespace-selector-matches-nothing")
    return conformance.Case(
        "namespace-selector-matches-nothing",
        "a pool whose namespaceSelectors match no namespace: never used automatically; an "
        "explicit request for one of its addresses (MetalLB grants it, ironlb does not)",
        (
            _config(
                [namespace(ns)],
                pool(
                    "nobody",
                    l2v4_range(0, 1),
                    allocation={"namespaceSelectors": [{"matchLabels": {"team": "nobody"}}]},
                ),
                pool("general", l2v4_range(10, 11)),
            ),
            conformance.Step(
                "automatic and requested",
                (service(ns, "automatic"), service(ns, "requested", annotations={IPS: l2v4(1)})),
            ),
        ),
    )


def lb_class_other() -> conformance.Case:
    ns = namespace_name("lb-class-other")
    return conformance.Case(
        "lb-class-other",
        "a Service with another loadBalancerClass is left alone: no address, no Event "
        "(e2e 'loadBalancerClass set on a service')",
        (
            _config([namespace(ns)], pool("pool-a", l2v4_range(0, 3))),
            conformance.Step(
                "other class",
                (service(ns, "elsewhere", load_balancer_class="example.com/other-lb"),),
            ),
        ),
    )


# --- invalid objects ----------------------------------------------------------------------------


def overlapping_pools() -> conformance.Case:
    ns = namespace_name("overlapping-pools")
    return conformance.Case(
        "overlapping-pools",
        "a pool overlapping another is refused; the first keeps serving "
        "(config_test 'overlapping CIDRs', webhook tests)",
        (
            _config(
                [namespace(ns)],
                pool("first", l2v4_range(0, 7)),
                pool("overlapping", l2v4_range(4, 11)),
            ),
            conformance.Step("a Service", (service(ns, "web"),)),
        ),
        invalid=True,
    )


def overlap_within_pool() -> conformance.Case:
    ns = namespace_name("overlap-within-pool")
    return conformance.Case(
        "overlap-within-pool",
        "a pool whose own entries overlap is refused (poolsFor checks every CIDR against all "
        "before it, its own included)",
        (_config([namespace(ns)], pool("self-overlap", l2v4_cidr(0, 30), l2v4_range(2, 5))),),
        invalid=True,
    )


def malformed_objects() -> conformance.Case:
    ns = namespace_name("malformed-objects")
    return conformance.Case(
        "malformed-objects",
        "objects wrong on their own: a CIDR that is no address, a reversed range, a community "
        "half over 65535 (config_test 'invalid CIDR', 'invalid IP range', webhook tests); "
        "the valid pool beside them serves",
        (
            _config(
                [namespace(ns)],
                pool("bad-cidr", "10.250.0.300/32"),
                pool("reversed", f"{l2v4(5)}-{l2v4(1)}"),
                bgp_advertisement("bad-community", ["good"], communities=["65536:1"]),
                pool("good", l2v4_range(10, 11)),
            ),
            conformance.Step("a Service", (service(ns, "web"),)),
        ),
        invalid=True,
    )


def pool_outside_namespace() -> conformance.Case:
    ns = namespace_name("pool-outside-namespace")
    return conformance.Case(
        "pool-outside-namespace",
        "a pool created outside the MetalLB namespace is refused by the webhook "
        "('resource must be created in metallb-system namespace')",
        (_config([namespace(ns)], pool("stray", l2v4_range(0, 3), namespace=ns)),),
        invalid=True,
    )


# --- layer 2 ------------------------------------------------------------------------------------


def l2_announce() -> conformance.Case:
    ns = namespace_name("l2-announce")
    return conformance.Case(
        "l2-announce",
        "layer 2: the hash winner announces an externalTrafficPolicy Cluster Service, the node "
        "with the endpoint a Local one, nobody a Service of a pool without advertisement "
        "(layer2_controller_test, e2e l2)",
        (
            _config(
                [namespace(ns)],
                pool("l2", l2v4_range(0, 7)),
                pool("silent", l2v4_range(10, 11)),
                l2_advertisement("l2", ["l2"]),
            ),
            conformance.Step(
                "Services with backends",
                (
                    service(ns, "cluster", annotations={IPS: l2v4(0)}),
                    *backends(ns, "cluster", 1),
                    service(ns, "local", local=True, annotations={IPS: l2v4(1)}),
                    *backends(ns, "local", 2),
                    service(ns, "unadvertised", annotations={POOL: "silent"}),
                    *backends(ns, "unadvertised", 1),
                ),
            ),
        ),
        quick=True,
    )


def l2_interfaces() -> conformance.Case:
    ns = namespace_name("l2-interfaces")
    return conformance.Case(
        "l2-interfaces",
        "an L2Advertisement limited to eth0: the ServiceL2Status lists the interface "
        "(e2e l2 'interfaces')",
        (
            _config(
                [namespace(ns)],
                pool("l2", l2v4_range(0, 3)),
                l2_advertisement("eth0-only", ["l2"], interfaces=["eth0"]),
            ),
            conformance.Step(
                "a Service",
                (service(ns, "web", annotations={IPS: l2v4(2)}), *backends(ns, "web", 1, 2)),
            ),
        ),
    )


def l2_missing_interface() -> conformance.Case:
    ns = namespace_name("l2-missing-interface")
    return conformance.Case(
        "l2-missing-interface",
        "an L2Advertisement limited to an interface no node has: not announced, announceFailed "
        "Warning (layer2_controller SetBalancer)",
        (
            _config(
                [namespace(ns)],
                pool("l2", l2v4_range(0, 3)),
                l2_advertisement("nowhere", ["l2"], interfaces=["eth9"]),
            ),
            conformance.Step(
                "a Service",
                (service(ns, "web", annotations={IPS: l2v4(2)}), *backends(ns, "web", 1)),
            ),
        ),
        quick=True,
    )


def l2_node_selector() -> conformance.Case:
    ns = namespace_name("l2-node-selector")
    return conformance.Case(
        "l2-node-selector",
        "an L2Advertisement for node3 only: node3 announces though the endpoint is on node1 "
        "(TestShouldAnnounceFromNodes)",
        (
            _config(
                [namespace(ns)],
                pool("l2", l2v4_range(0, 3)),
                l2_advertisement("node3-only", ["l2"], nodeSelectors=[hostname(3)]),
            ),
            conformance.Step(
                "a Service",
                (service(ns, "web", annotations={IPS: l2v4(3)}), *backends(ns, "web", 1)),
            ),
        ),
    )


def l2_pool_selector() -> conformance.Case:
    ns = namespace_name("l2-pool-selector")
    return conformance.Case(
        "l2-pool-selector",
        "an L2Advertisement choosing pools by label: the labelled pool is announced, the other "
        "not (config_test ipAddressPoolSelectors)",
        (
            _config(
                [namespace(ns)],
                pool("labelled", l2v4_range(0, 1), labels={"announce": "yes"}),
                pool("unlabelled", l2v4_range(10, 11)),
                l2_advertisement(
                    "by-label", ipAddressPoolSelectors=[{"matchLabels": {"announce": "yes"}}]
                ),
            ),
            conformance.Step(
                "one Service in each pool",
                (
                    service(ns, "in-labelled", annotations={POOL: "labelled"}),
                    *backends(ns, "in-labelled", 2),
                    service(ns, "in-unlabelled", annotations={POOL: "unlabelled"}),
                    *backends(ns, "in-unlabelled", 2),
                ),
            ),
        ),
    )


# --- BGP ----------------------------------------------------------------------------------------


def bgp_announce() -> conformance.Case:
    ns = namespace_name("bgp-announce")
    return conformance.Case(
        "bgp-announce",
        "BGP: every node announces a Cluster Service with a ready endpoint, only the endpoint's "
        "node a Local one; ServiceBGPStatus per node with the peer (bgp_controller_test, e2e "
        "bgp)",
        (
            _config(
                [namespace(ns)],
                pool("bgp", bgpv4_cidr(0, 28)),
                peer("tor"),
                bgp_advertisement("bgp", ["bgp"]),
            ),
            conformance.Step(
                "Services with backends",
                (
                    service(ns, "cluster", annotations={IPS: bgpv4(1)}),
                    *backends(ns, "cluster", 1),
                    service(ns, "local", local=True, annotations={IPS: bgpv4(2)}),
                    *backends(ns, "local", 2),
                ),
            ),
        ),
        quick=True,
    )


def bgp_node_selector() -> conformance.Case:
    ns = namespace_name("bgp-node-selector")
    return conformance.Case(
        "bgp-node-selector",
        "a BGPAdvertisement for node2 and peer tor only: only node2 announces "
        "(bgp_controller_test node selectors, peers)",
        (
            _config(
                [namespace(ns)],
                pool("bgp", bgpv4_cidr(0, 28)),
                peer("tor"),
                bgp_advertisement(
                    "node2-only", ["bgp"], nodeSelectors=[hostname(2)], peers=["tor"]
                ),
            ),
            conformance.Step(
                "a Service",
                (service(ns, "web", annotations={IPS: bgpv4(3)}), *backends(ns, "web", 1)),
            ),
        ),
    )


def bgp_beyond_native() -> conformance.Case:
    ns = namespace_name("bgp-beyond-native")
    return conformance.Case(
        "bgp-beyond-native",
        "what MetalLB's native BGP refuses and ironlb announces: an IPv6 pool in a "
        "BGPAdvertisement, a large community (internal/config/validation.go DiscardFRROnly)",
        (
            _config(
                [namespace(ns)],
                pool("bgp", bgpv4_cidr(0, 28)),
                pool("bgp6", bgpv6_cidr(0, 124)),
                peer("tor"),
                bgp_advertisement("v6", ["bgp6"]),
                bgp_advertisement("large", ["bgp"], communities=[f"large:{MY_ASN}:1:2"]),
            ),
            conformance.Step(
                "Services with backends",
                (
                    service(ns, "v6", families=["IPv6"], annotations={POOL: "bgp6"}),
                    *backends(ns, "v6", 1),
                    service(ns, "v4", annotations={IPS: bgpv4(4)}),
                    *backends(ns, "v4", 1),
                ),
            ),
        ),
    )


CASES: tuple[conformance.Case, ...] = (
    auto_lowest_free(),
    range_order(),
    avoid_buggy_ips(),
    avoid_buggy_single_address(),
    exhausted_pool_recycles(),
    exhausted_pool_type_change(),
    request_ip(),
    request_ip_refused(),
    address_pool_annotation(),
    address_pool_switch(),
    auto_assign_false(),
    two_unrestricted_pools(),
    pool_changes(),
    share_same_key(),
    share_port_conflict(),
    share_refused(),
    share_requested_ip(),
    dual_stack_families(),
    dual_stack_single_family_pools(),
    dual_stack_requests(),
    namespace_pinned_pool(),
    namespace_selector_priority(),
    service_selector_pool(),
    pinned_pool_exhausted_fallback(),
    priority_only_allocation(),
    namespace_selector_matches_nothing(),
    lb_class_other(),
    overlapping_pools(),
    overlap_within_pool(),
    malformed_objects(),
    pool_outside_namespace(),
    l2_announce(),
    l2_interfaces(),
    l2_missing_interface(),
    l2_node_selector(),
    l2_pool_selector(),
    bgp_announce(),
    bgp_node_selector(),
    bgp_beyond_native(),
)

# One of each kind a user sees (allocation, sharing, L2 and BGP announcement): what a quick run
# of `bench.versus` and the end-to-end comparison with MetalLB apply.
QUICK: tuple[conformance.Case, ...] = tuple(c for c in CASES if c.quick)


def by_name(name: str) -> conformance.Case:
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(name)
