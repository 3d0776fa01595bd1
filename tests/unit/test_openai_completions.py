"""OpenAI legacy Completions adapter: channels, splitting, integrity, what the SDK reads."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols import ADAPTERS, ZaiWebAdapter, find_adapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.protocols.openai_completions import OpenAICompletionsAdapter
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
from tests.support.payload_streams import as_sse, payloads

A = OpenAICompletionsAdapter
TEXT = Channel.TEXT
SSE = "text/event-stream"
RECORDED = "vercel-ai-payloads/openai--openai-completion-text.payloads.ndjson"


def shape(path: str, method: str = "POST", host: str = "api.openai.com") -> RequestShape:
    return RequestShape(method=method, host=host, path=path, headers={}, body=b"{}")


def chunk(text: str | None, *, data_prefix: str = "data: ", newline: str = "\n", usage: Any = None,
          choice: dict[str, Any] | None = None, **top: Any) -> bytes:
    """One text_completion chunk (vLLM / TGI / OpenAI shape)."""
    ch = {"index": 0, "text": text, "logprobs": None, "finish_reason": None, **(choice or {})}
    obj = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
           "choices": [ch], "usage": usage, **top}
    return f"{data_prefix}{json.dumps(obj)}{newline}{newline}".encode()


def synthetic_streams() -> dict[str, bytes]:
    """Shapes the recorded file lacks (written here, not captured): TGI's `data:` without a
    space and no [DONE]; vLLM's stop_reason and include_usage chunk; legacy logprobs; CRLF."""
    lp = {"tokens": [" Hel", "lo"], "token_logprobs": [-0.1, -0.2], "top_logprobs": None,
          "text_offset": [5, 9]}
    return {
        "tgi": b"".join([chunk(" Deep", data_prefix="data:"), chunk(" learning is", data_prefix="data:"),
                         chunk(" fun", data_prefix="data:", choice={"finish_reason": "length"})]),
        "vllm": b"".join([chunk("Once upon", choice={"stop_reason": None}),
                          chunk(" a time", choice={"finish_reason": "stop", "stop_reason": None}),
                          b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
                          b'"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n',
                          b"data: [DONE]\n\n"]),
        "logprobs-crlf": chunk(" Hello", choice={"logprobs": lp}, newline="\r\n") + b"data: [DONE]\r\n\r\n",
    }


STREAMS = {RECORDED: as_sse(RECORDED), **synthetic_streams()}


def events_of(data: bytes) -> list[Event]:
    return parse(A, [data])


def objs(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in sse_events(data) if e.data and e.data != "[DONE]"]


