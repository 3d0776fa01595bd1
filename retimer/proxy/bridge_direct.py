"""The pacing bridge's direct writes: a paced HTTP/1 stream's timed bytes straight to its client.

Why (BENCHMARKS.md, "CPU per event"): through mitmproxy, every timed write is a `Wakeup` sent
down the connection's layer stack to the stream and a `SendHttp` sent back up through the HTTP
layer, the HTTP/1 connection (chunk framing), the client's TLS layer (encryption) and the
connection handler (the socket write): about ten layer calls, most of a paced event's CPU. Once
a stream's response head is out on an HTTP/1 connection, what a body chunk becomes on the wire
is fixed, so `ClientWriter` does those steps itself in one call: frame the chunk as
`Http1Server` would, encrypt it with the connection's own TLS object as the TLS layer would,
write it to the handler's transport, note the activity for the idle watchdog. It is only used
where the stack holds nothing else that could touch the client's bytes (`client_writer` checks
every layer); h2, HTTP/3, unknown layers, a closing transport, the end of a stream and every
error take the ordinary way. Both ways write synchronously on the one event loop, so their
bytes never interleave out of order.
Part of the bridge: one of the modules allowed on mitmproxy's internals.
"""

from __future__ import annotations

from typing import Any

from mitmproxy.proxy import layer as layer_mod
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers import modes, tls
from mitmproxy.proxy.server import ConnectionHandler
from mitmproxy.proxy.tunnel import TunnelState
from OpenSSL import SSL

HttpLayer = http_layer.HttpLayer
Http1Server = http_layer.Http1Server
ClientTLSLayer = tls.ClientTLSLayer
ServerTLSLayer = tls.ServerTLSLayer

# layers that pass a client's SendData up unchanged (a ClientTLSLayer on the client encrypts it)
_PASSING: tuple[type, ...] = (
    modes.HttpProxy, modes.HttpUpstreamProxy, modes.ReverseProxy, modes.TransparentProxy,
    modes.Socks5Proxy, HttpLayer, http_layer.HttpStream, layer_mod.NextLayer, ServerTLSLayer,
)


class ClientWriter:
    """Writes body chunks of one HTTP/1 response to its client as mitmproxy's layers would."""

    __slots__ = ("_chunked", "_tls", "_watchdog", "_writer")

    def __init__(self, writer: Any, ssl_conn: SSL.Connection | None, chunked: bool, watchdog: Any) -> None:
        self._writer = writer
        self._tls = ssl_conn
        self._chunked = chunked
        self._watchdog = watchdog

    @property
    def ready(self) -> bool:
        """The transport still takes bytes (if not, the ordinary way sees the client go)."""
        return not self._writer.is_closing()

    def write(self, data: bytes) -> None:
        raw = b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data
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


def client_writer(stream: Any, handler: Any) -> ClientWriter | None:
    """A writer for `stream`'s body, or None where only the ordinary way is sure to be right."""
    client = stream.context.client
    tls_layer: Any = None
    http: Any = None
    for la in stream.context.layers:
        if isinstance(la, ClientTLSLayer) and la.conn is client and tls_layer is None:
            tls_layer = la
        elif type(la) not in _PASSING or (isinstance(la, ServerTLSLayer) and la.conn is client):
            return None
        elif isinstance(la, HttpLayer):
            http = la
    if http is None:
        return None
    h1 = http.connections.get(client)
    if type(h1) is not Http1Server or h1.stream_id != stream.stream_id or h1.response is None:
        return None
    ssl_conn = None
    if tls_layer is not None:
        ssl_conn = tls_layer.tls
        if ssl_conn is None or tls_layer.tunnel_state is not TunnelState.OPEN:
            return None
    io = handler.transports.get(client)
    if io is None or io.writer is None:
        return None
    chunked = "chunked" in h1.response.headers.get("transfer-encoding", "").lower()
    return ClientWriter(io.writer, ssl_conn, chunked, handler.timeout_watchdog)


def _annotated(cls: type, name: str) -> bool | None:
    return any(name in getattr(c, "__annotations__", {}) for c in cls.__mro__) or None


NEEDED = {  # what this module relies on, for the bridge's start-up check (None: missing)
    "Http1Server.response": _annotated(Http1Server, "response"),
    "Http1Server.stream_id": _annotated(Http1Server, "stream_id"),
    "HttpLayer.connections": "connections" in HttpLayer.__init__.__code__.co_names or None,
    "TLSLayer.tls": _annotated(tls.TLSLayer, "tls"),
    "TunnelLayer.tunnel_state": _annotated(tls.TLSLayer, "tunnel_state"),
    "ConnectionHandler.transports": _annotated(ConnectionHandler, "transports"),
    "ConnectionHandler.timeout_watchdog": _annotated(ConnectionHandler, "timeout_watchdog"),
}
