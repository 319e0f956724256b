"""One log schema for every process: what a membership line looks like in the speaker's log."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from ironlb_io import logs
from speaker.membership import node


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """The root logger configured as a process does it, into a buffer; restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    buffer = io.StringIO()
    logs.configure_logging("INFO", buffer)
    yield buffer
    root.handlers[:] = handlers
    root.setLevel(level)


def test_membership_fields_are_keys_of_the_line(lines: io.StringIO) -> None:
    # Exactly the call node.Member makes when a member changes state.
    node.log.info("member changed", extra={"node": "n1", "member": "n2", "incarnation": 4})
    (line,) = [json.loads(text) for text in lines.getvalue().splitlines()]
    assert line["logger"] == "speaker.membership.node"
    assert (line["node"], line["member"], line["incarnation"]) == ("n1", "n2", 4)
    assert "fields" not in line


def test_values_that_are_not_json_scalars_are_written_as_text(lines: io.StringIO) -> None:
    logging.getLogger("t").warning("x", extra={"address": ("10.0.0.1", 7946)})
    (line,) = [json.loads(text) for text in lines.getvalue().splitlines()]
    assert line["address"] == "('10.0.0.1', 7946)" and line["level"] == "warning"


@pytest.mark.parametrize("level", ["warning", "WARN", "Info", "debug", "none"])
def test_every_command_line_spelling_of_a_level_is_understood(
    level: str, lines: io.StringIO
) -> None:
    logs.configure_logging(level, lines)
