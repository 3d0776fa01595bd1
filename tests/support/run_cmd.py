"""`retimer run [options] -- COMMAND` as a subprocess, against the TLS fake mapped to llm.test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import RUN_CLIENTS, SUPPORT
from tests.support.proxy import free_port
from tests.support.upstream import FakeLLM

CLIENTS = RUN_CLIENTS


HOSTMAP = SUPPORT / "hostmap.py"


TEXT = "Retimer keeps the words and changes only the time between them. Naïve café, 東京! " * 3


class Run:
    """`retimer run [options] -- COMMAND` as a subprocess, with its own port, confdir and log."""

    def __init__(self, tmp: Path, fake: FakeLLM) -> None:
        self.tmp, self.port = tmp, free_port()
        self.confdir, self.log = tmp / "confdir", tmp / "records.jsonl"
        self.options = [
            "--listen-port", str(self.port), "--set", f"confdir={self.confdir}",
            "--log", str(self.log), "--intercept", r"^llm\.test:", "--set", f"scripts={HOSTMAP}",
            "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}", *PACED,
        ]

    def argv(self, *command: str) -> list[str]:
        return [sys.executable, "-m", "retimer", "run", *self.options, "--", *command]

    def __call__(self, *command: str, timeout: float = 120,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*command), capture_output=True, text=True, check=False,
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd=self.tmp, env=env)

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]


PACED = ("--ttft", "300ms", "--tps", "200", "--jitter", "0", "--profile", "gpt-5")
