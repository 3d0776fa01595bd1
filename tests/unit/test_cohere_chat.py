"""Cohere v2 chat adapter: channels, splitting, integrity on the recorded streams."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols import ADAPTERS, find_adapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.cohere_chat import CohereChatAdapter
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
from tests.support.payload_streams import PAYLOAD_FIXTURES, as_sse, provider

A = CohereChatAdapter
TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream"
FIXTURES = [n for n in PAYLOAD_FIXTURES if provider(n) == "cohere"]


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="api.cohere.com", path=path, headers={}, body=b"{}")


def ev(obj: dict[str, Any], newline: str = "\n") -> bytes:
    return f"event: {obj['type']}{newline}data: {json.dumps(obj)}{newline}{newline}".encode()


def content(text: str, key: str = "text", **top: Any) -> dict[str, Any]:
    return {"type": "content-delta", "index": 0, "delta": {"message": {"content": {key: text}}}, **top}


def tool_args(args: str, index: int = 0) -> dict[str, Any]:
    return {"type": "tool-call-delta", "index": index,
            "delta": {"message": {"tool_calls": {"function": {"arguments": args}}}}}


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
    ("POST", "/v2/chat", SSE, True),
    ("post", "/v2/chat/", "text/event-stream; charset=utf-8", True),
    ("POST", "/cohere/v2/chat?x=1", SSE, True),
    ("POST", "/v2/chat", "application/json", False),
    ("GET", "/v2/chat", SSE, False),
    ("POST", "/v1/chat", SSE, False),
    ("POST", "/api/chat", SSE, False),
    ("POST", "/v2/chat/completions", SSE, False),
    ("POST", "/compatibility/v1/chat/completions", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert A.accepts(shape(path, method), ctype) is expected


def test_registry() -> None:
    assert A in ADAPTERS and A.name == "cohere-chat"
    assert find_adapter(shape("/v2/chat"), SSE) is A


# -- channels on recorded streams ---------------------------------------------------------
def _reference(data: bytes) -> dict[Channel, str]:
    """A plain reading of the documented delta fields."""
    out: dict[Channel, str] = {}
    for sse in sse_events(data):
        if not sse.data or sse.data == "[DONE]":
            continue
        obj, found = json.loads(sse.data), []
        msg = obj.get("delta", {}).get("message", {})
        if obj["type"] == "content-delta":
            found = [(TEXT, msg["content"].get("text")), (REASONING, msg["content"].get("thinking"))]
        elif obj["type"] == "tool-plan-delta":
            found = [(REASONING, msg["tool_plan"])]
        elif obj["type"] == "tool-call-delta":
            found = [(TOOL_ARGS, msg["tool_calls"]["function"]["arguments"])]
        for channel, text in found:
            if text:
                out[channel] = out.get(channel, "") + text
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_channels_and_raw(name: str) -> None:
    data = as_sse(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == _reference(data)
    assert all(e.splittable == bool(e.texts) for e in events)


def test_fixture_known_texts() -> None:
    assert channel_texts(events_of(as_sse("vercel-ai-payloads/cohere--cohere-text.payloads.ndjson"))) == {
        TEXT: "The capital of France is Paris."}
    tools = channel_texts(events_of(as_sse("vercel-ai-payloads/cohere--cohere-tool-call.payloads.ndjson")))
    assert tools[TOOL_ARGS] == '{"location": "San Francisco"}{"city": "San Francisco"}'
    assert tools[REASONING].startswith("I will use the weather tool")
    thinking = channel_texts(events_of(as_sse("vercel-ai-payloads/cohere--cohere-reasoning.payloads.ndjson")))
    assert set(thinking) == {REASONING, TEXT} and thinking[TEXT] == "The answer to 2 + 2 is 4."


# -- properties --------------------------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = as_sse(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    assert [event_key(e) for e in parse(A, rechunk(raw, cuts))] == [event_key(e) for e in events_of(raw)]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), data=st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_split_integrity(name: str, seed: int, data: st.DataObject) -> None:
    rnd = random.Random(seed)
    raw = as_sse(name)
    output, records = resplit(A, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(A, raw, records, output, cuts)
    for r in records:
        if r.pieces is None:
            continue
        [orig_sse] = sse_events(r.event.raw)
        orig = json.loads(orig_sse.data or "")
        path = r.event.payload.path[2:]  # under delta.message
        for piece, raw_piece in zip(r.pieces, r.out, strict=True):
            [sse] = sse_events(raw_piece)
            assert sse.event == orig_sse.event == orig["type"]
            obj = json.loads(sse.data or "")
            want = json.loads(json.dumps(orig))
            leaf = want["delta"]["message"]
            for key in path[:-1]:
                leaf = leaf[key]
            leaf[path[-1]] = piece
            assert obj == want


def cohere_view(data: bytes) -> dict[str, Any]:
    """What a client builds: text, thinking and plan per block, tool calls by index."""
    view: dict[str, Any] = {"content": {}, "plan": "", "tools": {}, "end": None}
    for sse in sse_events(data):
        if not sse.data or sse.data == "[DONE]":
            continue
        obj = json.loads(sse.data)
        msg = (obj.get("delta") or {}).get("message") or {}
        if obj["type"] in ("content-start", "content-delta"):
            block = view["content"].setdefault(obj["index"], {})
            for key, value in msg["content"].items():
                block[key] = block.get(key, "") + value if key != "type" else value
        elif obj["type"] == "tool-plan-delta":
            view["plan"] += msg["tool_plan"]
        elif obj["type"] in ("tool-call-start", "tool-call-delta"):
            call = view["tools"].setdefault(obj["index"], {"args": ""})
            call["args"] += msg["tool_calls"]["function"]["arguments"]
            call.setdefault("id", msg["tool_calls"].get("id"))
        elif obj["type"] == "message-end":
            view["end"] = obj["delta"]
    return view


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", FIXTURES)
def test_client_builds_same_message(name: str, how: str) -> None:
    raw = as_sse(name)
    output, records = resplit(A, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    assert any(r.pieces and len(r.pieces) > 1 for r in records)
    assert cohere_view(output) == cohere_view(raw)


# -- targeted ----------------------------------------------------------------------------
@pytest.mark.parametrize(("obj", "channel"), [
    (content("Hello there"), TEXT),
    (content("Hello there", key="thinking"), REASONING),
    ({"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "Hello there"}}}, REASONING),
    (tool_args("Hello there", index=2), TOOL_ARGS),
])
def test_split_every_piece_is_the_same_event(obj: dict[str, Any], channel: Channel) -> None:
    event = only(ev(obj, newline="\r\n"))
    assert event.texts == ((channel, "Hello there"),) and event.splittable
    out = A().split(event, ["Hel", "lo", " there"])
    assert [only(p).texts for p in out] == [((channel, p),) for p in ["Hel", "lo", " there"]]
    assert all(p.startswith(f"event: {obj['type']}\r\n".encode()) for p in out)
    assert [data_of(p).get("index") for p in out] == [obj.get("index")] * 3


def test_logprobs_go_on_the_last_piece() -> None:
    logprobs = [{"token_ids": [1, 2], "logprobs": [-0.1, -0.2]}]
    out = A().split(only(ev(content("ab", logprobs=logprobs))), ["a", "b"])
    assert "logprobs" not in data_of(out[0]) and data_of(out[1])["logprobs"] == logprobs


@pytest.mark.parametrize(("obj", "texts"), [
    ({"type": "tool-call-start", "index": 0, "delta": {"message": {"tool_calls": {
        "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}}}}, ((TOOL_ARGS, "{}"),)),
    ({"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text", "text": "Hi"}}}},
     ((TEXT, "Hi"),)),
    ({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "a", "thinking": "b"}}}},
     ((TEXT, "a"), (REASONING, "b"))),
])
def test_counted_but_not_split(obj: dict[str, Any], texts: tuple[tuple[Channel, str], ...]) -> None:
    event = only(ev(obj))
    assert event.texts == texts and not event.splittable


@pytest.mark.parametrize("raw", [
    ev(content("")),
    ev(content(5)),  # type: ignore[arg-type]
    ev({"type": "content-delta", "index": 0, "delta": {"message": {"content": "text"}}}),
    ev({"type": "content-delta", "index": 0, "delta": {"message": "x"}}),
    ev({"type": "content-delta", "index": 0}),
    ev({"type": "tool-call-delta", "delta": {"message": {"tool_calls": [{"function": {"arguments": "x"}}]}}}),
    ev({"type": "citation-start", "index": 0, "delta": {"message": {"citations": {"text": "Paris"}}}}),
    ev({"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text", "text": ""}}}}),
    ev({"type": "message-end", "delta": {"finish_reason": "COMPLETE"}}),
    ev({"type": "mystery-delta", "delta": {"message": {"content": {"text": "x"}}}}),
    b"event: content-delta\ndata: not json\n\n",
    b"event: content-delta\ndata: [1]\n\n",
    b'event: content-delta\ndata: {"type":"content-delta","delta":{"message":{"content":{"text":"\xff"}}}}\n\n',
    b"data: [DONE]\n\n",
    b": keep-alive\n\n",
    ev(content("no blank line"))[:-1],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw and all(not e.texts for e in events)


def test_bad_split_raises_and_single_piece_is_raw() -> None:
    raw = ev(content("abc"))
    event = only(raw)
    assert A().split(event, ["abc"]) == [raw]
    with pytest.raises(ValueError):
        A().split(event, ["ab"])
