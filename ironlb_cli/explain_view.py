"""`ironlb status --explain NAMESPACE/NAME`, the pure part: why each node announces it or not.

Every speaker decides, after every pass and for every Service, whether its own node announces it
and, if not, why; it serves that verdict at `GET /explain?service=NAMESPACE/NAME` on its metrics
port (`speaker.health`). This module turns those answers, and the API objects, into one row per
node; the shell (`ironlb_cli.__main__`) only fetches, `render` prints.

What a speaker answers (`SpeakerExplain`; the speaker produces exactly this)::

    {"node": "node1", "service": "ns/name",
     "datapath": {"ready": true, "reason": null, "message": ""},
     "verdicts": [
       {"protocol": "layer2", "announcing": false, "reason": "notOwner",
        "message": "node2 is elected", "ips": ["10.0.0.1"]},
       {"protocol": "bgp", "announcing": true, "reason": null, "message": "to peers tor",
        "ips": ["10.0.0.1"]}],
     "conflicts": [{"ip": "10.0.0.1", "mac": "aa:bb:cc:dd:ee:ff", "interface": "eth0",
                    "last_seen_s_ago": 0.4}]}

* `datapath`: the node's data path as a whole (kube-proxy's health, a drain from the Node object);
  `reason` is one of `ironlb.datapath.Reason` when not ready;
* `verdicts`: one per protocol that applies to the Service on this node (`layer2`, `bgp`);
  `reason` is one of `speaker.desired.Reason` (`notOwner`, `noLocalEndpoints`, ...) or of
  `ironlb.datapath.Reason` when not announcing, null when announcing; `ips` the addresses the
  verdict is about;
* `conflicts`: another MAC seen answering ARP/NDP for an address this node owns (layer 2).

Reasons are printed as given: a speaker newer than this command may say something it does not
know, and that shows verbatim. The document is read as data: a field of the wrong type shows as
unknown, never stops the command.

A node whose speaker was not given, could not be reached or has no verdict falls back to what the
API says, and no more: `announcing` for each protocol whose ServiceL2Status / ServiceBGPStatus of
that node names the Service, and the data path from the `DataPathReady` condition of its
`speaker-<node>` ConfigurationState; else unknown.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from ironlb import configuration_state, datapath, parsing
from ironlb_cli import readers, status_view

SCHEMA_VERSION = 1
PROTOCOL_ORDER = ("layer2", "bgp")  # columns; a protocol this command does not know comes after
MAX_KEY = 63 + 1 + 63  # namespace/name, both DNS labels


# --- what a speaker answers -----------------------------------------------------------------------


class DataPath(TypedDict):
    ready: bool
    reason: str | None
    message: str


class Verdict(TypedDict):
    protocol: str
    announcing: bool
    reason: str | None
    message: str
    ips: list[str]


class Conflict(TypedDict):
    ip: str
    mac: str
    interface: str
    last_seen_s_ago: float


class SpeakerExplain(TypedDict):
    node: str
    service: str
    datapath: DataPath
    verdicts: list[Verdict]
    conflicts: list[Conflict]


# --- inputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """One speaker's answer to `/explain`: its document, or why there is none."""

    url: str
    node: str | None = None  # from `NAME=URL`
    document: Any = None  # the JSON body of a 200
    status: int | None = None  # the HTTP status, when an answer came back
    error: str | None = None  # why there is no document (a 404's `error` says which Service)


@dataclass(frozen=True, slots=True)
class Inputs:
    service: str  # "namespace/name"
    status: status_view.Inputs  # the API objects, as `ironlb status` reads them
    configuration_states: Sequence[Any] | None = ()  # None: could not be read
    probes: Sequence[Probe] = ()


# --- the view -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerdictView:
    protocol: str
    announcing: bool | None  # None: the speaker's answer did not say
    reason: str | None
    message: str
    ips: tuple[str, ...]
    source: str  # "speaker" | "ServiceL2Status" | "ServiceBGPStatus"


