"""Where a stream's bytes go to its client: one `ClientSink` interface, two ways.

`LayerSink` sends through mitmproxy's layers: a `SendHttp(ResponseData)` command that the
stream's generator yields (`commands`). `ClientWriter` writes straight to the connection (its
`commands` are always none). Both say whether they take bytes now (`ready`). Why (BENCHMARKS.md,
"CPU per event"): through mitmproxy, every timed write is a `Wakeup` sent down the connection's
layer stack to the stream and a `SendHttp` sent back up through the HTTP layer, the client's HTTP
connection (HTTP/1 chunk framing, or h2 frames and flow control), the client's TLS layer
(encryption) and the connection handler (the socket write): about ten layer calls per write.
Once a stream's response head is out, what a body chunk becomes on the wire is fixed, so
`ClientWriter` does those steps itself in one call, each as mitmproxy's own layer does it: frame
the chunk as `Http1Server` does, or hand it to the connection's own h2 state machine as
`Http2Server` does (which keeps flow control: what the window does not allow waits in its
buffer, sent by mitmproxy when the client opens the window); encrypt with the connection's own
TLS object as the TLS layer does; write to the handler's transport; note the activity for the
idle watchdog. It is only used where the stack holds nothing else that could touch the
client's bytes (`client_writer` checks every layer); HTTP/3, unknown layers, a closing transport
or h2 stream, the end of a stream and every error take the layers. Both ways write
synchronously on the one event loop, so their bytes never interleave out of order. A
passthrough chunk is written while mitmproxy handles the upstream's read, so the handler's
`drain_writers` after it keeps the backpressure of the ordinary way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Protocol

import mitmproxy_rs
from mitmproxy.proxy import commands
from mitmproxy.proxy import layer as layer_mod
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers import modes, tls
from mitmproxy.proxy.server import ConnectionHandler, TimeoutWatchdog
from mitmproxy.proxy.tunnel import TunnelState
from OpenSSL import SSL

HttpLayer = http_layer.HttpLayer
HttpStream = http_layer.HttpStream
SendHttp = http_layer.SendHttp
ResponseData = http_layer.ResponseData
Http1Server = http_layer.Http1Server
Http2Server = http_layer.Http2Server
ClientTLSLayer = tls.ClientTLSLayer
ServerTLSLayer = tls.ServerTLSLayer

# layers that pass a client's SendData up unchanged (a ClientTLSLayer on the client encrypts it)
_PASSING: tuple[type, ...] = (
    modes.HttpProxy, modes.HttpUpstreamProxy, modes.ReverseProxy, modes.TransparentProxy,
    modes.Socks5Proxy, HttpLayer, http_layer.HttpStream, layer_mod.NextLayer, ServerTLSLayer,
)


class ClientSink(Protocol):
    """Takes a response's body bytes for its client, in order."""

    @property
    def ready(self) -> bool:
        """The sink takes bytes now (False: the client is going; the ordinary way sees it go)."""
        ...

    def write(self, data: bytes) -> None: ...

    def commands(self) -> Iterator[commands.Command]:
        """What the stream's handler must yield for the writes so far to happen, each once."""
        ...


class LayerSink:
    """Body bytes as mitmproxy's own `SendHttp` commands, for the stream's handler to yield
    (`commands`), through every layer between it and the client."""

    __slots__ = ("_client", "_pending", "_stream_id")

    def __init__(self, stream: HttpStream) -> None:
        self._stream_id = stream.stream_id
        self._client = stream.context.client
        self._pending: list[commands.Command] = []

    @property
    def ready(self) -> bool:
        """mitmproxy's layers take a write whatever the connection's state (and drop it when
        the client has gone)."""
        return True

    def write(self, data: bytes) -> None:
        self._pending.append(SendHttp(ResponseData(self._stream_id, data), self._client))

    def commands(self) -> Iterator[commands.Command]:
        """The writes so far, each once."""
        pending, self._pending = self._pending, []
        return iter(pending)


