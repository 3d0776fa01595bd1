"""The cheapest load generator bench has: many concurrent streams on raw asyncio sockets.

Why: the scaling benchmark runs the client on the same cores as the proxy it measures, so every
microsecond the client spends per read is taken from the proxy. httpx's async client costs
far more per read than the proxy's share allows at 10,000 events/s; here a read costs one
timestamp and one list append (an `asyncio.Protocol`), and the HTTP/1.1 responses (chunked
framing included) are parsed with h11 after every stream ended (parsing one as it ends would
stall this loop, and so delay the timestamps of the reads of streams still playing), each body
piece keeping the time of the read that completed it: the same `(time, bytes)` reads bench/client.py's httpx path
gives, so bench.client builds the same results from them.

Only plain-HTTP upstreams through a forward proxy (absolute-form targets), or direct.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import h11

monotonic = time.monotonic
END_CHUNK = b"0\r\n\r\n"  # the last chunk of a chunked body: the stream is over


class Reads(asyncio.Protocol):
    """Timestamps every read; wakes `done` at the end of a chunked body or of the connection."""

    def __init__(self) -> None:
        self.reads: list[tuple[float, bytes]] = []
        self.tail = b""
        self.done: asyncio.Event = asyncio.Event()
        self.transport: asyncio.Transport | None = None
        self.whole = False  # wake on every read (an untimed response of any framing)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio's, or uvloop's TCPTransport

    def data_received(self, data: bytes) -> None:
        self.reads.append((monotonic(), data))
        self.tail = (self.tail + data)[-len(END_CHUNK):]
        if self.tail == END_CHUNK or self.whole:
            self.done.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.done.set()

    def take(self) -> list[tuple[float, bytes]]:
        """The reads so far, and a fresh start for the next response on this connection."""
        reads, self.reads, self.tail = self.reads, [], b""
        self.done.clear()
        return reads


def request_bytes(conn: h11.Connection, method: str, url: str, proxied: bool,
                  headers: dict[str, str], body: bytes = b"") -> bytes:
    """One whole request as h11 writes it (absolute-form target through a forward proxy)."""
    parts = urlsplit(url)
    target = url if proxied else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    hdrs = [("host", parts.netloc), *((k, v) for k, v in headers.items() if k.lower() != "host"),
            ("content-length", str(len(body)))]
    out = conn.send(h11.Request(method=method, target=target, headers=hdrs)) or b""
    if body:
        out += conn.send(h11.Data(data=body)) or b""
    return out + (conn.send(h11.EndOfMessage()) or b"")


def parse_response(conn: h11.Connection, reads: list[tuple[float, bytes]]
                   ) -> tuple[int, float, list[tuple[float, bytes]]]:
    """(status, time of the head, body pieces with the time of the read that completed each),
    from the raw reads of one response; a body the reads do not finish ends where they do."""
    status, t_head, body = 0, 0.0, []
    try:
        for t, data in [*reads, (reads[-1][0] if reads else 0.0, b"")]:  # b"": end of input
            conn.receive_data(data)
            while True:
                ev = conn.next_event()
                if ev is h11.NEED_DATA or ev is h11.PAUSED:
                    break
                if isinstance(ev, h11.Response):
                    status, t_head = ev.status_code, t
                elif isinstance(ev, h11.Data):
                    body.append((t, bytes(ev.data)))
                elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed):
                    return status, t_head, body
    except h11.RemoteProtocolError:  # cut short: what arrived is the result
        pass
    return status, t_head, body


async def untimed_response(conn: h11.Connection, reads: Reads, timeout: float) -> None:
    """Read one response whatever its framing (parsed read by read: nothing is timed here),
    and make the connection ready for the next request."""
    reads.whole = True
    while conn.their_state is not h11.DONE:
        await asyncio.wait_for(reads.done.wait(), timeout)
        for _, data in reads.take():
            conn.receive_data(data)
        while (ev := conn.next_event()) is not h11.NEED_DATA:
            if isinstance(ev, h11.ConnectionClosed):
                raise ConnectionError("the proxy closed the connection after the warm-up")
            if isinstance(ev, h11.EndOfMessage):
                break
    reads.whole = False
    conn.start_next_cycle()


Stream = tuple[asyncio.Transport, Reads, h11.Connection]


async def connect(proxy: str | None, spec: dict[str, Any], timeout: float) -> Stream:
    """A connection for one stream, warmed up with the spec's GET (so the proxy has made its
    flow machinery and upstream connection before the timed request)."""
    target = urlsplit(proxy or spec["url"])
    loop = asyncio.get_running_loop()
    if target.hostname is None:
        raise ValueError(f"no host in {proxy or spec['url']!r}")
    transport, reads = await loop.create_connection(Reads, target.hostname, target.port or 80)
    conn = h11.Connection(h11.CLIENT)
    if spec.get("warmup"):
        transport.write(request_bytes(conn, "GET", spec["warmup"], proxy is not None, {}))
        await untimed_response(conn, reads, timeout)
    return transport, reads, conn


async def one_stream(stream: Stream, proxied: bool, spec: dict[str, Any], timeout: float
                     ) -> tuple[float, float, list[tuple[float, bytes]]]:
    """Wait the spec's `delay`, then POST and time every read: (t_call, w_call, the reads)."""
    transport, reads, conn = stream
    await asyncio.sleep(spec.get("delay", 0.0))
    data = request_bytes(conn, "POST", spec["url"], proxied, spec["headers"], spec["body"].encode())
    w_call, t_call = time.time(), monotonic()
    transport.write(data)
    await asyncio.wait_for(reads.done.wait(), timeout)
    return t_call, w_call, reads.take()


async def run_concurrent(proxy: str | None, specs: list[dict[str, Any]],
                         timeout: float) -> list[tuple[float, float, float, float, int,
                                                       list[tuple[float, bytes]]]]:
    """Every stream on its own connection, all on this one thread: every connection opened
    and warmed up first, then the requests, each after its `delay` from one common start (0:
    all written in the same instant). Each result: (t_call, w_call, t_sent, t_head, status,
    body pieces)."""
    streams: list[Stream] = []
    try:
        opened = await asyncio.gather(*(connect(proxy, s, timeout) for s in specs),
                                      return_exceptions=True)
        streams = [st for st in opened if not isinstance(st, BaseException)]
        for failed in opened:
            if isinstance(failed, BaseException):
                raise failed
        played = await asyncio.gather(*(one_stream(st, proxy is not None, s, timeout)
                                        for st, s in zip(streams, specs, strict=True)))
        out = []
        for (t_call, w_call, reads), (_, _, conn) in zip(played, streams, strict=True):
            status, t_head, body = parse_response(conn, reads)
            out.append((t_call, w_call, t_call, t_head, status, body))
        return out
    finally:
        for transport, _, _ in streams:
            transport.close()


def check_spec(spec: dict[str, Any]) -> None:
    """A spec this client can send: plain http (no TLS to the upstream or the proxy)."""
    if not spec["url"].startswith("http://"):
        raise ValueError(f"the raw client speaks plain http only: {json.dumps(spec['url'])}")
