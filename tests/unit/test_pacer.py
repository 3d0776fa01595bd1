"""The pacer and the live scheduler on fake clocks: order, due times, chunking, integrity."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.timing.pacer import PacerState, StreamPacer
from retimer.timing.strategy import Strategy
from retimer.wire.protocols.base import AdapterError, Channel, Event
from retimer.wire.tokenizer import split_tokens
from tests.support.pacer_fakes import FixedTiming, LineAdapter, text_of


def drain(pacer: StreamPacer) -> list:
    out = pacer.pop_due(float("inf"))
    pacer.sent(out, 0.0)
    return out


BODY = b"start\nT:Hello world, this is a test of the pacer.\nT: And more words here.\nend\n"


def test_burst_is_spread_at_the_profile_rate() -> None:
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.4, 0.025), start=0.0)
    pacer.feed(BODY, now=0.01)
    pacer.finish(now=0.02)
    out = drain(pacer)
    token_emissions = [e for e in out if e.tokens]
    n = sum(e.tokens for e in token_emissions)
    assert n == len(split_tokens("Hello world, this is a test of the pacer.")) + len(
        split_tokens(" And more words here.")
    )
    assert all(e.tokens == 1 for e in token_emissions)
    assert token_emissions[0].due == 0.4
    assert abs(token_emissions[-1].due - (0.4 + (n - 1) * 0.025)) < 1e-9
    assert out[0].data == b"start\n" and out[0].due == 0.01  # non-token event goes at once
    assert out[-1].data == b"end\n" and out[-1].due == token_emissions[-1].due
    assert b"".join(e.data for e in out).count(b"\n") == n + 2
    assert text_of(b"".join(e.data for e in out)) == text_of(BODY)
    assert pacer.done
    assert not pacer.scheduler.ttft_bound and pacer.scheduler.bound_s == 0


def test_slow_upstream_is_never_overtaken() -> None:
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.1, 0.01), start=0.0)
    for i in range(5):
        pacer.feed(b"T: word\n", now=1.0 + i)
    pacer.finish(now=6.0)
    out = drain(pacer)
    assert [e.due for e in out] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert pacer.scheduler.ttft_bound
    assert abs(pacer.scheduler.bound_s - 4 * 0.99) < 1e-9


def test_chunking_groups_tokens_across_events() -> None:
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.2, 0.05, chunk=3), start=0.0)
    for _ in range(4):
        pacer.feed(b"T: a b\n", now=0.0)  # 2 tokens per upstream event
    pacer.finish(now=0.0)
    out = drain(pacer)
    assert [e.tokens for e in out] == [3, 3, 2]
    assert out[0].due == 0.2  # the first network event carries its tokens at the TTFT
    assert abs(out[1].due - (0.2 + 3 * 0.05)) < 1e-9
    assert text_of(b"".join(e.data for e in out)) == " a b" * 4


def test_passthrough_emits_every_event_as_it_arrived() -> None:
    pacer = StreamPacer(LineAdapter(), FixedTiming(5.0, 1.0), start=0.0, passthrough=True)
    pacer.feed(BODY[:20], now=0.5)
    pacer.feed(BODY[20:], now=0.7)
    pacer.finish(now=0.8)
    out = drain(pacer)
    assert b"".join(e.data for e in out) == BODY
    assert max(e.due for e in out) <= 0.7


def test_trailing_partial_event_goes_out_verbatim_at_the_end() -> None:
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.0, 0.0), start=0.0)
    pacer.feed(b"T: hi\npartial", now=0.0)
    assert not pacer.done
    pacer.finish(now=1.0)
    out = drain(pacer)
    assert b"".join(e.data for e in out) == b"T: hi\npartial"


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["text", "text", "words", "none"]), min_size=1, max_size=12),
    arrivals=st.lists(st.floats(0, 2), min_size=12, max_size=12),
    gap=st.floats(0, 0.1),
    ttft=st.floats(0, 1),
    chunk=st.integers(1, 5),
    pop_between=st.booleans(),
)
def test_never_early_never_reordered_text_intact(kinds, arrivals, gap, ttft, chunk, pop_between):
    """Each upstream line carries a marker; no marker may leave before its line arrived."""
    pacer = StreamPacer(LineAdapter(), FixedTiming(ttft, gap, chunk), start=0.0)
    body = b""
    arrival: dict[str, float] = {}
    out = []
    for i, (kind, now) in enumerate(zip(kinds, sorted(arrivals), strict=False)):
        marker = f"m{i}x"
        data = {"text": f"T: {marker}\n", "words": f"T: {marker} a b, c\n", "none": f"{marker}\n"}
        body += data[kind].encode()
        arrival[marker] = now
        pacer.feed(data[kind].encode(), now)
        if pop_between:
            out += pacer.pop_due(now)
    pacer.finish(max(arrivals))
    out += drain(pacer)
    dues = [e.due for e in out]
    assert dues == sorted(dues)
    for e in out:
        for marker in re.findall(r"m\d+x", e.data.decode()):
            assert e.due >= arrival[marker] - 1e-12
    assert b"".join(e.data for e in out).replace(b"T:", b"") .count(b"m") == len(kinds)
    assert text_of(b"".join(e.data for e in out)) == text_of(body)


class BrokenAdapter(LineAdapter):
    """Parses two chunks, then fails: the pacer must fall back to pass-through."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def feed(self, data: bytes) -> list[Event]:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("boom")
        return super().feed(data)


