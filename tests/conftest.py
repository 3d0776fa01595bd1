"""Figures a test measured for whoever reads the run (install size and time), printed after the
results: `pytestconfig.stash[FIGURES].append(line)` from any test or fixture."""

from __future__ import annotations

import pytest

FIGURES = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section("figures measured")
        for line in lines:
            terminalreporter.write_line(line)
