"""HTTP's corners on LLM paths, through the running proxy: answers without a body (204, 304,
HEAD), error statuses with a stream body, and HTTP/1.0 at either end.

Each is answered by a raw upstream that writes exactly the bytes given, so the test controls
the status line, the framing and when the connection closes.
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.inproc_proxy import InProcessProxy
from tests.support.proxy import RetimerProxy
from tests.support.sse_client import sse_text
from tests.support.stream_bodies import make_openai_stream

WORDS = " ".join(f"w{i}" for i in range(120))
BODY = make_openai_stream(WORDS, words_per_chunk=3)
JUNK = random.Random(7).randbytes(6000).replace(b"\xef", b"\x00")  # no BOM by chance
_EVENTS = BODY.split(b"\n\n")
NOT_JSON = b"\n\n".join([*_EVENTS[:10], b'data: {"choices": [{"delta": {"content": "x', *_EVENTS[10:]])
PACED = ("--profile", "gpt-5", "--ttft", "1500ms", "--tps", "400", "--jitter", "0")


class RawUpstream:
    """Answers each request with `respond(method, path) -> bytes`, written at once; then
    closes the connection (every answer here is the connection's last, and says so: an
    HTTP/1.1 answer without `connection: close` invites the proxy to reuse a connection this
    server is closing, a race a loaded machine loses with a 502)."""

    def __init__(self, respond: dict[str, bytes]) -> None:
        self.respond = respond
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                if not (data := conn.recv(65536)):
                    return
                buf += data
            head, _, body = buf.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            while length and len(body) < int(length.group(1)):
                body += conn.recv(65536)
            method, path = head.split(b" ")[:2]
            conn.sendall(self.respond[path.decode()])

    def close(self) -> None:
        self.sock.close()


def response(status: str, body: bytes, *headers: str, version: str = "HTTP/1.1") -> bytes:
    head = [f"{version} {status}", *headers]
    if version == "HTTP/1.1":
        head.append("connection: close")
    if body and not any(h.lower().startswith("content-length") for h in headers):
        head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


SSE = "content-type: text/event-stream"


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    u = RawUpstream({
        "/v1/chat/completions": response("200 OK", BODY, SSE),
        "/no-content/v1/chat/completions": response("204 No Content", b"", SSE),
        "/not-modified/v1/chat/completions": response("304 Not Modified", b"", SSE),
        "/rate-limited/v1/chat/completions": response("429 Too Many Requests", BODY, SSE),
        "/failed/v1/chat/completions": response("500 Internal Server Error", BODY, SSE),
        "/old/v1/chat/completions": response("200 OK", BODY, SSE, version="HTTP/1.0"),
        "/junk/v1/chat/completions": response("200 OK", JUNK, SSE),
        "/not-json/v1/chat/completions": response("200 OK", NOT_JSON, SSE),
    })
    yield u
    u.close()


def _state(proxy: InProcessProxy) -> tuple[int, int]:
    return proxy.call(lambda: (proxy.addon.bridge.active, len(proxy.addon.active)))


def test_answers_without_a_body_are_not_paced_and_leave_no_state(
    tmp_path: Path, upstream: RawUpstream
) -> None:
    with InProcessProxy(tmp_path, *PACED) as proxy, httpx.Client(proxy=proxy.url) as c:
        for method, path, status in [("POST", "/no-content", 204), ("POST", "/not-modified", 304),
                                     ("HEAD", "", 200)]:
            started = time.monotonic()
            r = c.request(method, f"{upstream.url}{path}/v1/chat/completions", json={})
            assert (r.status_code, r.content) == (status, b"")
            assert time.monotonic() - started < 1.0  # not held for the 1.5 s TTFT
            assert "transfer-encoding" not in r.headers
            assert _state(proxy) == (0, 0), f"{method} {path} left a stream in flight"
        assert proxy.records(1, timeout=0.5) == []


@pytest.mark.parametrize("path,status", [("/rate-limited", 429), ("/failed", 500)])
def test_an_error_status_with_a_stream_body_passes_unpaced(
    tmp_path: Path, upstream: RawUpstream, path: str, status: int
) -> None:
    with InProcessProxy(tmp_path, *PACED) as proxy, httpx.Client(proxy=proxy.url) as c:
        started = time.monotonic()
        r = c.post(f"{upstream.url}{path}/v1/chat/completions", json={})
        assert time.monotonic() - started < 1.0
        assert (r.status_code, r.content) == (status, BODY)  # byte for byte, not split
        assert _state(proxy) == (0, 0)
        assert proxy.records(1, timeout=0.5) == []


def _raw_http10(proxy_port: int, url: str) -> tuple[bytes, bytes]:
    """POST url through the proxy as an HTTP/1.0 client; (head, body) read until close."""
    body = json.dumps({"stream": True}).encode()
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=20) as s:
        s.sendall(f"POST {url} HTTP/1.0\r\nhost: {url.split('/')[2]}\r\n"
                  f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                  + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


@pytest.mark.parametrize("path", ["", "/old"])
def test_http10_gets_a_close_delimited_body_never_chunks(
    tmp_path: Path, upstream: RawUpstream, path: str
) -> None:
    """An HTTP/1.0 client, or an HTTP/1.0 upstream: no chunked framing (HTTP/1.0 has none);
    the re-timed body ends with the connection, text whole."""
    with InProcessProxy(tmp_path, *PACED) as proxy:
        head, body = _raw_http10(proxy.port, f"{upstream.url}{path}/v1/chat/completions")
        assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower()
        assert sse_text(body) == WORDS
        assert body.count(b"data: ") > BODY.count(b"data: ")  # split: it was paced
        (record,) = proxy.records(1)
        assert record["outcome"] == "complete"
        with httpx.Client(proxy=proxy.url) as c:  # an HTTP/1.1 client, an HTTP/1.0 upstream
            r = c.post(f"{upstream.url}{path}/v1/chat/completions", json={})
            assert sse_text(r.content) == WORDS
            assert ("transfer-encoding" in r.headers) == (path == "")
        assert len(proxy.records(2)) == 2


@pytest.mark.parametrize("path,body,warning", [
    ("/junk", JUNK, "has bytes that are not UTF-8 text; passed on unchanged"),
    ("/not-json", NOT_JSON, "has an event whose data is not JSON; passed on unchanged"),
])
def test_malformed_streams_pass_unchanged_with_one_warning(
    tmp_path: Path, upstream: RawUpstream, path: str, body: bytes, warning: str
) -> None:
    with RetimerProxy(tmp_path, *PACED) as proxy, httpx.Client(proxy=proxy.url) as c:
        for _ in range(2):  # one warning per stream
            r = c.post(f"{upstream.url}{path}/v1/chat/completions", json={})
            assert r.status_code == 200
            if path == "/junk":
                assert r.content == body
            else:  # the good events around the broken one are still re-timed, text intact
                assert sse_text(r.content) == sse_text(body) != ""
                assert r.content.count(b"data: ") > body.count(b"data: ")
        proxy.records(2)
        logged = proxy.stderr()
    assert logged.count(warning) == 2, logged
    assert "Traceback" not in logged
