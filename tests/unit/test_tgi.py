"""TGI generate_stream adapter: token channel, atomic events, what huggingface_hub reads."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.timing.pacer import StreamPacer
from retimer.wire.protocols.base import Channel, RequestShape
from retimer.wire.protocols.tgi import TGIGenerateStreamAdapter as TGI
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
from tests.support.fixture_streams import load

TEXT = Channel.TEXT
SSE = "text/event-stream"
FIXTURE = "misc/hf-tgi-generate-stream-tokens.sse"


def shape(path: str, body: bytes = b"{}", method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="tgi.local:8080", path=path, headers={}, body=body)


def token_event(text: str, *, index: int = 1, special: bool = False, final: str | None = None) -> bytes:
    obj = {"index": index, "token": {"id": 7, "text": text, "logprob": -0.5, "special": special},
           "generated_text": final, "details": None if final is None else {"finish_reason": "eos_token"}}
    return f"data:{json.dumps(obj)}\n\n".encode()


def objs(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in sse_events(data) if e.complete and e.data]


# -- accepts -------------------------------------------------------------------------------
_STREAM_BODY = b'{"inputs": "Hello", "parameters": {"max_new_tokens": 20}, "stream": true}'


@pytest.mark.parametrize(("method", "path", "body", "ctype", "expected"), [
    ("POST", "/generate_stream", b"{}", SSE, True),
    ("post", "/tgi/generate_stream?x=1", b"{}", "text/event-stream; charset=utf-8", True),
    ("POST", "/", _STREAM_BODY, SSE, True),  # Inference Endpoints root
    ("POST", "/hf-inference/models/gpt2", _STREAM_BODY, SSE, True),
    ("POST", "/generate_stream", b"{}", "application/json", False),
    ("GET", "/generate_stream", b"", SSE, False),
    ("POST", "/generate", b'{"inputs": "Hello"}', SSE, False),
    ("POST", "/", b'{"inputs": "Hello", "stream": false}', SSE, False),
    ("POST", "/", b'{"inputs": ["a", "b"], "stream": true}', SSE, False),
    ("POST", "/v1/chat/completions", b'{"messages": [], "stream": true}', SSE, False),
    ("POST", "/", b"not json \xff", SSE, False),
])
def test_accepts(method: str, path: str, body: bytes, ctype: str, expected: bool) -> None:
    assert TGI.accepts(shape(path, body, method), ctype) is expected and TGI.name == "tgi-generate-stream"


# -- channels ------------------------------------------------------------------------------
def test_fixture_text_is_the_generated_tokens() -> None:
    data = load(FIXTURE)
    events = parse(TGI, [data])
    assert b"".join(e.raw for e in events) == data
    tokens = [o["token"]["text"] for o in objs(data) if not o["token"]["special"]]
    assert len(tokens) == 150 and channel_texts(events) == {TEXT: "".join(tokens)}
    # the final generated_text (prompt included) is a repeat, not counted; in this capture the
    # per-token texts even differ from it ("comblines" vs "combines": a detokenizer quirk)
    final = objs(data)[-1]["generated_text"]
    assert final.startswith("Write about the difference") and "It combines various" in final
    assert "It comblines various" in channel_texts(events)[TEXT]
    assert [e.texts for e in events] == [((TEXT, t),) for t in tokens]
    assert all(e.atomic and not e.splittable for e in events)


@pytest.mark.parametrize(("raw", "texts"), [
    (token_event(" hi"), ((TEXT, " hi"),)),
    (token_event("</s>", special=True, final="hi"), ()),  # control token: not in generated_text
    (token_event("", final=""), ()),
    (b'data:{"error":"Request failed during generation: Server error","error_type":"generation"}\n\n', ()),
    (b'data:{"index":1,"token":{"id":1,"text":5,"special":false}}\n\n', ()),
    (b'data:{"index":1,"token":"x"}\n\n', ()),
    (b'data:{"index":1,"token":{"id":1,"text":"\xff","special":false}}\n\n', ()),
    (b"data:not json\n\n", ()),
    (b"data: [DONE]\n\n", ()),
    (b": ping\n\n", ()),
    (token_event("no end")[:-2], ()),
])
def test_event_kinds_and_malformed_pass_through(raw: bytes, texts: tuple[Any, ...]) -> None:
    events = parse(TGI, [raw])
    assert b"".join(e.raw for e in events) == raw
    assert tuple(t for e in events for t in e.texts) == texts
    assert not any(e.splittable for e in events)


# -- properties ----------------------------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_property_rechunking(data: st.DataObject) -> None:
    raw = load(FIXTURE)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    assert [event_key(e) for e in parse(TGI, rechunk(raw, cuts))] == [event_key(e) for e in parse(TGI, [raw])]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
def test_property_nothing_is_split(rnd: random.Random, data: st.DataObject) -> None:
    raw = load(FIXTURE)
    output, records = resplit(TGI, raw, lambda e: random_pieces(e.text, rnd))
    assert output == raw and all(r.pieces is None for r in records)
    check_integrity(TGI, raw, records, output, data.draw(st.lists(st.integers(0, len(raw)), max_size=40)))


def test_split_is_refused() -> None:
    [event] = parse(TGI, [token_event(" interconnected")])
    with pytest.raises(ValueError):
        TGI().split(event, [" inter", "connected"])


class _Timing:
    ttft = 0.0

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk

    def gap(self) -> float:
        return 0.001

    def chunk_size(self) -> int:
        return self.chunk


@pytest.mark.parametrize("chunk", [1, 3])
def test_pacer_sends_every_event_whole(chunk: int) -> None:
    raw = load(FIXTURE)
    pacer = StreamPacer(TGI(), _Timing(chunk), start=0.0)  # type: ignore[arg-type]
    for piece in rechunk(raw, range(0, len(raw), 97)):
        pacer.feed(piece, now=0.0)
    pacer.finish(now=0.0)
    emissions = pacer.pop_all()
    assert pacer.failure is None and b"".join(e.data for e in emissions) == raw
    assert [e.data for e in emissions] == [e.raw for e in parse(TGI, [raw])]


# -- what huggingface_hub's InferenceClient.text_generation(stream=True) reads -----------
def _hf_stream(data: bytes, details: bool) -> list[Any]:
    from huggingface_hub.inference._common import _stream_text_generation_response
    return list(_stream_text_generation_response(data.decode("utf-8").splitlines(), details))


def test_huggingface_hub_reads_the_paced_stream() -> None:
    raw = load(FIXTURE)
    pacer = StreamPacer(TGI(), _Timing(1), start=0.0)  # type: ignore[arg-type]
    pacer.feed(raw, now=0.0)
    pacer.finish(now=0.0)
    out = b"".join(e.data for e in pacer.pop_all())
    texts = _hf_stream(out, details=False)
    assert "".join(texts) == channel_texts(parse(TGI, [raw]))[TEXT]
    detailed = _hf_stream(out, details=True)
    assert [d.index for d in detailed] == list(range(1, 151))
    assert [d.token.id for d in detailed] == [o["token"]["id"] for o in objs(raw)]
    assert detailed[-1].details is not None and detailed[-1].details.finish_reason == "length"
