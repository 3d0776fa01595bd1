"""Fake LLM upstream for tests: replays recorded stream bodies over HTTP/1.1 (h11), optionally TLS.

Routes (query strings ignored for routing):
  POST .../chat/completions  -> OpenAI Chat SSE stream (server's `openai_body`)
  POST .../v1/messages       -> Anthropic Messages SSE stream (server's `anthropic_body`)
  POST /api/chat             -> Ollama NDJSON stream (server's `ollama_body`, when set)
  any  /slow?ms=N            -> sleeps N ms, then the JSON answer below
  GET  a path in `pages`     -> that page as text/html (a fake LLM site for browsers)
  anything else              -> 200 {"ok": true, "method": ..., "path": <raw target>}
A request header `x-fake-fixture: <path under tests/fixtures/streams>` streams that file instead,
on any route. The delivery plan can be overridden per request with `x-fake-bursts`,
`x-fake-burst-gap`, `x-fake-event-gap`, `x-fake-gzip` (0/1) and `x-fake-close` (0/1);
`x-fake-encoding` picks a Content-Encoding as servers really send it (see `BodyEncoder`),
including broken ones. The bodies themselves are built in tests/support/stream_bodies.py.
Faults, per request: `x-fake-abort-after: N` cuts the connection after N body pieces
(`x-fake-abort: rst` resets it, `fin` closes it; either way no end of message), `x-fake-error-after: N`
sends the API's error event after N pieces and ends cleanly, `x-fake-forever: 1` drips endless
OpenAI Chat chunks after the body's first event. A client that goes away mid-stream is noticed at
once (`Served.peer_closed`) and the stream stops, as a real server would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import ssl
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import h11

from tests.support.loop_server import Handler, LoopServer
from tests.support.server_certs import make_certs
from tests.support.stream_bodies import (
    CONTENT_TYPES,
    DEFAULT_ANTHROPIC_FIXTURE,
    DEFAULT_OPENAI_FIXTURE,
    BodyEncoder,
    compact_json,
    load_fixture,
    split_bursts,
    split_events,
)

CERT_NAMES = ("localhost", "127.0.0.1", "llm.test")


@dataclass(frozen=True, slots=True)
class Write:
    """One body piece handed to the socket (size before gzip/chunk framing) and when."""

    size: int
    mono: float
    wall: float


@dataclass(slots=True)
class Served:
    """One request the server handled, and how it answered."""

    conn: int  # connection ordinal; equal values mean a reused keep-alive connection
    method: str
    target: str  # raw request target, query included
    path: str  # target without the query
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: bytes
    route: str = ""  # "openai" | "anthropic" | "fixture" | "slow" | "json" | "error"
    response_body: bytes = b""  # decoded (pre-gzip) body the server meant to send
    writes: list[Write] = field(default_factory=list)
    done: bool = False  # set just before the end of the response goes out
    peer_closed: float | None = None  # monotonic time the client went away mid-response
    aborted: bool = False  # the server cut the connection on purpose (x-fake-abort-after)


class FakeLLM(LoopServer):
    """Local upstream that streams recorded LLM bodies with a configurable delivery plan.

    Plan: `per_event_gap` (seconds between SSE events) wins over `bursts`/`burst_gap` (k equal
    byte pieces). `first_delay` waits after the response head before the first piece. `close`
    sends a close-delimited body (`Connection: close`) instead of chunked. Attributes may be
    changed between requests.
    """

    def __init__(self, openai_body: bytes | None = None, anthropic_body: bytes | None = None, *,
                 bursts: int = 1, burst_gap: float = 0.0, per_event_gap: float | None = None,
                 first_delay: float = 0.0, gzip: bool = False, close: bool = False,
                 tls: bool = False, port: int = 0) -> None:
        oa, an = openai_body, anthropic_body
        self.openai_body = load_fixture(DEFAULT_OPENAI_FIXTURE) if oa is None else oa
        self.anthropic_body = load_fixture(DEFAULT_ANTHROPIC_FIXTURE) if an is None else an
        self.ollama_body: bytes | None = None  # set: POST /api/chat streams it (NDJSON)
        self.bursts, self.burst_gap, self.per_event_gap = bursts, burst_gap, per_event_gap
        self.first_delay, self.gzip, self.close, self.tls = first_delay, gzip, close, tls
        self.port = port
        # PEM files, set by start() when tls: the CA to trust, the server cert and its key.
        self.ca_path: Path | None = None
        self.cert_path: Path | None = None
        self.key_path: Path | None = None
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._served: list[Served] = []
        self._conn_ids = itertools.count(1)
        self.pages: dict[str, bytes] = {}  # GET path -> HTML page

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.url_for("127.0.0.1")

    def url_for(self, host: str) -> str:
        """Base URL using another name for this server (e.g. "localhost", "llm.test")."""
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def client_ssl_context(self) -> ssl.SSLContext:
        """Client context trusting our CA, e.g. `httpx.Client(verify=fake.client_ssl_context())`."""
        assert self.ca_path, "start a tls=True server first"
        return ssl.create_default_context(cafile=str(self.ca_path))

    def start(self) -> FakeLLM:
        ssl_ctx = None
        if self.tls:
            self._tmp = Path(tempfile.mkdtemp(prefix="fakellm-"))
            self.ca_path, self.cert_path, self.key_path = make_certs(self._tmp, CERT_NAMES, "retimer fake upstream CA")
            ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_ctx.load_cert_chain(self.cert_path, self.key_path)
            ssl_ctx.set_alpn_protocols(["http/1.1"])
        self._start_thread(ssl_ctx, "fake LLM", timeout=5)
        return self

    async def _listen(self, ssl_ctx: ssl.SSLContext | None,
                      tracked: Callable[[Handler], Handler]) -> list[asyncio.Server]:
        server = await asyncio.start_server(tracked(self._serve_conn), "127.0.0.1", self.port,
                                            ssl=ssl_ctx)
        self.port = server.sockets[0].getsockname()[1]
        return [server]

    # -- records -----------------------------------------------------------------------------
    @property
    def requests(self) -> list[Served]:
        """Snapshot copies of every request served so far, in arrival order."""
        with self._lock:
            return [replace(r, headers=dict(r.headers), writes=list(r.writes))
                    for r in self._served]

    def wait_done(self, n: int, timeout: float = 5.0) -> list[Served]:
        """Block until at least n responses are complete; return the snapshot."""
        with self._done:
            if not self._done.wait_for(lambda: sum(r.done for r in self._served) >= n, timeout):
                raise TimeoutError(f"only {sum(r.done for r in self._served)} of {n} done")
        return self.requests

    def clear(self) -> None:
        with self._lock:
            self._served.clear()

    # -- server (runs on the background loop) ------------------------------------------------
    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn, conn_id = h11.Connection(h11.SERVER), next(self._conn_ids)
        try:
            while True:
                req, body = None, bytearray()
                while True:
                    ev = conn.next_event()
                    if ev is h11.NEED_DATA:
                        conn.receive_data(await reader.read(65536))
                    elif isinstance(ev, h11.Request):
                        req = ev
                    elif isinstance(ev, h11.Data):
                        body += ev.data
                    elif isinstance(ev, h11.EndOfMessage):
                        break
                    else:  # ConnectionClosed
                        return
                assert req is not None
                keep = await self._respond(conn, writer, conn_id, req, bytes(body), reader)
                if not keep or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except (h11.ProtocolError, ConnectionError, ssl.SSLError):
            writer.transport.abort()
        finally:
            writer.close()

    async def _respond(self, conn: h11.Connection, writer: asyncio.StreamWriter, conn_id: int,
                       req: h11.Request, body: bytes,
                       reader: asyncio.StreamReader | None = None) -> bool:
        """Answer one request; return False if the connection must close afterwards."""
        target = req.target.decode("latin-1")
        split = urlsplit(target)
        headers: dict[str, str] = {}
        for k, v in req.headers:
            name, val = k.decode("latin-1"), v.decode("latin-1")
            headers[name] = f"{headers[name]}, {val}" if name in headers else val
        method, fixture = req.method.decode(), headers.get("x-fake-fixture")
        ctype, stream, route = "text/event-stream", None, "json"
        if fixture:
            try:
                stream, route = load_fixture(fixture), "fixture"
                ctype = CONTENT_TYPES.get(Path(fixture).suffix, ctype)
            except FileNotFoundError:
                route = "error"
        elif method == "POST" and split.path.endswith("/chat/completions"):
            stream, route = self.openai_body, "openai"
        elif method == "POST" and split.path.endswith("/v1/messages"):
            stream, route = self.anthropic_body, "anthropic"
        elif method == "POST" and split.path == "/api/chat" and self.ollama_body is not None:
            stream, route, ctype = self.ollama_body, "ollama", "application/x-ndjson"
        elif split.path == "/slow":
            route = "slow"
        elif method == "GET" and split.path in self.pages:
            route = "page"
        rec = Served(conn_id, method, target, split.path, headers, body, route)
        with self._lock:
            self._served.append(rec)
        if stream is not None:
            watch = asyncio.ensure_future(self._watch_peer(conn, reader, rec)) if reader else None
            try:
                await self._stream(conn, writer, rec, headers, stream, ctype, watch)
            finally:
                if watch is not None:
                    watch.cancel()
                    await asyncio.gather(watch, return_exceptions=True)  # its read is over
            return not self._opt(headers, "x-fake-close", self.close)

        if route == "slow":
            await asyncio.sleep(float(parse_qs(split.query).get("ms", ["0"])[0]) / 1000)
        payload = {"ok": route != "error", "method": method, "path": target}
        if route == "error":
            payload["error"] = f"no such fixture: {fixture}"
        rec.response_body = data = json.dumps(payload).encode()
        ctype = "application/json"
        if route == "page":
            rec.response_body = data = self.pages[split.path]
            ctype = "text/html; charset=utf-8"
        self._finish(rec)
        writer.write(b"".join(conn.send(ev) or b"" for ev in (
            h11.Response(status_code=404 if route == "error" else 200, headers=[
                ("content-type", ctype), ("content-length", str(len(data)))]),
            h11.Data(data=data), h11.EndOfMessage())))
        await writer.drain()
        return True

    @staticmethod
    def _opt(headers: dict[str, str], name: str, default: bool) -> bool:
        return headers[name] not in ("0", "false", "") if name in headers else default

    @staticmethod
    async def _watch_peer(conn: h11.Connection, reader: asyncio.StreamReader, rec: Served) -> None:
        """Notice the client leaving mid-response (bytes it sends meanwhile go to h11)."""
        try:
            while data := await reader.read(65536):
                conn.receive_data(data)
        except (ConnectionError, ssl.SSLError):
            pass
        if not rec.done:
            rec.peer_closed = time.monotonic()

    async def _stream(self, conn: h11.Connection, writer: asyncio.StreamWriter, rec: Served,
                      headers: dict[str, str], body: bytes, ctype: str,
                      watch: asyncio.Future | None = None) -> None:
        event_gap = (float(headers["x-fake-event-gap"]) if "x-fake-event-gap" in headers
                     else self.per_event_gap)
        gap = float(headers.get("x-fake-burst-gap", self.burst_gap))
        if event_gap is not None:
            pieces, gap = split_events(body), event_gap
        else:
            pieces = split_bursts(body, int(headers.get("x-fake-bursts", self.bursts)))
        abort_after = int(headers.get("x-fake-abort-after", -1))
        error_after = int(headers.get("x-fake-error-after", -1))
        if error_after >= 0:
            pieces = [*pieces[:error_after], _error_event(rec.path)]
        forever = self._opt(headers, "x-fake-forever", False)
        plan = itertools.chain(pieces[:1], _endless_openai()) if forever else iter(pieces)
        encoding = headers.get("x-fake-encoding") or (
            "gzip" if self._opt(headers, "x-fake-gzip", self.gzip) else "")
        encoder = BodyEncoder(encoding, len(pieces)) if encoding and not forever else None
        close = self._opt(headers, "x-fake-close", self.close)
        rec.response_body = body
        hdrs = [("content-type", ctype), ("cache-control", "no-cache")]
        if encoder is not None:
            hdrs.append(("content-encoding", encoder.header))
        if close:
            hdrs.append(("connection", "close"))
            head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
            writer.write(head.encode())
        else:
            writer.write(conn.send(h11.Response(status_code=200, headers=hdrs)) or b"")
        await writer.drain()
        if self.first_delay:
            await asyncio.sleep(self.first_delay)
        for i, piece in enumerate(plan):
            if i and gap:
                if watch is not None:
                    await asyncio.wait({watch}, timeout=gap)
                else:
                    await asyncio.sleep(gap)
            if watch is not None and watch.done():
                raise ConnectionResetError("the client went away mid-stream")
            if i == abort_after:
                rec.aborted = True
                _cut(writer, headers.get("x-fake-abort", "rst"))
                return
            data = encoder.encode(piece, i) if encoder is not None else piece
            writer.write(data if close else (conn.send(h11.Data(data=data)) or b""))
            await writer.drain()
            with self._lock:
                rec.writes.append(Write(len(piece), time.monotonic(), time.time()))
        if abort_after >= 0:  # fewer pieces than N: cut after the last one
            await asyncio.sleep(gap)  # let the peer read them first (a reset drops unread data)
            rec.aborted = True
            _cut(writer, headers.get("x-fake-abort", "rst"))
            return
        self._finish(rec)
        if not close:
            writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()

    def _finish(self, rec: Served) -> None:
        with self._done:
            rec.done = True
            self._done.notify_all()


def _error_event(path: str) -> bytes:
    """The error event the API sends mid-stream (Anthropic's named event, else OpenAI's)."""
    if path.endswith("/v1/messages"):
        err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return f"event: error\ndata: {compact_json(err)}\n\n".encode()
    err = {"error": {"message": "The server had an error while processing your request.",
                     "type": "server_error", "param": None, "code": None}}
    return f"data: {compact_json(err)}\n\n".encode()


def _endless_openai() -> Iterator[bytes]:
    """OpenAI Chat content chunks, forever: an upstream that never ends."""
    head = {"id": "chatcmpl-forever", "object": "chat.completion.chunk", "created": 1727346168,
            "model": "gpt-test"}
    for i in itertools.count():
        delta = {"content": f"drip {i} "}
        yield f"data: {compact_json({**head, 'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode()


def _cut(writer: asyncio.StreamWriter, kind: str) -> None:
    """End the connection mid-body: `rst` resets it (SO_LINGER 0), `fin` closes it."""
    if kind == "rst":
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    else:
        writer.transport.close()
