"""Raw Kubernetes objects (plain dicts) -> `ironlb.model` values, or Problems.

This is the one place where MetalLB's per-object rules live: required fields, types, ranges,
defaults, address and community syntax, duplicate list entries, timer rules. Each `parse_<kind>`
takes whatever the API (or a fuzzer) hands it and returns the model value or the list of
everything wrong with it; it never raises, so one bad object cannot take a process down. An
object either parses completely or not at all: a half-understood pool is worse than none.

Rules that span objects (overlaps, dangling references, conflicts between advertisements) are
`ironlb.validation`'s job; the CRD schema repeats some of these checks, but objects also come from
fixtures, old apiservers and tests, so nothing here trusts it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ironlb import addresses, model, selectors
from ironlb.problems import Problem

T = TypeVar("T")

UINT16_MAX = 2**16 - 1
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
# Go's time.Duration is int64 nanoseconds: about 292 years.
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9

_DIGITS = re.compile(r"[0-9]+")
_DURATION = re.compile(
    r"([-+]?)((?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)"
)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


# --- Scalar syntax shared with validation and the speaker ----------------------------------------


def parse_duration(text: object) -> float | str:
    """A Go duration string (`90s`, `1m30s`, `300ms`, `0`) -> seconds, or why it is not one."""
    if not isinstance(text, str):
        return "must be a duration string such as 90s or 1m30s"
    if text in ("0", "+0", "-0"):
        return 0.0
    match = _DURATION.fullmatch(text)
    if match is None:
        return f"{text!r} is not a duration (use units h, m, s, ms, us, ns, e.g. 1m30s)"
    seconds = sum(
        float(number) * _UNIT_SECONDS[unit]
        for number, unit in _DURATION_PART.findall(match.group(2))
    )
    if not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        return f"{text!r} is out of range"
    return -seconds if match.group(1) == "-" else seconds


def parse_community_value(text: str) -> model.BGPCommunity | model.CommunityRef | str:
    """`a:b` or `large:a:b:c` -> a value; anything else with neither shape -> an alias reference.

    Like MetalLB, a string with two or four `:`-separated fields is a value and must be a valid
    one; any other string can only be the name of a Community alias, resolved later. A string
    is returned when the text is a malformed value.
    """
    fields = text.split(":")
    if len(fields) == 2:
        for section in fields:
            if not _DIGITS.fullmatch(section) or int(section) > UINT16_MAX:
                return (
                    f"invalid community value: invalid section {section!r} of community "
                    f"{text!r} (each part of a:b must be 0..{UINT16_MAX})"
                )
        return model.BGPCommunity(large=False, values=(int(fields[0]), int(fields[1])))
    if len(fields) == 4:
        if fields[0] != "large":
            return (
                "invalid community value: invalid marker for large community, expected "
                f"community to be of format large:<uint32>:<uint32>:<uint32> but got {text!r}"
            )
        for section in fields[1:]:
            if not _DIGITS.fullmatch(section) or int(section) > UINT32_MAX:
                return (
                    f"invalid community value: invalid section {section!r} of community "
                    f"{text!r} (each part must be 0..{UINT32_MAX})"
                )
        return model.BGPCommunity(large=True, values=tuple(int(f) for f in fields[1:]))
    if not text:
        return "must not be empty"
    return model.CommunityRef(model.AliasName(text))


# --- Field reader --------------------------------------------------------------------------------


class _Fields:
    """Reads typed fields out of one raw object, collecting a Problem per thing wrong.

    Every getter returns a usable value (a default when the field is bad) so that parsing goes on
    and reports all problems of an object at once; the caller checks `problems` at the end.
    """

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        self.problems: list[Problem] = []

    def problem(self, field: str, message: str) -> None:
        self.problems.append(Problem(self.kind, self.name, field, message))

    def mapping(self, raw: Mapping[Any, Any], key: str, path: str) -> Mapping[Any, Any]:
        value = raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(path, "must be an object")
            return {}
        return value

    def string(self, raw: Mapping[Any, Any], key: str, path: str, *, required: bool = False) -> str:
        value = raw.get(key)
        if value is None:
            if required:
                self.problem(path, "is required")
            return ""
        if not isinstance(value, str):
            self.problem(path, "must be a string")
            return ""
        if required and not value:
            self.problem(path, "is required")
        return value

    def boolean(self, raw: Mapping[Any, Any], key: str, path: str, default: bool) -> bool:
        value = raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(path, "must be true or false")
            return default
        return value

    def integer(
        self,
        raw: Mapping[Any, Any],
        key: str,
        path: str,
        *,
        low: int,
        high: int,
        required: bool = False,
    ) -> int | None:
        value = raw.get(key)
        if value is None:
            if required:
                self.problem(path, "is required")
            return None
        # bool is an int in Python but never a number in JSON.
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(path, "must be an integer")
            return None
        if not low <= value <= high:
            self.problem(path, f"{value} is out of range {low}..{high}")
            return None
        return value

    def duration(self, raw: Mapping[Any, Any], key: str, path: str) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        seconds = parse_duration(value)
        if isinstance(seconds, str):
            self.problem(path, seconds)
            return None
        if seconds < 0:
            self.problem(path, f"{value!r} must not be negative")
            return None
        return seconds

    def ip(
        self, raw: Mapping[Any, Any], key: str, path: str, what: str
    ) -> addresses.IPAddress | None:
        text = self.string(raw, key, path)
        if not text:
            return None
        address = addresses.parse_ip(text)
        if address is None:
            self.problem(path, f"invalid {what} {text!r}: not an IP address")
        return address

    def items(self, raw: Mapping[Any, Any], key: str, path: str) -> list[tuple[str, Any]]:
        """(path, item) for each element of a list field; absent or null means empty."""
        value = raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.problem(path, "must be a list")
            return []
        return [(f"{path}[{i}]", item) for i, item in enumerate(value)]

    def strings(
        self, raw: Mapping[Any, Any], key: str, path: str, *, unique: bool = True
    ) -> tuple[str, ...]:
        out: list[str] = []
        for where, item in self.items(raw, key, path):
            if not isinstance(item, str):
                self.problem(where, "must be a string")
            elif unique and item in out:
                self.problem(where, f"duplicate definition of {key} {item!r}")
            else:
                out.append(item)
        return tuple(out)

    def selector(self, raw: Any, path: str) -> selectors.LabelSelector | None:
        parsed, problems = selectors.parse(raw, kind=self.kind, name=self.name, field=path)
        self.problems.extend(problems)
        if parsed is None:
            return None
        seen: list[selectors.Requirement] = []
        for i, requirement in enumerate(parsed.match_expressions):
            if requirement in seen:
                self.problem(
                    f"{path}.matchExpressions[{i}]", "duplicate definition of match expression"
                )
                return None
            seen.append(requirement)
        return parsed

    def selectors(
        self, raw: Mapping[Any, Any], key: str, path: str
    ) -> tuple[selectors.LabelSelector, ...]:
        out: list[selectors.LabelSelector] = []
        for where, item in self.items(raw, key, path):
            parsed = self.selector(item, where)
            if parsed is None:
                continue
            if parsed in out:
                self.problem(where, f"duplicate definition of {key}")
                continue
            out.append(parsed)
        return tuple(out)

    def labels(self, metadata: Mapping[Any, Any]) -> model.Labels:
        raw = metadata.get("labels")
        if raw is None:
            return ()
        if not isinstance(raw, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
        ):
            self.problem("metadata.labels", "must be a map of strings to strings")
            return ()
        return tuple(sorted(raw.items()))


def _start(obj: object, kind: str) -> tuple[_Fields, Mapping[Any, Any], Mapping[Any, Any]] | None:
    """Common envelope: an object with `metadata.name`; returns the reader, metadata and spec."""
    if not isinstance(obj, Mapping):
        return None
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    fields = _Fields(kind, name if isinstance(name, str) else "")
    if not isinstance(metadata, Mapping):
        fields.problem("metadata", "is required")
        metadata = {}
    else:
        fields.string(metadata, "name", "metadata.name", required=True)
        fields.string(metadata, "namespace", "metadata.namespace")
    declared = obj.get("kind")
    if declared is not None and declared != kind:
        fields.problem("kind", f"expected {kind}, got {declared!r}")
    spec = fields.mapping(obj, "spec", "spec")
    return fields, metadata, spec


def _not_an_object(kind: str) -> list[Problem]:
    return [Problem(kind, "", "", "must be a Kubernetes object (a JSON object)")]


def _namespace(metadata: Mapping[Any, Any]) -> str:
    value = metadata.get("namespace")
    return value if isinstance(value, str) else ""


def _done(fields: _Fields, value: Callable[[], T]) -> tuple[T | None, list[Problem]]:
    if fields.problems:
        return None, fields.problems
    return value(), []


# --- Kinds ---------------------------------------------------------------------------------------


def parse_ipaddresspool(obj: Mapping[str, Any]) -> tuple[model.IPAddressPool | None, list[Problem]]:
    started = _start(obj, model.IP_ADDRESS_POOL)
    if started is None:
        return None, _not_an_object(model.IP_ADDRESS_POOL)
    f, metadata, spec = started
    labels = f.labels(metadata)

    ranges: list[addresses.AddressRange] = []
    if "addresses" not in spec or spec.get("addresses") == []:
        f.problem("spec.addresses", "pool has no prefixes defined")
    for where, item in f.items(spec, "addresses", "spec.addresses"):
        parsed = addresses.parse_range(item) if isinstance(item, str) else "must be a string"
        if isinstance(parsed, str):
            f.problem(where, parsed)
        else:
            ranges.append(parsed)

    auto_assign = f.boolean(spec, "autoAssign", "spec.autoAssign", True)
    avoid_buggy = f.boolean(spec, "avoidBuggyIPs", "spec.avoidBuggyIPs", False)

    allocation: model.ServiceAllocation | None = None
    if spec.get("serviceAllocation") is not None:
        raw = f.mapping(spec, "serviceAllocation", "spec.serviceAllocation")
        path = "spec.serviceAllocation"
        priority = f.integer(raw, "priority", f"{path}.priority", low=-(2**63), high=2**63 - 1)
        allocation = model.ServiceAllocation(
            priority=priority or 0,
            namespaces=f.strings(raw, "namespaces", f"{path}.namespaces"),
            namespace_selectors=f.selectors(
                raw, "namespaceSelectors", f"{path}.namespaceSelectors"
            ),
            service_selectors=f.selectors(raw, "serviceSelectors", f"{path}.serviceSelectors"),
        )

    return _done(
        f,
        lambda: model.IPAddressPool(
            name=model.PoolName(f.name),
            addresses=tuple(ranges),
            auto_assign=auto_assign,
            avoid_buggy_ips=avoid_buggy,
            service_allocation=allocation,
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def _preferred_node_selectors(
    f: _Fields, spec: Mapping[Any, Any]
) -> tuple[model.PreferredNodeSelector, ...]:
    out: list[model.PreferredNodeSelector] = []
    for where, item in f.items(spec, "preferredNodeSelectors", "spec.preferredNodeSelectors"):
        if not isinstance(item, Mapping):
            f.problem(where, "must be an object")
            continue
        weight = f.integer(item, "weight", f"{where}.weight", low=1, high=100, required=True)
        if item.get("preference") is None:
            f.problem(f"{where}.preference", "is required")
            continue
        preference = f.selector(item.get("preference"), f"{where}.preference")
        if weight is not None and preference is not None:
            out.append(model.PreferredNodeSelector(weight, preference))
    return tuple(out)


def parse_l2advertisement(
    obj: Mapping[str, Any],
) -> tuple[model.L2Advertisement | None, list[Problem]]:
    started = _start(obj, model.L2_ADVERTISEMENT)
    if started is None:
        return None, _not_an_object(model.L2_ADVERTISEMENT)
    f, metadata, spec = started
    labels = f.labels(metadata)
    pools = f.strings(spec, "ipAddressPools", "spec.ipAddressPools")
    pool_selectors = f.selectors(spec, "ipAddressPoolSelectors", "spec.ipAddressPoolSelectors")
    node_selectors = f.selectors(spec, "nodeSelectors", "spec.nodeSelectors")
    interfaces = f.strings(spec, "interfaces", "spec.interfaces", unique=False)
    service_selectors = f.selectors(spec, "serviceSelectors", "spec.serviceSelectors")
    preferred = _preferred_node_selectors(f, spec)
    return _done(
        f,
        lambda: model.L2Advertisement(
            name=model.L2AdvertisementName(f.name),
            ip_address_pools=tuple(model.PoolName(p) for p in pools),
            ip_address_pool_selectors=pool_selectors,
            node_selectors=node_selectors,
            interfaces=interfaces,
            service_selectors=service_selectors,
            preferred_node_selectors=preferred,
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def parse_bgpadvertisement(
    obj: Mapping[str, Any],
) -> tuple[model.BGPAdvertisement | None, list[Problem]]:
    started = _start(obj, model.BGP_ADVERTISEMENT)
    if started is None:
        return None, _not_an_object(model.BGP_ADVERTISEMENT)
    f, metadata, spec = started
    labels = f.labels(metadata)
    length_v4 = f.integer(spec, "aggregationLength", "spec.aggregationLength", low=1, high=32)
    length_v6 = f.integer(spec, "aggregationLengthV6", "spec.aggregationLengthV6", low=0, high=128)
    local_pref = f.integer(spec, "localPref", "spec.localPref", low=0, high=UINT32_MAX)

    communities: list[model.BGPCommunity | model.CommunityRef] = []
    seen: list[str] = []
    for where, text in f.items(spec, "communities", "spec.communities"):
        if not isinstance(text, str):
            f.problem(where, "must be a string")
            continue
        if text in seen:
            f.problem(where, f"duplicate definition of community {text!r}")
            continue
        seen.append(text)
        parsed = parse_community_value(text)
        if isinstance(parsed, str):
            f.problem(where, parsed)
        else:
            communities.append(parsed)

    pools = f.strings(spec, "ipAddressPools", "spec.ipAddressPools")
    pool_selectors = f.selectors(spec, "ipAddressPoolSelectors", "spec.ipAddressPoolSelectors")
    node_selectors = f.selectors(spec, "nodeSelectors", "spec.nodeSelectors")
    peers = f.strings(spec, "peers", "spec.peers")
    service_selectors = f.selectors(spec, "serviceSelectors", "spec.serviceSelectors")

    if service_selectors:
        if length_v4 is not None and length_v4 != model.DEFAULT_AGGREGATION_LENGTH:
            f.problem(
                "spec.aggregationLength",
                "serviceSelectors and aggregationLength are mutually exclusive: "
                f"with serviceSelectors it must stay {model.DEFAULT_AGGREGATION_LENGTH}",
            )
        if length_v6 is not None and length_v6 != model.DEFAULT_AGGREGATION_LENGTH_V6:
            f.problem(
                "spec.aggregationLengthV6",
                "serviceSelectors and aggregationLengthV6 are mutually exclusive: "
                f"with serviceSelectors it must stay {model.DEFAULT_AGGREGATION_LENGTH_V6}",
            )

    return _done(
        f,
        lambda: model.BGPAdvertisement(
            name=model.BGPAdvertisementName(f.name),
            aggregation_length=model.DEFAULT_AGGREGATION_LENGTH if length_v4 is None else length_v4,
            aggregation_length_v6=(
                model.DEFAULT_AGGREGATION_LENGTH_V6 if length_v6 is None else length_v6
            ),
            local_pref=local_pref or 0,
            communities=tuple(communities),
            ip_address_pools=tuple(model.PoolName(p) for p in pools),
            ip_address_pool_selectors=pool_selectors,
            node_selectors=node_selectors,
            peers=tuple(model.PeerName(p) for p in peers),
            service_selectors=service_selectors,
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def _timers(
    f: _Fields, hold: float | None, keepalive: float | None
) -> tuple[float | None, float | None]:
    """MetalLB's parseTimers: derive the missing one, then hold 0 or >= 3s, keepalive <= hold."""
    if hold is None and keepalive is None:
        return None, None
    if hold is None:
        assert keepalive is not None
        hold = keepalive * 3
    elif keepalive is None:
        keepalive = hold / 3
    if int(hold) != 0 and int(hold) < 3:
        f.problem("spec.holdTime", f"invalid hold time {hold:g}s: must be 0 or >= 3s")
    if keepalive > hold:
        f.problem(
            "spec.keepaliveTime",
            f"invalid keepaliveTime {keepalive:g}s: must not be greater than holdTime {hold:g}s",
        )
    return hold, keepalive


