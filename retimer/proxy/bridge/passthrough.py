"""A passthrough stream's driver: every chunk goes on as it comes, counted for its record.

With `--profile passthrough` (or a study condition that is) nothing is re-timed: every body
chunk goes to the client as it arrives, compressed or not, framing unchanged. Why the driver
writes it itself (BENCHMARKS.md, "Session 10"): through mitmproxy each chunk is a `SendHttp`
sent up through the HTTP layer, the client's HTTP connection, TLS and the handler; a
`sinks.ClientWriter` does the same in one call, during mitmproxy's handling of the upstream's
read, so the handler's `drain_writers` after it keeps the ordinary backpressure. Where it
cannot (an addon's `stream` callable, HTTP/3, a closing client, an empty chunk, a failing
write) mitmproxy's own streaming sends the chunk. The playout keeps the chunks with their
arrival times and counts them (`Playout.passed`).
"""

from __future__ import annotations

import logging
import time

from mitmproxy import http
from mitmproxy.proxy import events

from retimer.proxy.bridge.driver import (
    BridgeState,
    Commands,
    DoneCallback,
    Driver,
    HttpStream,
    RequestProtocolError,
    ResponseData,
    ResponseEndOfMessage,
    ResponseProtocolError,
)
from retimer.proxy.bridge.sinks import ClientWriter, client_writer
from retimer.proxy.patches.connections import connection_handler
from retimer.timing.playout import Playout

logger = logging.getLogger("retimer.proxy.bridge")


class PassthroughDriver(Driver):
    """A passthrough stream: mitmproxy's own streaming, or a direct write, passes each chunk."""

    __slots__ = ("_looked", "_writer")

    def __init__(self, flow: http.HTTPFlow, playout: Playout, state: BridgeState, on_done: DoneCallback) -> None:
        super().__init__(flow, playout, state, on_done)
        self._writer: ClientWriter | None = None
        self._looked = False  # client_writer was asked

    def event(self, stream: HttpStream, event: events.Event) -> Commands:
        playout = self.playout
        streaming = stream.server_state == stream.state_stream_response_body
        if isinstance(event, ResponseData) and streaming:
            playout.passed(event.data, time.monotonic())
            if playout.warnings:
                self._log_warnings(stream)
            if self._pass_directly(stream, event.data):
                self._state.passed_directly += 1
                return
        elif isinstance(event, ResponseEndOfMessage) and streaming:
            playout.passed_end(time.monotonic())
            if playout.warnings:
                self._log_warnings(stream)
            self.finish("complete")
        elif isinstance(event, ResponseProtocolError):
            playout.passed_abort(time.monotonic())
            self.finish("upstream-error")
        elif isinstance(event, RequestProtocolError):
            # the client had every byte that came, but `passed` counts only now and then: count
            # the rest now (the OpenAI SDK closes at `[DONE]`, which may be before the upstream's end)
            playout.passed_abort(time.monotonic())
            self.finish("client-gone")
        yield from self._state.original_http(stream, event)

    def _pass_directly(self, stream: HttpStream, data: bytes) -> bool:
        """Send a body chunk to the client as mitmproxy's HttpStream would, without its layers;
        False: send it the ordinary way (no writer for this connection, an addon's stream
        callable, a client going away, an empty chunk, a bug: logged, then never again)."""
        try:
            if not self._looked:
                self._looked = True
                handler = connection_handler(self._state.proxyserver, stream.context.client)
                self._writer = client_writer(stream, handler) if handler is not None else None
            out = self._writer
            response = stream.flow.response
            if out is None or not data or response is None or response.stream is not True or not out.ready:
                return False
            self._write(out, stream, data)
        except Exception:  # a bug here must not cost the stream: it goes on the ordinary way
            logger.exception("retimer: a direct write failed; this stream goes on through mitmproxy")
            self._writer = None
            return False
        return True
