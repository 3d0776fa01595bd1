"""The core's playouts, driven as the shell drives them: bytes and times in, one `step` per wake.

`Playout` (one HTTP stream) and `WebSocketPlayout` (a WebSocket's turns) hold every decision
between the proxy's clock and its connection; these tests drive them with made-up times, no
proxy, and check what each step says: the bytes, the next timer, the end.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.timing import emission
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import End, Playout, PlayoutPool, Step
from retimer.timing.scheduler import NoTiming
from retimer.timing.turns import WebSocketPlayout
from retimer.wire.encoding import decoder_for
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.protocols.websocket import WebSocketMessageAdapter, decode_messages, encode_message


class FixedTiming:
    """TTFT then a constant gap: the timing a profile with jitter 0 gives."""

    def __init__(self, ttft: float, gap: float) -> None:
        self.ttft, self._gap = ttft, gap

    def gap(self) -> float:
        return self._gap

    def chunk_size(self) -> int:
        return 1


def event(text: str) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"' + text.encode() + b'"}}]}\n\n'


def text_of(data: bytes) -> str:
    return "".join(re.findall(r'"content":"([^"]*)"', data.decode()))


def paced(pool: PlayoutPool | None = None, ttft: float = 1.0, gap: float = 0.1) -> Playout:
    pacer = StreamPacer(OpenAIChatAdapter(), FixedTiming(ttft, gap), 0.0)
    return Playout(pacer, pool or PlayoutPool(), 0.0)


def run(playout: Playout, until: float) -> tuple[bytes, list[float]]:
    """Wake as a shell would, at every timer the steps ask for, until `until`."""
    out, wakes, armed = b"", [], None
    step = playout.step(0.0, None)
    now = 0.0
    while True:
        out += step.data
        if step.end is not None:
            break
        if step.wake is not None:
            armed = step.wake
        if armed is None or armed > until:
            break
        now, armed = armed, None
        wakes.append(now)
        step = playout.step(now, armed)
    return out, wakes


def test_nothing_leaves_before_ttft_then_tokens_at_their_gaps() -> None:
    playout = paced()
    body = event("a") + event("b") + event("c")
    playout.feed(body, 0.0)
    first = playout.step(0.0, None)
    assert first.data == b"" and first.end is None
    assert first.wake == pytest.approx(1.0) and first.delay == pytest.approx(emission.timer_delay(1.0, 0.0))
    assert playout.step(0.0, first.wake).wake is None  # the armed timer will do
    at_ttft = playout.step(1.0, None)
    assert at_ttft.data == event("a") and at_ttft.wake == pytest.approx(1.1)
    assert playout.step(1.1, None).data == event("b")
    playout.end(1.15)
    last = playout.step(1.2, None)
    assert last.data == event("c") and last.end is End.COMPLETE


def test_every_token_leaves_once_in_order() -> None:
    playout = paced(gap=0.01)
    body = b"".join(event(w) for w in "the quick brown fox".split())
    playout.feed(body[:17], 0.0)
    playout.feed(body[17:], 0.2)
    playout.end(0.3)
    out, wakes = run(playout, 10.0)
    assert text_of(out) == text_of(body) and wakes == sorted(wakes)


def test_a_body_that_cannot_be_decoded_ends_broken_with_what_was_decoded() -> None:
    pacer = StreamPacer(OpenAIChatAdapter(), FixedTiming(1.0, 0.1), 0.0,
                        decoder=decoder_for("gzip"))
    playout = Playout(pacer, PlayoutPool(), 0.0)
    playout.feed(b"not gzip at all", 0.0)
    step = playout.step(0.0, None)
    assert step.end is End.BROKEN and "retimer:" in step.reason
    assert [w.message("h") for w in playout.warnings][-1].startswith("retimer: the openai-chat stream from h is corrupt")


def test_a_cap_turns_the_stream_to_passthrough_and_says_so_once() -> None:
    pool = PlayoutPool()
    pool.settings.max_stream_buffer = 100
    playout = paced(pool)
    body = b"".join(event(f"w{i}") for i in range(20))
    playout.feed(body, 0.0)
    assert len(playout.warnings) == 1 and "reached the buffer cap" in playout.warnings[0].after
    sent = playout.step(0.0, None).data  # what it held goes at once (split events: same text)
    assert text_of(sent) == text_of(body) and playout.step(0.01, None).data == b""
    playout.release()
    assert pool.held == 0


def test_the_pool_counts_what_all_streams_hold() -> None:
    pool = PlayoutPool()
    a, b = paced(pool), paced(pool)
    a.feed(event("x"), 0.0)
    b.feed(event("yy"), 0.0)
    assert pool.held == len(event("x")) + len(event("yy"))
    a.step(1.0, None)
    assert pool.held == len(event("yy"))
    b.release()
    assert pool.held == 0


def test_a_keepalive_goes_out_while_tokens_are_held() -> None:
    pool = PlayoutPool()
    pool.settings.keepalive_s = 0.5
    playout = paced(pool, ttft=2.0)
    playout.feed(event("a"), 0.0)
    first = playout.step(0.0, None)
    assert first.wake == pytest.approx(0.5)  # the keep-alive comes before the token
    assert playout.step(0.5, None).data.startswith(b":")


def test_draining_sends_everything_held_at_once() -> None:
    pool = PlayoutPool()
    playout = paced(pool, ttft=30.0)
    playout.feed(event("a") + event("b"), 0.0)
    assert playout.step(0.0, None).data == b""
    pool.draining = True
    assert playout.step(0.01, None).data == event("a") + event("b")


def test_an_upstream_that_breaks_off_gets_everything_that_arrived() -> None:
    playout = paced()
    playout.feed(event("a") + b'data: {"cho', 0.0)
    assert playout.waiting
    assert playout.abort(0.1) == event("a") + b'data: {"cho'


def test_passthrough_counts_what_passed() -> None:
    pacer = StreamPacer(OpenAIChatAdapter(), NoTiming(), 0.0, passthrough=True)
    playout = Playout(pacer, PlayoutPool(), 0.0)
    playout.passed(event("a"), 0.0)
    playout.passed(event("b c"), 0.05)
    playout.passed_end(0.2)
    assert pacer.stats.emitted_side.tokens >= 2 and playout.warnings == []


def ws_playout(pool: PlayoutPool | None = None) -> WebSocketPlayout:
    def pacer(start: float) -> StreamPacer:
        return StreamPacer(WebSocketMessageAdapter(), FixedTiming(0.5, 0.1), start)
    return WebSocketPlayout(pacer(0.0), 0, pool or PlayoutPool())


def test_a_websocket_sends_each_turn_in_order_and_retires_it() -> None:
    ws = ws_playout()
    later = StreamPacer(WebSocketMessageAdapter(), FixedTiming(0.5, 0.1), 1.0)
    step = ws.server_message(encode_message(b'{"delta":"hi"}', is_text=True), 0.0, None)
    assert step.data == b"" and step.wake is not None
    assert ws.holding
    turn_over = ws.client_message(1.0, b"ask")
    assert turn_over.turns == ()  # turn 0 still holds its message
    assert ws.asked is not None and (ws.asked.at, ws.asked.content, ws.asked.number) == (1.0, b"ask", 1)
    ws.open_turn(later, 1)  # the shell draws the turn's timing at its first answer
    assert ws.asked is None
    out = ws.step(step.wake, None)
    assert decode_messages(out.data) == [(b'{"delta":"hi"}', True)]
    assert [t.index for t in out.turns] == [0] and not ws.holding


def test_a_turn_ends_with_its_last_message_not_the_next_turn() -> None:
    """A turn is over when its last message is sent (`last_sent`), however long the client
    then waits before its next message; turns are numbered in the socket's order."""
    ws = ws_playout()
    step = ws.server_message(encode_message(b'{"delta":"one two"}', is_text=True), 0.0, None)
    assert step.wake is not None
    ws.step(step.wake, None)
    out = ws.client_message(9.0, b"next")  # the client thought for ~8 s
    (turn,) = out.turns
    assert (turn.number, turn.last_sent) == (0, step.wake)
    assert ws.asked is not None and ws.asked.answered == turn.pacer.stats.upstream.tokens > 0
    # a second message before any answer replaces the first; it keeps the tokens answered before
    ws.client_message(9.5, b"again")
    assert ws.asked is not None and (ws.asked.content, ws.asked.number) == (b"again", 2)
    assert ws.asked.answered == turn.pacer.stats.upstream.tokens
    ws.open_turn(StreamPacer(WebSocketMessageAdapter(), FixedTiming(0.5, 0.1), 9.5), 1)
    ws.server_message(encode_message(b'{"delta":"three"}', is_text=True), 9.6, None)
    assert ws.turns[-1].number == 2 and ws.turns[-1].messages == 1 and ws.turns[-1].last_sent is None


