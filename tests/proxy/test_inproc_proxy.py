"""The in-process proxy harness itself: what the fault tests rely on when they stop a proxy at
once and start another in the same test (a CI run lost a test to each of these)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.inproc_proxy import InProcessProxy


def test_a_proxy_stopped_at_once_ran_its_done_hooks_and_left_no_log_handler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = list(logging.getLogger().handlers)
    for i in range(3):
        with InProcessProxy(tmp_path / f"p{i}", "--record", str(tmp_path / f"c{i}")) as proxy:
            assert proxy.port > 0
        assert (tmp_path / f"c{i}" / "cassette.json").is_file()  # the recorder's `done` ran
        assert logging.getLogger().handlers == before
    said = [r.getMessage() for r in caplog.records if "calls recorded" in r.getMessage()]
    assert said == [f"retimer: cassette {tmp_path / f'c{i}'}: 0 calls recorded" for i in range(3)]
