"""The real `retimer` proxy (retimer.cli.proxy.runner.build_proxy, every addon) on a thread of the test process.

For fault tests that must look inside the running proxy: the bridge's per-stream table, the
addon's active streams, whether a stream's objects were freed. Clients still talk to it over
real sockets. One at a time per process (mitmproxy keeps its master in a global).
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.proxy import wait_listening


def forget_log_handlers(master: Any) -> None:
    """Take `master`'s log handlers off the root logger. mitmproxy removes its own in
    `Master.done`, which a run that stopped early (a failed start) never reaches, and never the
    ones of a `termlog` or `errorcheck` added as addons (as retimer adds them): one left behind
    repeats the next proxy's lines, or sends them to this one's closed loop, which raises."""
    if master is None:
        return
    for name, remove in (("termlog", "uninstall"), ("errorcheck", "finish")):
        if (addon := master.addons.get(name)) is not None:
            getattr(addon, remove)()
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "master", None) is master:
            root.removeHandler(h)


class RunningSignal:
    """An addon whose `running` hook says the master finished starting."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


class InProcessProxy:
    """`retimer ARGS` with its own confdir and record log, served from a background thread."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = 0  # the system's choice, read from the running proxy (no race with other tests)
        self.confdir = tmp / "confdir"
        self.log_path = tmp / "records.jsonl"
        self.argv = ["--listen-port", "0", "--set", f"confdir={self.confdir}",
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
            from retimer.cli.proxy.runner import bound_port, build_proxy, listening_port

            config = ProxyConfig.from_args(proxy_parser().parse_args(self.argv))
            self.master, self.addon, _ = build_proxy(config, out=io.StringIO(), interactive=False)
            self.loop = asyncio.get_running_loop()
            started = RunningSignal()
            self.master.addons.add(started)
            running = asyncio.create_task(self.master.run())
            # Listening is not enough: `Master.run` skips its `done` hooks when told to stop before
            # its servers are set up, and a test may stop the proxy as soon as start() returns.
            if await listening_port(self.master, running, timeout):
                await asyncio.wait([running, asyncio.ensure_future(started.event.wait())],
                                   timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if started.event.is_set():
                    self.port = bound_port(self.master) or 0
            built.set()
            await running

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as e:  # noqa: BLE001 - surfaced to start()
                self._error = e
                built.set()
            finally:
                forget_log_handlers(self.master)

        self._thread = threading.Thread(target=run, name="retimer-inproc", daemon=True)
        self._thread.start()
        built.wait(timeout)
        if self.port and wait_listening(self.port, timeout, lambda: self._error is None):
            return self
        self.stop()
        raise RuntimeError(f"in-process retimer did not start: {self._error!r}")

    def stop(self) -> None:
        if self.master is not None and self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.master.shutdown)
            self._thread.join(30)
            if self._thread.is_alive():
                raise RuntimeError("in-process retimer did not stop within 30 s")
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