def test_adapter_failure_falls_back_to_passthrough_without_losing_bytes() -> None:
    pacer = StreamPacer(BrokenAdapter(), FixedTiming(0.5, 0.01), start=0.0)
    chunks = [b"T: one two", b" three\nT: fo", b"ur\nT: five\n", b"tail"]
    for i, chunk in enumerate(chunks):
        pacer.feed(chunk, now=float(i))
    pacer.finish(now=5.0)
    out = drain(pacer)
    sent = b"".join(e.data for e in out)
    assert text_of(sent) == text_of(b"".join(chunks))
    assert sent.endswith(b"T: four\nT: five\ntail")  # from the failure on, bytes as they came
    assert pacer.failure is not None and "boom" in pacer.failure
    dues = [e.due for e in out]
    assert dues == sorted(dues)


class FailingAdapter(LineAdapter):
    """Fails on the first bytes with the given exception."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def feed(self, data: bytes) -> list[Event]:
        raise self.error


def passed_through(error: Exception) -> tuple[StreamPacer, bytes]:
    pacer = StreamPacer(FailingAdapter(error), FixedTiming(0.5, 0.01), start=0.0)
    for i, chunk in enumerate(BODY.split(b" ")):
        pacer.feed(chunk + b" ", now=float(i))
    pacer.finish(now=20.0)
    return pacer, b"".join(e.data for e in drain(pacer))


def test_an_adapter_bug_passes_the_stream_through_unchanged_and_logs_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="retimer")
    pacer, sent = passed_through(RuntimeError("bug"))
    assert sent == b"".join(chunk + b" " for chunk in BODY.split(b" "))
    assert pacer.state is PacerState.UNPARSED and pacer.fallback == "RuntimeError: bug"
    [record] = [r for r in caplog.records if r.exc_info is not None]
    assert record.levelno == logging.ERROR and "lines adapter" in record.getMessage()
    assert "RuntimeError: bug" in caplog.text and "Traceback" in caplog.text


@pytest.mark.parametrize("error", [AdapterError("not lines"), ValueError("not lines")])
def test_input_the_adapter_cannot_read_passes_through_without_a_traceback(
    error: Exception, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="retimer")
    pacer, sent = passed_through(error)
    assert sent == b"".join(chunk + b" " for chunk in BODY.split(b" "))
    assert pacer.state is PacerState.UNPARSED and pacer.fallback is not None
    assert "not lines" in pacer.fallback
    assert not [r for r in caplog.records if r.exc_info is not None]


def test_a_cap_stops_pacing_once_and_says_so() -> None:
    pacer = StreamPacer(LineAdapter(), FixedTiming(5.0, 1.0), start=0.0)
    pacer.feed(BODY, now=0.1)
    assert pacer.state is PacerState.PACING and pacer.holding
    pacer.cap_reached("too much", now=0.2)
    assert pacer.state is PacerState.CAPPED and pacer.fallback == "buffer cap: too much"
    assert all(e.due <= 0.2 for e in pacer.pop_due(0.2)) and pacer.pending == 0
    pacer.cap_reached("again", now=0.3)  # a second cap changes nothing
    assert pacer.state is PacerState.CAPPED and pacer.fallback == "buffer cap: too much"


def test_gzip_body_is_decoded_before_parsing() -> None:
    import zlib

    from retimer.wire.encoding import decoder_for

    comp = zlib.compressobj(wbits=31)
    body = comp.compress(BODY) + comp.flush()
    decoder = decoder_for("gzip")
    assert decoder is not None and decoder_for("compress") is None
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.1, 0.01), start=0.0, decoder=decoder)
    for i in range(0, len(body), 7):
        pacer.feed(body[i : i + 7], now=0.0)
    pacer.finish(now=0.0)
    assert text_of(b"".join(e.data for e in drain(pacer))) == text_of(BODY)


HUGE = {"x": "HUGE_NUMBER"}  # replaced by a literal json.dumps cannot produce


@pytest.mark.parametrize("kind", ["openai-chat", "ollama", "websocket"])
def test_a_number_beyond_a_double_keeps_its_event_whole_and_valid(kind: str) -> None:
    """1e999 parses to inf, which Python would write back as `Infinity` (not JSON) in every
    split piece: such an event passes whole, its literal intact, with one noted anomaly."""
    import json

    from retimer.wire.protocols import OllamaAdapter, OpenAIChatAdapter
    from retimer.wire.protocols.websocket import WebSocketMessageAdapter, encode_message

    content = "some words that would be split here"
    if kind == "openai-chat":
        obj = {"choices": [{"index": 0, "delta": {"content": content}}], **HUGE}
        raw, adapter = f"data: {json.dumps(obj)}\n\n".encode(), OpenAIChatAdapter()
    elif kind == "ollama":
        obj = {"model": "m", "message": {"role": "assistant", "content": content}, "done": False,
               **HUGE}
        raw, adapter = (json.dumps(obj) + "\n").encode(), OllamaAdapter()
    else:
        obj = {"type": "response.output_text.delta", "delta": content, **HUGE}
        raw = encode_message(json.dumps(obj).encode(), is_text=True)
        adapter = WebSocketMessageAdapter()
    raw = raw.replace(b'"HUGE_NUMBER"', b"1e999")
    pacer = StreamPacer(adapter, FixedTiming(0.1, 0.01), start=0.0)
    pacer.feed(raw, now=0.0)
    pacer.finish(now=0.0)
    out = b"".join(e.data for e in drain(pacer))
    assert out == raw and b"Infinity" not in out
    assert adapter.anomaly is not None or kind == "websocket"  # (its text is estimated)


class WholeLineAdapter(LineAdapter):
    """Like LineAdapter, but `W:<text>` events carry text that cannot be split (a Gemini
    function call, an estimated event)."""

    def _event(self, raw: bytes) -> Event:
        if raw.startswith(b"W:") and raw.endswith(b"\n"):
            return Event(raw, ((Channel.TOOL_ARGS, raw[2:-1].decode()),), atomic=True)
        return super()._event(raw)


@pytest.mark.parametrize("chunk", [1, 3])
def test_a_whole_first_event_leaves_when_all_its_tokens_are_decoded(chunk: int) -> None:
    """A whole event of n tokens that opens the stream is sent at TTFT + (n - 1) gaps: the
    model decodes it token by token before it can send it, whatever the profile's chunking;
    a later whole event costs n gaps, as its tokens would one by one."""
    pacer = StreamPacer(WholeLineAdapter(), FixedTiming(0.5, 0.1, chunk), 0.0)
    first, later = '{"city":"Paris","units":"metric"}', "W:one two three\n"
    pacer.feed(f"W:{first}\n".encode() + later.encode(), 0.0)
    pacer.finish(0.0)
    n_first, n_later = len(split_tokens(first)), len(split_tokens(later[2:-1]))
    assert n_first > 3
    dues = [(e.data, round(e.due, 6)) for e in pacer.pop_all()]
    assert dues == [(f"W:{first}\n".encode(), round(0.5 + (n_first - 1) * 0.1, 6)),
                    (later.encode(), round(0.5 + (n_first - 1 + n_later) * 0.1, 6))]


class CountingLineAdapter(LineAdapter):
    """LineAdapter that counts the events it has parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.parsed = 0

    def feed(self, data: bytes) -> list[Event]:
        events = super().feed(data)
        self.parsed += len(events)
        return events


