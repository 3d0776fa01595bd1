"""TTFT counts from when a request reached the machine, not from when a busy proxy read it
(retimer.proxy.patches.arrival: the kernel's `tcpi_last_data_recv` on Linux)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import h11
import pytest

from retimer.proxy.patches import arrival
from tests.support.inproc_proxy import InProcessProxy
from tests.support.sse_client import sse_text
from tests.support.upstream import FakeLLM

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO's last_data_recv is Linux's")
TTFT_S, BLOCK_S = 1.5, 0.6
TEXT = "one two three four five six"
pytestmark = pytest.mark.fake_llm(openai=TEXT, words_per_chunk=2)


def post(proxy: InProcessProxy, fake: FakeLLM, block_s: float) -> tuple[float, float, bytes]:
    """A streamed chat request through the proxy, written while its event loop is blocked for
    `block_s` (0: not blocked): (time it was sent, time of the first token, the body)."""
    conn = h11.Connection(h11.CLIENT)
    body = json.dumps({"model": "gpt-test", "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    url = f"{fake.url}/v1/chat/completions"
    head = h11.Request(method="POST", target=url, headers=[
        ("host", url.split("/")[2]), ("content-type", "application/json"),
        ("content-length", str(len(body)))])
    data = conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        if block_s:
            blocked = threading.Event()

            def block() -> None:
                blocked.set()
                time.sleep(block_s)  # the loop is busy: the request waits in the socket

            assert proxy.loop is not None
            proxy.loop.call_soon_threadsafe(block)
            assert blocked.wait(10)
        sent = time.time()
        sock.sendall(data)
        first, out = 0.0, b""
        while True:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the connection"
            conn.receive_data(chunk)
            while (ev := conn.next_event()) is not h11.NEED_DATA:
                if isinstance(ev, h11.Data):
                    out += bytes(ev.data)
                    first = first or (time.time() if sse_text(out) else 0.0)  # not the role chunk
                elif isinstance(ev, h11.EndOfMessage):
                    return sent, first, out


def started(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["time"]).timestamp()


@linux_only
def test_a_request_that_waited_for_a_busy_loop_is_timed_from_its_arrival(
        tmp_path: Path, fake: FakeLLM) -> None:
    args = ("--profile", "frontier", "--ttft", f"{TTFT_S * 1000:g}ms", "--tps", "200", "--jitter", "0")
    with InProcessProxy(tmp_path, *args) as proxy:
        sent, first, body = post(proxy, fake, BLOCK_S)
        [record] = proxy.records(1)
    assert sse_text(body) == TEXT  # the text is untouched
    # the record starts when the bytes arrived (within a kernel tick and the send itself), not
    # when the loop woke up BLOCK_S later and read them
    assert sent - 0.005 <= started(record) <= sent + BLOCK_S / 3
    # and the client's first token comes TTFT after it sent, not TTFT after the wait
    assert first - sent < TTFT_S + BLOCK_S / 2
    assert first - sent >= TTFT_S - 0.005


@linux_only
def test_an_unhurried_request_keeps_mitmproxys_time(tmp_path: Path, fake: FakeLLM) -> None:
    """No wait, no correction: the record's time is never before the request was sent."""
    with InProcessProxy(tmp_path, "--profile", "frontier", "--ttft", "200ms", "--jitter", "0") as proxy:
        for n in range(1, 4):
            sent, _, _ = post(proxy, fake, 0.0)
            record = proxy.records(n)[-1]
            assert sent - 0.005 <= started(record) <= sent + 1.0


def test_no_socket_no_correction() -> None:
    """A connection the proxy server does not list (or no proxy server) waited 0 s."""

    class Server:
        connections: dict[str, Any] = {}

    class Conn:
        id = "not-listed"

    assert arrival.waited_s(Server(), Conn()) == 0.0
    assert arrival.waited_s(None, Conn()) == 0.0


@linux_only
def test_the_kernel_tick_is_measured_and_never_coarser_than_the_coarsest() -> None:
    """The tick taken off a measured age: what this kernel counts in (1-10 ms), seen on loopback."""
    tick = arrival.kernel_tick_s()
    assert 0.001 <= tick <= arrival.TICK_S
