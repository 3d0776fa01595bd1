"""WebSocket sessions in cassettes, through the real proxy (retimer.proxy.cassette_sockets):
a Codex-like Responses socket (a prewarm, then two turns chained by `previous_response_id`)
recorded once against a WebSocket upstream, then replayed with that upstream gone: every
turn answered with its own recorded messages, byte for byte, paced by the profile; each
turn's record names its match; a turn the cassette does not hold gets an `error` event; a
socket on a path the cassette never saw is refused with a 400."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

from wsproto import ConnectionType, WSConnection
from wsproto.events import Request

from retimer.cassette.store import INDEX, read_cassette
from tests.support.inproc_proxy import InProcessProxy
from tests.support.proxy import free_port, run_cli
from tests.support.wsfake import PREWARM, FakeWSLLM, ProxiedWSClient, responses_turn

FIRST = "I will read the parser before I change anything in it."
SECOND = "The parser is fixed and its four tests pass."
FAST = ("--profile", "human-reading", "--ttft", "20ms", "--tps", "3000", "--jitter", "0")
REPLAY = ("--profile", "human-reading", "--ttft", "50ms", "--tps", "15000", "--jitter", "0")


def session(client: ProxiedWSClient, previous: str, output: str) -> list[list[str]]:
    """The prewarm, the task, the task's tool output after `previous`: each turn's messages."""
    asks = [{"type": "response.create", "generate": False, "instructions": "Be brief."},
            {"type": "response.create", "input": [{"role": "user", "content": "Fix the parser"}]},
            {"type": "response.create", "previous_response_id": previous, "input": [
                {"type": "function_call_output", "call_id": "call_Q1w2E3r4T5y6",
                 "output": output}]}]
    turns = []
    for ask in asks:
        client.send(json.dumps(ask))
        turns.append([str(r.data) for r in client.receive_until('"response.completed"')])
    return turns


def test_a_websocket_session_is_recorded_turn_by_turn_and_replayed_without_its_upstream(
        tmp_path: Path) -> None:
    cassette = tmp_path / "cassette"
    with FakeWSLLM([PREWARM, responses_turn(FIRST), responses_turn(SECOND)]) as server:
        port = server.port
        with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)) as proxy:
            client = ProxiedWSClient(proxy.port, "127.0.0.1", port, "/v1/responses")
            try:
                recorded = session(client, "resp_Ab12Cd34Ef56Gh78", "4 passed in 0.31s")
            finally:
                client.close()
            proxy.records(3)
    _, calls = read_cassette(cassette)
    assert [(c.socket, c.turn, c.entry.status, c.entry.protocol, c.shape.method)
            for c in calls] == [(1, t, 101, "websocket", "WEBSOCKET") for t in (1, 2, 3)]
    assert [c.upstream.tokens for c in calls][0] == 0 and all(c.upstream.tokens for c in calls[1:])
    assert all(c.upstream.ttft_ms is not None for c in calls)
    assert "Fix the parser" not in (cassette / INDEX).read_text()
    assert (cassette / INDEX).stat().st_mode & 0o077 == 0
    shown = run_cli("cassette", "show", str(cassette)).stdout.splitlines()
    assert [line.split()[1:3] for line in shown[2:]] == [["websocket", f"1.{t}"] for t in (1, 2, 3)]
    assert all(len(line) <= 80 for line in shown[1:])

    # the upstream is gone; the second run's ids and tool output's timing differ
    with InProcessProxy(tmp_path / "play", *REPLAY, "--replay", str(cassette)) as proxy:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", port, "/v1/responses")
        try:
            replayed = session(client, "resp_Zz98Yy76Xx54Ww32", "4 passed in 0.52s")
            client.send(json.dumps({"type": "response.create", "input": "something else"}))
            refused = client.receive_until('"error"')
        finally:
            client.close()
        records = proxy.records(4)
    assert replayed == recorded  # every message, byte for byte
    assert [(r["turn"], r["cassette"]["match"], r["cassette"]["call"]) for r in records[:3]] == [
        (1, "replayed", 1), (2, "replayed", 2), (3, "replayed", 3)]
    assert len({r["id"] for r in records}) == len(records)
    error = json.loads(str(refused[-1].data))
    assert error["type"] == "error" and "matches no recorded call" in error["error"]["message"]
    assert records[3]["cassette"]["match"] == "diverged"
    # paced by the replay's profile: the answer's turn takes about its 50 ms TTFT, not less
    answer = records[1]
    assert answer["target"]["ttft_ms"] == 50.0 and answer["emitted"]["ttft_ms"] >= 49.0
    assert answer["emitted"]["tokens"] == answer["upstream"]["tokens"] == calls[1].upstream.tokens


def test_a_socket_on_a_path_the_cassette_never_saw_is_refused(tmp_path: Path) -> None:
    cassette = tmp_path / "cassette"
    with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)):
        pass  # an empty cassette
    with InProcessProxy(tmp_path / "play", *REPLAY, "--replay", str(cassette)) as proxy:
        ws = WSConnection(ConnectionType.CLIENT)
        target = f"127.0.0.1:{free_port()}"
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(ws.send(Request(host=target, target=f"http://{target}/v1/realtime")))
            answer = b""
            while b"\r\n\r\n" not in answer and (data := sock.recv(65536)):
                answer += data
            head, _, body = answer.partition(b"\r\n\r\n")
            while len(body) < int(re.search(rb"content-length: (\d+)", head, re.I)[1]):  # type: ignore[index]
                body += sock.recv(65536)
        records = proxy.records(0, timeout=0)
    assert head.startswith(b"HTTP/1.1 400 ")
    assert "no WebSocket on this path" in json.loads(body)["error"]["message"]
    assert records == []  # refused before any turn
