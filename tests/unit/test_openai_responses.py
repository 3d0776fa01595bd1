"""OpenAI Responses adapter: channels, splitting, sequence_number renumbering, SDK view."""

from __future__ import annotations

import functools
import json
import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.timing.pacer import StreamPacer
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.openai_responses import OpenAIResponsesAdapter
from tests.support.adapter_checks import (
    channel_texts,
    check_integrity,
    event_key,
    parse,
    random_pieces,
    rechunk,
    resplit,
    sse_events,
    two_pieces,
)
from tests.support.fixture_streams import RESPONSES_FIXTURES, load

A = OpenAIResponsesAdapter
TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream"
_SEQ_DIGITS = re.compile(rb'("sequence_number"\s*:\s*)\d+')
CHANNELS = {
    "response.output_text.delta": TEXT, "response.refusal.delta": TEXT,
    "response.reasoning_summary_text.delta": REASONING, "response.reasoning_text.delta": REASONING,
    "response.function_call_arguments.delta": TOOL_ARGS,
    "response.custom_tool_call_input.delta": TOOL_ARGS,
    "response.code_interpreter_call_code.delta": TOOL_ARGS,
    "response.mcp_call_arguments.delta": TOOL_ARGS,
}


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="api.openai.com", path=path, headers={}, body=b"{}")


def ev(obj: dict[str, Any], *, named: bool = True) -> bytes:
    head = f"event: {obj['type']}\n" if named else ""
    return f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


def delta(kind: str, text: str, seq: int | None, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": kind, "item_id": "msg_1", "output_index": 0, "content_index": 0,
                           "delta": text, **extra}
    if seq is not None:
        obj["sequence_number"] = seq
    return obj


def objs(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in sse_events(data) if e.complete and e.data and e.data != "[DONE]"]


def seqs(data: bytes) -> list[int | None]:
    return [o.get("sequence_number") for o in objs(data)]


def events_of(data: bytes) -> list[Event]:
    return parse(A, [data])


