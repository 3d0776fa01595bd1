"""The suite's shape: three tiers by folder, each marked with its name, and the shared fixtures.

- tests/unit: the sans-io core and pure checks (no sockets, no subprocesses, no sleeps);
- tests/proxy: retimer's shell in this process (mitmproxy's test flows, the in-process proxy,
  fakes on loopback);
- tests/e2e: the real `retimer` command, browsers, agent CLIs, PostgreSQL, HAProxy.
`pytest -m unit` (or `scripts/test --fast`) runs the first tier alone.

scripts/test runs the suite on pytest-xdist workers with `--dist loadgroup`: a module's tests stay
on one worker (its module-scoped fakes and proxies start once), except in a module marked
`spread`, whose tests go to any worker (long modules of independent tests). A test marked
`serial` runs after the parallel part, alone: it measures time and needs a quiet machine.

Figures a test measured for whoever reads the run (install size and time) are printed after the
results: `pytestconfig.stash[FIGURES].append(line)` from any test or fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.support.fixtures"]

# hypothesis' per-example deadline (200 ms) and its too-slow check are timing assertions: a busy
# machine failed a property test with one (the flake hunt); timing claims belong in bench/
settings.register_profile("retimer", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("retimer")

FIGURES = pytest.StashKey[list[str]]()
TIERS = ("unit", "proxy", "e2e")
HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = []
    config.addinivalue_line("markers", "unit: tests/unit, the sans-io core (set by folder)")
    config.addinivalue_line("markers", "proxy: tests/proxy, the shell in-process (set by folder)")
    config.addinivalue_line("markers", "e2e: tests/e2e, real processes and clients (set by folder)")
    config.addinivalue_line("markers", "serial: runs alone after the parallel part (scripts/test)")
    config.addinivalue_line("markers", "spread: this module's tests may run on different workers")
    config.addinivalue_line("markers", "slow: a unit test `scripts/test --fast` leaves out (fuzzing)")
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's, set per module here "
                            "(registered also for runs without xdist, e.g. the serial part)")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.resolve().relative_to(HERE).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(TIERS)}}}")
        item.add_marker(tier)
        if item.get_closest_marker("spread") is None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(str(item.path.relative_to(HERE))))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section("figures measured")
        for line in lines:
            terminalreporter.write_line(line)
