"""Small HTTP/1.1 servers on loopback (h11 on asyncio, a random port on 127.0.0.1): the response
cache's replay server and `retimer demo`'s content server. What they share is here: listening,
keep-alive, reading a whole request, and aborting every connection on stop; each says only how
it answers a request.
"""

from __future__ import annotations

import asyncio

import h11


class LoopbackServer:
    """Serves HTTP/1.1 on 127.0.0.1; subclasses write each response in `respond`."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

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
        finally:
            self._writers.discard(writer)
            writer.close()


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
