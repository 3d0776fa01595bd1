"""Gemini streamGenerateContent adapters: alt=sse events and the streamed JSON array."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape
from retimer.wire.protocols.gemini_json import GeminiJSONArrayAdapter
from retimer.wire.protocols.gemini_sse import GeminiSSEAdapter
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
from tests.support.fixture_streams import GEMINI_JSON_FIXTURES, GEMINI_SSE_FIXTURES, load

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE, JSON = "text/event-stream", "application/json; charset=UTF-8"
API = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
VERTEX = ("/v1beta1/projects/p/locations/global/publishers/google/models/"
          "gemini-3-flash-preview:streamGenerateContent")
ALL = [(GeminiSSEAdapter, n) for n in GEMINI_SSE_FIXTURES] + [(GeminiJSONArrayAdapter, n) for n in GEMINI_JSON_FIXTURES]


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="generativelanguage.googleapis.com", path=path, headers={}, body=b"{}")


def chunk(text: str | None = "Hi", **extra: Any) -> dict[str, Any]:
    part: dict[str, Any] = {} if text is None else {"text": text}
    return {"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
            "modelVersion": "gemini-2.5-flash", "responseId": "r1", **extra}


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\r\n\r\n"


def array(*objs: Any, sep: bytes = b"\n,\r\n") -> bytes:
    return b"[" + sep.join(json.dumps(o, indent=2).encode() for o in objs) + b"\n]"


def only(adapter: type[Adapter], data: bytes) -> Event:
    events = [e for e in parse(adapter, [data]) if e.texts]
    assert len(events) == 1
    return events[0]


def elements(adapter: type[Adapter], data: bytes) -> list[dict[str, Any]]:
    """The decoded GenerateContentResponses of a stream, as a client reads them."""
    if adapter is GeminiJSONArrayAdapter:
        return json.loads(data)
    return [json.loads(e.data) for e in sse_events(data) if e.complete and e.data]


def sdk_response(obj: dict[str, Any]) -> Any:
    """The SDK's GenerateContentResponse for one chunk, built the way its stream loop does."""
    from google.genai import models, types
    convert = models._GenerateContentResponse_from_vertex if "createTime" in obj else models._GenerateContentResponse_from_mldev
    return types.GenerateContentResponse._from_response(response=convert(obj), kwargs={})


# -- accepts ------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "sse_ok", "json_ok"), [
    ("POST", API + "?alt=sse", SSE, True, False),
    ("POST", VERTEX + "?alt=sse", "text/event-stream; charset=utf-8", True, False),
    ("POST", API + "?key=k&%24alt=sse", SSE, True, False),
    ("POST", API, JSON, False, True),
    ("POST", VERTEX, "application/json", False, True),
    ("POST", API.replace(":", "%3A") + "?key=x", JSON, False, True),
    ("POST", API + "?alt=sse", JSON, False, False),  # error body of an SSE request
    ("POST", API + "?alt=json", JSON, False, True),
    ("GET", API + "?alt=sse", SSE, False, False),
    ("POST", "/v1beta/models/gemini-2.5-flash:generateContent", JSON, False, False),
    ("POST", "/v1beta/models/gemini-2.5-flash:generateContent?alt=sse", SSE, False, False),
    ("POST", "/v1/chat/completions?x=:streamGenerateContent", SSE, False, False),
    ("POST", API, "text/html", False, False),
])
def test_accepts(method: str, path: str, ctype: str, sse_ok: bool, json_ok: bool) -> None:
    assert GeminiSSEAdapter.accepts(shape(path, method), ctype) is sse_ok
    assert GeminiJSONArrayAdapter.accepts(shape(path, method), ctype) is json_ok
    assert GeminiSSEAdapter.name == "gemini-sse" and GeminiJSONArrayAdapter.name == "gemini-json"


# -- recorded streams ---------------------------------------------------------------------
def _reference(adapter: type[Adapter], data: bytes) -> dict[Channel, str]:
    out: dict[Channel, str] = {}
    for obj in elements(adapter, data):
        for cand in obj.get("candidates", []):
            for part in cand.get("content", {}).get("parts", []):
                if part.get("text"):
                    channel = REASONING if part.get("thought") else TEXT
                    out[channel] = out.get(channel, "") + part["text"]
                elif isinstance(part.get("functionCall"), dict):
                    args = json.dumps(part["functionCall"].get("args") or {}, ensure_ascii=False,
                                      separators=(",", ":"))
                    out[TOOL_ARGS] = out.get(TOOL_ARGS, "") + args
    return out


