"""The floor of a paced event in Python: a bare asyncio HTTP proxy that paces SSE events.

`bench.cpu`'s `floor` route (issue 41): what any pacing proxy written in Python on asyncio
spends per paced event before it does anything retimer does. For each proxied request (plain
HTTP, absolute-form URL, a new connection as the bench client makes) it opens a connection to
the upstream, forwards the request, reads the whole response with h11, cuts the body into SSE
events at blank lines and writes one event per loop timer, `--gap` apart after `--ttft`, HTTP/1
chunk-framed, then the last chunk, and closes. No tokenizer, no JSON, no timing model, no
records, no mitmproxy: a loop timer and a `send` per event and a request's bare handling.
Run: `python -m bench.floor_proxy --port P [--ttft S] [--gap S]` (prints `listening` when ready).
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import urlsplit

import h11


async def _read_response(host: str, port: int, request: h11.Request, body: bytes) -> tuple[h11.Response, bytes]:
    reader, writer = await asyncio.open_connection(host, port)
    conn = h11.Connection(h11.CLIENT)
    writer.write(conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
    response: h11.Response | None = None
    parts: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    writer.close()
    assert response is not None
    return response, b"".join(parts)


def _paced(transport: asyncio.WriteTransport, events: list[bytes], start: float, ttft: float,
           gap: float, done: asyncio.Future[None]) -> None:
    """Each event at start + ttft + i * gap, one loop timer and one write each."""
    loop = asyncio.get_running_loop()

    def emit(i: int) -> None:
        data = events[i]
        transport.write(b"%x\r\n%s\r\n" % (len(data), data))
        if i + 1 < len(events):
            loop.call_at(start + ttft + (i + 1) * gap, emit, i + 1)
        else:
            transport.write(b"0\r\n\r\n")
            done.set_result(None)

    loop.call_at(start + ttft, emit, 0)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ttft: float, gap: float) -> None:
    loop = asyncio.get_running_loop()
    conn = h11.Connection(h11.SERVER)
    request: h11.Request | None = None
    body: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            if not data:
                writer.close()
                return
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            break
    assert request is not None
    start = loop.time()
    url = urlsplit(request.target.decode())
    path = url.path + (f"?{url.query}" if url.query else "")
    headers = [(k, v) for k, v in request.headers if k not in (b"proxy-connection", b"connection")]
    upstream = h11.Request(method=request.method, target=path, headers=headers)
    response, content = await _read_response(url.hostname or "127.0.0.1", url.port or 80, upstream, b"".join(body))
    events = [e + b"\n\n" for e in content.split(b"\n\n") if e.strip()]
    head = [(k, v) for k, v in response.headers
            if k not in (b"content-length", b"transfer-encoding", b"connection")]
    out = h11.Response(status_code=response.status_code,
                       headers=[*head, (b"transfer-encoding", b"chunked"), (b"connection", b"close")])
    writer.write(conn.send(out))
    done: asyncio.Future[None] = loop.create_future()
    _paced(writer.transport, events, start, ttft, gap, done)
    await done
    writer.close()


async def main_async(port: int, ttft: float, gap: float) -> None:
    server = await asyncio.start_server(lambda r, w: serve(r, w, ttft, gap), "127.0.0.1", port)
    print("listening", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.1, help="seconds before the first event")
    ap.add_argument("--gap", type=float, default=0.01, help="seconds between events")
    args = ap.parse_args()
    try:
        asyncio.run(main_async(args.port, args.ttft, args.gap))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
