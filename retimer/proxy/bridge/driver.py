"""One driver per paced HTTP stream: mitmproxy's events for it in, its timed bytes out.

A `StreamDriver` feeds its `Playout` (retimer.timing.playout) what the upstream sends, asks it
one question per wake (`step`), and does what the answer says: write the bytes through a
`ClientSink` (through mitmproxy's layers, or straight to the connection once the stream's
connection handler is known and `sinks.client_writer` finds the stack simple enough), arm a
timer (`timers`), or end the stream (the upstream's held end, or an error). Every stream
shares one `BridgeState`: mitmproxy's own HTTP handler, the timers, the pool of playouts and the
table of streams. `Driver` is what paced and passthrough (`passthrough.PassthroughDriver`)
drivers share: their flow, their end and their record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.proxy import events
from mitmproxy.proxy.layer import CommandGenerator
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.server import ConnectionHandler

from retimer.proxy.bridge.sinks import ClientSink, ClientWriter, LayerSink, client_writer
from retimer.proxy.bridge.timers import DirectTimers, PacingWakeup, Route, routes
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import End, Playout, PlayoutPool, Step

logger = logging.getLogger("retimer.proxy.bridge")

ResponseData = http_layer.ResponseData
ResponseEndOfMessage = http_layer.ResponseEndOfMessage
ResponseProtocolError = http_layer.ResponseProtocolError
RequestProtocolError = http_layer.RequestProtocolError
ErrorCode = http_layer.ErrorCode

HttpStream = http_layer.HttpStream
Commands = CommandGenerator[None]
HttpHandler = Callable[[HttpStream, events.Event], Commands]  # mitmproxy's HttpStream._handle_event
DoneCallback = Callable[[http.HTTPFlow, StreamPacer, float, str], None]


@dataclass(slots=True)
class BridgeState:
    """What every driver of one process shares."""

    original_http: HttpHandler
    pool: PlayoutPool = field(default_factory=PlayoutPool)
    timers: DirectTimers | None = None
    streams: dict[str, Driver] = field(default_factory=dict)  # flow id -> its driver
    # mitmproxy's Proxyserver addon, once running: where a passthrough stream's handler is found
    proxyserver: Proxyserver | None = None
    passed_directly: int = 0  # passthrough body chunks a driver wrote itself


class Driver:
    """What every stream's driver has: its flow, its playout, its end and its record."""

    __slots__ = ("_keep_body", "_state", "finished", "flow", "on_done", "playout")

    def __init__(self, flow: http.HTTPFlow, playout: Playout, state: BridgeState, on_done: DoneCallback) -> None:
        self.flow = flow
        self.playout = playout
        self.on_done = on_done
        self.finished = False
        self._state = state
        self._keep_body: bool | None = None  # mitmproxy's store_streamed_bodies, read at the first write

    def event(self, stream: HttpStream, event: events.Event) -> Commands:
        """One of mitmproxy's events for this stream (its upstream's data, end or error)."""
        raise NotImplementedError

    def woken(self, stream: HttpStream, cmd: PacingWakeup) -> Commands:
        """A wakeup this stream asked for came back through mitmproxy."""
        return
        yield

    def finish(self, outcome: str) -> None:
        """The stream is over: it leaves the table and its record is made (once)."""
        if self.finished:
            return
        self.finished = True
        self._state.streams.pop(self.flow.id, None)
        self.playout.release()
        try:
            self.on_done(self.flow, self.playout.pacer, time.monotonic(), outcome)
        except Exception:  # a broken record must never break the stream
            logger.exception("retimer: recording a finished stream failed")

    def _log_warnings(self, stream: HttpStream) -> None:
        """What the playout had to say, worded with the host (a header parse: only then)."""
        host = stream.flow.request.pretty_host
        for warning in self.playout.warnings:
            logger.warning(warning.message(host))
        self.playout.warnings.clear()

    def _write(self, sink: ClientSink, stream: HttpStream, data: bytes) -> None:
        """`data` to the client through `sink`, and into the flow's body when mitmproxy keeps
        streamed bodies."""
        sink.write(data)
        if self._keep_body is None:  # an option read costs a deepcopy: once per stream
            self._keep_body = bool(stream.context.options.store_streamed_bodies)
        if self._keep_body:
            stream.response_body_buf += data


class StreamDriver(Driver):
    """A paced stream. Wakes come through mitmproxy (`woken`) until its connection handler is
    known, then from the bridge's own timers, which try `wake_direct` first. Either way one
    method wakes it (`_wake`: the playout's step, its bytes to a sink); they differ only in the
    sink (`LayerSink` or `ClientWriter`) and in who ends the stream (mitmproxy's layers)."""

    __slots__ = ("_layers", "_looked", "_writer", "handler", "held_end", "routes", "stream", "wakeups")

    def __init__(self, flow: http.HTTPFlow, playout: Playout, state: BridgeState, on_done: DoneCallback) -> None:
        super().__init__(flow, playout, state, on_done)
        self.held_end: events.Event | None = None  # ResponseEndOfMessage, waiting for the last bytes
        self.wakeups: dict[PacingWakeup, float] = {}  # outstanding -> due
        self.handler: ConnectionHandler | None = None  # its connection's, once a wakeup named it
        self.routes: list[Route] | None = None  # the HTTP layers that route its wakeups
        self.stream: HttpStream | None = None
        self._layers: LayerSink | None = None
        self._writer: ClientWriter | None = None
        self._looked = False  # client_writer was asked (once handler is known)

    def event(self, stream: HttpStream, event: events.Event) -> Commands:
        self.stream = stream
        streaming = stream.server_state == stream.state_stream_response_body
        playout = self.playout
        if isinstance(event, ResponseData) and streaming:
            playout.feed(event.data, time.monotonic())
            if playout.warnings:
                self._log_warnings(stream)
            yield from self._play(stream)
        elif isinstance(event, ResponseEndOfMessage) and streaming:
            playout.end(time.monotonic())
            if playout.warnings:
                self._log_warnings(stream)
            self.held_end = event
            yield from self._play(stream)
        elif isinstance(event, ResponseProtocolError):
            # the upstream broke: the client gets everything that arrived, then the same error
            yield from self._end_broken(stream, event)
        elif isinstance(event, RequestProtocolError):
            self.finish("client-gone")
            yield from self._state.original_http(stream, event)
        else:
            yield from self._state.original_http(stream, event)

    def woken(self, stream: HttpStream, cmd: PacingWakeup) -> Commands:
        self.stream = stream
        if self.wakeups.pop(cmd, None) is not None:
            yield from self._play(stream)
        # else: a stale wakeup

    def wake_direct(self, cmd: PacingWakeup, batch: int = 0) -> bool:
        """A due wakeup from the bridge's timers, handled without mitmproxy's layers when all it
        does is write body bytes; False: deliver it the ordinary way (the stream's end, a
        broken upstream, a connection `client_writer` does not write). A bug here is logged
        once and the stream goes on the ordinary way. (The hot path: one wake per write.)
        `batch`: the steps it may parse ahead after its write (`emission.batch_steps`)."""
        wake: float | None = None
        try:
            stream = self.stream
            assert stream is not None and self.handler is not None  # timers arm only then
            if not self._looked:
                self._looked = True
                self._writer = client_writer(stream, self.handler)
            out = self._writer
            if out is None or not out.ready or self._upstream_gone(stream):
                return False
            wake = self.wakeups.pop(cmd)
            step = self._wake(stream, out)
            if step.data and step.end is None:
                self.playout.parse_ahead(time.monotonic(), step.wake, batch)  # the bytes are out
            if step.end is not None:
                self.wakeups[cmd] = wake  # the end goes the ordinary way, with this wakeup
                return False
            if step.wake is not None and self._arm(stream, step) is not None:
                raise RuntimeError("a stream with a known handler asked for mitmproxy's wakeup")
            return True
        except Exception:
            logger.exception("retimer: a direct write failed; this stream goes on through mitmproxy")
            self._writer = None
            self._looked = True
            if wake is not None:
                self.wakeups.setdefault(cmd, wake)  # the ordinary way delivers this wakeup
            return False

    def _wake(self, stream: HttpStream, sink: ClientSink) -> Step:
        """One wake, either way: the playout's step at this moment, its bytes to `sink`."""
        playout = self.playout
        wakeups = self.wakeups
        step = playout.step(time.monotonic(), min(wakeups.values()) if wakeups else None)
        if playout.warnings:
            self._log_warnings(stream)
        if step.data:
            self._write(sink, stream, step.data)
        return step

    def _layer_sink(self, stream: HttpStream) -> LayerSink:
        sink = self._layers
        if sink is None:
            sink = self._layers = LayerSink(stream)
        return sink

    def _play(self, stream: HttpStream) -> Commands:
        """One wake through mitmproxy's layers (which also end the stream)."""
        if self._upstream_gone(stream):
            logger.warning(f"retimer: the upstream connection of a stream from "
                           f"{stream.flow.request.pretty_host} closed without ending it; "
                           "ending it as broken")
            yield from self._end_broken(stream, server_error(stream, "server connection lost"))
            return
        sink = self._layer_sink(stream)
        step = self._wake(stream, sink)
        yield from sink.commands()
        if step.data and step.end is None:
            self.playout.parse_ahead(time.monotonic(), step.wake, 0)  # out: what falls due soon
        if step.end is End.COMPLETE:
            end = self.held_end
            assert end is not None  # COMPLETE comes only after the upstream's end
            self.finish("complete")
            yield from self._state.original_http(stream, end)
        elif step.end is End.BROKEN:
            self.finish("upstream-error")
            yield from self._state.original_http(stream, server_error(stream, step.reason))
        elif step.wake is not None and (cmd := self._arm(stream, step)) is not None:
            yield cmd  # mitmproxy's own wakeup: the first of a stream names its handler

    def _end_broken(self, stream: HttpStream, error: events.Event) -> Commands:
        """The stream cannot end cleanly: the client gets everything that arrived, then
        `error` (a ResponseProtocolError: HTTP/1 no terminating chunk, h2 RST_STREAM)."""
        data = self.playout.abort(time.monotonic())
        if data:
            sink = self._layer_sink(stream)
            self._write(sink, stream, data)
            yield from sink.commands()
        self.finish("upstream-error")
        yield from self._state.original_http(stream, error)

    def _arm(self, stream: HttpStream, step: Step) -> PacingWakeup | None:
        """Ask to be woken for `step.wake`; the command to yield if the bridge's timers cannot
        arm it yet (a stream's first wakeup goes through mitmproxy)."""
        assert step.wake is not None
        cmd = PacingWakeup(step.delay)
        self.wakeups[cmd] = step.wake
        timers = self._state.timers
        if timers is None:
            return cmd
        if self.routes is None and self.handler is not None:
            self.routes = routes(stream)
        return None if timers.arm(self, cmd) else cmd

    def _upstream_gone(self, stream: HttpStream) -> bool:
        """The upstream connection has ended, yet the stream got neither its end nor an error.

        mitmproxy 12 can lose a server connection's close: a reader whose drain failed on the
        reset cancels its own task, and if it then waits for the connection's event lock, the
        cancellation lands there and ConnectionClosed is never delivered (seen in the soak under
        load). A plain proxy would leave that client waiting for its read timeout; a stream that
        retimer keeps alive with SSE comments would wait for ever. So each wake checks."""
        conn = getattr(stream.flow, "server_conn", None)
        return conn is not None and conn.timestamp_end is not None and self.playout.waiting


def server_error(stream: HttpStream, message: str) -> events.Event:
    """The error a broken upstream would give this stream (ended as the server's fault)."""
    return ResponseProtocolError(stream.stream_id, message, ErrorCode.GENERIC_SERVER_ERROR)