# -- accepts / registry ------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/v1/completions", SSE, True),
    ("post", "/openai/deployments/instruct/completions?api-version=2024-10-21",
     "text/event-stream; charset=utf-8", True),
    ("POST", "/v1/engines/copilot-codex/completions", SSE, True),
    ("POST", "/v1/fim/completions", SSE, True),
    ("POST", "/beta/completions/", SSE, True),
    ("POST", "/v1/chat/completions", SSE, False),
    ("POST", "/api/v2/chat/completions", SSE, False),
    ("POST", "/api/v0/chat/completion", SSE, False),
    ("GET", "/v1/completions", SSE, False),
    ("POST", "/v1/completions", "application/json", False),
    ("POST", "/v1/completions/x", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert A.accepts(shape(path, method), ctype) is expected


def test_registry() -> None:
    assert A in ADAPTERS and A.name == "openai-completions"
    assert find_adapter(shape("/v1/completions"), SSE) is A
    assert find_adapter(shape("/v1/chat/completions"), SSE) is OpenAIChatAdapter
    assert find_adapter(shape("/api/v2/chat/completions", host="chat.z.ai"), SSE) is ZaiWebAdapter


# -- channels ----------------------------------------------------------------------------
def _reference(data: bytes) -> dict[Channel, str]:
    """A plain reading: every choice's `text`, in order."""
    text = "".join(c["text"] for o in objs(data) for c in o["choices"] if c.get("text"))
    return {TEXT: text} if text else {}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_channels_and_raw(name: str) -> None:
    data = STREAMS[name]
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == _reference(data)
    assert all(e.splittable == bool(e.texts) for e in events)


def test_recorded_text() -> None:
    text = "".join(c["text"] for p in payloads(RECORDED) for c in json.loads(p)["choices"])
    assert channel_texts(events_of(STREAMS[RECORDED])) == {TEXT: text}
    assert text.startswith('The holiday is called "Gratitude Day"')


# -- properties --------------------------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = STREAMS[name]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=60), label="cuts")
    events = parse(A, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]


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
        [orig] = objs(r.event.raw)
        pieces = [o for p in r.out for o in objs(p)]
        assert [p["choices"][0]["text"] for p in pieces] == r.pieces
        for i, obj in enumerate(pieces):
            last = i == len(pieces) - 1
            assert {k: v for k, v in obj.items() if k not in ("choices", "usage")} == {
                k: v for k, v in orig.items() if k not in ("choices", "usage")}
            assert obj["usage"] == (orig["usage"] if last else None)
            want = {**orig["choices"][0], "text": obj["choices"][0]["text"]}
            if not last:
                want = {k: (None if k in ("finish_reason", "logprobs", "stop_reason") else v)
                        for k, v in want.items()}
            assert obj["choices"][0] == want


def completion_view(data: bytes) -> dict[str, Any]:
    """What the openai SDK's stream of `Completion` chunks gives a client, accumulated: text
    and finish reason per choice index, logprob tokens, usage (built as the SDK builds
    streamed chunks: `construct_type`, which does not reject the null finish_reason)."""
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai.types import Completion

    view: dict[str, Any] = {"text": {}, "finish": {}, "usage": None, "logprobs": {}}
    for sse in SSEDecoder().iter_bytes(iter([data])):
        if sse.data.startswith("[DONE]"):
            break
        c: Completion = construct_type(type_=Completion, value=json.loads(sse.data))
        view["usage"] = c.usage or view["usage"]
        for ch in c.choices:
            view["text"][ch.index] = view["text"].get(ch.index, "") + ch.text
            if ch.finish_reason:
                view["finish"][ch.index] = ch.finish_reason
            if ch.logprobs:
                view["logprobs"].setdefault(ch.index, []).extend(ch.logprobs.tokens or [])
    return view


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_sdk_reads_the_same_completion(name: str, how: str) -> None:
    raw = STREAMS[name]
    output, records = resplit(A, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    assert any(r.pieces and len(r.pieces) > 1 for r in records)
    assert completion_view(output) == completion_view(raw)


# -- targeted ----------------------------------------------------------------------------
def test_split_puts_logprobs_finish_and_usage_last() -> None:
    lp = {"tokens": ["a", "b"], "token_logprobs": [-1, -2], "top_logprobs": None, "text_offset": [0, 1]}
    raw = chunk("ab", choice={"logprobs": lp, "finish_reason": "stop", "token_ids": [1, 2]},
                usage={"completion_tokens": 2})
    [event] = events_of(raw)
    first, last = (objs(p)[0] for p in A().split(event, ["a", "b"]))
    assert first["choices"] == [{"index": 0, "text": "a", "logprobs": None, "finish_reason": None}]
    assert first["usage"] is None
    assert last["choices"] == [{"index": 0, "text": "b", "logprobs": lp, "finish_reason": "stop",
                                "token_ids": [1, 2]}]
    assert last["usage"] == {"completion_tokens": 2}


def test_tgi_framing_is_kept_around_pieces() -> None:
    [event] = events_of(chunk("hello", data_prefix="data:"))
    out = A().split(event, ["hel", "lo"])
    assert all(p.endswith(b"\n\n") for p in out)
    assert [e.texts for e in events_of(b"".join(out))] == [((TEXT, "hel"),), ((TEXT, "lo"),)]


def test_fim_chat_shaped_chunks_are_read_as_chat() -> None:
    raw = (b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,'
           b'"delta":{"content":"def f():"},"finish_reason":null}]}\n\n')
    [event] = events_of(raw)
    assert event.texts == ((TEXT, "def f():"),) and event.splittable
    pieces = [o["choices"][0]["delta"]["content"] for p in A().split(event, ["def", " f():"])
              for o in objs(p)]
    assert pieces == ["def", " f():"]


@pytest.mark.parametrize(("raw", "texts"), [
    # two choices (n=2) in one chunk: both counted, not split
    (b'data: {"choices":[{"index":0,"text":"a"},{"index":1,"text":"b"}]}\n\n', ((TEXT, "a"), (TEXT, "b"))),
    # in-band error with text: counted, sent whole
    (b'data: {"choices":[{"index":0,"text":"a"}],"error":{"message":"x"}}\n\n', ((TEXT, "a"),)),
    # both shapes in one chunk
    (b'data: {"choices":[{"index":0,"text":"a","delta":{"content":"b"}}]}\n\n', ((TEXT, "a"), (TEXT, "b"))),
])
def test_counted_but_not_split(raw: bytes, texts: tuple[tuple[Channel, str], ...]) -> None:
    [event] = events_of(raw)
    assert event.texts == texts and not event.splittable


@pytest.mark.parametrize("raw", [
    chunk(""),
    chunk(None),
    chunk(5),  # type: ignore[arg-type]
    b'data: {"choices":[],"usage":{"total_tokens":3}}\n\n',
    b'data: {"choices":"text"}\n\n',
    b'data: {"choices":[null,"x"]}\n\n',
    b"data: not json\n\n",
    b"data: [1]\n\n",
    b'data: {"choices":[{"index":0,"text":"\xff"}]}\n\n',
    b"data: [DONE]\n\n",
    b": keep-alive\n\n",
    b'data: {"error":{"message":"overloaded"}}\n\n',
    chunk("no blank line")[:-1],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw and all(not e.texts for e in events)


def test_bad_split_raises() -> None:
    [event] = events_of(chunk("abc"))
    with pytest.raises(ValueError):
        A().split(event, ["ab"])
    assert A().split(event, ["abc"]) == [event.raw]
