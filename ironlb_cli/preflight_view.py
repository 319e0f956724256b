"""`ironlb preflight`: whether a cluster running MetalLB is ready for ironlb to take it over
(docs/migration.md), from what the API holds. Pure: the shell fetches, this judges.

Each finding is `fail` (the take-over would not work: fix it first), `warn` (it works, at a cost
the finding names) or `ok`. The checks, in the order of the doc's steps:

1. ironlb's CRDs are installed over MetalLB's: the BGPPeer CRD converts its versions without a
   webhook (MetalLB's needs its webhook, which goes with MetalLB) and the ConfigurationState CRD
   exists (MetalLB 0.15 has none; ironlb's speakers write one per node).
2. Every stored metallb.io object passes ironlb's parsing and cross-object validation (the
   webhook's rules): the problems `ironlb status` lists.
3. MetalLB's speaker Pods match the take-over selector, so ironlb's speakers will see them
   (a node without one is served by ironlb at once); their memberlist port is not the one
   ironlb's speakers will bind beside them.
4. BGPPeers without graceful restart: their routes pause when the sessions change hands.
5. MetalLB's controller: two controllers would write the same Service status; ironlb's is
   installed once MetalLB's is gone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironlb import honouring, model, taking_over
from ironlb_cli import readers, status_view

BGPPEER_CRD = "bgppeers.metallb.io"
CONFIGURATION_STATE_CRD = "configurationstates.metallb.io"
MEMBERLIST_PORT_NAMES = ("memberlist-udp", "memberlist")
DEFAULT_MEMBERLIST_PORT = 7946
CONTROLLER_SELECTOR = "app.kubernetes.io/name=metallb,app.kubernetes.io/component=controller"


class Level(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    check: str
    message: str


@dataclass(frozen=True, slots=True)
class Inputs:
    crds: Sequence[Mapping[str, Any]]  # the metallb.io CustomResourceDefinitions
    config: Mapping[str, Sequence[Mapping[str, Any]]]  # kind -> stored objects
    nodes: Sequence[Mapping[str, Any]]
    metallb_speakers: Sequence[Mapping[str, Any]]  # Pods matching the take-over selector
    metallb_controllers: Sequence[Mapping[str, Any]] = ()
    selector: str = taking_over.METALLB_SPEAKER_SELECTOR
    ml_bind_port: int = DEFAULT_MEMBERLIST_PORT  # the port ironlb's speakers will bind
    secret_names: frozenset[str] | None = None  # None: not readable


def check(inputs: Inputs) -> list[Finding]:
    return [
        *_crds(inputs.crds),
        *_objects(inputs),
        *_speakers(inputs),
        *_graceful_restart(inputs),
        *_controllers(inputs.metallb_controllers),
    ]


def passed(findings: Iterable[Finding]) -> bool:
    return all(f.level is not Level.FAIL for f in findings)


def _name(obj: Mapping[str, Any]) -> str:
    return readers.text(readers.mapping(obj.get("metadata")).get("name"))


def _crds(crds: Sequence[Mapping[str, Any]]) -> list[Finding]:
    by_name = {_name(c): c for c in crds}
    peer = by_name.get(BGPPEER_CRD)
    spec = readers.mapping(peer.get("spec") if peer is not None else None)
    strategy = readers.mapping(spec.get("conversion")).get("strategy")
    problems = []
    if peer is None:
        problems.append(f"no {BGPPEER_CRD}")
    elif strategy not in (None, "None"):
        problems.append(
            f"{BGPPEER_CRD} converts through a webhook ({strategy}): MetalLB's, which goes "
            "with MetalLB"
        )
    if CONFIGURATION_STATE_CRD not in by_name:
        problems.append(f"no {CONFIGURATION_STATE_CRD} (ironlb's speakers write one per node)")
    if problems:
        text = "; ".join(problems)
        return [Finding(Level.FAIL, "crds", f"{text}: apply ironlb's CRDs over MetalLB's first")]
    return [Finding(Level.OK, "crds", "ironlb's CRDs are installed")]


def _objects(inputs: Inputs) -> list[Finding]:
    config, found = status_view.checked(inputs.config, inputs.secret_names)
    out = [Finding(Level.FAIL, "objects", str(p)) for p in found]
    # Accepted, and said where the user looks, but not done: worth knowing before the switch.
    out += [Finding(Level.WARN, "not-honoured", str(p)) for p in honouring.not_honoured(config)]
    if not found:
        count = sum(len(inputs.config.get(kind, ())) for kind in model.CONFIG_KINDS)
        out.insert(
            0, Finding(Level.OK, "objects", f"{count} metallb.io objects pass ironlb's checks")
        )
    return out


def _memberlist_port(pod: Mapping[str, Any]) -> int | None:
    """The UDP port the Pod's speaker binds for memberlist: its named container port, else its
    METALLB_ML_BIND_PORT, else memberlist's default (the speaker is on the host network)."""
    for item in readers.items(readers.mapping(pod.get("spec")).get("containers")):
        container = readers.mapping(item)
        for port in map(readers.mapping, readers.items(container.get("ports"))):
            if port.get("name") in MEMBERLIST_PORT_NAMES:
                value = port.get("containerPort")
                return value if isinstance(value, int) else None
        for env in map(readers.mapping, readers.items(container.get("env"))):
            if env.get("name") == "METALLB_ML_BIND_PORT":
                value = readers.text(env.get("value"))
                return int(value) if value.isdigit() else None
    return DEFAULT_MEMBERLIST_PORT


