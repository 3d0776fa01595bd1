"""A test server that runs on its own thread and asyncio loop, started and stopped from the
test's thread: the lifecycle FakeLLM (tests/support/upstream.py) and FakeAPI (tests/support/clients/fakeapi.py)
share. A subclass says where it listens (`_listen`) and how it serves a connection; this class
starts the loop, tracks connection tasks, and on stop closes the listeners and cancels them."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Self

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class LoopServer:
    """Base of the fake servers: `start()` prepares, then calls `_start_thread`."""

    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _tmp: Path | None = None  # a temporary directory removed at stop (certificates)

    def start(self) -> Self:
        raise NotImplementedError

    async def _listen(self, ssl_ctx: ssl.SSLContext | None,
                      tracked: Callable[[Handler], Handler]) -> list[asyncio.Server]:
        """Start the listeners (asyncio.start_server with `tracked(handler)`), set the ports."""
        raise NotImplementedError

    def _start_thread(self, ssl_ctx: ssl.SSLContext | None, name: str, timeout: float) -> None:
        ready, errors = threading.Event(), []
        self._thread = threading.Thread(target=self._run, args=(ssl_ctx, ready, errors),
                                        name=name, daemon=True)
        self._thread.start()
        ready.wait(timeout)
        if errors or not ready.is_set():
            self.stop()
            raise RuntimeError(f"{name} failed to start: {errors}")

    def stop(self) -> None:
        if self._loop and self._stop and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(5)
        self._thread = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self, ssl_ctx: ssl.SSLContext | None, ready: threading.Event, errors: list) -> None:
        try:
            asyncio.run(self._main(ssl_ctx, ready))
        except BaseException as e:  # noqa: BLE001 - surfaced to start()
            errors.append(e)
            ready.set()

    async def _main(self, ssl_ctx: ssl.SSLContext | None, ready: threading.Event) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        tasks: set[asyncio.Task] = set()

        def tracked(handler: Handler) -> Handler:
            async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                assert task
                tasks.add(task)
                try:
                    await handler(r, w)
                except asyncio.CancelledError:  # shutdown; re-raising makes 3.12.1 log noise
                    pass
                finally:
                    tasks.discard(task)
            return on_conn

        servers = await self._listen(ssl_ctx, tracked)
        ready.set()
        await self._stop.wait()
        for server in servers:
            server.close()
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