# -- accepts --------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/v1/responses", SSE, True),
    ("POST", "/api/v1/responses", "text/event-stream; charset=utf-8", True),
    ("POST", "/openai/v1/responses/?x=1", SSE, True),
    ("POST", "/responses", SSE, True),
    ("GET", "/v1/responses/resp_1?stream=true", SSE, True),  # resuming a background response
    ("GET", "/v1/responses/resp_1/input_items", SSE, False),
    ("POST", "/v1/responses", "application/json", False),
    ("POST", "/v1/responses/resp_1/cancel", SSE, False),
    ("POST", "/v1/chat/completions", SSE, False),
    ("POST", "/v1/messages?next=/responses", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert A.accepts(shape(path, method), ctype) is expected and A.name == "openai-responses"


# -- channels on recorded streams ------------------------------------------------------------
def _reference(data: bytes) -> dict[Channel, str]:
    out: dict[Channel, str] = {}
    for obj in objs(data):
        channel = CHANNELS.get(obj.get("type", ""))
        if channel and obj.get("delta"):
            out[channel] = out.get(channel, "") + obj["delta"]
    return out


@pytest.mark.parametrize("name", RESPONSES_FIXTURES)
def test_fixture_channels_and_raw(name: str) -> None:
    data = load(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == _reference(data)
    assert all(e.splittable == bool(e.texts) for e in events)
    assert all(not e.texts for e in events if b".done" in e.raw.split(b"\n", 1)[0])


def test_fixture_known_channels() -> None:
    assert set(channel_texts(events_of(load("openai-responses/reasoning-summary-code-interpreter.sse")))) == {
        TEXT, REASONING, TOOL_ARGS}
    assert set(channel_texts(events_of(load("openrouter/openrouter-responses-api-reasoning-text.sse")))) == {
        TEXT, REASONING}
    assert channel_texts(events_of(load("openai-responses/aws-bedrock-mantle-responses.sse"))) == {TOOL_ARGS: "{}"}


# -- properties on recorded streams ---------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", RESPONSES_FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(A, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw


@functools.cache
def _event_type() -> Any:
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter
    return TypeAdapter(ResponseStreamEvent)


def _validates(obj: dict[str, Any]) -> bool:
    from pydantic import ValidationError
    try:
        _event_type().validate_python(obj)
    except ValidationError:
        return False
    return True


_BIG = [HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large]


@settings(max_examples=10, deadline=None, suppress_health_check=_BIG)
@given(seed=st.integers(0, 2**32), data=st.data())  # a seed: st.randoms is slow on 650-event streams
@pytest.mark.parametrize("name", RESPONSES_FIXTURES)
def test_property_split_integrity_and_numbering(name: str, seed: int, data: st.DataObject) -> None:
    rnd = random.Random(seed)
    raw = load(name)
    upstream = sse_events(raw)
    output, records = resplit(A, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.7 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(A, raw, records, output, cuts)
    before, after = seqs(raw), seqs(output)
    if before[0] is None:
        assert set(after) == {None} and all(b"sequence_number" not in b for r in records for b in r.out)
    else:  # contiguous upstream stays contiguous from the same start
        assert after == list(range(before[0], before[0] + len(after)))
    split_seen = False
    for r, up in zip(records, upstream, strict=True):
        if r.pieces is None:  # byte-identical, or identical but for the digits after a split
            if not split_seen or before[0] is None:
                assert r.out == [up.raw]
            else:
                assert _SEQ_DIGITS.sub(rb"\1N", r.out[0]) == _SEQ_DIGITS.sub(rb"\1N", up.raw)
            continue
        split_seen = split_seen or len(r.pieces) > 1
        orig = json.loads(up.data or "")
        for i, (piece, raw_piece) in enumerate(zip(r.pieces, r.out, strict=True)):
            [p] = sse_events(raw_piece)
            assert p.event == up.event and p.newline == up.newline
            obj = json.loads(p.data or "")
            last = i == len(r.pieces) - 1
            expected = {k: v for k, v in orig.items() if last or k != "obfuscation"}
            expected["delta"] = piece
            if "logprobs" in orig and not last:
                expected["logprobs"] = []
            if "sequence_number" in orig:
                expected["sequence_number"] = obj["sequence_number"]
            assert obj == expected and list(obj) == list(expected)
            # early-2025 streams lack sequence_number, which today's SDK types require
            assert _validates(obj) == _validates(orig) == ("sequence_number" in orig)


# -- what the official SDK accumulates ------------------------------------------------------
def responses_view(data: bytes) -> dict[str, Any]:
    """The SDK's accumulated snapshot before response.completed, and the final response."""
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai._types import omit
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    deltas: dict[tuple[str, Any, Any], str] = {}
    snapshot = final = None
    for sse in SSEDecoder().iter_bytes(iter([data])):
        if sse.data.startswith("[DONE]"):
            break
        obj = json.loads(sse.data)
        if obj.get("type") == "response.completed":
            snapshot = state._ResponseStreamState__current_snapshot.model_dump(warnings=False)  # type: ignore[attr-defined]
        for out in state.handle_event(construct_type(type_=ResponseStreamEvent, value=obj)):  # type: ignore[arg-type]
            if out.type in CHANNELS:
                key = (out.type, getattr(out, "output_index", None), getattr(out, "content_index", None))
                deltas[key] = deltas.get(key, "") + out.delta  # type: ignore[union-attr]
            if out.type == "response.completed":
                final = out.response.model_dump(warnings=False)  # type: ignore[union-attr]
    return {"snapshot": snapshot, "final": final, "deltas": deltas}


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", [n for n in RESPONSES_FIXTURES if "resume" not in n])  # no created
def test_sdk_accumulates_same_response(name: str, how: str) -> None:
    pytest.importorskip("openai")
    raw = load(name)
    output, _ = resplit(A, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    want, got = responses_view(raw), responses_view(output)
    assert got == want and want["final"] is not None and want["deltas"]


# -- renumbering ----------------------------------------------------------------------------
def _stream() -> bytes:
    return b"".join([
        ev({"type": "response.created", "response": {"id": "r"}, "sequence_number": 7}),
        ev(delta("response.output_text.delta", "abc", 8, logprobs=[{"token": "abc", "logprob": -1.0}],
                 obfuscation="xx")),
        b": keepalive\n\n",
        ev(delta("response.output_text.delta", "de", 9, logprobs=[])),
        ev({"type": "response.output_text.done", "text": "abcde", "sequence_number": 10}),
    ])


def test_split_renumbers_pieces_and_later_events_in_one_batch() -> None:
    adapter = A()
    events = adapter.feed(_stream())
    untouched = [e.raw for e in events]
    assert adapter.split(events[1], ["a", "bc"])[0].startswith(b"event: response.output_text.delta\n")
    assert events[0].raw == untouched[0] and events[2].raw == untouched[2]  # before / no number
    assert events[4].raw == untouched[4].replace(b'"sequence_number":10', b'"sequence_number":11')
    pieces = adapter.split(events[3], ["d", "e"])
    assert [o["sequence_number"] for o in objs(b"".join(pieces))] == [10, 11]
    assert seqs(events[4].raw) == [12]
    first, last = objs(b"".join(A().split(A().feed(_stream())[1], ["a", "bc"])))
    assert first["logprobs"] == [] and "obfuscation" not in first
    assert last["logprobs"] == [{"token": "abc", "logprob": -1.0}] and last["obfuscation"] == "xx"


def test_later_batches_get_the_shift() -> None:
    adapter = A()
    data = _stream()
    cut = data.index(b"event: response.output_text.done")
    [created, text, *_] = adapter.feed(data[:cut])
    out = adapter.split(text, list("abc"))
    [done] = adapter.feed(data[cut:]) + adapter.end()
    assert seqs(b"".join([created.raw, *out, done.raw])) == [7, 8, 9, 10, 12]
    assert done.upstream_size == len(data) - cut


def test_unterminated_tail_stays_verbatim_after_a_split() -> None:
    adapter = A()
    data = _stream()
    [_, text, *_] = adapter.feed(data[:-1])
    adapter.split(text, list("abc"))
    [tail] = adapter.end()
    assert tail.raw == data[data.index(b"event: response.output_text.done"):-1]


def test_single_piece_and_unnumbered_splits_do_not_shift() -> None:
    adapter = A()
    events = adapter.feed(_stream())
    assert adapter.split(events[1], ["abc"]) == [events[1].raw]
    assert seqs(events[4].raw) == [10]
    plain = A()
    a, b = plain.feed(ev(delta("response.refusal.delta", "no", None)) + ev({"type": "x", "sequence_number": 3}))
    assert seqs(b"".join(plain.split(a, ["n", "o"]))) == [None, None] and seqs(b.raw) == [3]


@pytest.mark.parametrize("tail", [
    b': "sequence_number":10\nevent: response.output_text.done\ndata: {"sequence_number":10}\n\n',
    b'data: {"type":"x","item":{"sequence_number":10},"sequence_number":10}\n\n',
    b'data: {"type":"x","sequence\\u005fnumber":10}\n\n',
    b'data: {"type":"x",\ndata: "sequence_number":\ndata: 10}\r\n\r\n',
])
def test_renumber_falls_back_to_reserialising(tail: bytes) -> None:
    adapter = A()
    text, later = adapter.feed(ev(delta("response.output_text.delta", "ab", 9)) + tail)
    adapter.split(text, ["a", "b"])
    [after] = sse_events(later.raw)
    assert json.loads(after.data or "") == {**json.loads(sse_events(tail)[0].data or ""), "sequence_number": 11}
    assert after.event == sse_events(tail)[0].event


class _Timing:
    ttft = 0.0

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk

    def gap(self) -> float:
        return 0.001

    def chunk_size(self) -> int:
        return self.chunk


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), chunk=st.integers(1, 4))
@pytest.mark.parametrize("name", [n for n in RESPONSES_FIXTURES if "gpt4o" not in n])
def test_pacer_output_numbers_increase(name: str, data: st.DataObject, chunk: int) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=30), label="cuts")
    pacer = StreamPacer(A(), _Timing(chunk), start=0.0)  # type: ignore[arg-type]
    for piece in rechunk(raw, cuts):
        pacer.feed(piece, now=0.0)
    pacer.finish(now=0.0)
    out = b"".join(e.data for e in pacer.pop_all())
    assert pacer.failure is None
    numbers = seqs(out)
    assert numbers == list(range(seqs(raw)[0], seqs(raw)[0] + len(numbers)))  # type: ignore[arg-type]
    assert channel_texts(events_of(out)) == channel_texts(events_of(raw))
    assert [o["type"] for o in objs(out) if o["type"] not in CHANNELS] == [
        o["type"] for o in objs(raw) if o["type"] not in CHANNELS]


