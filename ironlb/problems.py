"""Errors a user can cause, as values.

A bad object must never crash a process; parsing and validation return `Problem`s that the shells
turn into admission denials, status conditions, Events and log lines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one object, naming the field a person must change."""

    kind: str
    name: str
    field: str
    message: str
    # A dangling reference may heal when its referent appears; admission does not reject it.
    transient: bool = False

    def __str__(self) -> str:
        where = f"{self.kind}/{self.name}" if self.name else self.kind
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )
