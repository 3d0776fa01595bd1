"""The pacing bridge: with its parts (bridge_timers, bridge_direct, bridge_passthrough, bridge_websocket,
bridge_listen), the only code that touches mitmproxy's private internals.

mitmproxy's public `flow.response.stream` callable runs only when upstream data arrives, so it
can neither emit on a timer nor split one upstream chunk into several timed writes. For a paced
flow we therefore wrap `HttpStream._handle_event`: upstream `ResponseData` goes into the
stream's `StreamPacer`, timed bytes go to the client as `SendHttp(ResponseData)` when a
`RequestWakeup` we asked for comes back as `Wakeup` (after a stream's first, the bridge's own
loop timers deliver them: bridge_timers, and the bridge then frames, encrypts and writes the
bytes itself, HTTP/1 or h2: bridge_direct), and `ResponseEndOfMessage` is held until the last
byte is out. A passthrough stream's chunks are only counted, and go on as they come, written
by the bridge too where it can (`bridge_passthrough`). The real flow and upstream connection stay
intact (mitmweb shows them).
`install()` puts the wrappers in once per process and returns the process's `PacingBridge`,
which holds the paced streams and what they hold. WebSocket messages are paced with public
hooks; the server's later events wait behind held messages (`WebSocketOrder`, in
bridge_websocket, behind a wrapped `WebsocketLayer.handle_event`). `check_internals()` verifies
at start-up that every private name either module uses still exists.

Faults: a client that goes away ends the stream at once (record `client-gone`; mitmproxy then
closes the upstream connection, cancelling the request); an upstream that breaks off gets
everything that arrived sent, then the same error (HTTP/1: no terminating chunk; h2: RST_STREAM).
Bounds: bytes held per stream and in total are capped (`Settings`): past a cap the stream
becomes pass-through. While bytes are held and nothing went out for `keepalive_s`, the adapter's
keep-alive goes out (or, with `idle_release`, the next emission early). When to send and when
to wake is `retimer.timing.emission`'s policy; its sleeps never exceed MAX_SLEEP_S, so
`PacingBridge.drain()` (shutdown) is noticed within that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from typing import Any

from mitmproxy import http
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layer import Layer
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers import websocket as ws_layer

from retimer.proxy import bridge_arrival, bridge_direct, bridge_hooks, bridge_timers
from retimer.proxy.bridge_flow import DoneCallback, PacedFlow, Settings, server_error, upstream_gone
from retimer.proxy.bridge_passthrough import PassthroughStreams
from retimer.proxy.bridge_timers import PacingWakeup
from retimer.proxy.bridge_websocket import CloseFrameScanner as CloseFrameScanner  # re-exported
from retimer.proxy.bridge_websocket import WebSocketOrder
from retimer.timing import emission
from retimer.timing.pacer import Emission, StreamPacer

logger = logging.getLogger(__name__)

HttpStream = http_layer.HttpStream
SendHttp = http_layer.SendHttp
ResponseData = http_layer.ResponseData
ResponseEndOfMessage = http_layer.ResponseEndOfMessage
ResponseProtocolError = http_layer.ResponseProtocolError
RequestProtocolError = http_layer.RequestProtocolError
ErrorCode = http_layer.ErrorCode

WebsocketLayer = ws_layer.WebsocketLayer


class InternalsMissing(RuntimeError):
    """This mitmproxy lacks a private name the bridge relies on."""


def check_internals() -> None:
    """Fail with one clear line when mitmproxy changed what the bridge wraps."""
    needed = {
        "HttpStream._handle_event": getattr(HttpStream, "_handle_event", None),
        "HttpStream.state_stream_response_body": getattr(
            HttpStream, "state_stream_response_body", None
        ),
        "layers.http.SendHttp": getattr(http_layer, "SendHttp", None),
        "layers.http.ResponseData": getattr(http_layer, "ResponseData", None),
        "layers.http.ResponseEndOfMessage": getattr(http_layer, "ResponseEndOfMessage", None),
        "layers.http.ErrorCode": getattr(http_layer, "ErrorCode", None),
        "events.Wakeup": getattr(events, "Wakeup", None),
        "WebsocketLayer.handle_event": getattr(WebsocketLayer, "handle_event", None),
        "Layer._paused": getattr(Layer, "__annotations__", {}).get("_paused"),
        **bridge_timers.NEEDED,
        **bridge_direct.NEEDED,
        **bridge_hooks.NEEDED,
        **bridge_arrival.NEEDED,
    }
    missing = [name for name, value in needed.items() if value is None]
    if missing:
        from mitmproxy.version import VERSION

        raise InternalsMissing(
            f"mitmproxy {VERSION} lacks {', '.join(missing)}; retimer needs mitmproxy >=12.2.3,<13"
        )


_installed: PacingBridge | None = None


def install() -> PacingBridge:
    """The process's bridge. The first call checks mitmproxy's internals (InternalsMissing) and
    wraps HttpStream and WebsocketLayer to call it; later calls return the same bridge."""
    global _installed
    if _installed is None:
        check_internals()
        bridge = PacingBridge(HttpStream._handle_event, WebsocketLayer.handle_event)
        bridge.timers = bridge_timers.install(lambda: bridge.draining, bridge.emit_direct)
        bridge_hooks.install()  # mitmproxy's hooks to the addons that have them

        def handle_http(stream: Any, event: events.Event) -> Generator[commands.Command, Any, None]:
            yield from bridge.http_event(stream, event)

        def handle_websocket(layer: Any, event: events.Event) -> Generator[commands.Command, Any, None]:
            yield from bridge.websockets.event(layer, event)

        HttpStream._handle_event = handle_http  # type: ignore[method-assign]
        WebsocketLayer.handle_event = handle_websocket  # type: ignore[method-assign]
        _installed = bridge
    return _installed


class PacingBridge:
    """The paced HTTP streams and held WebSockets of this process, and what they hold.

    The addons use the public part: `pace` a flow, `websockets` (hold a WebSocket's server
    events), `settings` (the bounds), `drain` and `shutdown_all` (shutdown), and what tests and
    the soak probe read: `active`, `buffered`, `paced_flows()`, `draining`, `reset()`.
    mitmproxy calls `http_event` and `websockets.event` through the wrappers of `install()`."""

    def __init__(self, original_http: Callable[..., Any], original_websocket: Callable[..., Any]) -> None:
        self.settings = Settings()
        self.draining = False  # shutting down: every stream sends what it holds when it wakes
        self._buffered = 0  # bytes kept by all paced streams
        self._paced: dict[str, PacedFlow] = {}
        self._original_http = original_http
        self.websockets = WebSocketOrder(original_websocket)
        self.timers: bridge_timers.DirectTimers | None = None  # set by install()
        self.passthrough = PassthroughStreams(original_http, self._finish, self._warn_once)

    # -- what the addons, tests and bench use ------------------------------------------------
    def pace(self, flow: http.HTTPFlow, pacer: StreamPacer, on_done: DoneCallback) -> None:
        """Re-time this flow's response body; call from `responseheaders` with stream=True set.
        A passthrough pacer's stream is only counted: mitmproxy sends its bytes unchanged."""
        self._paced[flow.id] = PacedFlow(
            flow, pacer, on_done, last_send=time.monotonic(), counting=pacer.passthrough
        )

    @property
    def active(self) -> int:
        """Paced HTTP streams in flight."""
        return len(self._paced)

    @property
    def buffered(self) -> int:
        """Bytes all paced streams keep now."""
        return self._buffered

    def paced_flows(self) -> list[PacedFlow]:
        return list(self._paced.values())

    def drain(self) -> None:
        """Shutting down: from now on every stream sends what it holds as soon as it wakes."""
        self.draining = True

    def shutdown_all(self, outcome: str = "shutdown") -> int:
        """Record every stream still in flight as ended with `outcome`; return how many."""
        left = self.paced_flows()
        for paced in left:
            self._finish(paced, outcome)
        return len(left)

    def reset(self) -> None:
        """A fresh start for another proxy in this process (tests): default settings, not
        draining, no stream; call only while no proxy runs."""
        self.settings = Settings()
        self.draining = False
        self.passthrough.proxyserver = None
        self._buffered = 0
        self._paced.clear()
        self.websockets.clear()

    # -- HTTP streams -------------------------------------------------------------------------
    def http_event(self, stream: Any, event: events.Event) -> Generator[commands.Command, Any, None]:
        flow = getattr(stream, "flow", None)
        paced = self._paced.get(flow.id) if flow is not None else None
        if isinstance(event, events.Wakeup) and isinstance(event.command, PacingWakeup):
            if paced is not None and paced.wakeups.pop(event.command, None) is not None:
                yield from self._emit(stream, paced)
            return  # a stale wakeup for a finished stream
        if paced is None or paced.finished:
            yield from self._original_http(stream, event)
            return
        if paced.counting:
            yield from self.passthrough.event(stream, paced, event)
            return
        streaming = stream.server_state == stream.state_stream_response_body
        if isinstance(event, ResponseData) and streaming:
            now = time.monotonic()
            paced.pacer.feed(event.data, now)
            self._warn_once(stream, paced)
            if paced.pacer.broken is not None:
                yield from self._corrupt(stream, paced, now)
                return
            self._account(paced)
            self._check_caps(stream, paced, now)
            yield from self._emit(stream, paced)
        elif isinstance(event, ResponseEndOfMessage) and streaming:
            now = time.monotonic()
            paced.pacer.finish(now)
            if paced.pacer.broken is not None:
                yield from self._corrupt(stream, paced, now)
                return
            self._warn_once(stream, paced)
            paced.held_end = event
            yield from self._emit(stream, paced)
        elif isinstance(event, ResponseProtocolError):
            # the upstream broke: the client gets everything that arrived, then the same error
            yield from self._end_broken(stream, paced, time.monotonic(), event)
        elif isinstance(event, RequestProtocolError):
            self._finish(paced, "client-gone")
            yield from self._original_http(stream, event)
        else:
            yield from self._original_http(stream, event)

    def _end_broken(
        self, stream: Any, paced: PacedFlow, now: float, error: Any
    ) -> Generator[commands.Command, Any, None]:
        """The stream cannot end cleanly: the client gets everything that arrived, then
        `error` (a ResponseProtocolError: HTTP/1 no terminating chunk, h2 RST_STREAM)."""
        yield from self._send(stream, paced, paced.pacer.abort(now), now)
        self._finish(paced, "upstream-error")
        yield from self._original_http(stream, error)

    def _warn_once(self, stream: Any, paced: PacedFlow) -> None:
        """One warning per stream: it fell back to pass-through, or it carried a malformed part."""
        if paced.warned:
            return
        pacer = paced.pacer  # the host is looked up only to warn: pretty_host parses headers
        if failure := pacer.fallback:
            paced.warned = True
            logger.warning(f"retimer: cannot parse the {pacer.adapter.name} stream from "
                           f"{stream.flow.request.pretty_host} ({failure}); passing the rest "
                           "through unchanged")
        elif anomaly := pacer.adapter.anomaly:
            paced.warned = True
            logger.warning(f"retimer: the {pacer.adapter.name} stream from "
                           f"{stream.flow.request.pretty_host} has {anomaly}; passed on unchanged")

    def _corrupt(self, stream: Any, paced: PacedFlow, now: float) -> Generator[commands.Command, Any, None]:
        """The body cannot be decoded (its Content-Encoding header is already gone): the client
        gets everything decoded so far, then a broken connection, as a client reading the upstream
        directly would fail; never the undecodable bytes with a clean end."""
        logger.warning(
            f"retimer: the {paced.pacer.adapter.name} stream from {stream.flow.request.pretty_host} "
            f"is corrupt ({paced.pacer.broken}); the client gets what was decoded, then an error"
        )
        yield from self._end_broken(stream, paced, now, server_error(stream, f"retimer: {paced.pacer.broken}"))

    def _emit(self, stream: Any, paced: PacedFlow) -> Generator[commands.Command, Any, None]:
        pacer = paced.pacer
        now = time.monotonic()
        if upstream_gone(stream, paced):
            logger.warning(f"retimer: the upstream connection of a stream from "
                           f"{stream.flow.request.pretty_host} closed without ending it; "
                           "ending it as broken")
            yield from self._end_broken(stream, paced, now, server_error(stream, "server connection lost"))
            return
        due = self._due(paced, now)
        if due:
            yield from self._send(stream, paced, due, now)
            pacer.prepare(now + emission.PARSE_AHEAD_S)  # the bytes are out: parse ahead now
        if pacer.done:
            if paced.held_end is not None:
                end = paced.held_end
                self._finish(paced, "complete")
                yield from self._original_http(stream, end)
            return
        if cmd := self._rearm(stream, paced, now):
            yield cmd  # mitmproxy's own wakeup: the first of a stream names its handler

    def emit_direct(self, paced: PacedFlow, cmd: PacingWakeup) -> bool:
        """Deliver a due wakeup of a stream whose handler is known without mitmproxy's layers,
        when all it does is write body bytes (`bridge_direct`); False: deliver it the ordinary
        way (the stream's end, a broken upstream, a connection `bridge_direct` does not write)."""
        stream = paced.stream
        if paced.direct is None:
            paced.direct = bridge_direct.client_writer(stream, paced.handler) or False
        out = paced.direct
        if not out or not out.ready or upstream_gone(stream, paced):
            return False
        pacer = paced.pacer
        now = time.monotonic()
        if due := self._due(paced, now):
            data = due[0].data if len(due) == 1 else b"".join(e.data for e in due)
            out.write(data)
            self._sent(stream, paced, due, data, now)
            pacer.prepare(now + emission.PARSE_AHEAD_S)
        if pacer.done:
            return False  # the end goes the ordinary way, with this wakeup
        del paced.wakeups[cmd]
        if self._rearm(stream, paced, now) is not None:
            raise RuntimeError("a stream with a known handler asked for mitmproxy's wakeup")
        return True

    def _due(self, paced: PacedFlow, now: float) -> list[Emission]:
        """What goes out now: the due emissions, or what keeps an idle client alive."""
        due = emission.to_send(paced.pacer, now, self.draining)
        if not due and emission.keepalive_due(now, paced.last_send, self.settings.keepalive_s):
            due = paced.pacer.idle(now, self.settings.idle_release)
        return due

    def _rearm(self, stream: Any, paced: PacedFlow, now: float) -> PacingWakeup | None:
        """Ask to be woken when the next thing falls due; the command to yield if the bridge's
        timers cannot arm it yet (a stream's first wakeup goes through mitmproxy)."""
        pacer = paced.pacer
        wake = emission.next_wake(
            now, pacer.next_due(), holding=pacer.holding, awaiting_upstream=paced.held_end is None,
            last_send=paced.last_send, keepalive_s=self.settings.keepalive_s,
        )
        if wake is None or not emission.needs_timer(wake, min(paced.wakeups.values(), default=None)):
            return None
        delay = emission.timer_delay(wake, now)
        cmd = PacingWakeup(delay)
        paced.wakeups[cmd] = wake
        if self.timers is None or not self.timers.arm(paced, stream, cmd, delay):
            return cmd
        return None

    def _account(self, paced: PacedFlow) -> None:
        """Keep the total of held bytes current (O(1): this stream's change only)."""
        now_held = paced.pacer.buffered
        self._buffered += now_held - paced.counted
        paced.counted = now_held

    def _check_caps(self, stream: Any, paced: PacedFlow, now: float) -> None:
        """Past a cap the stream becomes pass-through: what it holds goes out at once."""
        held, total, settings = paced.counted, self._buffered, self.settings
        if paced.pacer.failure is not None:
            return  # passing through already: nothing is held for long
        if held > settings.max_stream_buffer:
            reason = f"{held} bytes held > {settings.max_stream_buffer} per stream"
        elif total > settings.max_total_buffer:
            reason = f"{total} bytes held by all streams > {settings.max_total_buffer}"
        else:
            return
        paced.pacer.cap_reached(reason, now)
        self._account(paced)
        paced.warned = True
        logger.warning(
            f"retimer: the stream from {stream.flow.request.pretty_host} reached the buffer cap "
            f"({reason}); passing it through unpaced"
        )

    def _send(
        self, stream: Any, paced: PacedFlow, batch: list[Emission], now: float
    ) -> Generator[commands.Command, Any, None]:
        if not batch:
            return
        data = batch[0].data if len(batch) == 1 else b"".join(e.data for e in batch)
        yield SendHttp(ResponseData(stream.stream_id, data), stream.context.client)
        self._sent(stream, paced, batch, data, now)

    def _sent(self, stream: Any, paced: PacedFlow, batch: list[Emission], data: bytes, now: float) -> None:
        if paced.keep_body is None:  # an option read costs a deepcopy: once per stream
            paced.keep_body = bool(stream.context.options.store_streamed_bodies)
        if paced.keep_body:
            stream.response_body_buf += data
        paced.pacer.sent(batch, now)
        paced.last_send = now
        self._account(paced)

    def _finish(self, paced: PacedFlow, outcome: str) -> None:
        if paced.finished:
            return
        paced.finished = True
        self._paced.pop(paced.flow.id, None)
        self._buffered -= paced.counted
        paced.counted = 0
        try:
            paced.on_done(paced.flow, paced.pacer, time.monotonic(), outcome)
        except Exception:  # a broken record must never break the stream
            logger.exception("retimer: recording a finished stream failed")