class ClientWriter:
    """Writes body chunks of one response to its client as mitmproxy's layers would: `frame`
    turns a chunk into the connection's bytes, `is_open` says the stream still takes them."""

    __slots__ = ("_frame", "_is_open", "_tls", "_watchdog", "_writer")

    def __init__(
        self, writer: asyncio.StreamWriter | mitmproxy_rs.Stream, ssl_conn: SSL.Connection | None,
        frame: Callable[[bytes], bytes], is_open: Callable[[], bool], watchdog: TimeoutWatchdog,
    ) -> None:
        # an asyncio StreamWriter only passes writes on to its transport (others: as they are)
        self._writer: asyncio.WriteTransport | mitmproxy_rs.Stream = (
            writer.transport if isinstance(writer, asyncio.StreamWriter) else writer)
        self._tls = ssl_conn
        self._frame = frame
        self._is_open = is_open
        self._watchdog = watchdog

    @property
    def ready(self) -> bool:
        """The transport (and the h2 stream) still take bytes; if not, the ordinary way sees
        the client go."""
        return not self._writer.is_closing() and self._is_open()

    def write(self, data: bytes) -> None:
        raw = self._frame(data)
        if not raw:
            return  # h2: held back by flow control, in the connection's own buffer
        if self._tls is None:
            self._writer.write(raw)
        else:
            try:
                self._tls.sendall(raw)
            except (SSL.ZeroReturnError, SSL.SysCallError):
                pass  # the TLS layer drops a write to a closing peer the same way
            while True:
                try:
                    self._writer.write(self._tls.bio_read(65535))
                except SSL.WantReadError:
                    break
        self._watchdog.register_activity()

    def commands(self) -> Iterator[commands.Command]:
        """None: every write is on the transport already."""
        return iter(())


def client_writer(stream: HttpStream, handler: ConnectionHandler) -> ClientWriter | None:
    """A writer for `stream`'s body, or None where only the ordinary way is sure to be right."""
    client = stream.context.client
    tls_layer: tls.ClientTLSLayer | None = None
    http: http_layer.HttpLayer | None = None
    for la in stream.context.layers:
        if isinstance(la, ClientTLSLayer) and la.conn is client and tls_layer is None:
            tls_layer = la
        elif type(la) not in _PASSING or (isinstance(la, ServerTLSLayer) and la.conn is client):
            return None
        elif isinstance(la, HttpLayer):
            http = la
    if http is None:
        return None
    frame_is_open = _framing(http.connections.get(client), stream.stream_id)
    if frame_is_open is None:
        return None
    ssl_conn = None
    if tls_layer is not None:
        ssl_conn = tls_layer.tls
        if ssl_conn is None or tls_layer.tunnel_state is not TunnelState.OPEN:
            return None
    io = handler.transports.get(client)
    if io is None or io.writer is None:
        return None
    return ClientWriter(io.writer, ssl_conn, *frame_is_open, handler.timeout_watchdog)


def _framing(conn: object, stream_id: int) -> tuple[Callable[[bytes], bytes], Callable[[], bool]] | None:
    """How the client's HTTP connection layer frames a body chunk of `stream_id`, and whether
    the stream is still open for it; None for any other connection (HTTP/3) or state."""
    if type(conn) is Http1Server:
        if conn.stream_id != stream_id or conn.response is None:
            return None
        if "chunked" in conn.response.headers.get("transfer-encoding", "").lower():
            return (lambda data: b"%x\r\n%s\r\n" % (len(data), data)), _always
        return (lambda data: data), _always
    if type(conn) is Http2Server:
        h2_conn = conn.h2_conn

        def frame(data: bytes) -> bytes:
            h2_conn.send_data(stream_id, data)
            return h2_conn.data_to_send()

        return frame, lambda: conn.is_open_for_us(stream_id)
    return None


def _always() -> bool:
    return True


def _annotated(cls: type, name: str) -> bool | None:
    return any(name in getattr(c, "__annotations__", {}) for c in cls.__mro__) or None


NEEDED = {  # what this module relies on, for the bridge's start-up check (None: missing)
    "layers.http.SendHttp": getattr(http_layer, "SendHttp", None),
    "layers.http.ResponseData": getattr(http_layer, "ResponseData", None),
    "Http1Server.response": _annotated(Http1Server, "response"),
    "Http1Server.stream_id": _annotated(Http1Server, "stream_id"),
    "Http2Server.h2_conn": _annotated(Http2Server, "h2_conn"),
    "Http2Server.is_open_for_us": getattr(Http2Server, "is_open_for_us", None),
    "HttpLayer.connections": "connections" in HttpLayer.__init__.__code__.co_names or None,
    "TLSLayer.tls": _annotated(tls.TLSLayer, "tls"),
    "TunnelLayer.tunnel_state": _annotated(tls.TLSLayer, "tunnel_state"),
    "ConnectionHandler.transports": _annotated(ConnectionHandler, "transports"),
    "ConnectionHandler.timeout_watchdog": _annotated(ConnectionHandler, "timeout_watchdog"),
}
