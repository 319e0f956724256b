"""MetalLB's ConfigurationState objects: did a component accept its configuration? Pure.

MetalLB 0.15.3+ keeps one ConfigurationState named `controller` (label
`metallb.io/component-type=controller`) and one `speaker-<node>` per node (labels
`metallb.io/component-type=speaker`, `metallb.io/node-name=<node>`) in its namespace. Each holds
one condition written by the component's configuration reconciler (`poolReconcilerValid` for the
controller, `configReconcilerValid` for a speaker) and a summary that checks and alerts read:
`result` is `Unknown` without conditions, `Invalid` when a condition is False for a
`ConfigurationError`, else `Valid`; `errorSummary` joins the messages of those conditions.

Both programs build the status here, from the Problems their own parse found, and count as
errors what MetalLB's `config.For` refuses: an object that does not parse, a conflict, and the
references MetalLB cannot resolve (a BFDProfile, a password Secret, a community alias) although
ironlb calls them transient. An advertisement naming a pool or a peer that does not exist is no
error in MetalLB (it selects nothing) and is none here; it is reported on the advertisement's
own `Valid` condition (`controller.config_report`).

A field that is accepted but not honoured (`ironlb.honouring`) is no error either: MetalLB's
`result: Invalid` means the configuration was refused and the last good one is still in use,
which checks and alerts written for MetalLB rely on, while ironlb runs this configuration
without that field. A speaker says it in a condition of ironlb's own beside MetalLB's,
`Honoured` (`False`/`NotHonoured`, one line per object and field), like `DataPathReady`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironlb import annotations as keys
from ironlb import model
from ironlb.problems import Problem

CONTROLLER_CONDITION = "poolReconcilerValid"
SPEAKER_CONDITION = "configReconcilerValid"
REASON_OK = "Reconciled"
REASON_CONFIG = "ConfigurationError"
REASON_UNKNOWN = "UnknownError"
VALID, INVALID, UNKNOWN = "Valid", "Invalid", "Unknown"
HONOURED_CONDITION = "Honoured"
REASON_HONOURED = "Honoured"
REASON_NOT_HONOURED = "NotHonoured"
# A condition message stays readable (and far below the CRD's 32768 characters): a node whose
# routes all overflow must not write thousands of lines.
MAX_HONOURED_LINES = 20


@dataclass(frozen=True, slots=True)
class Component:
    """Who writes one ConfigurationState: its object name, labels and condition type."""

    name: str
    type: str  # "controller" | "speaker"
    condition: str
    node: str = ""

    @property
    def labels(self) -> dict[str, str]:
        labels = {keys.COMPONENT_TYPE: self.type}
        if self.node:
            labels[keys.NODE_NAME] = self.node
        return labels


CONTROLLER = Component("controller", "controller", CONTROLLER_CONDITION)


def speaker(node: str) -> Component:
    return Component(f"speaker-{node}", "speaker", SPEAKER_CONDITION, node)


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str  # "True" | "False"
    reason: str
    message: str


# Advertisement fields that select by name: a name that matches nothing is no error.
_SELECTING = {
    (model.L2_ADVERTISEMENT, "spec.ipAddressPools"),
    (model.BGP_ADVERTISEMENT, "spec.ipAddressPools"),
    (model.BGP_ADVERTISEMENT, "spec.peers"),
}


def is_error(problem: Problem) -> bool:
    """Whether MetalLB would refuse the configuration for this Problem."""
    if not problem.transient:
        return True
    return (problem.kind, problem.field.partition("[")[0]) not in _SELECTING


def verdict(problems: Iterable[Problem]) -> Verdict:
    """False for a ConfigurationError while any Problem is an error, else True."""
    hard = [str(p) for p in problems if is_error(p)]
    if hard:
        return Verdict("False", REASON_CONFIG, "; ".join(dict.fromkeys(hard)))
    return Verdict("True", REASON_OK, "")


def honoured(findings: Iterable[Problem]) -> Verdict:
    """The `Honoured` condition: True, or False with each finding (at most MAX_HONOURED_LINES)."""
    lines = list(dict.fromkeys(str(p) for p in findings))
    if not lines:
        return Verdict("True", REASON_HONOURED, "every field set is honoured")
    shown = lines[:MAX_HONOURED_LINES]
    if len(lines) > len(shown):
        shown.append(f"and {len(lines) - len(shown)} more")
    return Verdict("False", REASON_NOT_HONOURED, "; ".join(shown))


def summary(conditions: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(result, errorSummary) of a list of conditions, as MetalLB derives them."""
    if not conditions:
        return UNKNOWN, ""
    failing = [
        str(c.get("message") or "")
        for c in conditions
        if c.get("status") == "False" and c.get("reason") == REASON_CONFIG
    ]
    if failing:
        return INVALID, "\n".join(failing)
    return VALID, ""


def _conditions(current: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    status = (current or {}).get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def status(
    component: Component,
    problems: Iterable[Problem],
    current: Mapping[str, Any] | None,
    now: str,
    extra: Mapping[str, Verdict] | None = None,
) -> dict[str, Any]:
    """The whole status `component` wants, given the object as it is (or None).

    `extra`: conditions of ironlb's own types beside MetalLB's (a speaker's `DataPathReady`);
    they never count in `result` (only ConfigurationError does), so MetalLB's checks read the
    same. Conditions of other types are kept. `lastTransitionTime` moves only when a condition's
    status flips; MetalLB sets it to now on every reconcile, which would make every reconcile a
    write: we write only when what the object says changes.
    """
    wanted = {component.condition: verdict(problems), **(extra or {})}
    conditions = _conditions(current)
    merged = [dict(c) for c in conditions if c.get("type") not in wanted]
    for kind, want in wanted.items():
        ours = next((c for c in conditions if c.get("type") == kind), None)
        since = now
        if (
            ours is not None
            and ours.get("status") == want.status
            and ours.get("lastTransitionTime")
        ):
            since = str(ours["lastTransitionTime"])
        merged.append(
            {
                "type": kind,
                "status": want.status,
                "reason": want.reason,
                "message": want.message,
                "lastTransitionTime": since,
            }
        )
    result, errors = summary(merged)
    return {"result": result, "errorSummary": errors, "conditions": merged}


def status_patch(
    component: Component,
    problems: Iterable[Problem],
    current: Mapping[str, Any] | None,
    now: str,
    extra: Mapping[str, Verdict] | None = None,
) -> dict[str, Any] | None:
    """The merge patch for `<name>/status`, or None when the object already says this."""
    want = status(component, problems, current, now, extra)
    have = (current or {}).get("status")
    if isinstance(have, Mapping) and _same(have, want):
        return None
    return {"status": want}


def _same(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    if (have.get("result"), have.get("errorSummary") or "") != (
        want["result"],
        want["errorSummary"],
    ):
        return False
    fields = ("type", "status", "reason", "message", "lastTransitionTime")
    have_conditions = [tuple(c.get(f) for f in fields) for c in _conditions({"status": have})]
    return have_conditions == [tuple(c.get(f) for f in fields) for c in want["conditions"]]


def body(component: Component, namespace: str) -> dict[str, Any]:
    """The object to create (its status is set afterwards, through the status subresource)."""
    return {
        "apiVersion": f"{model.GROUP}/{model.RESOURCES[model.CONFIGURATION_STATE][1][-1]}",
        "kind": model.CONFIGURATION_STATE,
        "metadata": {"name": component.name, "namespace": namespace, "labels": component.labels},
    }