def _peer_asns(f: _Fields, spec: Mapping[Any, Any]) -> tuple[int | None, int, str, int]:
    """myASN, peerASN, dynamicASN and localASN; exactly one of peerASN and dynamicASN is set."""
    my_asn = f.integer(spec, "myASN", "spec.myASN", low=0, high=UINT32_MAX, required=True)
    if my_asn == 0:
        f.problem("spec.myASN", "missing local ASN: must not be 0")
    peer_asn = f.integer(spec, "peerASN", "spec.peerASN", low=0, high=UINT32_MAX) or 0
    dynamic_asn = f.string(spec, "dynamicASN", "spec.dynamicASN")
    if dynamic_asn not in ("", "internal", "external"):
        f.problem("spec.dynamicASN", f"invalid dynamicASN {dynamic_asn!r}: internal or external")
    if peer_asn == 0 and not dynamic_asn:
        f.problem("spec.peerASN", "missing peer ASN and dynamicASN: set exactly one")
    elif peer_asn != 0 and dynamic_asn:
        f.problem("spec.peerASN", "both peerASN and dynamicASN specified: set exactly one")
    local_asn = f.integer(spec, "localASN", "spec.localASN", low=0, high=UINT32_MAX) or 0
    return my_asn, peer_asn, dynamic_asn, local_asn


