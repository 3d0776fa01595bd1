"""WebSocket pacing: the message adapter (sans-io) and real WebSocket turns through the proxy."""

from __future__ import annotations

import json
import random
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.openai_responses import OpenAIResponsesAdapter
from retimer.wire.protocols.websocket import (
    WebSocketMessageAdapter,
    decode_messages,
    encode_message,
    is_llm_websocket_path,
)
from retimer.wire.sse import SSEParser
from retimer.wire.tokenizer import count_tokens, split_tokens
from tests.support.adapter_checks import channel_texts, random_pieces
from tests.support.clients.pacing import predicted_s
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.stream_bodies import FIXTURES
from tests.support.wsfake import PREWARM, FakeWSLLM, ProxiedWSClient, WSReply, responses_turn

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS


def realtime(kind: str, **fields: object) -> bytes:
    return json.dumps({"type": kind, "event_id": f"event_{random.randrange(10**9)}", **fields}).encode()


def feed_all(messages: list[tuple[bytes, bool]]) -> tuple[WebSocketMessageAdapter, list[Event]]:
    adapter = WebSocketMessageAdapter()
    events: list[Event] = []
    for payload, is_text in messages:
        events += adapter.feed(encode_message(payload, is_text=is_text))
    return adapter, events + adapter.end()


# -- records ---------------------------------------------------------------------------
@given(st.lists(st.tuples(st.binary(max_size=300), st.booleans()), max_size=8))
def test_records_round_trip(messages: list[tuple[bytes, bool]]) -> None:
    data = b"".join(encode_message(p, is_text=t) for p, t in messages)
    assert decode_messages(data) == messages


@given(st.lists(st.tuples(st.binary(max_size=80), st.booleans()), min_size=1, max_size=5),
       st.lists(st.integers(0, 600), max_size=6))
def test_adapter_events_do_not_depend_on_chunking(messages: list[tuple[bytes, bool]],
                                                  cuts: list[int]) -> None:
    data = b"".join(encode_message(p, is_text=t) for p, t in messages)
    points = sorted({c for c in cuts if 0 < c < len(data)})
    adapter = WebSocketMessageAdapter()
    events: list[Event] = []
    for a, b in zip([0, *points], [*points, len(data)]):
        events += adapter.feed(data[a:b])
    events += adapter.end()
    assert b"".join(e.raw for e in events) == data
    assert len(events) == len(messages)


def test_broken_record_is_refused() -> None:
    good = encode_message(b"hello", is_text=True)
    with pytest.raises(ValueError):
        decode_messages(good[:-1])
    with pytest.raises(ValueError):
        decode_messages(b"x" + good[1:])


@pytest.mark.parametrize(("path", "expected"), [
    ("/v1/realtime?model=gpt-realtime", True),
    ("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", True),
    ("/v1/responses", True),
    ("/socket.io/?EIO=4", False),
    ("/chat", False),
])
def test_llm_websocket_paths(path: str, expected: bool) -> None:
    assert is_llm_websocket_path(path) is expected
    assert WebSocketMessageAdapter.accepts(RequestShape("GET", "h", path, {}, b""), "") is expected


# -- channels and splitting ------------------------------------------------------------
def test_channels_of_known_shapes() -> None:
    gemini = json.dumps({"serverContent": {"modelTurn": {"parts": [{"text": "Bonjour à tous"}]}}})
    thought = json.dumps({"serverContent": {"modelTurn": {"parts": [{"text": "hmm", "thought": True}]}}})
    _, events = feed_all([
        (realtime("session.created", session={"id": "s"}), True),
        (realtime("response.output_text.delta", delta="Hello"), True),
        (realtime("response.output_audio_transcript.delta", delta=" there"), True),
        (realtime("response.reasoning_summary_text.delta", delta="think"), True),
        (realtime("response.function_call_arguments.delta", delta='{"a":'), True),
        (b"\x00\x01audio", False),
        (gemini.encode(), True),
        (thought.encode(), True),
        (realtime("response.done", response={"status": "completed"}), True),
    ])
    assert [e.texts for e in events] == [
        (), ((TEXT, "Hello"),), ((TEXT, " there"),), ((REASONING, "think"),),
        ((TOOL_ARGS, '{"a":'),), (), ((TEXT, "Bonjour à tous"),), ((REASONING, "hmm"),), (),
    ]
    assert all(e.splittable for e in events if e.texts)