def test_a_closed_websocket_says_what_it_never_sent() -> None:
    ws = ws_playout()
    ws.server_message(encode_message(b"x", is_text=False), 0.0, None)
    (closed,) = ws.close(0.1)
    assert closed.left == 1 and closed.turn.messages == 1


def test_a_step_is_a_value() -> None:
    assert Step(b"x") == Step(b"x", None, 0.0, None, "", ())


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.sampled_from(["the", " quick", " brown", "\\n", " fox", "é", " jumps"]),
                      min_size=1, max_size=80),
       per_event=st.integers(1, 5), cut=st.integers(1, 400),
       tail=st.sampled_from([b"", b"data: [DONE]\n\n", b": keep-alive\n\n" * 30, b"\n\n", b"data: {}\n\n"]),
       batch_s=st.floats(0.0, 2.0), steps=st.integers(1, 64), gap=st.sampled_from([0.001, 0.01]))
def test_parsing_ahead_in_batches_never_changes_what_leaves_or_when(
    words: list[str], per_event: int, cut: int, tail: bytes, batch_s: float, steps: int, gap: float,
) -> None:
    """Whatever the batch (how far ahead, how many steps), every step gives the bytes and the
    timers it gives when nothing is parsed ahead at all, and when only what falls due soon is
    (a batch of no steps), to the end."""
    body = b"".join(event("".join(words[i:i + per_event])) for i in range(0, len(words), per_event)) + tail

    def played(batch_s: float, steps: int | None) -> list[tuple[bytes, float | None, End | None]]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(emission, "PARSE_BATCH_S", batch_s)
            playout = paced(ttft=0.05, gap=gap)  # 1 ms: wakes too close for a batch
            for i in range(0, len(body), cut):
                playout.feed(body[i:i + cut], 0.001 * i / cut)
            playout.end(0.01)
            steps_seen, now, armed = [], 0.0, None
            while True:
                step = playout.step(now, armed)
                steps_seen.append((step.data, step.wake, step.end))
                if step.end is not None:
                    return steps_seen
                if step.data and steps is not None:
                    playout.parse_ahead(now, step.wake, steps)  # as the shell does, after its write
                armed = step.wake if step.wake is not None else armed
                assert armed is not None
                now, armed = armed, None

    batched = played(batch_s, steps)
    assert batched == played(0.0, None) == played(0.0, 0)
    out = b"".join(d for d, _, _ in batched)
    assert text_of(out) == text_of(body) and out.endswith(tail) and batched[-1][2] is End.COMPLETE
