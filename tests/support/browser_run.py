"""The fake LLM chat site and `retimer browser` run against it, for the browser tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from retimer.cli.launch.browser import Kind
from tests.support.paths import FIXTURES, SUPPORT
from tests.support.upstream import FakeLLM

PAGE = (FIXTURES / "browser" / "fake-llm-chat.html").read_bytes()


HOSTMAP = SUPPORT / "hostmap.py"


TEXT = "Retimer keeps every word and changes only the time between them — naïve café, 東京. " * 2


INTERCEPT = ("--intercept", r"^llm\.test:", "--set", f"scripts={HOSTMAP}")


def site(fake: FakeLLM, query: str = "") -> str:
    return f"https://llm.test:{fake.port}/{query}"


def token_curve(result: dict[str, Any]) -> tuple[float, float]:
    """(TTFT ms, tokens/s) as the page saw them: first read with text, then the least-squares
    slope of cumulative tokens over read times (browsers may merge close events into one read)."""
    reads = [r for r in result["reads"] if r["tokens"]]
    t = np.array([r["t"] for r in reads]) / 1000
    n = np.cumsum([r["tokens"] for r in reads])
    return reads[0]["t"], float(np.polyfit(t, n, 1)[0])


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text` (the throwaway profile path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and text in cmdline:
            pids.append(int(entry.name))
    return pids


def run_retimer_browser(tmp: Path, fake: FakeLLM, kind: Kind, *args: str,
                        stop: signal.Signals) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`retimer browser KIND --headless SITE?report ARGS`, until the page reports back; then
    stop it with `stop` and check nothing of the browser is left (processes, temp files)."""
    # the throwaway profile is made under TMPDIR; short, as Chromium puts a socket there
    tmpdir = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))
    tmp.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "retimer", "browser", kind, "--headless", site(fake, "?report"),
            *args]
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}
    with (tmp / "out").open("w") as out, (tmp / "err").open("w") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                text=True)
    try:
        deadline = time.monotonic() + 40
        while not (reports := [r for r in fake.requests if r.path == "/report"]):
            assert proc.poll() is None, (tmp / "err").read_text()
            assert time.monotonic() < deadline, (tmp / "err").read_text()
            time.sleep(0.05)
        assert processes_mentioning(str(tmpdir))  # the browser runs from the throwaway dir
        proc.send_signal(stop)
        code = proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = subprocess.CompletedProcess(argv, code, (tmp / "out").read_text(),
                                       (tmp / "err").read_text())
    assert processes_mentioning(str(tmpdir)) == [], done.stderr
    assert list(tmpdir.iterdir()) == [], done.stderr  # profile and browser temp files removed
    tmpdir.rmdir()
    return done, json.loads(reports[0].body)
