"""Runs the real `retimer` command as a subprocess for end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

_LISTENING = re.compile(r"listening on https?://\S+?:(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, timeout: float = 60,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`retimer ARGS` to completion, for commands that exit (errors, `profiles`)."""
    return subprocess.run(
        [sys.executable, "-m", "retimer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def wait_listening(port: int, timeout: float, alive: Any = None) -> bool:
    """True once 127.0.0.1:`port` takes a connection within `timeout` seconds; False on
    timeout, or as soon as `alive()` (if given) says the server is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def post_through_proxy(port: int, url: str, alive: Callable[[], bool], timeout: float = 30) -> bytes:
    """POST `url` through the proxy on 127.0.0.1:`port` as soon as it takes the request (it may
    still be starting: retried while `alive()`), and return the body it streamed back."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with httpx.Client(proxy=f"http://127.0.0.1:{port}") as c:
                with c.stream("POST", url, json={}) as r:
                    return r.read()
        except httpx.TransportError:
            assert time.monotonic() < deadline and alive(), "the proxy did not start"
            time.sleep(0.2)


def wait_for_log(log: Path, timeout: float = 10) -> str:
    """The text of a record log once it holds a record."""
    deadline = time.monotonic() + timeout
    while not log.exists() or not log.read_text().strip():
        assert time.monotonic() < deadline, f"no record in {log}"
        time.sleep(0.05)
    return log.read_text()


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class RetimerProxy:
    """`retimer` listening on a free port with its own confdir (CA) and record log."""

    def __init__(self, tmp: Path, *args: str, upstream_ca: Path | None = None,
                 confdir: Path | None = None, command: Sequence[str] | None = None,
                 cwd: Path | None = None, env: Mapping[str, str] | None = None,
                 port: int = 0) -> None:
        """`command` runs another `retimer` than this checkout's (an installed one), from `cwd`
        with `env` (default: this process's). `port`: 0 (the default) lets the system choose and
        reads it from the banner; a retimer older than that banner (a baseline checkout) needs
        a free port given (`free_port()`)."""
        self.tmp = tmp
        self.command = list(command) if command else [sys.executable, "-m", "retimer"]
        self.cwd, self.env = cwd, env
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = port  # 0: the system's choice, read from the banner (no race with other tests)
        self.confdir = confdir or tmp / "confdir"  # another's: instances sharing one CA
        self.log_path = tmp / "records.jsonl"
        self.out_path = tmp / "retimer.out"
        self.err_path = tmp / "retimer.err"
        self.args = [
            "--listen-port", str(self.port), "--set", f"confdir={self.confdir}",
            "--log", str(self.log_path), *args,
        ]
        if upstream_ca is not None:
            self.args += ["--set", f"ssl_verify_upstream_trusted_ca={upstream_ca}"]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> Path:
        return self.confdir / "mitmproxy-ca-cert.pem"

    def start(self, timeout: float = 60.0) -> RetimerProxy:  # a hunt under load: 30 s was short
        env = {**(os.environ if self.env is None else self.env), "PYTHONUNBUFFERED": "1"}
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*self.command, *self.args],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=self.cwd,
            )
        proc = self.proc
        port = self.port or self.banner_port(timeout, lambda: proc.poll() is None)
        if port is not None and wait_listening(port, timeout, lambda: proc.poll() is None):
            self.port = port
            return self
        if proc.poll() is not None:
            raise RuntimeError(f"retimer exited {proc.returncode}: {self.stderr()}")
        self.stop()
        raise TimeoutError(f"retimer did not listen within {timeout}s: {self.stderr()}")

    def banner_port(self, timeout: float, alive: Callable[[], bool]) -> int | None:
        """The port `retimer listening on http://HOST:PORT` names (with --listen-port 0, the
        one the system chose), once the banner is out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():
            if m := _LISTENING.search(self.out_path.read_text(errors="replace")):
                return int(m.group(1))
            time.sleep(0.05)
        return None

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> RetimerProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def client_ssl_context(self) -> ssl.SSLContext:
        """Trusts retimer's CA only: what a client configured for the proxy trusts."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    def records(self, n: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until the log holds at least `n` records, then return them all."""
        deadline = time.monotonic() + timeout
        while True:
            lines: list[str] = []
            if self.log_path.exists():
                # complete lines only: a record being written may be read half-way
                done = self.log_path.read_text().split("\n")[:-1]
                lines = [x for x in done if x.strip()]
            if len(lines) >= n or time.monotonic() > deadline:
                return [json.loads(x) for x in lines]
            time.sleep(0.05)