RESPONSES_FIXTURES = sorted((FIXTURES / "openai-responses").glob("*.sse"))


@pytest.mark.parametrize("path", RESPONSES_FIXTURES, ids=lambda p: p.name)
def test_responses_over_websocket_count_what_sse_counts(path: Path) -> None:
    """Codex's default transport: the Responses events of a real capture, one per WebSocket
    message, carry exactly the tokens the SSE adapter counts for the same capture; the `.done`
    events and `response.completed` repeat the answer and must cost nothing."""
    body = path.read_bytes()
    sse = OpenAIResponsesAdapter()
    over_sse = channel_texts(sse.feed(body) + sse.end())
    parser = SSEParser()
    datas = [e.data for e in parser.feed(body) + parser.end()
             if e.data and e.data.strip() != "[DONE]"]
    _, events = feed_all([(d.encode(), True) for d in datas])
    assert over_sse, "the capture carries text"
    assert channel_texts(events) == over_sse
    repeats = [e for e in events if json.loads(decode_messages(e.raw)[0][0]).get("type", "")
               .endswith((".done", "response.completed"))]
    assert repeats and all(not e.texts for e in repeats)


def test_realtime_audio_and_lifecycle_messages_carry_no_tokens() -> None:
    live_audio = {"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": "audio/pcm", "data": "UklGRiQAAABXQVZFZm10IBAAAAABAAEA" * 8}}]}}}
    _, events = feed_all([
        (realtime("session.updated", session={"instructions": "Be brief and friendly."}), True),
        (realtime("response.output_audio.delta", delta="UklGRiQAAABXQVZFZm10IBAAAAAB" * 20), True),
        (realtime("response.audio.delta", delta="UklGRiQAAABXQVZFZm10IBAAAAAB" * 20), True),
        (realtime("response.output_audio_transcript.done", transcript="Hello there"), True),
        (realtime("response.content_part.done", part={"type": "text", "text": "Hello there"}), True),
        (realtime("conversation.item.created", item={"content": [{"text": "Hi"}]}), True),
        (realtime("error", error={"message": "Something went wrong here"}), True),
        (json.dumps(live_audio).encode(), True),
        (json.dumps({"serverContent": {"turnComplete": True}}).encode(), True),
        (json.dumps({"setupComplete": {}}).encode(), True),
        (json.dumps({"serverContent": {"outputTranscription": {"text": "Hello you"}}}).encode(), True),
        (realtime("response.some_new_text.delta", delta="future words"), True),
    ])
    assert [e.texts for e in events] == [(), (), (), (), (), (), (), (), (), (),
                                         ((TEXT, "Hello you"),), ((TEXT, "future words"),)]


def test_unknown_text_messages_are_estimated_and_kept_whole() -> None:
    _, events = feed_all([(b'{"kind":"chunk","content":"some words here"}', True),
                          (b"plain text words", True), (b"{broken json", True)])
    assert [e.atomic for e in events] == [True, True, True]
    assert channel_texts(events)[TEXT]
    assert all(not e.splittable for e in events)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=60), st.randoms(use_true_random=False))
def test_split_realtime_delta_keeps_text_ids_and_order(text: str, rnd: random.Random) -> None:
    adapter = WebSocketMessageAdapter()
    [event] = adapter.feed(encode_message(
        json.dumps({"type": "response.output_text.delta", "event_id": "event_1", "delta": text,
                    "item_id": "item_9", "content_index": 0}).encode(), is_text=True))
    pieces = random_pieces(text, rnd)
    out = adapter.split(event, pieces)
    again = [json.loads(p) for m in out for p, _ in decode_messages(m)]
    assert [o["delta"] for o in again] == pieces
    assert {o["item_id"] for o in again} == {"item_9"}
    assert len({o["event_id"] for o in again}) == len(pieces)
    assert again[0]["event_id"] == "event_1"


