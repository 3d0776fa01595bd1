"""The pacing bridge: the process's paced streams, and the wrappers that hand them mitmproxy's events.

mitmproxy's public `flow.response.stream` callable runs only when upstream data arrives, so it
can neither emit on a timer nor split one upstream chunk into several timed writes. For a paced
flow `install()` therefore wraps `HttpStream._handle_event`: each event of a paced or
passthrough stream goes to its driver (`driver.StreamDriver`, `passthrough.PassthroughDriver`),
every other event to mitmproxy's own handler. The real flow and upstream connection stay
intact (mitmweb shows them). WebSocket messages are paced with public hooks
(`websocket.WebSocketPacing`); the server's later events wait behind held messages
(`websocket_order.WebSocketOrder`, behind a wrapped `WebsocketLayer.handle_event`).
`install()` checks, before it wraps anything, that every private name the bridge uses exists.

Faults: a client that goes away ends the stream at once (record `client-gone`; mitmproxy then
closes the upstream connection, cancelling the request); an upstream that breaks off gets
everything that arrived sent, then the same error (HTTP/1: no terminating chunk; h2: RST_STREAM).
Bounds: bytes held per stream and in total are capped (`Settings`, in the playouts' pool): past
a cap the stream becomes pass-through. The timing decisions are the playout's (sans-io); its
sleeps never exceed `emission.MAX_SLEEP_S`, so `drain()` (shutdown) is noticed within that.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.proxy import events
from mitmproxy.proxy.layer import Layer
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers import websocket as ws_layer

from retimer.proxy.bridge import sinks, timers
from retimer.proxy.bridge.driver import BridgeState, Commands, DoneCallback, Driver, HttpHandler, StreamDriver
from retimer.proxy.bridge.passthrough import PassthroughDriver
from retimer.proxy.bridge.timers import DirectTimers, PacingWakeup
from retimer.proxy.bridge.websocket_order import WebSocketOrder
from retimer.proxy.patches import require
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import Playout, PlayoutPool, Settings

HttpStream = http_layer.HttpStream
WebsocketLayer = ws_layer.WebsocketLayer

NEEDED = {  # what this module relies on, for the start-up check (None: missing)
    "HttpStream._handle_event": getattr(HttpStream, "_handle_event", None),
    "HttpStream.state_stream_response_body": getattr(HttpStream, "state_stream_response_body", None),
    "layers.http.ResponseEndOfMessage": getattr(http_layer, "ResponseEndOfMessage", None),
    "layers.http.ErrorCode": getattr(http_layer, "ErrorCode", None),
    "events.Wakeup": getattr(events, "Wakeup", None),
    "WebsocketLayer.handle_event": getattr(WebsocketLayer, "handle_event", None),
    "Layer._paused": getattr(Layer, "__annotations__", {}).get("_paused"),
}


def check_internals() -> None:
    """Fail with one clear line (`patches.InternalsMissing`) when mitmproxy changed what the
    bridge wraps or reads."""
    require({**NEEDED, **timers.NEEDED, **sinks.NEEDED})


_installed: PacingBridge | None = None


def install() -> PacingBridge:
    """The process's bridge. The first call checks mitmproxy's internals and wraps
    HttpStream, WebsocketLayer and ConnectionHandler.wakeup to call it; later calls return
    the same bridge."""
    global _installed
    if _installed is None:
        check_internals()
        bridge = PacingBridge(HttpStream._handle_event, WebsocketLayer.handle_event)
        bridge.state.timers = timers.install(bridge.pool)

        def handle_http(stream: HttpStream, event: events.Event) -> Commands:
            yield from bridge.http_event(stream, event)

        def handle_websocket(layer: WebsocketLayer, event: events.Event) -> Commands:
            yield from bridge.websockets.event(layer, event)

        HttpStream._handle_event = handle_http  # type: ignore[method-assign]
        WebsocketLayer.handle_event = handle_websocket  # type: ignore[method-assign,assignment]
        _installed = bridge
    return _installed


class PacingBridge:
    """The paced HTTP streams and held WebSockets of this process, and what they hold.

    The addons use the public part: `pace` a flow, `websockets` (hold a WebSocket's server
    events), `pool` (the bounds, shutdown), `drain` and `shutdown_all` (shutdown), and what
    tests and the soak probe read: `active`, `buffered`, `drivers()`, `timers`, `reset()`.
    mitmproxy calls `http_event` and `websockets.event` through the wrappers of `install()`."""

    def __init__(self, original_http: HttpHandler, original_websocket: Callable[..., Commands]) -> None:
        self.state = BridgeState(original_http)
        self.websockets = WebSocketOrder(original_websocket)

    # -- what the addons, tests and bench use ------------------------------------------------
    def pace(self, flow: http.HTTPFlow, pacer: StreamPacer, on_done: DoneCallback) -> None:
        """Re-time this flow's response body; call from `responseheaders` with stream=True set.
        A passthrough pacer's stream is only counted: its bytes go on as they come."""
        state = self.state
        playout = Playout(pacer, state.pool, time.monotonic())
        driver = PassthroughDriver if pacer.passthrough else StreamDriver
        state.streams[flow.id] = driver(flow, playout, state, on_done)

    @property
    def pool(self) -> PlayoutPool:
        """The playouts' limits (`settings`), the bytes they hold and whether they drain."""
        return self.state.pool

    @property
    def settings(self) -> Settings:
        return self.state.pool.settings

    @property
    def timers(self) -> DirectTimers | None:
        return self.state.timers

    @property
    def passed_directly(self) -> int:
        """Passthrough body chunks written by a driver itself (not by mitmproxy's layers)."""
        return self.state.passed_directly

    def serve(self, proxyserver: Proxyserver | None) -> None:
        """mitmproxy's Proxyserver addon, once running: where a passthrough stream's connection
        handler is found."""
        self.state.proxyserver = proxyserver

    @property
    def active(self) -> int:
        """Paced HTTP streams in flight."""
        return len(self.state.streams)

    @property
    def buffered(self) -> int:
        """Bytes all paced streams keep now."""
        return self.state.pool.held

    @property
    def draining(self) -> bool:
        return self.state.pool.draining

    def drivers(self) -> list[Driver]:
        return list(self.state.streams.values())

    def drain(self) -> None:
        """Shutting down: from now on every stream sends what it holds as soon as it wakes."""
        self.state.pool.draining = True

    def shutdown_all(self, outcome: str = "shutdown") -> int:
        """Record every stream still in flight as ended with `outcome`; return how many."""
        left = self.drivers()
        for driver in left:
            driver.finish(outcome)
        return len(left)

    def reset(self) -> None:
        """A fresh start for another proxy in this process (tests): default settings, not
        draining, no stream; call only while no proxy runs."""
        pool = self.state.pool
        pool.settings = Settings()
        pool.draining = False
        pool.held = 0
        self.state.proxyserver = None
        self.state.streams.clear()
        self.websockets.clear()

    # -- mitmproxy's HTTP events ----------------------------------------------------------
    def http_event(self, stream: HttpStream, event: events.Event) -> Commands:
        flow = getattr(stream, "flow", None)
        driver = self.state.streams.get(flow.id) if flow is not None else None
        if isinstance(event, events.Wakeup) and isinstance(event.command, PacingWakeup):
            if driver is not None:
                yield from driver.woken(stream, event.command)
            return  # else: a stale wakeup for a finished stream
        if driver is None:
            yield from self.state.original_http(stream, event)
        else:
            yield from driver.event(stream, event)
