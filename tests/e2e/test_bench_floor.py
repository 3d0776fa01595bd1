"""bench.floor_proxy, issue 41's floor, does what its figures claim (no timing measured here:
its figures live in BENCHMARKS.md): every upstream event reaches the client whole, in order,
one chunk each, none before its slot; bench.floor's lateness is the arithmetic it says."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import h11
import pytest

from bench.floor import lateness_after_first, table
from bench.harness import ROOT
from tests.support.proxy import free_port, wait_listening
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

TTFT_S, GAP_S = 0.05, 0.004


@pytest.fixture
def floor_proxy() -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.floor_proxy", "--port", str(port),
                             "--ttft", str(TTFT_S), "--gap", str(GAP_S)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout and proc.stdout.readline().split() == ["listening", str(port)]
        assert wait_listening(port, 10)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _chunks_through(port: int, url: str) -> tuple[float, list[tuple[float, bytes]], bytes]:
    """POST through the proxy on a raw socket: (when the request left, each HTTP/1 chunk of
    the body with the time the read that completed it arrived, the whole body)."""
    import socket

    conn = h11.Connection(h11.CLIENT)
    body = b'{"stream": true}'
    wire = conn.send(h11.Request(method="POST", target=url, headers=[
        ("host", url.split("/")[2]), ("content-type", "application/json"),
        ("content-length", str(len(body)))])) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    chunks: list[tuple[float, bytes]] = []
    part = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        t0 = time.monotonic()
        sock.sendall(wire)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(65536)
                at = time.monotonic()
                conn.receive_data(data)
            elif isinstance(event, h11.Response):
                assert event.status_code == 200
            elif isinstance(event, h11.Data):
                part += bytes(event.data)
                if event.chunk_end:  # h11 may hand a chunk over in pieces, as reads cut it
                    chunks.append((at, part))
                    part = b""
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    return t0, chunks, b"".join(c for _, c in chunks)


def test_the_floor_proxy_paces_every_upstream_event_whole_and_in_order(floor_proxy: int) -> None:
    body = make_openai_stream("one two three four five six seven eight nine ten", words_per_chunk=1)
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
    with FakeLLM(body, bursts=1) as fake:
        t0, chunks, got = _chunks_through(floor_proxy, fake.url + "/v1/chat/completions")
    assert got == body  # byte for byte
    assert [c for _, c in chunks] == events  # each event a chunk of its own
    # none before its slot: event i no sooner than TTFT + i gaps after the request left
    for i, (at, _) in enumerate(chunks):
        assert at - t0 >= TTFT_S + i * GAP_S


def test_lateness_after_first_is_each_events_delay_past_its_slot() -> None:
    events = [(10.0, 1), (10.02, 1), (10.05, 2), (10.06, 1)]
    late = lateness_after_first(events, 0.02)
    assert late == pytest.approx([0.0, 0.0, 0.01, 0.0])
    assert lateness_after_first([], 0.02) == []


def test_the_floor_table_says_what_each_row_measured() -> None:
    rows = [{"streams": 400, "within_s": 1.0, "events": 10, "cpu_us_per_event": 20.14,
             "lateness_after_first_ms": {"p50": 0.18, "p99": 1.27, "max": 4.5}},
            {"streams": 400, "within_s": 0.0, "events": 10, "cpu_us_per_event": 21.0,
             "lateness_after_first_ms": {"p50": -0.05, "p99": 1.87, "max": 6.8}}]
    assert table(rows).splitlines()[2:] == ["| 400 | within 1 s | 20.1 | 0.18 / 1.27 / 4.5 |",
                                            "| 400 | same instant | 21.0 | -0.05 / 1.87 / 6.8 |"]