@pytest.mark.parametrize(("adapter", "name"), ALL)
def test_fixture_channels_and_raw(adapter: type[Adapter], name: str) -> None:
    data = load(name)
    events = parse(adapter, [data])
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == _reference(adapter, data)
    # one text part per chunk here; a function call's arguments count but are never split
    assert all(e.splittable == (bool(e.texts) and e.texts[0][0] is not TOOL_ARGS) for e in events)
    assert parse(adapter, [data[i:i + 1] for i in range(len(data))]) == events  # byte by byte


def test_fixture_known_texts() -> None:
    texts = {n: channel_texts(parse(adapter, [load(n)])) for adapter, n in ALL}
    assert texts["gemini/sse-gemini-2.0-flash-text.sse"] == {TEXT: "The capital of France is Paris.\n"}
    assert texts["gemini/sse-vertex-gemini-3-flash.sse"] == {TEXT: "OK"}
    assert texts["gemini/llm-gemini-3-flash-short-text.json-stream"] == {TEXT: "Hello"}
    assert set(texts["gemini/sse-gemini-2.5-pro-thoughts.sse"]) == {TEXT, REASONING}
    assert texts["gemini/llm-gemini-flash-thoughts-signature.json-stream"][TEXT] == "Scoop"
    for name in ("gemini/sse-gemini-2.0-flash-two-function-calls-single-event.sse",
                 "gemini/sse-gemini-3-pro-functioncall-thoughtsig.sse",
                 "gemini/llm-gemini-3-flash-functioncall-thoughtsig.json-stream",
                 "gemini/llm-gemini-3-flash-functioncall-with-id.json-stream"):
        # function calls arrive whole: their arguments are paced as tool-argument tokens
        assert set(texts[name]) <= {TOOL_ARGS, REASONING} and texts[name][TOOL_ARGS].startswith("{")


def test_json_array_events_shape() -> None:
    data = load("gemini/llm-gemini-flash-thoughts-signature.json-stream")
    raws = [e.raw for e in parse(GeminiJSONArrayAdapter, [data])]
    assert raws[0] == b"[" and raws[-1] == b"\n]" and len(raws) == 5
    assert raws[1].startswith(b"{") and raws[2].startswith(b"\n,\r\n{") and raws[2].endswith(b"}")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize(("adapter", "name"), ALL)
