"""Structured logs: one JSON object per line, so that log pipelines need no parsing rules."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = "ironlb.membership"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"), default=str)


def setup(level: str = "info") -> logging.Logger:
    """Route the membership logger to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(LOGGER)
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    return logger


def event(stream: Any, **fields: Any) -> None:
    """One JSON line on stream (the CLI's stdout), stamped with the monotonic clock.

    CLOCK_MONOTONIC is shared by every process on a host, so the benchmark can compare the stamps
    of different members directly.
    """
    fields = {"t": time.monotonic(), **fields}
    stream.write(json.dumps(fields, separators=(",", ":"), default=str) + "\n")
    stream.flush()
