"""One log schema for every ironlb process: one JSON object per line, extra fields as keys.

`{"ts": ISO 8601 UTC with milliseconds, "level", "msg", "logger", ...extra}`, plus `object`
(namespace/name) for kopf's per-object loggers and `error` (the traceback) for exceptions. A
caller logs fields with `extra={"node": ...}`; values that are not JSON scalars are written as
their `str`, never as a Python repr inside a string. Loggers are named after their module
(`logging.getLogger(__name__)`), so the `logger` field says where a line was written.

The controller, the speaker and the data planes' own command lines all configure logging here.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
LEVELS = {
    "all": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "none": logging.CRITICAL + 1,
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra fields of the record become keys."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            "logger": record.name,
        }
        for key, value in record.__dict__.items():
            if key in _STANDARD or key == "settings" or key.startswith("k8s_"):
                continue
            line[key] = value if isinstance(value, str | int | float | bool | None) else str(value)
        ref = record.__dict__.get("k8s_ref")
        if isinstance(ref, Mapping):
            line["object"] = f"{ref.get('namespace') or ''}/{ref.get('name') or ''}".lstrip("/")
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"))


def configure_logging(level: str, stream: TextIO | None = None) -> None:
    """Every logger to `stream` (stdout; stderr for the data planes' command lines, whose stdout
    carries their event stream) at `level`, a name from LEVELS in any case."""
    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    threshold = LEVELS[level.lower()]
    root.setLevel(threshold)
    # kopf narrates every event at INFO; keep that for debugging only.
    kopf_level = logging.DEBUG if threshold <= logging.DEBUG else logging.WARNING
    logging.getLogger("kopf").setLevel(max(kopf_level, threshold))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