def _speakers(inputs: Inputs) -> list[Finding]:
    on: dict[str, Mapping[str, Any]] = {}
    for pod in inputs.metallb_speakers:
        node = readers.text(readers.mapping(pod.get("spec")).get("nodeName"))
        if node:
            on.setdefault(node, pod)
    nodes = sorted(_name(n) for n in inputs.nodes)
    without = [n for n in nodes if n not in on]
    out = []
    if not on:
        out.append(
            Finding(
                Level.FAIL,
                "speakers",
                f"no Pod matches {inputs.selector!r} on any node: ironlb's speakers would "
                "announce beside MetalLB's at once (give the selector of MetalLB's speaker "
                "Pods: speaker.takeOverFrom)",
            )
        )
        return out
    detail = f"MetalLB's speaker runs on {len(on)} of {len(nodes)} nodes"
    if without:
        detail += f"; ironlb serves at once on {', '.join(without)}"
    out.append(Finding(Level.WARN if without else Level.OK, "speakers", detail))
    clashing = sorted(n for n, pod in on.items() if _memberlist_port(pod) == inputs.ml_bind_port)
    if clashing:
        out.append(
            Finding(
                Level.FAIL,
                "membership-port",
                f"MetalLB's speakers bind UDP {inputs.ml_bind_port} for memberlist (on "
                f"{', '.join(clashing)}): give ironlb's another (speaker.memberlist.mlBindPort, "
                f"e.g. {inputs.ml_bind_port + 1}) so both run side by side",
            )
        )
    else:
        out.append(
            Finding(
                Level.OK,
                "membership-port",
                f"ironlb's membership port {inputs.ml_bind_port} is free beside MetalLB's",
            )
        )
    return out


def _graceful_restart(inputs: Inputs) -> list[Finding]:
    peers = inputs.config.get(model.BGP_PEER, ())
    without = sorted(
        _name(p) for p in peers if not readers.mapping(p.get("spec")).get("enableGracefulRestart")
    )
    if not peers:
        return []
    if not without:
        return [Finding(Level.OK, "graceful-restart", "every BGPPeer has enableGracefulRestart")]
    return [
        Finding(
            Level.WARN,
            "graceful-restart",
            f"BGPPeers without enableGracefulRestart ({', '.join(without)}): their routes "
            "pause while the sessions change hands (about a second towards ironlb; back to "
            "MetalLB, until its FRR is configured: about 10 s). With it (and the router's "
            "graceful-restart helper, FRR's default) the router keeps them.",
        )
    ]


def _controllers(pods: Sequence[Mapping[str, Any]]) -> list[Finding]:
    running = [
        _name(p) for p in pods if not readers.mapping(p.get("metadata")).get("deletionTimestamp")
    ]
    if not running:
        return []
    return [
        Finding(
            Level.OK,
            "controller",
            f"MetalLB's controller runs ({', '.join(sorted(running))}): install ironlb with "
            "controller.enabled=false, and enable it once MetalLB is uninstalled",
        )
    ]
