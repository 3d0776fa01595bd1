"""The real `retimer` in a tmux terminal: its screen read as a person reads it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

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

    def screen(self, history: bool = False, joined: bool = False) -> list[str]:
        """The visible screen, or everything including what scrolled off (`history`); with
        `joined`, a line the terminal wrapped is one line (as it copies), a printed newline
        still ends one."""
        extra = (["-S", "-"] if history else []) + (["-J"] if joined else [])
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
