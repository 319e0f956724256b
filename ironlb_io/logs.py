"""Structured logs for both processes: one JSON object per line, extra fields as keys.

Kept apart from `controller.operator` so that the speaker, which does not use kopf, does not
import it just to log.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
LEVELS = {
    "all": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
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


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    # kopf narrates every event at INFO; keep that for debugging only.
    kopf_level = logging.DEBUG if level in ("all", "debug") else logging.WARNING
    logging.getLogger("kopf").setLevel(max(kopf_level, LEVELS[level]))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
