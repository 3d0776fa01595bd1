"""The real `retimer` in a real terminal (tmux), as a user at 80x24 or 200 columns sees it.

Streams go through it from a fake upstream; the screen (tmux capture-pane) must show every
finished stream's token count and TTFT whole, unique headings, a count of the streams that no
longer fit, and after Ctrl-C one copy of the table and its summary, nothing doubled."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.proxy import free_port
from tests.upstream import FakeLLM

TITLE = "retimer: streams"
EXITED = "RETIMER-EXITED"


class Tmux:
    """One tmux server of our own (its own socket), one window of the given size."""

    def __init__(self, tmp: Path, width: int, height: int) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux is needed to test the live view in a terminal (.ci/run installs it)"
        self.base = [tmux, "-L", f"retimer-test-{os.getpid()}-{width}", "-f", "/dev/null"]
        self.tmp, self.width, self.height = tmp, width, height

    def start(self, command: list[str]) -> None:
        # rich would size itself from COLUMNS/LINES rather than the terminal if they were set
        line = (f"env -u COLUMNS -u LINES {shlex.join(command)}; echo {EXITED} $?; sleep 600")
        self._tmux("new-session", "-d", "-x", str(self.width), "-y", str(self.height), line)

    def screen(self, history: bool = False) -> list[str]:
        """The visible screen, or everything including what scrolled off (`history`)."""
        extra = ["-S", "-"] if history else []
        out = self._tmux("capture-pane", "-p", *extra).stdout
        return out.rstrip("\n").split("\n")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def wait_for(self, test: Callable[[list[str]], bool], what: str, timeout: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if test(lines):
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n" + "\n".join(lines))
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False)

    def _tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=True,
                              timeout=30)


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(bursts=3, burst_gap=0.05) as f:
        yield f


def _wait_listening(port: int, tmux: Tmux, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("retimer did not listen; screen:\n" + "\n".join(tmux.screen()))


def _send(proxy: str, url: str, n: int) -> None:
    """`n` streams at once (the records' order is the table's order, whatever it is)."""
    def one(i: int) -> None:
        with httpx.Client(proxy=proxy, timeout=60) as c:
            r = c.post(f"{url}/v1/chat/completions?stream={i}",
                       json={"stream": True, "messages": []})
            assert r.status_code == 200

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def _records(log: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 30
    while True:
        lines = [x for x in log.read_text().split("\n")[:-1] if x.strip()] if log.exists() else []
        if len(lines) >= n or time.monotonic() > deadline:
            return [json.loads(x) for x in lines]
        time.sleep(0.1)


def _table(lines: list[str]) -> tuple[list[str], list[str], str]:
    """(headings, rows, summary line) of the last table on the screen."""
    top = max(i for i, line in enumerate(lines) if line.startswith(TITLE))
    heading, rule = lines[top + 1], lines[top + 2]
    assert set(rule.strip()) == {"─"}, rule
    body = [line for line in lines[top + 3:] if line.strip() and EXITED not in line]
    return re.split(r"\s{2,}", heading.strip()), body[:-1], body[-1]


@pytest.mark.parametrize(("width", "height", "streams"), [(80, 24, 25), (200, 40, 6)])
def test_live_view_in_a_terminal(tmp_path: Path, fake: FakeLLM, width: int, height: int,
                                 streams: int) -> None:
    port, log = free_port(), tmp_path / "records.jsonl"
    command = [sys.executable, "-m", "retimer", "--listen-port", str(port),
               "--set", f"confdir={tmp_path / 'confdir'}", "--log", str(log),
               "--profile", "groq", "--ttft", "1200ms"]  # TTFTs with a thousands separator
    tmux = Tmux(tmp_path, width, height)
    try:
        tmux.start(command)
        _wait_listening(port, tmux)
        _send(f"http://127.0.0.1:{port}", fake.url, streams)
        records = _records(log, streams)
        assert len(records) == streams
        total, done = f"{streams} streams", f"{streams} complete"
        lines = tmux.wait_for(lambda s: any(x.startswith(total) and done in x for x in s), done)
        assert all(len(x) <= width for x in lines)
        headings, rows, summary = _table(lines)
        assert len(headings) == len(set(headings)), headings
        assert {"tokens", "TTFT ms", "url"} <= set(headings)
        assert summary.startswith(f"{total} · ")
        newest_first = records[::-1]
        hidden = streams - len(rows)
        if len(rows) < streams:  # more streams than rows: the rest are counted
            assert rows and f"+{hidden} earlier not shown" in summary
            assert len(rows) == height - 5  # the screen is used, but not overflowed
        else:
            assert "earlier" not in summary
        for row, rec in zip(rows, newest_first, strict=False):
            cells = row.split()
            assert f"{rec['emitted']['tokens']:,}" in cells, (row, rec["emitted"])
            assert f"{rec['emitted']['ttft_ms']:,.0f}" in cells, (row, rec["emitted"])
            assert row.rstrip().endswith(f"stream={rec['url'].rsplit('=', 1)[1]}"), row
            assert not any("…" in c and c[0].isdigit() for c in cells), row
        if width >= 200:  # room for everything: every column, whole URLs
            assert {"format", "profile", "target ms", "tok/s", "target tok/s", "flow"} <= set(headings)
            assert all(rec["url"] in "\n".join(rows) for rec in records)

        tmux.keys("C-c")
        final = tmux.wait_for(lambda s: any(x.startswith(EXITED) for x in s), "exit", 30)
        assert f"{EXITED} 0" in final
        history = tmux.screen(history=True)
        assert sum(x.startswith(TITLE) for x in history) == 1, "\n".join(history)
        assert sum(x.startswith(total) for x in history) == 1, "\n".join(history)
        assert "Traceback" not in "\n".join(history)
        after, rows_after, summary_after = _table(history)  # its title has scrolled off
        assert (after, rows_after) == (headings, rows) and summary_after == summary
    finally:
        tmux.close()