@dataclass(frozen=True, slots=True)
class DataPathView:
    ready: bool | None  # None: unknown
    reason: str | None
    message: str
    source: str  # "speaker" | "ConfigurationState" | "none"


@dataclass(frozen=True, slots=True)
class ConflictView:
    ip: str
    mac: str
    interface: str
    last_seen_s_ago: float | None


@dataclass(frozen=True, slots=True)
class NodeExplain:
    name: str
    is_node: bool  # False: a speaker was given for a name the API has no Node of
    speaker: str  # "answered" | "no-verdict" | "error" | "not-given"
    url: str | None  # the /explain URL asked
    error: str | None  # why the speaker gave no verdict
    verdicts: tuple[VerdictView, ...]
    datapath: DataPathView
    conflicts: tuple[ConflictView, ...]

    @property
    def source(self) -> str:
        """Where the row comes from: "speaker", "api" (status objects, ConfigurationState) or
        "none" (nothing is known)."""
        if self.speaker == "answered":
            return "speaker"
        return "api" if self.verdicts or self.datapath.source != "none" else "none"

    @property
    def unknown_because(self) -> str:
        """Why what the speaker would say is unknown, for `unknown (...)`."""
        return {
            "answered": "",
            "no-verdict": "speaker has no verdict",
            "error": "speaker unreachable",
            "not-given": "speaker not scraped",
        }[self.speaker]


@dataclass(frozen=True, slots=True)
class ExplainView:
    service: status_view.ServiceView
    nodes: tuple[NodeExplain, ...]
    problems: tuple[str, ...]  # probes that fit no node, answers about something else

    @property
    def protocols(self) -> tuple[str, ...]:
        seen = {v.protocol for n in self.nodes for v in n.verdicts}
        known = [p for p in PROTOCOL_ORDER if p in seen]
        return (*known, *sorted(seen - set(PROTOCOL_ORDER)))


class ServiceNotFound(LookupError):
    """The Service does not exist, or is none that ironlb handles; the message says which."""


# --- small readers that never raise ---------------------------------------------------------------


def _reason(value: Any) -> str | None:
    """A reason as given; an unknown one verbatim, a non-string one as its JSON-ish text."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _name(obj: Any) -> str:
    return readers.text(readers.mapping(readers.mapping(obj).get("metadata")).get("name"))


def _key(obj: Any) -> str:
    meta = readers.mapping(readers.mapping(obj).get("metadata"))
    return f"{readers.text(meta.get('namespace'))}/{readers.text(meta.get('name'))}"


# --- the URL --------------------------------------------------------------------------------------


def valid_key(text: str) -> bool:
    """Whether `text` is one `namespace/name`."""
    namespace, slash, name = text.partition("/")
    return bool(slash and namespace and name and "/" not in name and len(text) <= MAX_KEY)


def explain_url(metrics_url: str, service: str) -> str | None:
    """A speaker's /explain URL for `service`, from its /metrics URL; None if not /metrics."""
    try:
        parts = urllib.parse.urlsplit(metrics_url)
    except ValueError:
        return None
    if not parts.path.endswith("/metrics"):
        return None
    path = parts.path[: -len("metrics")] + "explain"
    query = urllib.parse.urlencode({"service": service})
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, query, ""))


# --- reading a speaker's answer -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Answer:
    node: str | None
    verdicts: tuple[VerdictView, ...]
    datapath: DataPathView
    conflicts: tuple[ConflictView, ...]


