"""Kubernetes label selectors (metav1.LabelSelector), parsed once and matched many times.

Pools, advertisements and peers select namespaces, services and nodes by labels. An empty selector
selects everything, as in Kubernetes; a list of selectors is OR-ed by the callers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ironlb.problems import Problem

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


EVERYTHING = LabelSelector()


def any_matches(selectors: tuple[LabelSelector, ...], labels: Mapping[str, str]) -> bool:
    """OR over a selector list, where an empty list selects everything."""
    return not selectors or any(s.matches(labels) for s in selectors)


def parse(
    raw: Any, *, kind: str, name: str, field: str
) -> tuple[LabelSelector | None, list[Problem]]:
    """Parse one metav1.LabelSelector dict; a malformed one gives Problems, never an exception."""

    def problem(sub: str, message: str) -> Problem:
        return Problem(kind, name, f"{field}{sub}", message)

    if raw is None:
        return EVERYTHING, []
    if not isinstance(raw, Mapping):
        return None, [problem("", "must be a label selector object")]
    problems: list[Problem] = []
    labels: list[tuple[str, str]] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        problems.append(problem(".matchLabels", "must be a map of strings"))
    else:
        for k, v in match_labels.items():
            if not isinstance(k, str) or not isinstance(v, str):
                problems.append(problem(".matchLabels", f"{k!r}: keys and values must be strings"))
            else:
                labels.append((k, v))
    requirements: list[Requirement] = []
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        problems.append(problem(".matchExpressions", "must be a list"))
        expressions = []
    for i, expr in enumerate(expressions):
        where = f".matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            problems.append(problem(where, "must be an object"))
            continue
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or not key:
            problems.append(problem(f"{where}.key", "is required"))
            continue
        if not isinstance(op, str) or op not in OPERATORS:
            problems.append(
                problem(f"{where}.operator", f"{op!r} is not one of {', '.join(sorted(OPERATORS))}")
            )
            continue
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(problem(f"{where}.values", "must be a list of strings"))
            continue
        if op in ("In", "NotIn") and not values:
            problems.append(problem(f"{where}.values", f"must not be empty for operator {op}"))
            continue
        if op in ("Exists", "DoesNotExist") and values:
            problems.append(problem(f"{where}.values", f"must be empty for operator {op}"))
            continue
        if len(set(values)) != len(values):
            problems.append(problem(f"{where}.values", "has duplicate values"))
            continue
        requirements.append(Requirement(key, str(op), frozenset(values)))
    if problems:
        return None, problems
    return LabelSelector(tuple(sorted(labels)), tuple(requirements)), []


def _key_constraints(
    selector: LabelSelector,
) -> dict[str, tuple[bool, bool, frozenset[str] | None, frozenset[str]]]:
    """Per key: (must exist, must be absent, allowed values or None for any, forbidden values)."""
    out: dict[str, tuple[bool, bool, frozenset[str] | None, frozenset[str]]] = {}

    def add(
        key: str,
        exists: bool = False,
        absent: bool = False,
        allowed: frozenset[str] | None = None,
        forbidden: frozenset[str] = frozenset(),
    ) -> None:
        e, a, al, fo = out.get(key, (False, False, None, frozenset()))
        if allowed is not None:
            al = allowed if al is None else al & allowed
        out[key] = (e or exists, a or absent, al, fo | forbidden)

    for key, value in selector.match_labels:
        add(key, exists=True, allowed=frozenset({value}))
    for r in selector.match_expressions:
        if r.operator == "In":
            add(r.key, exists=True, allowed=r.values)
        elif r.operator == "NotIn":
            add(r.key, forbidden=r.values)
        elif r.operator == "Exists":
            add(r.key, exists=True)
        else:
            add(r.key, absent=True)
    return out


def disjoint(a: LabelSelector, b: LabelSelector) -> bool:
    """True when no label set can match both: proven key by key, never by enumeration.

    Label values are arbitrary strings, so a key's combined constraint is unsatisfiable only when
    it must both exist and be absent, or when the values it may take (from matchLabels / In) are
    all excluded. Keys are independent, so one unsatisfiable key makes the pair disjoint, and if
    no key is, some label set matches both: the answer is exact.
    """
    ca, cb = _key_constraints(a), _key_constraints(b)
    for key in ca.keys() | cb.keys():
        ea, aa, ala, foa = ca.get(key, (False, False, None, frozenset()))
        eb, ab, alb, fob = cb.get(key, (False, False, None, frozenset()))
        exists, absent = ea or eb, aa or ab
        allowed = ala if alb is None else (alb if ala is None else ala & alb)
        forbidden = foa | fob
        if exists and absent:
            return True
        if allowed is not None and (absent or not allowed - forbidden):
            return True
    return False


def lists_disjoint(a: tuple[LabelSelector, ...], b: tuple[LabelSelector, ...]) -> bool:
    """Disjointness of two OR-ed selector lists (an empty list selects everything)."""
    return all(disjoint(x, y) for x in (a or (EVERYTHING,)) for y in (b or (EVERYTHING,)))
