"""A passthrough stream in the pacing bridge: counted for its record, and passed on as it comes.

With `--profile passthrough` (or a study condition that is) nothing is re-timed: every body
chunk goes to the client as it arrives, compressed or not, framing unchanged. Why the bridge
writes it itself (BENCHMARKS.md, "Session 10"): through mitmproxy each chunk is a `SendHttp`
sent up through the HTTP layer, the client's HTTP connection, TLS and the handler; the
bridge's direct write (`bridge_direct`) does the same in one call, during mitmproxy's handling
of the upstream's read, so the handler's `drain_writers` after it keeps the ordinary
backpressure. Where it cannot (an addon's `stream` callable, HTTP/3, a closing client, an
empty chunk, a failing write) mitmproxy's own streaming sends the chunk. The pacer keeps the
chunks with their arrival times and counts them at most every COUNT_EVERY_S and at the end.
Part of the bridge: one of the modules allowed on mitmproxy's internals.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from typing import Any

from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import http as http_layer

from retimer.proxy import bridge_direct
from retimer.proxy.bridge_flow import PacedFlow

logger = logging.getLogger(__name__)

ResponseData = http_layer.ResponseData
ResponseEndOfMessage = http_layer.ResponseEndOfMessage
ResponseProtocolError = http_layer.ResponseProtocolError
RequestProtocolError = http_layer.RequestProtocolError

COUNT_EVERY_S = 0.1  # a passthrough stream's bytes are parsed and counted at most this often


class PassthroughStreams:
    """The bridge's passthrough streams: `event` handles each HTTP event of one."""

    def __init__(
        self, original_http: Callable[..., Any], finish: Callable[[PacedFlow, str], None],
        warn_once: Callable[[Any, PacedFlow], None],
    ) -> None:
        self._original_http = original_http
        self._finish = finish
        self._warn_once = warn_once
        # mitmproxy's Proxyserver addon, set by the addon once running: where a passthrough
        # stream's connection handler is found, for its direct writes
        self.proxyserver: Any = None
        self.written = 0  # body chunks the bridge wrote itself

    def event(self, stream: Any, paced: PacedFlow, event: events.Event) -> Generator[commands.Command, Any, None]:
        """A passthrough stream: every byte goes on as it comes (written by the bridge itself
        where `bridge_direct` can, else by mitmproxy's own streaming); the pacer keeps them with
        their arrival times and counts them at most every COUNT_EVERY_S (the live view's pace)
        and at the end, for its record."""
        pacer = paced.pacer
        streaming = stream.server_state == stream.state_stream_response_body
        if isinstance(event, ResponseData) and streaming:
            now = time.monotonic()
            pacer.receive(event.data, now)
            if now - paced.tallied >= COUNT_EVERY_S:
                pacer.tally()
                paced.tallied = now
                self._warn_once(stream, paced)
            if paced.direct is not False and self._pass_directly(stream, paced, event.data):
                self.written += 1
                return
        elif isinstance(event, ResponseEndOfMessage) and streaming:
            pacer.finish(time.monotonic())
            if pacer.broken is None:
                pacer.tally()
                self._warn_once(stream, paced)
            else:  # the client has the body as it came, to decode itself
                pacer.tally(pacer.abort(time.monotonic()))
                logger.warning(f"retimer: the {pacer.adapter.name} stream from "
                               f"{stream.flow.request.pretty_host} cannot be decoded to count it "
                               f"({pacer.broken}); passed on unchanged")
            self._finish(paced, "complete")
        elif isinstance(event, ResponseProtocolError):
            pacer.tally(pacer.abort(time.monotonic()))
            self._finish(paced, "upstream-error")
        elif isinstance(event, RequestProtocolError):
            self._finish(paced, "client-gone")
        yield from self._original_http(stream, event)

    def _pass_directly(self, stream: Any, paced: PacedFlow, data: bytes) -> bool:
        """Send a passthrough stream's body chunk to its client as mitmproxy's HttpStream would,
        without its layers (`bridge_direct`); False: send it the ordinary way (no writer for
        this connection, an addon's stream callable, a client going away, an empty chunk)."""
        try:
            if paced.direct is None:
                handler = bridge_direct.connection_handler(self.proxyserver, stream.context.client)
                paced.direct = handler is not None and bridge_direct.client_writer(stream, handler) or False
            out = paced.direct
            if not out or not data or stream.flow.response.stream is not True or not out.ready:
                return False
            out.write(data)
        except Exception:  # a bug here must not cost the stream: it goes on the ordinary way
            logger.exception("retimer: a direct write failed; this stream goes on through mitmproxy")
            paced.direct = False
            return False
        if paced.keep_body is None:  # an option read costs a deepcopy: once per stream
            paced.keep_body = bool(stream.context.options.store_streamed_bodies)
        if paced.keep_body:
            stream.response_body_buf += data
        return True

