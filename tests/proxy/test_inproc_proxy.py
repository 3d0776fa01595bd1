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
    root = logging.getLogger()
    # a master's handlers left by another test on this worker are that test's, not these proxies'
    # (a proxy's own stop may take them off too): compare the rest, and look for ours by name
    before = [h for h in root.handlers if getattr(h, "master", None) is None]
    for i in range(3):
        with InProcessProxy(tmp_path / f"p{i}", "--record", str(tmp_path / f"c{i}")) as proxy:
            assert proxy.port > 0
            master = proxy.master
            assert any(getattr(h, "master", None) is master for h in root.handlers)  # it had some
        assert (tmp_path / f"c{i}" / "cassette.json").is_file()  # the recorder's `done` ran
        assert not [h for h in root.handlers if getattr(h, "master", None) is master]
        assert [h for h in root.handlers if getattr(h, "master", None) is None] == before
    said = [r.getMessage() for r in caplog.records if "calls recorded" in r.getMessage()]
    assert said == [f"retimer: cassette {tmp_path / f'c{i}'}: 0 calls recorded" for i in range(3)]
