"""Unit tier: after the run, how many inputs each fuzz area tried (see tests/unit/fuzzing.py)."""

from __future__ import annotations

import pytest

from tests.unit import fuzzing


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not fuzzing.TRIED:
        return
    terminalreporter.section("fuzz")
    for area, count in sorted(fuzzing.TRIED.items()):
        terminalreporter.write_line(f"fuzz: {area} {count} inputs")
    terminalreporter.write_line(f"fuzz: total {fuzzing.TRIED.total()} inputs")
