"""Small servers on loopback (asyncio, a random port on 127.0.0.1): the response cache's and
the cassettes' replay servers and `retimer demo`'s content server. What they share is here:
listening (plain or TLS), keep-alive, reading a whole HTTP/1.1 request (h11), aborting every
connection on stop, and pointing a flow at such a server and back (`Redirect`, and a replay
server's table of the flows pointed at it, `ReplayServer`); each says only how it answers a
request (`respond`), or a WebSocket or HTTP/2 server how it serves a connection
(`serve_connection`).
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import h11

if TYPE_CHECKING:  # the demo's server uses this module without a proxy
    from mitmproxy import http

REPLAY_HEADER = "x-retimer-replay"


@dataclass(slots=True)
class Redirect:
    """A flow pointed at a loopback server, with where it was going. The server puts the
    request back as the client sent it (`restore`) on reading it, before any byte of its
    answer, so the Retimer addon, records and mitmweb see the request as sent, while
    `flow.server_conn` truthfully names the loopback server. The token (random per flow, in
    REPLAY_HEADER and under `metadata_key`) ties the request to what answers it."""

    flow: http.HTTPFlow
    scheme: bytes
    host: str
    port: int
    token: str
    metadata_key: str

    @classmethod
    def to(cls, flow: http.HTTPFlow, port: int, metadata_key: str,
           scheme: bytes = b"http") -> Redirect:
        """Point `flow` at 127.0.0.1:`port` over plain HTTP (or `scheme`; data fields, not the
        setters: Host / :authority stay as the client sent them)."""
        data = flow.request.data
        redirect = cls(flow, data.scheme, data.host, data.port, secrets.token_urlsafe(24),
                       metadata_key)
        flow.metadata[metadata_key] = redirect.token
        flow.request.headers[REPLAY_HEADER] = redirect.token
        data.scheme, data.host, data.port = scheme, "127.0.0.1", port
        return redirect

    def restore(self) -> None:
        """The request as the client sent it."""
        data = self.flow.request.data
        data.scheme, data.host, data.port = self.scheme, self.host, self.port
        self.flow.request.headers.pop(REPLAY_HEADER, None)
        self.flow.metadata.pop(self.metadata_key, None)


class LoopbackServer:
    """Serves HTTP/1.1 on 127.0.0.1; subclasses write each response in `respond` (or serve
    a whole connection their own way in `serve_connection`)."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls_context())
        self.port = self._server.sockets[0].getsockname()[1]

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS a server speaks (None: plain TCP)."""
        return None

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    @property
    def running(self) -> bool:
        return self._server is not None

    async def respond(self, request: h11.Request, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
        """Write the whole response to `request` (head, data, end of message) through `conn`."""
        raise NotImplementedError

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self.serve_connection(reader, writer)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer HTTP/1.1 requests, kept alive, until the peer goes."""
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await read_request(conn, reader)
                if request is None:
                    return
                await self.respond(request, conn, writer)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError):
            writer.transport.abort()


class Redirected(Protocol):
    """What a replay server keeps for a flow pointed at it: at least the way back."""

    @property
    def redirect(self) -> Redirect: ...


class LoopbackReplay[T: Redirected](LoopbackServer):
    """A loopback server that answers the flows pointed at it, each found by its token
    (REPLAY_HEADER) in `pending` with what answers it (a `T`). The flow's token is also kept
    under `token_key` in its metadata, so a flow that fails before it is served can be put
    back (`forget`)."""

    token_key = ""  # flow.metadata's key for this server's token, one per server class

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[str, T] = {}

    def stop(self) -> None:
        super().stop()
        self.pending.clear()

    def point(self, flow: http.HTTPFlow, scheme: bytes = b"http") -> Redirect:
        """Point `flow` at this server; the caller files what answers it under the token."""
        return Redirect.to(flow, self.port, self.token_key, scheme)

    def forget(self, flow: http.HTTPFlow) -> bool:
        """A flow pointed here failed before it was served: put its request back (True)."""
        token = flow.metadata.get(self.token_key)
        if not token or token not in self.pending:
            return False
        self.pending.pop(token).redirect.restore()
        return True

    def claim(self, headers: list[tuple[bytes, bytes]]) -> T | None:
        """What answers the request with these headers (None: no token, or not one of ours),
        its request put back as the client sent it, before any byte of the answer, so the
        proxy's responseheaders sees the original."""
        token = next((v.decode("latin-1") for k, v in headers if k.lower() == _REPLAY_KEY), "")
        found = self.pending.pop(token, None) if token else None
        if found is not None:
            found.redirect.restore()
        return found


_REPLAY_KEY = REPLAY_HEADER.encode()


async def read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """Read one whole request (its body is read and dropped); None when the peer is gone."""
    request: h11.Request | None = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
