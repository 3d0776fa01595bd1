"""The pacing bridge's timers: a paced stream's wakeups as plain loop timers, not mitmproxy tasks.

Why (BENCHMARKS.md, "CPU per event"): mitmproxy turns every `RequestWakeup` into a new asyncio
task that sleeps and then sends a `Wakeup` event down the connection's whole layer stack. A
paced stream wakes once or more per network event, and a stream that wakes a little early (it
asks early on purpose: timers run late, see retimer.timing.emission) finds nothing to send and
asks again, at the price of another task and another trip through the layers. So, once a
stream's connection handler is known (its first wakeup goes the ordinary way, and the wrapped
`ConnectionHandler.wakeup` names the handler), the bridge arms a loop timer itself: a firing
that is still early re-arms without touching mitmproxy, and one that is due is first offered to
the bridge's direct write (`bridge_direct`: body bytes on an HTTP/1 or h2 connection, written
without the layers); otherwise it hands the `Wakeup` to the handler's `server_event`, exactly as
mitmproxy's wakeup task would, routed to the stream through the HTTP layer's `command_sources`
like any wakeup the stream asked for (registered there only for a wakeup that goes that way).
Part of the bridge: one of the modules allowed on mitmproxy's internals.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.server import ConnectionHandler

from retimer.timing import emission

HttpLayer = http_layer.HttpLayer

logger = logging.getLogger(__name__)


class PacingWakeup(commands.RequestWakeup):
    """A wakeup the bridge asked for; recognised (and dropped if stale) on return. `paced` is
    the stream's PacedFlow, so the wrapped handler wakeup can name the stream's handler."""

    paced: Any = None


class DirectTimers:
    """Loop timers for the wakeups of streams whose connection handler is known."""

    def __init__(
        self, original_wakeup: Callable[..., Any], draining: Callable[[], bool],
        emit_direct: Callable[[Any, PacingWakeup], bool],
    ) -> None:
        self._original_wakeup = original_wakeup
        self._draining = draining
        self._emit_direct = emit_direct
        self._tasks: set[asyncio.Task[Any]] = set()  # deliveries that had to wait for the lock
        self.direct = 0  # wakeups delivered from a loop timer
        self.written = 0  # of those, handled by the bridge's direct write (bridge_direct)
        self.early = 0  # timer firings still early: re-armed without touching mitmproxy
        self.via_mitmproxy = 0  # wakeups that went through mitmproxy's own task

    async def handler_wakeup(self, handler: Any, request: commands.RequestWakeup) -> None:
        """The wrapped `ConnectionHandler.wakeup`: learn a paced stream's handler, then wake."""
        if isinstance(request, PacingWakeup) and request.paced is not None:
            self.via_mitmproxy += 1
            request.paced.handler = handler
            request.paced = None  # a wakeup cancelled with its connection must not keep the stream
        await self._original_wakeup(handler, request)

    def arm(self, paced: Any, stream: Any, cmd: PacingWakeup, delay: float) -> bool:
        """Arm a loop timer for `cmd` (False: the handler is not known yet; yield the command)."""
        if paced.handler is None:
            cmd.paced = paced
            return False
        if paced.routes is None:
            paced.routes = routes(stream)
            paced.stream = stream
        asyncio.get_running_loop().call_later(delay, self._fire, paced, cmd)
        return True

    def _fire(self, paced: Any, cmd: PacingWakeup) -> None:
        wake = paced.wakeups.get(cmd)
        if paced.finished or wake is None:
            return
        now = time.monotonic()
        if now + emission.WINDOW_S < wake and not self._draining():
            self.early += 1  # nothing can be due yet (see emission.next_wake): wait on
            asyncio.get_running_loop().call_later(emission.until_sendable(wake, now), self._fire, paced, cmd)
            return
        self.direct += 1
        handler = paced.handler
        lock = handler._server_event_lock
        busy = lock.locked() or bool(lock._waiters)
        if not busy and self._write_directly(paced, cmd):
            self.written += 1
            return
        for layer, child in paced.routes:  # as the command would have registered on its way up
            layer.command_sources[cmd] = child
        coro = handler.server_event(events.Wakeup(cmd))
        if busy:  # it would wait: let a task take its turn
            task = asyncio.get_running_loop().create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        try:  # server_event never awaits once it holds the free lock: it runs to its end here
            coro.send(None)
        except StopIteration:
            return
        raise RuntimeError("mitmproxy's server_event awaited with its lock free")


    def _write_directly(self, paced: Any, cmd: PacingWakeup) -> bool:
        """The bridge's direct write; a bug there is logged once and the stream goes on the
        ordinary way (a loop callback that raised would leave the stream without its wake)."""
        try:
            return self._emit_direct(paced, cmd)
        except Exception:
            logger.exception("retimer: a direct write failed; this stream goes on through mitmproxy")
            paced.direct = False
            return False


def routes(stream: Any) -> list[tuple[Any, Any]]:
    """Every HTTP layer above `stream` with its child on the way down to it (an HTTP proxy's
    CONNECT tunnel nests one HTTP layer in another): each routes a Wakeup by command_sources."""
    layers = stream.context.layers
    return [(la, layers[i + 1]) for i, la in enumerate(layers[:-1]) if isinstance(la, HttpLayer)]


def install(draining: Callable[[], bool], emit_direct: Callable[[Any, PacingWakeup], bool]) -> DirectTimers:
    """Wrap `ConnectionHandler.wakeup` (once per process, by the bridge's install()).
    `emit_direct` may handle a due wakeup itself (True) instead of mitmproxy's layers."""
    timers = DirectTimers(ConnectionHandler.wakeup, draining, emit_direct)

    async def wakeup(handler: Any, request: commands.RequestWakeup) -> None:
        await timers.handler_wakeup(handler, request)

    ConnectionHandler.wakeup = wakeup  # type: ignore[method-assign]
    return timers


NEEDED = {  # what this module relies on, for the bridge's start-up check (None: missing)
    "ConnectionHandler.wakeup": getattr(ConnectionHandler, "wakeup", None),
    "ConnectionHandler.server_event": getattr(ConnectionHandler, "server_event", None),
    "ConnectionHandler._server_event_lock":
        "_server_event_lock" in ConnectionHandler.__init__.__code__.co_names or None,
    "HttpLayer.command_sources": "command_sources" in HttpLayer.__init__.__code__.co_names or None,
}