def read_answer(document: Any, service: str) -> _Answer:
    """A speaker's document as data; ValueError when it is no verdict about `service`."""
    if not isinstance(document, Mapping):
        raise ValueError("the answer is not a JSON object")
    about = document.get("service")
    if isinstance(about, str) and about != service:
        raise ValueError(f"the answer is about {about}, not {service}")
    if not isinstance(document.get("verdicts"), list):
        raise ValueError("the answer has no verdicts")
    verdicts = []
    for raw in document["verdicts"]:
        v = readers.mapping(raw)
        protocol = readers.text(v.get("protocol"))
        if not protocol:
            continue
        verdicts.append(
            VerdictView(
                protocol=protocol,
                announcing=_bool(v.get("announcing")),
                reason=_reason(v.get("reason")),
                message=readers.text(v.get("message")),
                ips=tuple(ip for ip in readers.items(v.get("ips")) if isinstance(ip, str)),
                source="speaker",
            )
        )
    d = readers.mapping(document.get("datapath"))
    path = DataPathView(
        ready=_bool(d.get("ready")),
        reason=_reason(d.get("reason")),
        message=readers.text(d.get("message")),
        source="speaker",
    )
    conflicts = []
    for raw in readers.items(document.get("conflicts")):
        c = readers.mapping(raw)
        ago = _seconds(c.get("last_seen_s_ago"))
        conflicts.append(
            ConflictView(
                ip=readers.text(c.get("ip")),
                mac=readers.text(c.get("mac")),
                interface=readers.text(c.get("interface")),
                last_seen_s_ago=ago,
            )
        )
    return _Answer(
        node=readers.text(document.get("node")) or None,
        verdicts=_ordered(verdicts),
        datapath=path,
        conflicts=tuple(conflicts),
    )


def _ordered(verdicts: Sequence[VerdictView]) -> tuple[VerdictView, ...]:
    def rank(v: VerdictView) -> tuple[int, str]:
        known = v.protocol in PROTOCOL_ORDER
        return (PROTOCOL_ORDER.index(v.protocol) if known else len(PROTOCOL_ORDER), v.protocol)

    return tuple(sorted(verdicts, key=rank))


# --- building the view ----------------------------------------------------------------------------


def build(inputs: Inputs) -> ExplainView:
    """The explain view of `inputs.service`; ServiceNotFound when there is nothing to explain."""
    key = inputs.service
    namespace, _, name = key.partition("/")
    raw = next((s for s in inputs.status.services if _key(s) == key), None)
    if raw is None:
        raise ServiceNotFound(f"Service {key} not found")
    found = status_view.build(inputs.status)
    service = next((s for s in found.services if (s.namespace, s.name) == (namespace, name)), None)
    if service is None:
        spec = readers.mapping(readers.mapping(raw).get("spec"))
        kind = readers.text(spec.get("type")) or "ClusterIP"
        lb_class = readers.text(spec.get("loadBalancerClass"))
        what = f"type {kind}" + (f" with loadBalancerClass {lb_class}" if lb_class else "")
        ours = inputs.status.lb_class
        handled = f"with loadBalancerClass {ours}" if ours else "without a loadBalancerClass"
        raise ServiceNotFound(
            f"Service {key} is not one ironlb handles: it is {what}; ironlb handles type "
            f"LoadBalancer {handled} (--lb-class)"
        )

    nodes = [n for n in inputs.status.nodes if _name(n)]
    node_names = [_name(n) for n in nodes]
    answers, problems = _match(inputs.probes, nodes, key)
    problems[:0] = inputs.status.speaker_notes
    fallback = _Fallback.of(inputs, key)
    if inputs.configuration_states is None:
        problems.append(
            "ConfigurationStates could not be read: the data path of a node whose speaker gave "
            "no verdict is unknown"
        )
    rows = [(n, True) for n in node_names]
    rows += [(n, False) for n in sorted(answers) if n not in set(node_names)]
    out = []
    for node, is_node in rows:
        probe, answer, error = answers.get(node, (None, None, None))
        url = probe.url if probe is not None else None
        if answer is not None:
            out.append(
                NodeExplain(
                    node,
                    is_node,
                    "answered",
                    url,
                    None,
                    answer.verdicts,
                    answer.datapath,
                    answer.conflicts,
                )
            )
            continue
        if probe is None:
            speaker = "not-given"
        elif probe.status == 404:
            speaker = "no-verdict"
        else:
            speaker = "error"
        out.append(
            NodeExplain(
                node,
                is_node,
                speaker,
                url,
                error,
                fallback.verdicts(node),
                fallback.datapath(node),
                (),
            )
        )
    return ExplainView(
        service=service, nodes=tuple(sorted(out, key=lambda n: n.name)), problems=tuple(problems)
    )