def test_sequence_numbers_stay_strictly_increasing_after_splits() -> None:
    adapter = WebSocketMessageAdapter()
    def msg(seq: int, kind: str, **f: object) -> bytes:
        return encode_message(json.dumps({"type": kind, "sequence_number": seq, **f}).encode(),
                              is_text=True)
    out: list[bytes] = []
    for seq, (kind, fields) in enumerate([
        ("response.created", {}), ("response.output_text.delta", {"delta": "one two three"}),
        ("response.output_text.delta", {"delta": " four five"}), ("response.completed", {}),
    ]):
        for event in adapter.feed(msg(seq, kind, **fields)):
            if event.splittable:
                text = event.text
                out += adapter.split(event, [text[:3], text[3:6], text[6:]])
            else:
                out.append(event.raw)
    numbers = [json.loads(p)["sequence_number"] for m in out for p, _ in decode_messages(m)]
    assert numbers == list(range(len(numbers)))
    deltas = [json.loads(p).get("delta", "") for m in out for p, _ in decode_messages(m)]
    assert "".join(deltas) == "one two three four five"


# -- through the proxy -------------------------------------------------------------------
WORDS = "The quick brown fox jumps over the lazy dog while the cat watches from afar."
pytestmark = pytest.mark.retimer_proxy("--profile", "gpt-5", "--ttft", "400ms", "--tps", "40",
                                       "--jitter", "0", scope="module")


def reply(close_after: bool = False) -> WSReply:
    words = WORDS.split(" ")
    deltas = [(" " if i else "") + w for i, w in enumerate(words)]
    messages: list[tuple[bytes | str, bool]] = [
        (json.dumps({"type": "response.created", "event_id": "e0"}), True)]
    messages += [(json.dumps({"type": "response.output_text.delta", "event_id": f"e{i + 1}",
                              "delta": d}), True) for i, d in enumerate(deltas)]
    messages += [(b"\x00\x01\x02binary-audio", False),
                 (json.dumps({"type": "response.done", "event_id": "end"}), True)]
    return WSReply(messages, close_after=close_after)




def _check_turn(received: list, sent_at: float) -> None:
    texts = [r.data for r in received if isinstance(r.data, str)]
    objs = [json.loads(t) for t in texts]
    kinds = [o["type"] for o in objs]
    assert kinds[0] == "response.created" and kinds[-1] == "response.done"
    assert "".join(o.get("delta", "") for o in objs) == WORDS
    assert [r.data for r in received if isinstance(r.data, bytes)] == [b"\x00\x01\x02binary-audio"]
    deltas = [r for r, o in zip([r for r in received if isinstance(r.data, str)], objs)
              if o["type"] == "response.output_text.delta"]
    # the server wrote the whole reply at once: any wait is the proxy's pacing (400 ms TTFT,
    # ~17 tokens at 40 tok/s: the last delta >= ~0.8 s after the send). Lower bounds only:
    # pacing is never sooner than its schedule, and a loaded machine only makes it later.
    assert deltas[0].at - sent_at > 0.35
    assert deltas[-1].at - sent_at > 0.7


def _assert_server_closed(client: ProxiedWSClient) -> None:
    """Nothing more arrives: the server's close frame, code 1000."""
    assert client.receive_until("never") == []
    assert client.closed_by_server and client.close_code == 1000