def test_property_rechunking(adapter: type[Adapter], name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(adapter, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in parse(adapter, [raw])]


def _check_pieces(orig: dict[str, Any], objs: list[dict[str, Any]], pieces: list[str]) -> None:
    """Field placement of one split chunk, and what the SDK reads from each piece."""
    cand = orig["candidates"][0]
    part = cand["content"]["parts"][0]
    for i, (obj, piece) in enumerate(zip(objs, pieces, strict=True)):
        first, last = i == 0, i == len(objs) - 1
        [c] = obj["candidates"]
        [p] = c["content"]["parts"]
        assert p["text"] == piece and p.get("thought") == part.get("thought")
        assert c["content"].get("role") == cand["content"].get("role") and c.get("index") == cand.get("index")
        for key in ("responseId", "modelVersion", "createTime"):
            assert obj.get(key) == orig.get(key)
        for key in ("usageMetadata",):
            assert obj.get(key) == (orig.get(key) if last else None)
        for key in ("finishReason", "groundingMetadata", "citationMetadata", "safetyRatings"):
            assert c.get(key) == (cand.get(key) if last else None)
        assert p.get("thoughtSignature") == (part.get("thoughtSignature") if last else None)
        if first:
            assert {k: v for k, v in obj.items() if k not in ("candidates", "usageMetadata")} == {
                k: v for k, v in orig.items() if k not in ("candidates", "usageMetadata")}
        sdk = sdk_response(obj)
        assert sdk.candidates and sdk.candidates[0].content and sdk.candidates[0].content.parts
        assert sdk.candidates[0].content.parts[0].text == piece


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
@pytest.mark.parametrize(("adapter", "name"), ALL)
def test_property_split_integrity(adapter: type[Adapter], name: str, rnd: random.Random,
                                  data: st.DataObject) -> None:
    pytest.importorskip("google.genai")
    raw = load(name)
    output, records = resplit(adapter, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(adapter, raw, records, output, cuts)
    extra = sum(len(r.pieces) - 1 for r in records if r.pieces)
    assert len(elements(adapter, output)) == len(elements(adapter, raw)) + extra  # output is valid
    for r in records:
        if r.pieces is not None:
            if adapter is GeminiSSEAdapter:
                [orig] = elements(adapter, r.event.raw)
                objs = [json.loads(sse_events(b)[0].data or "") for b in r.out]
                assert all(sse_events(b)[0].newline == "\r\n" for b in r.out)
            else:
                orig = json.loads(r.event.raw.lstrip(b" \t\r\n,"))
                objs = [json.loads(b.lstrip(b" \t\r\n,")) for b in r.out]
            _check_pieces(orig, objs, r.pieces)


# -- what the google-genai SDK reads --------------------------------------------------------
def sdk_view(adapter: type[Adapter], data: bytes) -> dict[str, Any]:
    """Concatenated text and thoughts, signatures, function calls, final usage and finish reason per the SDK.

    SSE goes through the SDK's own line decoder (HttpResponse.segments over an httpx body).
    """
    import httpx
    from google.genai._api_client import HttpResponse
    if adapter is GeminiSSEAdapter:
        objs = list(HttpResponse({}, response_stream=httpx.Response(200, content=data)).segments())
    else:
        objs = json.loads(data)
    text, thoughts, sigs, calls, usage, finish = "", "", [], [], None, None
    for obj in objs:
        r = sdk_response(obj)
        text += r.text or ""
        content = r.candidates[0].content if r.candidates else None
        for part in (content.parts if content else None) or []:
            if part.thought:
                thoughts += part.text or ""
            if part.thought_signature:
                sigs.append(part.thought_signature)
        calls += [(c.name, c.args, c.id) for c in r.function_calls or []]
        usage = r.usage_metadata or usage
        finish = r.candidates[0].finish_reason if r.candidates else None
    return {"text": text, "thoughts": thoughts, "sigs": sigs, "calls": calls, "usage": usage, "finish": finish}


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize(("adapter", "name"), ALL)
def test_sdk_reads_same_response(adapter: type[Adapter], name: str, how: str) -> None:
    pytest.importorskip("google.genai")
    raw = load(name)
    output, _ = resplit(adapter, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    before, after = sdk_view(adapter, raw), sdk_view(adapter, output)
    assert after == before
    assert before["text"] or before["thoughts"] or before["calls"]


# -- targeted -----------------------------------------------------------------------------
FULL = chunk("Hello world", usageMetadata={"totalTokenCount": 9}, createTime="2026-01-01T00:00:00Z",
             promptFeedback={"safetyRatings": []})
FULL["candidates"][0].update(finishReason="STOP", safetyRatings=[{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}],
                             citationMetadata={"citations": []}, groundingMetadata={"webSearchQueries": ["q"]})
FULL["candidates"][0]["content"]["parts"][0].update(thoughtSignature="c2ln")


@pytest.mark.parametrize("adapter", [GeminiSSEAdapter, GeminiJSONArrayAdapter])
def test_split_field_placement(adapter: type[Adapter]) -> None:
    data = sse(FULL) if adapter is GeminiSSEAdapter else array(FULL)
    event = only(adapter, data)
    assert event.texts == ((TEXT, "Hello world"),) and event.splittable
    out = adapter().split(event, ["Hel", "lo", " world"])
    assert adapter().split(event, ["Hello world"]) == [event.raw]
    if adapter is GeminiSSEAdapter:
        objs = [json.loads(sse_events(b)[0].data or "") for b in out]
        assert out[1] == (b'data: {"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"index":0}],'
                          b'"modelVersion":"gemini-2.5-flash","responseId":"r1","createTime":"2026-01-01T00:00:00Z"}'
                          b"\r\n\r\n")
    else:
        assert out[1].startswith(b"\n,\r\n{\n  \"candidates\": [\n")  # no separator seen yet: Gemini's
        objs = json.loads(b"[" + b"".join(out) + b"]")
    _check_pieces(FULL, objs, ["Hel", "lo", " world"])
    assert objs[0]["promptFeedback"] == {"safetyRatings": []} and "promptFeedback" not in objs[2]


def test_split_thought_part_keeps_flag() -> None:
    obj = chunk("think", usageMetadata={"thoughtsTokenCount": 3})
    obj["candidates"][0]["content"]["parts"][0]["thought"] = True
    event = only(GeminiSSEAdapter, sse(obj))
    assert event.texts == ((REASONING, "think"),)
    out = GeminiSSEAdapter().split(event, ["th", "ink"])
    assert [only(GeminiSSEAdapter, b).texts for b in out] == [((REASONING, "th"),), ((REASONING, "ink"),)]


@pytest.mark.parametrize("adapter", [GeminiSSEAdapter, GeminiJSONArrayAdapter])
@pytest.mark.parametrize(("obj", "texts", "splittable"), [
    (chunk("a"), ((TEXT, "a"),), True),
    (chunk(""), (), False),
    (chunk(None), (), False),
    (chunk(5), (), False),  # type: ignore[arg-type]
    ({"candidates": [{"content": {"parts": [{"text": "a"}, {"text": "b", "thought": True}]}}]},
     ((TEXT, "a"), (REASONING, "b")), False),
    ({"candidates": [{"content": {"parts": [{"text": "a"}, {"functionCall": {"name": "f", "args": {}}}]}}]},
     ((TEXT, "a"), (TOOL_ARGS, "{}")), False),
    ({"candidates": [{"content": {"parts": [{"text": "a"}]}}, {"content": {"parts": [{"text": "b"}]}}]},
     ((TEXT, "a"), (TEXT, "b")), False),
    ({"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {"x": "long"}}}]}}]},
     ((TOOL_ARGS, '{"x":"long"}'),), False),  # a call's arguments count, kept whole
    ({"candidates": [{"content": {"parts": [{"text": "", "thoughtSignature": "abc"}]}, "finishReason": "STOP"}]},
     (), False),
    ({"promptFeedback": {"blockReason": "SAFETY"}}, (), False),
    ({"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}, (), False),
    ({"candidates": "x"}, (), False),
    ({"candidates": [{"content": {"parts": "x"}}, 3, {"content": None}]}, (), False),
])
def test_classification(adapter: type[Adapter], obj: dict[str, Any], texts: Any, splittable: bool) -> None:
    data = sse(obj) if adapter is GeminiSSEAdapter else array(obj)
    events = parse(adapter, [data])
    assert b"".join(e.raw for e in events) == data
    [event] = [e for e in events if b"{" in e.raw]
    assert event.texts == texts and event.splittable is splittable
    if texts and not splittable:
        with pytest.raises(ValueError):
            adapter().split(event, [event.text])


@pytest.mark.parametrize("raw", [
    b"data: not json\r\n\r\n",
    b"data: [1, 2]\r\n\r\n",
    b'data: {"candidates":[{"content":{"parts":[{"text":"\xff"}]}}]}\r\n\r\n',
    b": keepalive\r\n\r\n",
    sse(chunk("unterminated"))[:-2],
    sse(chunk("unterminated"))[:-4],
])
def test_sse_malformed_passes_through(raw: bytes) -> None:
    events = parse(GeminiSSEAdapter, [raw])
    assert b"".join(e.raw for e in events) == raw and all(not e.texts for e in events)


@pytest.mark.parametrize("raw", [
    b'{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}\n',
    b'<html>502</html>',
    b"",
    b"   \r\n",
    b'[{"candidates": [{"content": {"parts": [{"text": "cut off"',  # unterminated element
    b'[{"candidates": []}\n,\r\n',  # unterminated separator
    b'[{"candidates": [{"content": {"parts": [{"text": "x"}]}}]}',  # no closing bracket
    b'[{"candidates": [{"content": {"parts": [{"text": "x"}]}}]}]\r\ntrailing junk',
    b'[garbage, {"a": "\\u00zz"}, {"candidates": 1}}, nul]',
    b'[{"a": "\xff\xfe"}]',
    b'[' + b'[' * 5000 + b']' * 5000 + b']',
])
def test_json_malformed_passes_through(raw: bytes) -> None:
    for chunks in ([raw], [raw[i:i + 1] for i in range(len(raw))]):
        events = parse(GeminiJSONArrayAdapter, chunks)
        assert b"".join(e.raw for e in events) == raw
    text_events = [e for e in parse(GeminiJSONArrayAdapter, [raw]) if e.texts]
    assert all(b'"x"' in e.raw for e in text_events)  # only the complete, valid element counts


def test_json_unterminated_tail_only_at_end() -> None:
    adapter = GeminiJSONArrayAdapter()
    head = array(chunk("a"))[:-2]
    events = adapter.feed(head + b'\n,\r\n{"candidates": [{"content"')
    assert [e.raw for e in events] == [b"[", head[1:]] and events[1].texts == ((TEXT, "a"),)
    assert [e.raw for e in adapter.end()] == [b'\n,\r\n{"candidates": [{"content"']
    assert adapter.end() == []


def test_json_not_an_array_passes_as_it_comes() -> None:
    adapter = GeminiJSONArrayAdapter()
    assert [e.raw for e in adapter.feed(b'  {"error": ')] == [b'  {"error": ']
    assert [e.raw for e in adapter.feed(b"{}}")] == [b"{}}"]
    assert adapter.end() == []


def test_json_element_sent_at_its_closing_brace() -> None:
    adapter = GeminiJSONArrayAdapter()
    assert [e.raw for e in adapter.feed(b'[{"candidates": [{"content": {"parts": [{"text": "a}]\\"\\\\"')] == [b"["]
    events = adapter.feed(b"}]}}]}")
    assert len(events) == 1 and events[0].texts == ((TEXT, 'a}]"\\'),)
    assert adapter.feed(b"\n") == [] and adapter.feed(b",") == []  # separator waits for its element


def test_json_scalars_and_compact_separator() -> None:
    data = b'[1 ,"a,]\\"" ,null,[2,{"b":[]}] ,{"candidates":[{"content":{"parts":[{"text":"xyz"}]}}]}]'
    events = parse(GeminiJSONArrayAdapter, [data])
    assert [e.raw for e in events] == [b"[", b"1", b' ,"a,]\\""', b" ,null", b",[2,{\"b\":[]}]",
                                       b' ,{"candidates":[{"content":{"parts":[{"text":"xyz"}]}}]}', b"]"]
    adapter = GeminiJSONArrayAdapter()
    event = [e for e in adapter.feed(data) if e.texts][0]
    out = adapter.split(event, ["x", "y", "z"])
    assert out[0].startswith(b' ,{"candidates":[') and out[1].startswith(b' ,{"candidates":[')
    whole = json.loads(b"".join([e.raw for e in events[:-2]] + out + [b"]"]))
    assert len(whole) == 7 and [w["candidates"][0]["content"]["parts"][0]["text"] for w in whole[4:]] == list("xyz")


def test_json_split_uses_stream_separator() -> None:
    data = array(chunk("ab"), chunk("cd"), sep=b"\r\n,\r\n")
    adapter = GeminiJSONArrayAdapter()
    first, second = [e for e in adapter.feed(data) if e.texts]
    out = adapter.split(first, ["a", "b"])
    assert out[0].startswith(b"{\n") and out[1].startswith(b"\r\n,\r\n{\n")


@pytest.mark.parametrize("adapter", [GeminiSSEAdapter, GeminiJSONArrayAdapter])
def test_lone_surrogate_split_is_valid_utf8(adapter: type[Adapter]) -> None:
    body = b'{"candidates":[{"content":{"parts":[{"text":"a\\udc00b"}]}}]}'
    data = b"data: " + body + b"\r\n\r\n" if adapter is GeminiSSEAdapter else b"[" + body + b"]"
    event = only(adapter, data)
    out = adapter().split(event, ["a", "\udc00b"])
    for piece in out:
        piece.decode("utf-8")
    again = b"".join(out) if adapter is GeminiSSEAdapter else b"[" + b"".join(out) + b"]"
    assert channel_texts(parse(adapter, [again])) == {TEXT: "a\udc00b"}


@pytest.mark.parametrize("adapter", [GeminiSSEAdapter, GeminiJSONArrayAdapter])
def test_bad_pieces_raise(adapter: type[Adapter]) -> None:
    data = sse(chunk("abc")) if adapter is GeminiSSEAdapter else array(chunk("abc"))
    with pytest.raises(ValueError):
        adapter().split(only(adapter, data), ["ab"])
    with pytest.raises(ValueError):
        adapter().split(Event(raw=b"x"), ["x"])
