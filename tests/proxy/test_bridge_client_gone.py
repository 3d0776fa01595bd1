"""A passthrough stream whose client leaves before the upstream's end (retimer.proxy.bridge.passthrough):
its record still counts every token the client was passed.

The OpenAI SDK stops reading at `data: [DONE]` and closes its connection without waiting for the
chunked body's terminator, so on a loaded machine the proxy can see the client leave before the
upstream's end (mitmproxy: RequestProtocolError "Client disconnected."). Here the upstream holds
its terminator back, so the client always leaves first."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from types import TracebackType

import h11
import httpx
import openai
import pytest

from retimer.timing import playout
from tests.support.inproc_proxy import InProcessProxy
from tests.support.stream_bodies import make_openai_stream

TEXT = " ".join(f"w{i}" for i in range(40))
BODY = make_openai_stream(TEXT, words_per_chunk=2)
HOLD = "x-hold-end"  # request header: send the whole body, [DONE] included, but not its end


class HeldEndUpstream:
    """An HTTP/1.1 upstream that sends BODY in one piece, then ends it with the chunked
    terminator, or (`x-hold-end: 1`) holds the terminator until the proxy hangs up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.hung_up = threading.Event()  # the proxy closed a connection whose end was held
        self._thread = threading.Thread(target=self._accept, name="held-end upstream", daemon=True)

    def __enter__(self) -> HeldEndUpstream:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            http = h11.Connection(h11.SERVER)
            while True:  # one request per connection is all the proxy sends here
                event = http.next_event()
                if event is h11.NEED_DATA:
                    http.receive_data(conn.recv(65536))
                elif isinstance(event, h11.Request):
                    hold = dict(event.headers).get(HOLD.encode()) == b"1"
                elif isinstance(event, h11.EndOfMessage):
                    break
            head = h11.Response(status_code=200, headers=[("content-type", "text/event-stream")])
            conn.sendall(http.send(head) + http.send(h11.Data(data=BODY)))
            if not hold:
                conn.sendall(http.send(h11.EndOfMessage()))
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            if hold:
                self.hung_up.set()


def _whole(proxy: str, upstream: str) -> str:
    """A client that reads the body to its end (the chunked terminator included), as the SDK
    does not: the proxy always sees the upstream's end before this client leaves."""
    with httpx.Client(proxy=proxy, timeout=30) as client:
        body = client.post(upstream + "/v1/chat/completions", headers={HOLD: "0"}, json={
            "model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).text
    deltas = [json.loads(line[6:])["choices"] for line in body.splitlines()
              if line.startswith("data: {")]
    return "".join(c[0]["delta"].get("content") or "" for c in deltas if c)


def _chat(client: openai.OpenAI, hold: bool) -> str:
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_headers={HOLD: "1" if hold else "0"})
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_a_passthrough_client_that_leaves_before_the_upstreams_end_has_its_tokens_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a passthrough stream's bytes are counted now and then, and at its end: here only at its
    # end, however fast this machine is, so nothing the client was passed is counted before it left
    monkeypatch.setattr(playout, "COUNT_EVERY_S", float("inf"))
    with HeldEndUpstream() as upstream, InProcessProxy(tmp_path, "--profile", "passthrough") as proxy:
        client = openai.OpenAI(base_url=upstream.url + "/v1", api_key="sk-test", max_retries=0,
                               http_client=openai.DefaultHttpxClient(proxy=proxy.url))
        # the reference reads to the end: the SDK, which closes at [DONE], could leave before
        # the proxy relayed the upstream's end on a loaded machine (the flake hunt)
        ended = _whole(proxy.url, upstream.url)
        with client:
            left = _chat(client, hold=True)  # the SDK closes at [DONE]: before the upstream's end
        complete, gone = proxy.records(2, timeout=5)
        assert upstream.hung_up.wait(5)  # the upstream request was still cancelled
    assert ended == left == TEXT  # the client got the whole answer both times
    assert complete["outcome"] == "complete"
    assert gone["outcome"] == "client-gone"  # the proxy saw it leave first
    tokens = complete["upstream"]["tokens"]
    assert tokens > 0 and complete["emitted"]["tokens"] == tokens
    for side in ("upstream", "emitted"):  # all it was passed, as a complete stream counts it
        assert gone[side]["tokens"] == tokens, gone
        assert gone[side]["channels"] == complete[side]["channels"] == {"text": tokens}
        assert gone[side]["ttft_ms"] is not None
