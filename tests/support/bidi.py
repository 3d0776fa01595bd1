"""A minimal WebDriver BiDi client that drives a real Firefox (no geckodriver needed).

Firefox serves BiDi itself when started with `--remote-debugging-port 0`; it prints the
websocket address on stderr. Enough of the protocol for tests: navigate, evaluate, close.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
from types import TracebackType
from typing import Any

from websockets.sync.client import ClientConnection, connect

_LISTENING = re.compile(r"WebDriver BiDi listening on (ws://\S+)")


class BiDiError(RuntimeError):
    pass


class Firefox:
    """Firefox started from `argv` (which must include `--remote-debugging-port 0`)."""

    def __init__(self, argv: list[str], timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.log: list[str] = []
        found = threading.Event()
        address: list[str] = []

        def drain() -> None:  # keep reading: a full stderr pipe would stall Firefox
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if not found.is_set() and (m := _LISTENING.search(line)):
                    address.append(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(timeout) or not address:
            self.kill(grace=0)
            raise BiDiError("Firefox did not start WebDriver BiDi: " + "".join(self.log[-5:]))
        self._exit = contextlib.ExitStack()  # websockets wants connect() used as a context
        self.ws: ClientConnection = self._exit.enter_context(connect(
            address[0] + "/session", max_size=None, open_timeout=timeout))  # no Origin header
        self._ids = iter(range(1, 1 << 30))
        self.command("session.new", {"capabilities": {}})
        self.context: str = self.command("browsingContext.getTree", {})["contexts"][0]["context"]

    def command(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> Any:
        cid = next(self._ids)
        self.ws.send(json.dumps({"id": cid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout))
            if msg.get("id") != cid:
                continue  # an event; none are subscribed, but be safe
            if msg.get("type") == "error":
                raise BiDiError(f"{method}: {msg.get('error')}: {msg.get('message')}")
            return msg["result"]

    def navigate(self, url: str) -> None:
        self.command("browsingContext.navigate",
                     {"context": self.context, "url": url, "wait": "complete"})

    def evaluate_json(self, expression: str, timeout: float = 30.0) -> Any:
        """Await `expression` in the page and return its value through JSON."""
        result = self.command("script.evaluate", {
            "expression": f"(async () => JSON.stringify(await ({expression})))()",
            "target": {"context": self.context}, "awaitPromise": True,
        }, timeout)
        if result.get("type") == "exception":
            raise BiDiError(f"page threw: {result['exceptionDetails'].get('text')}")
        return json.loads(result["result"]["value"])

    def close(self) -> None:
        try:
            self.command("browser.close", {}, timeout=10)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            self._exit.close()
        finally:
            self.kill()

    def kill(self, grace: float = 5.0) -> None:
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def __enter__(self) -> Firefox:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