def test_realtime_turns_are_paced_with_exact_text(proxy: RetimerProxy) -> None:
    before = len(proxy.records(0, timeout=0))
    with FakeWSLLM([reply()]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/realtime?model=x")
        try:
            for _ in range(2):
                sent = client.send(json.dumps({"type": "response.create"}))
                _check_turn(client.receive_until('"response.done"'), sent)
        finally:
            client.close()
    records = proxy.records(before + 2)[before:]
    assert [r["protocol"] for r in records] == ["websocket", "websocket"]
    assert all(r["outcome"] == "complete" for r in records)
    assert all(r["emitted"]["tokens"] == r["upstream"]["tokens"] > 10 for r in records)
    assert all(r["emitted"]["ttft_ms"] > 300 for r in records)


def test_upstream_timing_is_the_servers_not_the_hold(proxy: RetimerProxy) -> None:
    """A server that streams its reply over ~0.1 s: its later messages wait behind the held
    first one inside the proxy, yet the record's upstream figures are when they came."""
    before = len(proxy.records(0, timeout=0))
    streamed = reply()
    streamed.gap = 0.005
    with FakeWSLLM([streamed]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/realtime?model=x")
        try:
            sent = client.send(json.dumps({"type": "response.create"}))
            _check_turn(client.receive_until('"response.done"'), sent)
        finally:
            client.close()
        ((first, last),) = server.spans
    (record,) = proxy.records(before + 1)[before:]
    span_ms = (last - first) * 1000
    assert span_ms > 80  # the server really spread it
    # the upstream's own duration (the client's message to the last message's arrival), not
    # the hold's: never shorter than the server's writes (20 ms: the server reads its clock
    # after its last write), and what it adds to them (the receipt's delay) well short of what
    # the paced turn (400 ms TTFT, then 40 tok/s) adds, which is what feeding the held
    # messages late would have added. A starved server (777 ms for its 16 writes under a CPU
    # hog) leaves little between the two, and the bound little to tell: it holds, it cannot
    # see the fault then; both sides grow with load, so the bounds are orderings.
    upstream, emitted = record["upstream"]["duration_ms"], record["emitted"]["duration_ms"]
    assert emitted > 700  # the client got it paced
    assert span_ms - 20 <= upstream, (record["upstream"], span_ms)
    assert upstream - span_ms < 0.6 * (emitted - span_ms) + 30, (
        record["upstream"], record["emitted"], span_ms)
    # and `retimer whatif` times the turn under other profiles, as it would an SSE call
    log = proxy.tmp / "turn.jsonl"
    log.write_text(json.dumps(record) + "\n")
    done = run_cli("whatif", str(log), "--json", "--profiles", "cerebras,gpt-5")
    assert done.returncode == 0, done.stderr
    (session,) = json.loads(done.stdout)["sessions"]
    assert session["timed"] == 1 and not session["unmodelled"]
    waits = [p["waiting_s"] for p in session["profiles"]]
    assert waits[0] < waits[1] and session["recorded"]["waiting_s"] not in waits


def test_long_messages_arrive_whole_and_intact(proxy: RetimerProxy) -> None:
    """Responses events that echo the request (50 kB of instructions, as GitHub Copilot's CLI
    gets them) in non-ASCII text, each read by the proxy a part at a time: the held messages
    retimer re-sends while the server's next long message is half-way in arrive as they were
    sent, none joined to another, no character cut in two. (Before: the client got the start of
    `response.completed` joined to a delta, and U+FFFD where a 4000-byte cut fell in a character.)"""
    echo = "Règles — “citez” … 😀 naïve façade € " * 900  # 1-4 bytes a character
    raw = echo.encode()
    assert any(raw[at] & 0xC0 == 0x80 for at in range(4000, len(raw), 4000))  # cuts in characters
    def ev(kind: str, **f: object) -> tuple[str, bool]:
        return json.dumps({"type": kind, **f}, ensure_ascii=False), True
    sent = [ev("response.created", response={"id": "resp_1", "instructions": echo}),
            ev("response.output_text.delta", delta="Bonjour"),
            ev("response.output_text.delta", delta=" à tous"),
            ev("response.completed", response={"id": "resp_1", "instructions": echo * 2})]
    before = len(proxy.records(0, timeout=0))
    with FakeWSLLM([WSReply(sent, gap=0.05, pieces=12)]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/responses")
        try:
            client.send(json.dumps({"type": "response.create"}))
            got = [r.data for r in client.receive_until('"response.completed"', timeout=60)]
        finally:
            client.close()
    objs = [json.loads(g) for g in got]  # each one whole JSON message
    assert [o["type"] for o in objs if o["type"] != "response.output_text.delta"] == [
        "response.created", "response.completed"]
    assert got[0] == sent[0][0] and got[-1] == sent[-1][0]
    assert "".join(o.get("delta", "") for o in objs) == "Bonjour à tous"
    (record,) = proxy.records(before + 1)[before:]  # one turn, its two deltas' tokens
    assert record["outcome"] == "complete"
    assert record["upstream"]["tokens"] == count_tokens("Bonjour") + count_tokens(" à tous")


def test_responses_websocket_turns_count_only_deltas_and_prewarm_is_recorded(
        proxy: RetimerProxy) -> None:
    """Codex sends a `generate: false` prewarm, then its request: the prewarm's turn carries
    no token, is not held for a TTFT and is recorded with 0 tokens; the answer's turn counts
    only its deltas, so it takes TTFT + tokens / rate, not that again for each repeat."""
    before = len(proxy.records(0, timeout=0))
    with FakeWSLLM([PREWARM, responses_turn(WORDS)]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/responses")
        try:
            client.send(json.dumps({"type": "response.create", "generate": False}))
            warm = client.receive_until('"response.completed"')
            time.sleep(0.3)
            asked = time.time()
            client.send(json.dumps({"type": "response.create", "input": "hi"}))
            answer = client.receive_until('"response.completed"')
        finally:
            client.close()
    assert [json.loads(r.data)["type"] for r in warm] == ["response.created", "response.completed"]
    deltas = [json.loads(r.data).get("delta", "") for r in answer]
    assert "".join(deltas) == WORDS
    records = proxy.records(before + 2)[before:]
    assert [r["protocol"] for r in records] == ["websocket", "websocket"]
    assert all(r["outcome"] == "complete" for r in records)
    prewarm, turn = records
    # each turn's time is its own client message's, not the socket's handshake
    started = [datetime.fromisoformat(r["time"]).timestamp() for r in records]
    # (the second starts when its message reaches the proxy: later on a loaded machine, never
    # sooner; the prewarm 0.3 s before)
    assert started[0] < asked - 0.2 and -0.05 < started[1] - asked < 0.25
    assert prewarm["upstream"]["tokens"] == prewarm["emitted"]["tokens"] == 0
    expected = len(split_tokens(WORDS))
    assert turn["upstream"]["tokens"] == turn["emitted"]["tokens"] == expected
    # the last message leaves right after the last delta, not `repeats x tokens / rate` later
    tail = answer[-1].at - answer[len(answer) - 5].at
    assert tail < 0.25, f"the repeats were paced: {tail:.2f} s after the last delta"


def test_each_turn_is_a_call_of_its_own(proxy: RetimerProxy) -> None:
    """Codex's way: a prewarm with the instructions, a pause (its tools, its user), then a turn
    that sends only its new input after `previous_response_id`, then a pause before the close.
    Each turn is a call: an id of its own, the socket in `connection`, its place in `turn`; its
    emitted duration ends with its last message, not at the client's next message or the close;
    its prompt is the chain's (the instructions the prewarm sent, and the new input)."""
    instructions = "You are a coding agent in the user's terminal. Be brief. " * 120
    before = len(proxy.records(0, timeout=0))
    with FakeWSLLM([PREWARM, responses_turn(WORDS)]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/responses")
        try:
            client.send(json.dumps({"type": "response.create", "generate": False, "input": [
                {"type": "message", "role": "developer", "content": instructions}]}))
            client.receive_until('"response.completed"')
            time.sleep(1.0)
            asked = client.send(json.dumps({
                "type": "response.create", "previous_response_id": "resp_0",
                "input": [{"type": "message", "role": "user", "content": "hi"}]}))
            answer = client.receive_until('"response.completed"')
            time.sleep(1.0)
        finally:
            client.close()
    prewarm, turn = proxy.records(before + 2)[before:]
    socket = turn["connection"]
    assert prewarm["connection"] == socket and (prewarm["turn"], turn["turn"]) == (1, 2)
    assert (prewarm["id"], turn["id"]) == (f"{socket}.1", f"{socket}.2")
    assert prewarm["emitted"]["duration_ms"] < 500  # not the 1 s the client paused after it
    # the turn ends with its last message: no sooner than its profile allows, and not at the
    # close 1 s after the client had it (the client reads it later than the proxy sent it on a
    # loaded machine: 457 ms later under a CPU hog, so no lower bound from the client's clock)
    got_ms = (answer[-1].at - asked) * 1000  # the client's wait for the answer
    assert predicted_s(turn) * 1000 - 5 <= turn["emitted"]["duration_ms"] < got_ms + 300
    prompts = prewarm["model"]["prompt_tokens"], turn["model"]["prompt_tokens"]
    assert count_tokens(instructions) <= prompts[0] < prompts[1] < prompts[0] + 20, prompts


def test_passthrough_records_every_turn_and_holds_nothing(tmp_path: Path) -> None:
    """A passthrough run (a study's control condition) records WebSocket turns as it records
    HTTP streams, with their tokens, and sends each message as it comes."""
    with RetimerProxy(tmp_path, "--profile", "passthrough") as proxy, \
            FakeWSLLM([PREWARM, responses_turn(WORDS)]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/responses")
        try:
            client.send(json.dumps({"type": "response.create", "generate": False}))
            client.receive_until('"response.completed"')
            client.send(json.dumps({"type": "response.create", "input": "hi"}))
            answer = client.receive_until('"response.completed"')
        finally:
            client.close()
        records = proxy.records(2)
    assert "".join(json.loads(r.data).get("delta", "") for r in answer) == WORDS
    assert [(r["protocol"], r["profile"]) for r in records] == [("websocket", "passthrough")] * 2
    assert [r["emitted"]["tokens"] for r in records] == [0, len(split_tokens(WORDS))]


def test_server_close_waits_for_held_messages(proxy: RetimerProxy) -> None:
    with FakeWSLLM([reply(close_after=True)]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/realtime")
        try:
            sent = client.send(json.dumps({"type": "response.create"}))
            received = client.receive_until('"response.done"')
            _check_turn(received, sent)
            _assert_server_closed(client)
        finally:
            client.close()


def test_a_close_read_with_a_later_turn_waits_for_every_held_turn(proxy: RetimerProxy) -> None:
    """The server greets (turn 0, held for its TTFT), then answers the client's message and
    closes in one write while turn 0 is still held: both turns reach the client, then the
    close (the close frame is found in bytes that were themselves waiting)."""
    greeting = [(json.dumps({"type": "session.created", "event_id": "g0"}), True),
                (json.dumps({"type": "response.output_text.delta", "event_id": "g1",
                             "delta": "hello there"}), True),
                (json.dumps({"type": "response.done", "event_id": "g2"}), True)]
    with FakeWSLLM([reply(close_after=True)], greeting=greeting) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/realtime")
        try:
            sent = client.send(json.dumps({"type": "response.create"}))
            first = client.receive_until('"g2"')
            rest = client.receive_until('"end"')
            _check_turn(rest, sent)
            _assert_server_closed(client)
        finally:
            client.close()
    objs = [json.loads(r.data) for r in first]
    assert objs[0]["type"] == "session.created" and objs[-1]["type"] == "response.done"
    assert "".join(o.get("delta", "") for o in objs) == "hello there"


def test_other_websockets_are_untouched(proxy: RetimerProxy, tmp_path: Path) -> None:
    with FakeWSLLM([reply()]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/socket.io/")
        try:
            sent = client.send("hi")
            received = client.receive_until('"response.done"')
        finally:
            client.close()
    assert len(received) == len(reply().messages)
    # paced, the last message could come no sooner than ~0.8 s (TTFT + tokens at 40 tok/s);
    # passed through, it comes as soon as the machine relays it (0.5 s seen under a CPU hog)
    assert received[-1].at - sent < 0.7


# SIGINT here, SIGTERM in test_faults.py's shutdown: retimer handles both with one handler
@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_shutdown_sends_held_messages_then_closes(tmp_path: Path, sig: signal.Signals) -> None:
    """The proxy is stopped mid-turn: every held message reaches the client at once, whole and
    in order; the socket, which the client keeps open, is closed at the grace period; the turn
    has its record, with nothing lost."""
    proxy = RetimerProxy(tmp_path, "--profile", "gpt-5", "--ttft", "300ms", "--tps", "4",
                         "--jitter", "0", "--set", "retimer_shutdown_grace=1500ms")
    with FakeWSLLM([reply()]) as server, proxy:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/realtime")
        try:
            sent = client.send(json.dumps({"type": "response.create"}))
            first = client.receive_until('"response.output_text.delta"')  # paced: ~0.3 s
            assert first[-1].at - sent > 0.2
            assert proxy.proc is not None
            stopped_at = time.monotonic()
            proxy.proc.send_signal(sig)
            rest = client.receive_until('"response.done"', timeout=10)
            # at 4 tok/s the remaining ~18 tokens would take ~4.5 s: they came out at once
            assert rest[-1].at - stopped_at < 1.0
            objs = [json.loads(r.data) for r in first + rest if isinstance(r.data, str)]
            assert [o["type"] for o in objs][::len(objs) - 1] == ["response.created", "response.done"]
            assert "".join(o.get("delta", "") for o in objs) == WORDS
            assert [r.data for r in rest if isinstance(r.data, bytes)] == [b"\x00\x01\x02binary-audio"]
            assert client.receive_until("never", timeout=10) == []  # then the socket ends
            closed_s = time.monotonic() - stopped_at
            proxy.proc.wait(15)
            exit_s = time.monotonic() - stopped_at
        finally:
            client.close()
    assert 1.3 < closed_s < 6 and exit_s < 8
    (record,) = proxy.records(1, timeout=2)
    assert record["protocol"] == "websocket" and record["outcome"] == "shutdown"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 10
    assert "Traceback" not in proxy.stderr()


# -- the bridge's close-frame scanner ---------------------------------------------------
def _frame(opcode: int, payload: bytes, mask: bool = False) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([m | 127]) + n.to_bytes(8, "big")
    return head + (b"\x01\x02\x03\x04" if mask else b"") + payload


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0x1, 0x2, 0x9, 0xA]), st.integers(0, 70000), st.booleans()),
                max_size=5),
       st.lists(st.integers(1, 200000), max_size=8))
def test_close_frame_scanner_finds_the_close_at_any_cut(frames: list[tuple[int, int, bool]],
                                                        cuts: list[int]) -> None:
    from retimer.proxy.bridge.websocket_order import CloseFrameScanner

    before = b"".join(_frame(op, b"x" * n, mask) for op, n, mask in frames)
    data = before + _frame(0x8, b"\x03\xe8done") + _frame(0x1, b"after")
    points = sorted({c for c in cuts if 0 < c < len(data)})
    scanner = CloseFrameScanner()
    found: int | None = None
    for a, b in zip([0, *points], [*points, len(data)]):
        offset = scanner.close_offset(data[a:b])
        if offset is not None:
            found = a + offset
            break
    # the close starts at len(before); when its 2-byte header was cut by a read, the start of
    # the read that completes it is reported (the first byte already went on, harmlessly)
    assert found is not None
    assert found == len(before) or (found == len(before) + 1 and found in points)
