"""The real `retimer` proxy (retimer.cli.proxy.runner.build_proxy, every addon) on a thread of the test process.

For fault tests that must look inside the running proxy: the bridge's per-stream table, the
addon's active streams, whether a stream's objects were freed. Clients still talk to it over
real sockets. One at a time per process (mitmproxy keeps its master in a global).
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.proxy import free_port, wait_listening


class InProcessProxy:
    """`retimer ARGS` with its own confdir and record log, served from a background thread."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.confdir = tmp / "confdir"
        self.log_path = tmp / "records.jsonl"
        self.argv = ["--listen-port", str(self.port), "--set", f"confdir={self.confdir}",
                     "--log", str(self.log_path), "--quiet", *args]
        self.master: Any = None
        self.addon: Any = None  # the Retimer addon
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> InProcessProxy:
        from retimer.proxy.addons import install

        install().reset()  # a previous in-process run may have drained
        built = threading.Event()

        async def main() -> None:
            from retimer.cli.proxy.options import ProxyConfig, proxy_parser
            from retimer.cli.proxy.runner import build_proxy

            config = ProxyConfig.from_args(proxy_parser().parse_args(self.argv))
            self.master, self.addon, _ = build_proxy(config, out=io.StringIO(), interactive=False)
            self.loop = asyncio.get_running_loop()
            built.set()
            await self.master.run()

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as e:  # noqa: BLE001 - surfaced to start()
                self._error = e
                built.set()

        self._thread = threading.Thread(target=run, name="retimer-inproc", daemon=True)
        self._thread.start()
        built.wait(timeout)
        if wait_listening(self.port, timeout, lambda: self._error is None):
            return self
        self.stop()
        raise RuntimeError(f"in-process retimer did not start: {self._error!r}")

    def stop(self) -> None:
        if self.master is not None and self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.master.shutdown)
            self._thread.join(15)
        self._thread = None

    def call(self, fn: Any, timeout: float = 5.0) -> Any:
        """Run `fn()` on the proxy's loop (where its state lives) and return the result."""
        assert self.loop is not None

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def __enter__(self) -> InProcessProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def records(self, n: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        import json

        deadline = time.monotonic() + timeout
        while True:
            lines: list[str] = []
            if self.log_path.exists():
                lines = [x for x in self.log_path.read_text().split("\n")[:-1] if x.strip()]
            if len(lines) >= n or time.monotonic() > deadline:
                return [json.loads(x) for x in lines]
            time.sleep(0.05)
