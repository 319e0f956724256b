"""What is wrong with the configuration, written where a person looks: pure.

The webhook stops most mistakes at the door, but not all of them: two pools created at the same
moment both pass admission and overlap; an advertisement may name a pool that does not exist yet
(allowed on purpose, so a multi-document apply need not be ordered). Every metallb.io object gets
a `Valid` condition in its status — False with the reason and the message while it has a Problem,
True once it has none — and a Warning Event when a new Problem appears, so `kubectl describe`
says what to change. A field the object sets that ironlb accepts but does not honour
(`ironlb.honouring`) makes it False too, with the reason `NotHonoured` when nothing worse is
wrong: the object is in use, without that field. An Event is posted once per change of the
condition, which is the memory: a restarted controller posts nothing again. The rest of the
configuration keeps working meanwhile (that is the allocator's and the speakers' business; this
module only reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ironlb import model, parsing, validation
from ironlb.problems import Problem

CONDITION = "Valid"
REASON_VALID = "Valid"
REASON_INVALID = "InvalidConfiguration"
REASON_DANGLING = "DanglingReference"
REASON_NOT_HONOURED = "NotHonoured"
EVENT_REASON = "InvalidConfiguration"

ObjectKey = tuple[str, str]  # (kind, name)


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str  # "True" | "False"
    reason: str
    message: str


def verdicts(
    objects: Iterable[ObjectKey],
    problems: Iterable[Problem],
    not_honoured: Iterable[Problem] = (),
) -> dict[ObjectKey, Verdict]:
    """One verdict per object: its own Problems joined, conflicts before dangling references,
    then the fields it sets that are not honoured (`ironlb.honouring`'s findings)."""
    by_object: dict[ObjectKey, list[Problem]] = {}
    for p in problems:
        by_object.setdefault((p.kind, p.name), []).append(p)
    notes: dict[ObjectKey, list[Problem]] = {}
    for p in not_honoured:
        notes.setdefault((p.kind, p.name), []).append(p)
    out: dict[ObjectKey, Verdict] = {}
    for key in objects:
        found = by_object.get(key, [])
        unhonoured = notes.get(key, [])
        if not found and not unhonoured:
            out[key] = Verdict("True", REASON_VALID, "no problem found with the configuration")
            continue
        hard = [p for p in found if not p.transient]
        if hard:
            reason = REASON_INVALID
        elif found:
            reason = REASON_DANGLING
        else:
            reason = REASON_NOT_HONOURED
        ordered = [*hard, *(p for p in found if p.transient), *unhonoured]
        out[key] = Verdict("False", reason, "; ".join(dict.fromkeys(_line(p) for p in ordered)))
    return out


def event_reason(verdict: Verdict) -> str:
    """The Warning Event's reason: `NotHonoured` when that is all, else InvalidConfiguration."""
    return REASON_NOT_HONOURED if verdict.reason == REASON_NOT_HONOURED else EVENT_REASON


def _line(p: Problem) -> str:
    return f"{p.field}: {p.message}" if p.field else p.message


def current_condition(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == CONDITION:
            return c
    return None


def condition_patch(obj: Mapping[str, Any], verdict: Verdict, now: str) -> dict[str, Any] | None:
    """The status merge patch that sets our condition, or None when it already says this.

    Only our condition type is written (conditions is a map list keyed by type); the transition
    time moves only when the status flips, as Kubernetes conditions do.
    """
    current = current_condition(obj)
    if current is not None and (
        current.get("status"),
        current.get("reason"),
        current.get("message"),
    ) == (verdict.status, verdict.reason, verdict.message):
        return None
    since = now
    if current is not None and current.get("status") == verdict.status:
        since = str(current.get("lastTransitionTime") or now)
    generation = (obj.get("metadata") or {}).get("generation")
    condition: dict[str, Any] = {
        "type": CONDITION,
        "status": verdict.status,
        "reason": verdict.reason,
        "message": verdict.message,
        "lastTransitionTime": since,
    }
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    others = [
        c
        for c in ((obj.get("status") or {}).get("conditions") or [])
        if isinstance(c, Mapping) and c.get("type") != CONDITION
    ]
    return {"status": {"conditions": [*others, condition]}}


def needs_event(obj: Mapping[str, Any], verdict: Verdict) -> bool:
    """Warn when an object turns invalid or its problems change (not on every check)."""
    if verdict.status == "True":
        return False
    current = current_condition(obj)
    return current is None or current.get("message") != verdict.message


def controller_problems(objects: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[Problem]:
    """What the controller's own configuration check finds, for its ConfigurationState.

    MetalLB's controller parses only the pools and the communities (namespaces are selector
    inputs, not configuration), and so does this: an advertisement or a peer in error is the
    speakers' ConfigurationState's business, not the controller's.
    """
    mine = {kind: list(objects.get(kind, ())) for kind in CONTROLLER_KINDS}
    config, problems = parsing.parse_config(mine)
    return validation.order([*problems, *validation.validate(config)])


CONTROLLER_KINDS = (model.IP_ADDRESS_POOL, model.COMMUNITY)


def kinds() -> tuple[str, ...]:
    return model.CONFIG_KINDS