# -- malformed input ------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [
    ev(delta("response.output_text.delta", "", 1)),
    ev(delta("response.output_text.delta", 5, 1)),  # type: ignore[arg-type]
    ev({"type": "response.output_text.delta", "sequence_number": 1}),
    ev({"type": "response.output_text.done", "text": "abc", "sequence_number": 1}),
    ev(delta("response.mystery.delta", "x", 1)),
    b"event: response.output_text.delta\ndata: not json\n\n",
    b"event: response.output_text.delta\ndata: [1, 2]\n\n",
    b'data: {"type":"response.output_text.delta","delta":"\xff"}\n\n',
    b"data: [DONE]\n\n",
    b": OPENROUTER PROCESSING\n\n",
    ev(delta("response.output_text.delta", "no blank line", 1))[:-1],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw and all(not e.texts for e in events)


def test_bad_logprobs_is_atomic_and_bad_split_raises() -> None:
    [event] = events_of(ev(delta("response.output_text.delta", "ab", 1, logprobs=None)))
    assert event.texts == ((TEXT, "ab"),) and not event.splittable
    [good] = events_of(ev(delta("response.output_text.delta", "ab", 1)))
    with pytest.raises(ValueError):
        A().split(good, ["a"])


class _FailingAfter(A):
    """Fails on the third feed: the pacer must pass the rest through without losing bytes."""

    calls = 0

    def feed(self, data: bytes) -> list[Event]:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("boom")
        return super().feed(data)


def test_pacer_fail_open_after_renumbering_keeps_bytes() -> None:
    raw = load("openai-responses/reasoning-summary-text-delta-long.sse")
    cut = raw.index(b"event: response.output_text.delta")
    parts = [raw[:cut - 5000], raw[cut - 5000:cut + 3], raw[cut + 3:]]
    pacer = StreamPacer(_FailingAfter(), _Timing(1), start=0.0)  # type: ignore[arg-type]
    for part in parts:
        pacer.feed(part, now=0.0)
    pacer.finish(now=0.0)
    out = b"".join(e.data for e in pacer.pop_all())
    assert pacer.failure and out.endswith(raw[cut:])  # the unparsed tail, as it came


def test_split_lazily_keeps_the_renumbered_split() -> None:
    """The Responses adapter rewrites its pieces as a whole (it renumbers): lazily, it splits
    at once, the same bytes as split()."""
    lazy, eager = A(), A()
    (_, event, *_), (_, same, *_) = lazy.feed(_stream()), eager.feed(_stream())
    assert list(lazy.split_lazily(event, ["a", "bc"])) == eager.split(same, ["a", "bc"])