def test_a_10k_token_burst_is_parsed_as_its_tokens_fall_due() -> None:
    burst = b"start\n" + b"T: word\n" * 10_000 + b"end\n"
    adapter = CountingLineAdapter()
    pacer = StreamPacer(adapter, FixedTiming(0.4, 0.0002), start=0.0)
    pacer.feed(burst, now=0.01)
    pacer.finish(now=0.02)
    assert [e.data for e in pacer.pop_due(pacer.next_due() or 0.0)] == [b"start\n"]
    first = pacer.next_due()
    assert first == pytest.approx(0.4)
    assert [e.tokens for e in pacer.pop_due(first)] == [1]
    assert adapter.parsed < 1_000  # the rest of the burst waits until its tokens are due
    assert pacer.holding and not pacer.done
    pacer.pop_due(first + 0.1)  # 500 more tokens due
    assert 500 < adapter.parsed < 2_000


class LazyLineAdapter(CountingLineAdapter):
    """Serialises a split event's pieces one at a time, as they are taken, and counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.serialised = 0

    def split_lazily(self, event: Event, pieces: Sequence[str]) -> Iterator[bytes]:
        assert "".join(pieces) == event.text
        for p in pieces:
            self.serialised += 1
            yield b"T:" + p.encode() + b"\n"

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        return list(self.split_lazily(event, pieces))


def test_a_10k_token_event_is_split_as_its_tokens_fall_due() -> None:
    words = " w" * 10_000
    adapter = LazyLineAdapter()
    pacer = StreamPacer(adapter, FixedTiming(0.4, 0.0002), start=0.0)
    pacer.feed(b"T:" + words.encode() + b"\nend\n", now=0.01)
    pacer.finish(now=0.02)
    first = pacer.next_due()
    assert first == pytest.approx(0.4)
    assert [e.data for e in pacer.pop_due(first)] == [b"T: w\n"]
    assert adapter.serialised < 10  # not the 10,000 pieces: they are cut as they fall due
    assert pacer.buffered > len(words)  # what is not cut yet still counts as held
    rest = pacer.pop_due(first + 0.1)  # 500 more tokens due
    assert len(rest) == 500 and adapter.serialised < 600
    out = pacer.pop_all()
    assert text_of(b"".join(e.data for e in out)) == words[501 * 2:]
    assert out[-1].data == b"end\n" and pacer.done and pacer.buffered == 0


@pytest.mark.parametrize("strategy", [Strategy.REPLAY, Strategy.SMOOTH])
def test_held_events_are_split_as_their_tokens_fall_due(strategy: Strategy) -> None:
    """`replay` and `smooth` hold the answer, then release it: a 10k-token event is still cut
    and serialised as its pieces fall due, not all at the release."""
    words = " w" * 10_000
    adapter = LazyLineAdapter()
    pacer = StreamPacer(adapter, FixedTiming(0.4, 0.0002), start=0.0, strategy=strategy,
                        target_tps=5000.0, expected_tokens=10_000)
    pacer.feed(b"T:" + words.encode() + b"\nend\n", now=0.01)
    pacer.finish(now=0.02)
    first = pacer.next_due()
    assert first is not None
    assert [e.data for e in pacer.pop_due(first)] == [b"T: w\n"]
    assert adapter.serialised < 10
    out = pacer.pop_all()
    assert text_of(b"".join(e.data for e in out)) == words[2:]
    assert out[-1].data == b"end\n" and pacer.done and pacer.buffered == 0


def test_a_split_event_waiting_for_its_tokens_keeps_its_place_when_the_upstream_breaks() -> None:
    for strategy in Strategy:
        pacer = StreamPacer(LazyLineAdapter(), FixedTiming(0.4, 0.01), start=0.0, strategy=strategy)
        pacer.feed(b"T:" + b" w" * 100 + b"\nT: partial", now=0.01)
        out = pacer.abort(0.02)
        assert b"".join(e.data for e in out).endswith(b"T: w\nT: partial")
        assert text_of(b"".join(e.data for e in out[:-1])) == " w" * 100


@given(
    n=st.integers(1, 3000),
    chunk=st.integers(1, 5),
    cuts=st.lists(st.integers(0, 40_000), max_size=4),
    step=st.floats(0.0005, 0.05),
    long_every=st.integers(2, 400),
    strategy=st.sampled_from(list(Strategy)),
)
@settings(max_examples=60, deadline=None)
def test_parsing_as_due_gives_the_schedule_of_parsing_at_once(
    n: int, chunk: int, cuts: list[int], step: float, long_every: int, strategy: Strategy
) -> None:
    def line(i: int) -> bytes:
        if i % long_every == 0:
            return b"T:" + b" long" * (i % 97 + 2) + b"\n"  # an event of many tokens: split
        return b"T: w%d\n" % i if i % 7 else b"note\n"

    body = b"".join(line(i) for i in range(n))
    bounds = sorted({0, len(body), *(c for c in cuts if c < len(body))})

    def fed() -> StreamPacer:
        pacer = StreamPacer(LazyLineAdapter(), FixedTiming(0.05, 0.001, chunk), start=0.0,
                            strategy=strategy, target_tps=800.0)
        for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            pacer.feed(body[a:b], now=0.001 * i)
        pacer.finish(now=0.01)
        return pacer

    at_once = [(e.due, e.data, e.tokens) for e in fed().pop_all()]
    lazy, pacer, now = [], fed(), 0.0
    while not pacer.done:
        now += step
        lazy += [(e.due, e.data, e.tokens) for e in pacer.pop_due(now)]
    assert lazy == at_once
    assert text_of(b"".join(d for _, d, _ in lazy)) == text_of(body)


def test_a_body_that_breaks_still_gives_everything_decoded_before_in_order() -> None:
    import zlib

    from retimer.wire.encoding import decoder_for

    decoded = b"T:" + b" w" * 300 + b"\nT: next\nT: part"
    gz = zlib.compressobj(wbits=31)
    good = gz.compress(decoded) + gz.flush(zlib.Z_SYNC_FLUSH)
    pacer = StreamPacer(LazyLineAdapter(), FixedTiming(0.4, 0.01), start=0.0,
                        decoder=decoder_for("gzip"))
    pacer.feed(good, now=0.01)
    pacer.pop_due(0.4)  # the first token: the rest of the long event is not serialised yet
    pacer.feed(b"\x00corrupt" * 8, now=0.02)
    assert pacer.state is PacerState.BROKEN
    out = b"".join(e.data for e in pacer.abort(0.03))
    assert text_of(out) == " w" * 299 + " next"  # every piece of it, then what followed
    assert out.endswith(b"T: next\nT: part") and pacer.done


class EndOnceAdapter(CountingLineAdapter):
    """Refuses bytes after its end, as a real framing parser would."""

    ended = False

    def feed(self, data: bytes) -> list[Event]:
        if self.ended:
            raise AdapterError("bytes after the end")
        return super().feed(data)

    def end(self) -> list[Event]:
        self.ended = True
        return super().end()


def test_prepare_parses_ahead_in_batches_of_one_slice_and_some_steps_at_most() -> None:
    from retimer.timing.backlog import SLICE_BYTES

    burst = b"T: word\n" * 10_000
    adapter = EndOnceAdapter()
    pacer = StreamPacer(adapter, FixedTiming(0.4, 0.0002), start=0.0)
    pacer.feed(burst, now=0.01)
    first = pacer.pop_due(pacer.next_due() or 0.0)
    parsed = adapter.parsed
    far = first[-1].due + 1.0
    pacer.prepare(far, far, 10**6)  # far ahead: still one slice only
    assert 0 < adapter.parsed - parsed <= SLICE_BYTES // len(b"T: word\n") + 1
    queued = pacer.pending
    pacer.prepare(0.0, float("inf"), 10**6)  # the schedule reaches past 0.0: no batch now
    assert adapter.parsed - parsed <= SLICE_BYTES // len(b"T: word\n") + 1
    assert pacer.pending == queued
    pacer.prepare(float("inf"), float("inf"), 5)  # short of it: a batch of 5 steps at most
    assert adapter.parsed - parsed <= 2 * (SLICE_BYTES // len(b"T: word\n") + 1)
    assert queued < pacer.pending <= queued + 5
    pacer.finish(now=0.02)  # the upstream's end waits behind the bytes still to parse
    for _ in range(5):
        pacer.prepare(float("inf"), float("inf"), 10**6)
    out = pacer.pop_all()
    assert all(e.due >= first[-1].due for e in out) and sum(e.tokens for e in out) == 9_999
    assert b"".join(e.data for e in first + out) == burst
    assert pacer.state is PacerState.PACING and pacer.done
