"""Gemini Interactions adapter: channels, splitting, integrity, what the SDK's models accept."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols import ADAPTERS, find_adapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.gemini_interactions import GeminiInteractionsAdapter
from tests.support.adapter_checks import (
    channel_texts,
    check_integrity,
    event_key,
    parse,
    random_pieces,
    rechunk,
    resplit,
    sse_events,
)
from tests.support.payload_streams import as_sse

A = GeminiInteractionsAdapter
TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream"
RECORDED = "vercel-ai-payloads/google--basic.payloads.ndjson"


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="generativelanguage.googleapis.com", path=path,
                        headers={}, body=b"{}")


def ev(obj: dict[str, Any], newline: str = "\n") -> bytes:
    return f"event: {obj['event_type']}{newline}data: {json.dumps(obj)}{newline}{newline}".encode()


def step_delta(delta: dict[str, Any], index: int = 0, **top: Any) -> dict[str, Any]:
    return {"index": index, "delta": delta, "event_type": "step.delta", **top}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def thought(t: str) -> dict[str, Any]:
    return {"type": "thought_summary", "content": {"type": "text", "text": t}}


def args(t: str) -> dict[str, Any]:
    return {"type": "arguments_delta", "arguments": t}


def synthetic() -> bytes:
    """A thinking + function call + answer stream in the documented shapes (written here, not
    captured: the recorded file has one text delta only), with event_id and usage metadata."""
    events = [
        {"interaction": {"id": "v1_x", "status": "in_progress"}, "event_type": "interaction.created"},
        {"index": 0, "step": {"type": "thought"}, "event_type": "step.start"},
        step_delta(thought("**Planning** the weather lookup"), event_id="e1"),
        step_delta({"type": "thought_signature", "signature": "c2ln"}),
        {"index": 0, "event_type": "step.stop"},
        {"index": 1, "step": {"type": "function_call", "id": "f1", "name": "weather"}, "event_type": "step.start"},
        step_delta(args('{"city": '), index=1), step_delta(args('"Paris"}'), index=1),
        {"index": 1, "event_type": "step.stop"},
        {"index": 2, "step": {"type": "model_output"}, "event_type": "step.start"},
        step_delta(text("It is sunny in Paris."), index=2, event_id="e9",
                   metadata={"total_usage": {"total_tokens": 12}}),
        {"index": 2, "event_type": "step.stop"},
        {"interaction": {"id": "v1_x", "status": "completed"}, "event_type": "interaction.completed"},
    ]
    return b"".join(ev(e) for e in events)


STREAMS = {RECORDED: as_sse(RECORDED), "synthetic": synthetic()}


def events_of(data: bytes) -> list[Event]:
    return parse(A, [data])


def only(data: bytes) -> Event:
    [event] = events_of(data)
    return event


def data_of(raw: bytes) -> dict[str, Any]:
    [sse] = sse_events(raw)
    return json.loads(sse.data or "")


# -- accepts / registry ------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/v1beta/interactions", SSE, True),
    ("post", "/v1beta/interactions/?alt=sse", "text/event-stream; charset=UTF-8", True),
    ("GET", "/v1beta/interactions/v1_ChdUR3N?stream=true&last_event_id=e5", SSE, True),
    ("POST", "/v1beta/interactions", "application/json", False),
    ("GET", "/v1beta/interactions", SSE, False),
    ("POST", "/v1beta/interactions/v1_x/cancel", SSE, False),
    ("GET", "/v1beta/interactions/v1_x/cancel", SSE, False),
    ("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert A.accepts(shape(path, method), ctype) is expected


def test_registry() -> None:
    assert A in ADAPTERS and A.name == "gemini-interactions"
    assert find_adapter(shape("/v1beta/interactions"), SSE) is A


# -- channels ----------------------------------------------------------------------------
def _reference(data: bytes) -> dict[Channel, str]:
    out: dict[Channel, str] = {}
    for sse in sse_events(data):
        obj = json.loads(sse.data or "{}")
        d = obj.get("delta") or {}
        found = {"text": (TEXT, d.get("text")), "arguments_delta": (TOOL_ARGS, d.get("arguments")),
                 "thought_summary": (REASONING, (d.get("content") or {}).get("text"))}.get(d.get("type"))
        if obj.get("event_type") == "step.delta" and found and found[1]:
            out[found[0]] = out.get(found[0], "") + found[1]
    return out


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_channels_and_raw(name: str) -> None:
    data = STREAMS[name]
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == _reference(data)
    assert all(e.splittable == bool(e.texts) for e in events)


def test_known_texts() -> None:
    assert channel_texts(events_of(STREAMS[RECORDED])) == {
        TEXT: "I'm doing great, thank you for asking!\n\nHow are you doing today? And what can I do for you?"}
    assert channel_texts(events_of(STREAMS["synthetic"])) == {
        REASONING: "**Planning** the weather lookup", TOOL_ARGS: '{"city": "Paris"}',
        TEXT: "It is sunny in Paris."}


# -- properties --------------------------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = STREAMS[name]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=60), label="cuts")
    assert [event_key(e) for e in parse(A, rechunk(raw, cuts))] == [event_key(e) for e in events_of(raw)]


def _validates(obj: dict[str, Any]) -> bool:
    """The google-genai SDK's own model of a step.delta event accepts the piece."""
    from google.genai._gaos.types.interactions.stepdelta import StepDelta

    try:
        StepDelta.model_validate(obj)
    except Exception:
        return False
    return True


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), data=st.data())
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_property_split_integrity(name: str, seed: int, data: st.DataObject) -> None:
    rnd = random.Random(seed)
    raw = STREAMS[name]
    output, records = resplit(A, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(A, raw, records, output, cuts)
    for r in records:
        if r.pieces is None:
            continue
        orig = data_of(r.event.raw)
        for i, (piece, raw_piece) in enumerate(zip(r.pieces, r.out, strict=True)):
            assert sse_events(raw_piece)[0].event == "step.delta"
            obj = data_of(raw_piece)
            last = i == len(r.pieces) - 1
            want = json.loads(json.dumps(orig))
            if want["delta"]["type"] == "thought_summary":
                want["delta"]["content"]["text"] = piece
            else:
                want["delta"]["text" if want["delta"]["type"] == "text" else "arguments"] = piece
            if not last:
                want.pop("event_id", None)
                want.pop("metadata", None)
            assert obj == want
            assert _validates(obj)


# -- targeted ----------------------------------------------------------------------------
@pytest.mark.parametrize(("delta", "channel"), [(text("Hello there"), TEXT), (thought("Hello there"), REASONING),
                                                (args("Hello there"), TOOL_ARGS)])
def test_split_every_piece_keeps_index_and_type(delta: dict[str, Any], channel: Channel) -> None:
    event = only(ev(step_delta(delta, index=3), newline="\r\n"))
    assert event.texts == ((channel, "Hello there"),) and event.splittable
    out = A().split(event, ["Hel", "lo", " there"])
    assert [only(p).texts for p in out] == [((channel, p),) for p in ["Hel", "lo", " there"]]
    assert all(p.startswith(b"event: step.delta\r\n") and p.endswith(b"\r\n\r\n") for p in out)
    assert [(data_of(p)["index"], data_of(p)["delta"]["type"]) for p in out] == [(3, delta["type"])] * 3


def test_event_id_and_usage_only_on_the_last_piece() -> None:
    event = only(ev(step_delta(text("ab"), event_id="e7", metadata={"total_usage": {"total_tokens": 3}})))
    first, last = (data_of(p) for p in A().split(event, ["a", "b"]))
    assert "event_id" not in first and "metadata" not in first
    assert last["event_id"] == "e7" and last["metadata"] == {"total_usage": {"total_tokens": 3}}


def test_legacy_content_delta_text() -> None:
    event = only(ev({"index": 0, "delta": text("hi there"), "event_type": "content.delta"}))
    assert event.texts == ((TEXT, "hi there"),) and event.splittable
    assert [only(p).texts for p in A().split(event, ["hi", " there"])] == [((TEXT, "hi"),), ((TEXT, " there"),)]


@pytest.mark.parametrize("raw", [
    ev(step_delta(text(""))),
    ev(step_delta({"type": "text", "text": 5})),
    ev(step_delta({"type": "text"})),
    ev(step_delta({"type": "thought_signature", "signature": "c2ln"})),
    ev(step_delta({"type": "thought_summary", "content": {"type": "image", "data": "AAAA"}})),
    ev(step_delta({"type": "text_annotation", "annotations": [{"url": "https://x"}]})),
    ev(step_delta({"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"})),
    ev(step_delta({"type": "google_search_call", "arguments": {"queries": ["x"]}})),
    ev(step_delta("text")),  # type: ignore[arg-type]
    ev({"index": 0, "step": {"type": "model_output", "content": [text("x")]}, "event_type": "step.start"}),
    ev({"error": {"message": "x"}, "event_type": "error"}),
    b"event: step.delta\ndata: not json\n\n",
    b"event: step.delta\ndata: [1]\n\n",
    b'event: step.delta\ndata: {"event_type":"step.delta","delta":{"type":"text","text":"\xff"}}\n\n',
    b": keep-alive\n\n",
    ev(step_delta(text("no blank line")))[:-1],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw and all(not e.texts for e in events)


def test_bad_split_raises_and_single_piece_is_raw() -> None:
    raw = ev(step_delta(text("abc")))
    event = only(raw)
    assert A().split(event, ["abc"]) == [raw]
    with pytest.raises(ValueError):
        A().split(event, ["ab"])
