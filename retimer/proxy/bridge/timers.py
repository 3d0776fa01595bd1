"""The pacing bridge's timers: a paced stream's wakeups as plain loop timers, not mitmproxy tasks.

Why (BENCHMARKS.md, "CPU per event"): mitmproxy turns every `RequestWakeup` into a new asyncio
task that sleeps and then sends a `Wakeup` event down the connection's whole layer stack. A
paced stream wakes once or more per network event, and a stream that wakes a little early (it
asks early on purpose: timers run late, see retimer.timing.emission) finds nothing to send and
asks again, at the price of another task and another trip through the layers. So, once a
stream's connection handler is known (its first wakeup goes the ordinary way, and the wrapped
`ConnectionHandler.wakeup` names the handler), the bridge arms a loop timer itself: a firing
that is still early re-arms without touching mitmproxy, and one that is due is first offered to
the stream's driver to write directly (`sinks.ClientWriter`: body bytes on an HTTP/1 or h2
connection, written without the layers); otherwise it hands the `Wakeup` to the handler's `server_event`, exactly as
mitmproxy's wakeup task would, routed to the stream through the HTTP layer's `command_sources`
like any wakeup the stream asked for (registered there only for a wakeup that goes that way).
Streams due within half a millisecond of each other share one loop timer (a `TimerGroup`, at
`emission.shared_timer_at`'s grid point): one loop turn wakes them all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layer import Layer
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.server import ConnectionHandler

from retimer.timing import emission
from retimer.timing.playout import PlayoutPool

HttpLayer = http_layer.HttpLayer
Route = tuple[http_layer.HttpLayer, Layer]  # an HTTP layer and its child on the way down to a stream


class TimedStream(Protocol):
    """What the timers need of a paced stream (`driver.StreamDriver`)."""

    finished: bool
    handler: ConnectionHandler | None
    routes: list[Route] | None
    wakeups: dict[PacingWakeup, float]

    def wake_direct(self, cmd: PacingWakeup, batch: int = 0) -> bool: ...


class PacingWakeup(commands.RequestWakeup):
    """A wakeup the bridge asked for; recognised (and dropped if stale) on return. `paced` is
    the stream it wakes, so the wrapped handler wakeup can name the stream's handler."""

    paced: TimedStream | None = None


class TimerGroup:
    """The wakeups one loop timer fires."""

    __slots__ = ("entries",)

    def __init__(self, paced: TimedStream, cmd: PacingWakeup) -> None:
        self.entries: list[tuple[TimedStream, PacingWakeup]] = [(paced, cmd)]


WakeupMethod = Callable[[ConnectionHandler, commands.RequestWakeup], Coroutine[Any, Any, None]]


class DirectTimers:
    """Loop timers for the wakeups of streams whose connection handler is known."""

    def __init__(self, original_wakeup: WakeupMethod, pool: PlayoutPool) -> None:
        self._original_wakeup = original_wakeup
        self._pool = pool
        self._tasks: set[asyncio.Task[Any]] = set()  # deliveries that had to wait for the lock
        self.direct = 0  # wakeups delivered from a loop timer
        self.written = 0  # of those, written directly by the stream's driver
        self.early = 0  # timer firings still early: re-armed without touching mitmproxy
        self.via_mitmproxy = 0  # wakeups that went through mitmproxy's own task
        self.shared = 0  # wakeups that joined a timer armed for another
        self._groups: dict[float, TimerGroup] = {}  # armed, not fired yet, by when they fire

    async def handler_wakeup(self, handler: ConnectionHandler, request: commands.RequestWakeup) -> None:
        """The wrapped `ConnectionHandler.wakeup`: learn a paced stream's handler, then wake."""
        if isinstance(request, PacingWakeup) and request.paced is not None:
            self.via_mitmproxy += 1
            request.paced.handler = handler
            request.paced = None  # a wakeup cancelled with its connection must not keep the stream
        await self._original_wakeup(handler, request)

    def arm(self, paced: TimedStream, cmd: PacingWakeup) -> bool:
        """Arm a loop timer for `cmd`, due at `paced.wakeups[cmd]` (False: the handler is not
        known yet; yield the command, whose own delay mitmproxy's wakeup task sleeps)."""
        if paced.handler is None:
            cmd.paced = paced
            return False
        self._schedule(paced, cmd, paced.wakeups[cmd])
        return True

    def _schedule(self, paced: TimedStream, cmd: PacingWakeup, wake: float) -> None:
        """Fire `cmd` (due at `wake`) with the timer of its grid point, armed if it is the first."""
        at = emission.shared_timer_at(wake)
        group = self._groups.get(at)
        if group is not None:
            group.entries.append((paced, cmd))
            self.shared += 1
            return
        self._groups[at] = group = TimerGroup(paced, cmd)
        asyncio.get_running_loop().call_later(at - time.monotonic(), self._fire_group, at, group)

    def _fire_group(self, at: float, group: TimerGroup) -> None:
        del self._groups[at]
        entries = group.entries
        batch = emission.batch_steps(time.monotonic() - at, len(entries))
        for paced, cmd in entries:
            try:  # one stream's failure must not keep the others asleep
                self._fire(paced, cmd, batch)
            except Exception as e:
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "retimer: a paced stream's wakeup failed", "exception": e})

    def _fire(self, paced: TimedStream, cmd: PacingWakeup, batch: int = 0) -> None:
        wake = paced.wakeups.get(cmd)
        if paced.finished or wake is None:
            return
        wait = emission.too_early(wake, time.monotonic(), self._pool.draining)
        if wait is not None:
            self.early += 1  # nothing can be due yet: wait on
            self._schedule(paced, cmd, wake)
            return
        self.direct += 1
        handler = paced.handler
        assert handler is not None  # armed only once known
        lock = handler._server_event_lock
        busy = lock.locked() or bool(lock._waiters)
        if not busy and paced.wake_direct(cmd, batch):
            self.written += 1
            return
        for layer, child in paced.routes or ():  # as the command would have registered on its way up
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



def routes(stream: http_layer.HttpStream) -> list[Route]:
    """Every HTTP layer above `stream` with its child on the way down to it (an HTTP proxy's
    CONNECT tunnel nests one HTTP layer in another): each routes a Wakeup by command_sources."""
    layers = stream.context.layers
    return [(la, layers[i + 1]) for i, la in enumerate(layers[:-1]) if isinstance(la, HttpLayer)]


def install(pool: PlayoutPool) -> DirectTimers:
    """Wrap `ConnectionHandler.wakeup` (once per process, by the bridge's `install()`)."""
    timers = DirectTimers(ConnectionHandler.wakeup, pool)

    async def wakeup(handler: ConnectionHandler, request: commands.RequestWakeup) -> None:
        await timers.handler_wakeup(handler, request)

    ConnectionHandler.wakeup = wakeup  # type: ignore[method-assign,assignment]
    return timers


NEEDED = {  # what this module relies on, for the bridge's start-up check (None: missing)
    "ConnectionHandler.wakeup": getattr(ConnectionHandler, "wakeup", None),
    "ConnectionHandler.server_event": getattr(ConnectionHandler, "server_event", None),
    "ConnectionHandler._server_event_lock":
        "_server_event_lock" in ConnectionHandler.__init__.__code__.co_names or None,
    "HttpLayer.command_sources": "command_sources" in HttpLayer.__init__.__code__.co_names or None,
}