def _match(
    probes: Sequence[Probe], nodes: Sequence[Any], key: str
) -> tuple[dict[str, tuple[Probe, _Answer | None, str | None]], list[str]]:
    """Node name -> (probe, its answer or None, why none); problems with the probes."""
    by_address = status_view.nodes_by_address(nodes)
    matched: dict[str, tuple[Probe, _Answer | None, str | None]] = {}
    problems: list[str] = []
    for probe in probes:
        answer: _Answer | None = None
        error = probe.error
        if error is None:
            try:
                answer = read_answer(probe.document, key)
            except ValueError as e:
                error = str(e)
        node = probe.node
        said = answer.node if answer is not None else None
        if said and node and said != node:
            problems.append(f"{probe.url}: given as node {node}, the speaker says it is {said}")
        node = said or node or status_view.node_of_url(probe.url, by_address)
        problem = status_view.file_under_node(
            matched, node, probe.url, (probe, answer, error), "asked"
        )
        if problem:
            problems.append(problem)
    return matched, problems


@dataclass(frozen=True, slots=True)
class _Fallback:
    """What the API says of each node for one Service, for nodes whose speaker did not."""

    announced: Mapping[str, tuple[VerdictView, ...]]
    paths: Mapping[str, DataPathView]

    @classmethod
    def of(cls, inputs: Inputs, key: str) -> _Fallback:
        announced: dict[str, list[VerdictView]] = {}
        for raw in inputs.status.l2_statuses:
            l2, _ = parsing.parse_servicel2status(readers.mapping(raw))
            if l2 is None or not l2.node or f"{l2.service_namespace}/{l2.service_name}" != key:
                continue
            where = f"on {', '.join(l2.interfaces)}" if l2.interfaces else ""
            verdict = VerdictView("layer2", True, None, where, (), "ServiceL2Status")
            announced.setdefault(l2.node, []).append(verdict)
        for raw in inputs.status.bgp_statuses:
            bgp, _ = parsing.parse_servicebgpstatus(readers.mapping(raw))
            if bgp is None or not bgp.node or f"{bgp.service_namespace}/{bgp.service_name}" != key:
                continue
            to = f"to peers {', '.join(sorted(bgp.peers))}" if bgp.peers else ""
            verdict = VerdictView("bgp", True, None, to, (), "ServiceBGPStatus")
            announced.setdefault(bgp.node, []).append(verdict)
        paths: dict[str, DataPathView] = {}
        for raw in inputs.configuration_states or ():
            name = _name(raw)
            if not name.startswith("speaker-"):
                continue
            for condition in readers.items(
                readers.mapping(readers.mapping(raw).get("status")).get("conditions")
            ):
                c = readers.mapping(condition)
                if c.get("type") != datapath.CONDITION_TYPE:
                    continue
                ready = {"True": True, "False": False}.get(readers.text(c.get("status")))
                reason, message = _reason(c.get("reason")), readers.text(c.get("message"))
                paths[name] = DataPathView(ready, reason, message, "ConfigurationState")
        return cls(
            announced={node: _dedup(found) for node, found in announced.items()},
            paths=paths,
        )

    def verdicts(self, node: str) -> tuple[VerdictView, ...]:
        return self.announced.get(node, ())

    def datapath(self, node: str) -> DataPathView:
        found = self.paths.get(configuration_state.speaker(node).name)
        return found or DataPathView(None, None, "", "none")


def _dedup(verdicts: Sequence[VerdictView]) -> tuple[VerdictView, ...]:
    """One verdict per protocol: two status objects of one node and Service say one thing."""
    by_protocol: dict[str, VerdictView] = {}
    for v in verdicts:
        by_protocol.setdefault(v.protocol, v)
    return _ordered(list(by_protocol.values()))