def _peer_addresses(
    f: _Fields, spec: Mapping[Any, Any]
) -> tuple[addresses.IPAddress | None, str, addresses.IPAddress | None, addresses.IPAddress | None]:
    """peerAddress or interface (exactly one), sourceAddress and routerID."""
    peer_address = f.ip(spec, "peerAddress", "spec.peerAddress", "BGPPeer address")
    interface = f.string(spec, "interface", "spec.interface")
    if not spec.get("peerAddress") and not interface:
        f.problem("spec.peerAddress", "peer has no peerAddress or interface specified")
    if spec.get("peerAddress") and interface:
        f.problem("spec.interface", "peer has both peerAddress and interface specified")
    source = f.ip(spec, "sourceAddress", "spec.sourceAddress", "source IP")
    router_id = f.ip(spec, "routerID", "spec.routerID", "router ID")
    return peer_address, interface, source, router_id


def parse_bgppeer(obj: Mapping[str, Any]) -> tuple[model.BGPPeer | None, list[Problem]]:
    """v1beta2 and v1beta1 share field names; v1beta1's fields are a subset, parsed the same."""
    started = _start(obj, model.BGP_PEER)
    if started is None:
        return None, _not_an_object(model.BGP_PEER)
    f, metadata, spec = started
    labels = f.labels(metadata)

    my_asn, peer_asn, dynamic_asn, local_asn = _peer_asns(f, spec)
    multihop = f.boolean(spec, "ebgpMultiHop", "spec.ebgpMultiHop", False)
    if multihop and my_asn is not None and peer_asn == my_asn:
        f.problem("spec.ebgpMultiHop", "invalid ebgpMultiHop for an iBGP peer (peerASN == myASN)")

    peer_address, interface, source, router_id = _peer_addresses(f, spec)
    port = f.integer(spec, "peerPort", "spec.peerPort", low=0, high=16384)

    hold, keepalive = _timers(
        f,
        f.duration(spec, "holdTime", "spec.holdTime"),
        f.duration(spec, "keepaliveTime", "spec.keepaliveTime"),
    )
    connect = f.duration(spec, "connectTime", "spec.connectTime")
    if connect is not None and not (1 <= connect <= 65535 and connect == int(connect)):
        f.problem("spec.connectTime", "connect time must be a whole number of seconds in 1..65535")

    node_selectors = f.selectors(spec, "nodeSelectors", "spec.nodeSelectors")
    password = f.string(spec, "password", "spec.password")
    secret_ref = f.mapping(spec, "passwordSecret", "spec.passwordSecret")
    secret_name = f.string(secret_ref, "name", "spec.passwordSecret.name")
    f.string(secret_ref, "namespace", "spec.passwordSecret.namespace")
    if password and secret_name:
        f.problem("spec.passwordSecret", "can not have both password and passwordSecret set")
    bfd_profile = f.string(spec, "bfdProfile", "spec.bfdProfile")
    graceful = f.boolean(spec, "enableGracefulRestart", "spec.enableGracefulRestart", False)
    vrf = f.string(spec, "vrf", "spec.vrf")
    disable_mp = f.boolean(spec, "disableMP", "spec.disableMP", False)
    dual_stack = f.boolean(spec, "dualStackAddressFamily", "spec.dualStackAddressFamily", False)

    return _done(
        f,
        lambda: model.BGPPeer(
            name=model.PeerName(f.name),
            my_asn=my_asn or 0,
            peer_asn=peer_asn,
            dynamic_asn=dynamic_asn,
            local_asn=local_asn,
            peer_address=peer_address,
            interface=interface,
            source_address=source,
            # 0 is v1beta1's "unset" (it has no schema default); v1beta2 defaults to 179.
            peer_port=port or model.DEFAULT_PEER_PORT,
            hold_time=hold,
            keepalive_time=keepalive,
            connect_time=connect,
            router_id=router_id,
            node_selectors=node_selectors,
            password=password,
            password_secret=model.SecretName(secret_name) if secret_name else None,
            bfd_profile=model.BFDProfileName(bfd_profile) if bfd_profile else None,
            enable_graceful_restart=graceful,
            ebgp_multi_hop=multihop,
            vrf=vrf,
            disable_mp=disable_mp,
            dual_stack_address_family=dual_stack,
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def parse_bfdprofile(obj: Mapping[str, Any]) -> tuple[model.BFDProfile | None, list[Problem]]:
    started = _start(obj, model.BFD_PROFILE)
    if started is None:
        return None, _not_an_object(model.BFD_PROFILE)
    f, metadata, spec = started
    labels = f.labels(metadata)

    def interval(key: str) -> int | None:
        return f.integer(spec, key, f"spec.{key}", low=10, high=60000)

    receive, transmit, echo = (
        interval("receiveInterval"),
        interval("transmitInterval"),
        interval("echoInterval"),
    )
    multiplier = f.integer(spec, "detectMultiplier", "spec.detectMultiplier", low=2, high=255)
    ttl = f.integer(spec, "minimumTtl", "spec.minimumTtl", low=1, high=254)
    echo_mode = f.boolean(spec, "echoMode", "spec.echoMode", False)
    passive = f.boolean(spec, "passiveMode", "spec.passiveMode", False)
    return _done(
        f,
        lambda: model.BFDProfile(
            name=model.BFDProfileName(f.name),
            receive_interval=receive,
            transmit_interval=transmit,
            detect_multiplier=multiplier,
            echo_interval=echo,
            echo_mode=echo_mode,
            passive_mode=passive,
            minimum_ttl=ttl,
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def parse_community(obj: Mapping[str, Any]) -> tuple[model.Community | None, list[Problem]]:
    started = _start(obj, model.COMMUNITY)
    if started is None:
        return None, _not_an_object(model.COMMUNITY)
    f, metadata, spec = started
    labels = f.labels(metadata)
    aliases: list[model.CommunityAlias] = []
    for where, item in f.items(spec, "communities", "spec.communities"):
        if not isinstance(item, Mapping):
            f.problem(where, "must be an object with name and value")
            continue
        name = f.string(item, "name", f"{where}.name", required=True)
        value = f.string(item, "value", f"{where}.value", required=True)
        if not name or not value:
            continue
        parsed = parse_community_value(value)
        if isinstance(parsed, str):
            f.problem(f"{where}.value", parsed)
        elif isinstance(parsed, model.CommunityRef):
            f.problem(
                f"{where}.value",
                f"{value!r} is not a community value: use a:b or large:a:b:c",
            )
        else:
            aliases.append(model.CommunityAlias(model.AliasName(name), parsed))
    return _done(
        f,
        lambda: model.Community(
            name=model.CommunityName(f.name),
            communities=tuple(aliases),
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def _status_fields(f: _Fields, obj: Mapping[Any, Any]) -> tuple[Mapping[Any, Any], str, str, str]:
    status = f.mapping(obj, "status", "status")
    return (
        status,
        f.string(status, "node", "status.node"),
        f.string(status, "serviceName", "status.serviceName"),
        f.string(status, "serviceNamespace", "status.serviceNamespace"),
    )


def parse_servicel2status(
    obj: Mapping[str, Any],
) -> tuple[model.ServiceL2Status | None, list[Problem]]:
    started = _start(obj, model.SERVICE_L2_STATUS)
    if started is None:
        return None, _not_an_object(model.SERVICE_L2_STATUS)
    f, metadata, _ = started
    labels = f.labels(metadata)
    status, node, service, service_namespace = _status_fields(f, obj)
    interfaces: list[str] = []
    for where, item in f.items(status, "interfaces", "status.interfaces"):
        if not isinstance(item, Mapping):
            f.problem(where, "must be an object")
            continue
        interfaces.append(f.string(item, "name", f"{where}.name"))
    return _done(
        f,
        lambda: model.ServiceL2Status(
            name=f.name,
            node=model.NodeName(node),
            service_name=service,
            service_namespace=service_namespace,
            interfaces=tuple(interfaces),
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


def parse_servicebgpstatus(
    obj: Mapping[str, Any],
) -> tuple[model.ServiceBGPStatus | None, list[Problem]]:
    started = _start(obj, model.SERVICE_BGP_STATUS)
    if started is None:
        return None, _not_an_object(model.SERVICE_BGP_STATUS)
    f, metadata, _ = started
    labels = f.labels(metadata)
    status, node, service, service_namespace = _status_fields(f, obj)
    peers = f.strings(status, "peers", "status.peers", unique=False)
    return _done(
        f,
        lambda: model.ServiceBGPStatus(
            name=f.name,
            node=model.NodeName(node),
            service_name=service,
            service_namespace=service_namespace,
            peers=tuple(model.PeerName(p) for p in peers),
            labels=labels,
            namespace=_namespace(metadata),
        ),
    )


PARSERS: Mapping[str, Callable[[Mapping[str, Any]], tuple[Any, list[Problem]]]] = {
    model.IP_ADDRESS_POOL: parse_ipaddresspool,
    model.L2_ADVERTISEMENT: parse_l2advertisement,
    model.BGP_ADVERTISEMENT: parse_bgpadvertisement,
    model.BGP_PEER: parse_bgppeer,
    model.BFD_PROFILE: parse_bfdprofile,
    model.COMMUNITY: parse_community,
    model.SERVICE_L2_STATUS: parse_servicel2status,
    model.SERVICE_BGP_STATUS: parse_servicebgpstatus,
}


def parse(kind: str, obj: Mapping[str, Any]) -> tuple[Any, list[Problem]]:
    """Dispatch on kind; an unknown kind is a Problem, not an exception."""
    parser = PARSERS.get(kind)
    if parser is None:
        return None, [Problem(str(kind), "", "kind", "is not a metallb.io kind")]
    return parser(obj)


# --- The bundle ----------------------------------------------------------------------------------


def _secret_names(objects: Iterable[Any]) -> tuple[frozenset[model.SecretName], list[Problem]]:
    names: set[model.SecretName] = set()
    problems: list[Problem] = []
    for obj in objects:
        metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if isinstance(name, str) and name:
            names.add(model.SecretName(name))
        else:
            problems.append(Problem(model.SECRET, "", "metadata.name", "is required"))
    return frozenset(names), problems


def _sort_key(value: Any) -> tuple[str, str, str]:
    # The content breaks ties between namesakes (possible only across namespaces or in
    # hand-built inputs), so that the order never depends on the order of the input lists.
    return (str(value.name), str(value.namespace), repr(value))


def parse_config(
    objects_by_kind: Mapping[str, Iterable[Any]],
) -> tuple[model.Config, list[Problem]]:
    """Parse every object of every configuration kind; keep all that parse.

    `objects_by_kind` maps a kind name (`IPAddressPool`, ..., and `Secret` for the Secrets in
    the MetalLB namespace) to raw objects. A bad object adds Problems and is left out; it never
    disturbs the others. Objects are ordered by name so the result does not depend on list order.
    Cross-object rules are not checked here: see `ironlb.validation.validate`.
    """
    parsed: dict[str, list[Any]] = {kind: [] for kind in model.CONFIG_KINDS}
    problems: list[Problem] = []
    secrets: frozenset[model.SecretName] = frozenset()
    for kind, objects in objects_by_kind.items():
        if kind == model.SECRET:
            secrets, secret_problems = _secret_names(objects)
            problems.extend(secret_problems)
            continue
        if kind not in parsed:
            if kind in PARSERS:
                continue  # status kinds are outputs, not configuration
            problems.append(
                Problem(str(kind), "", "kind", "is not a metallb.io configuration kind")
            )
            continue
        for obj in objects:
            value, object_problems = PARSERS[kind](obj)
            problems.extend(object_problems)
            if value is not None:
                parsed[kind].append(value)
    for values in parsed.values():
        values.sort(key=_sort_key)
    config = model.Config(
        pools=tuple(parsed[model.IP_ADDRESS_POOL]),
        l2_advertisements=tuple(parsed[model.L2_ADVERTISEMENT]),
        bgp_advertisements=tuple(parsed[model.BGP_ADVERTISEMENT]),
        bgp_peers=tuple(parsed[model.BGP_PEER]),
        bfd_profiles=tuple(parsed[model.BFD_PROFILE]),
        communities=tuple(parsed[model.COMMUNITY]),
        secret_names=secrets,
    )
    return config, problems
