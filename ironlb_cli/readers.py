"""Readers of API objects and speaker answers that never raise: a field of the wrong shape reads
as empty, so a malformed object shows up as blanks or a problem, never as a crash. Pure; shared
by `status_view` and `explain_view`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""
