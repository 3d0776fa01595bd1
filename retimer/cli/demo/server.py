"""`retimer demo`'s content server: HTTP/1.1 (h11 on asyncio) on 127.0.0.1, behind the proxy in
reverse mode. It serves the page, its scripts and styles (all shipped with retimer: the page
fetches nothing from the network), the page's configuration, the demo's records, and the source
response as an Anthropic Messages stream sent at once, as a fast upstream would: the proxy in
front of it does all the timing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import h11

from retimer.cli.demo.source import ASSETS
from retimer.proxy.loopback import LoopbackServer

# the page, scripts and styles the server may send, with their media types
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "demo.js": "text/javascript; charset=utf-8",
    "demo.css": "text/css; charset=utf-8",
    "demo_worker.js": "text/javascript; charset=utf-8",
    "marked.umd.js": "text/javascript; charset=utf-8",
    "highlight.min.js": "text/javascript; charset=utf-8",
    "github.min.css": "text/css; charset=utf-8",
    "github-dark.min.css": "text/css; charset=utf-8",
}
STREAM_PATH = "/v1/messages"
WARMUP_QUERY = "warmup=1"  # a short stream the demo sends itself before the page opens
WARMUP_BODY_TEXT = "Ready."
HELLO_PATH = "/demo/hello"  # the page opens one warm connection per pane with these
HELLO_HOLD_S = 0.15
BATCH_EVENTS = 24  # SSE events per write: the proxy reads a fast upstream, not one huge write
SECURITY_HEADERS = [
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    # nothing from elsewhere: no fetch, image, font or script from the network
    ("content-security-policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
     "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'"),
]


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"


class DemoServer(LoopbackServer):
    """Answers the page's requests; `stream_body` is the SSE body every pane's request gets
    and `records(run)` the demo addon's records of one run."""

    def __init__(self, config: Mapping[str, object], stream_body: bytes, warmup_body: bytes,
                 records: Callable[[str], Sequence[Mapping[str, object]]]) -> None:
        super().__init__()
        self.config = json.dumps(config, ensure_ascii=False).encode()
        self.stream_body = stream_body
        self.warmup_body = warmup_body
        self.records = records
        self.streams = 0  # stream requests answered

    def answer(self, method: str, target: str) -> Response:
        """The response to one request (the stream included: sent whole, the proxy times it)."""
        parts = urlsplit(target)
        path = parts.path
        if method == "POST" and path == STREAM_PATH:
            if parts.query == WARMUP_QUERY:
                return Response(200, self.warmup_body, "text/event-stream; charset=utf-8")
            self.streams += 1
            return Response(200, self.stream_body, "text/event-stream; charset=utf-8")
        if method not in ("GET", "HEAD"):
            return Response(405, b'{"error": "method not allowed"}')
        if path in ("/", "/index.html"):
            return _static("index.html")
        if path.startswith("/demo/assets/") and path.removeprefix("/demo/assets/") in STATIC:
            return _static(path.removeprefix("/demo/assets/"))
        if path == "/demo/config.json":
            return Response(200, self.config)
        if path == "/demo/records":
            run = parse_qs(parts.query).get("run", [""])[0]
            return Response(200, json.dumps(self.records(run)).encode())
        if path == HELLO_PATH:
            return Response(200, b'{"ok": true}')
        if path == "/favicon.ico":
            return Response(204, b"", "image/x-icon")
        return Response(404, b'{"error": "not found"}')

    async def respond(self, request: h11.Request, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        if target == HELLO_PATH:  # held, so the page's parallel hellos open one connection each
            await asyncio.sleep(HELLO_HOLD_S)
        answer = self.answer(method, target)
        headers = [("content-type", answer.content_type), *SECURITY_HEADERS]
        if answer.content_type.startswith("text/event-stream"):
            headers.append(("transfer-encoding", "chunked"))
        else:
            headers.append(("content-length", str(len(answer.body))))
        writer.write(conn.send(h11.Response(status_code=answer.status, headers=headers)) or b"")
        if answer.body and method != "HEAD" and answer.status != 204:
            for piece in stream_batches(answer):
                writer.write(conn.send(h11.Data(data=piece)) or b"")
                await writer.drain()
                await asyncio.sleep(0.0005)  # a fast upstream, and the proxy's loop stays free
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()


def stream_batches(answer: Response) -> list[bytes]:
    """A stream in writes of a few events each; anything else in one write."""
    if not answer.content_type.startswith("text/event-stream"):
        return [answer.body]
    events = answer.body.split(b"\n\n")
    out = [b"\n\n".join(events[i:i + BATCH_EVENTS]) + b"\n\n" for i in range(0, len(events), BATCH_EVENTS)]
    out[-1] = out[-1][:-2]  # the body's own end, as it was
    return [piece for piece in out if piece]


def _static(name: str) -> Response:
    return Response(200, (ASSETS / name).read_bytes(), STATIC[name])
