"""Bedrock event stream: framing, channels, splitting with valid CRCs, and what botocore reads."""

from __future__ import annotations

import base64
import functools
import json
import random
import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.timing.pacer import StreamPacer
from retimer.wire.eventstream import (
    EventStreamFramer,
    Frame,
    FramingError,
    Header,
    HeaderType,
    encode_frame,
    encode_headers,
    parse_headers,
)
from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.bedrock import BedrockEventStreamAdapter
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
from tests.support.fixture_streams import ANTHROPIC_FIXTURES, STREAMS_DIR, load
from tests.support.sdk_views import anthropic_view

A = BedrockEventStreamAdapter
TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
ES = "application/vnd.amazon.eventstream"
FIXTURES = sorted(p.relative_to(STREAMS_DIR).as_posix() for p in (STREAMS_DIR / "bedrock").glob("*.bin"))
CONVERSE = [n for n in FIXTURES if "converse" in n]
TITAN = "bedrock/invoke-with-response-stream-titan-chunk.bin"
PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def frame(event_type: str, payload: Any, *, message_type: str = "event", extra: tuple[Header, ...] = ()) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
    headers = (Header(":event-type", HeaderType.STRING, event_type),
               Header(":content-type", HeaderType.STRING, "application/json"),
               Header(":message-type", HeaderType.STRING, message_type), *extra)
    return encode_frame(headers, body)


def chunk(inner: dict[str, Any], pad: int = 7) -> bytes:
    return frame("chunk", {"bytes": base64.b64encode(json.dumps(inner).encode()).decode(), "p": PAD[:pad]})


def events_of(data: bytes) -> list[Event]:
    return parse(A, [data])


def frames_of(data: bytes) -> list[Frame]:
    framer = EventStreamFramer()
    frames = framer.feed(data)
    assert framer.failure is None and framer.end() == b""
    return frames


def crcs_valid(message: bytes) -> bool:
    """Checked straight from the spec, independently of the framer."""
    total, headers_len, prelude_crc = struct.unpack_from(">III", message)
    (message_crc,) = struct.unpack_from(">I", message, len(message) - 4)
    return (total == len(message) and headers_len <= total - 16
            and zlib.crc32(message[:8]) == prelude_crc and zlib.crc32(message[:-4]) == message_crc)


# -- what botocore (the AWS SDK for Python) reads -----------------------------------------
@functools.cache
def _service_model() -> Any:
    from botocore.loaders import Loader
    from botocore.model import ServiceModel
    return ServiceModel(Loader().load_service_model("bedrock-runtime", "service-2"))


def botocore_events(data: bytes, operation: str, cuts: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """The events botocore's rest-json response parser yields for this response body."""
    from botocore.parsers import RestJSONParser

    class Body:
        def stream(self) -> Any:
            return iter(rechunk(data, cuts))

    shape = _service_model().operation_model(operation).output_shape
    response = {"status_code": 200, "headers": {"content-type": ES}, "body": Body(),
                "context": {"operation_name": operation}}
    parsed = RestJSONParser().parse(response, shape)
    return list(parsed["stream" if operation == "ConverseStream" else "body"])


def converse_view(data: bytes, cuts: tuple[int, ...] = ()) -> tuple[dict[Channel, str], list[Any]]:
    """Per-channel text and the message a client assembles (blocks by index, other events)."""
    texts: dict[Channel, str] = {}
    blocks: dict[int, dict[str, Any]] = {}
    others: list[Any] = []
    for ev in botocore_events(data, "ConverseStream", cuts):
        if "contentBlockDelta" not in ev:
            others.append(ev)
            continue
        d = ev["contentBlockDelta"]
        block = blocks.setdefault(d["contentBlockIndex"], {})
        for member, value in d["delta"].items():
            for key, part in (value.items() if isinstance(value, dict) else [(None, value)]):
                slot = f"{member}.{key}" if key else member
                block[slot] = block.get(slot, type(part)()) + part
                channel = {"text": TEXT, "reasoningContent.text": REASONING, "toolUse.input": TOOL_ARGS}.get(slot)
                if channel and part:
                    texts[channel] = texts.get(channel, "") + part
    return texts, [blocks, others]


def invoke_inner(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(ev["chunk"]["bytes"]) for ev in botocore_events(data, "InvokeModelWithResponseStream")]


def bedrock_anthropic_view(data: bytes) -> dict[str, Any]:
    """The message the anthropic SDK's Bedrock client accumulates (its own event stream decoder)."""
    from anthropic.lib.bedrock._stream_decoder import AWSEventStreamDecoder
    sse = b"".join(f"event: {e.event}\ndata: {e.data}\n\n".encode()
                   for e in AWSEventStreamDecoder().iter_bytes(iter([data])))
    return anthropic_view(sse)


# -- accepts ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/model/us.amazon.nova-micro-v1:0/converse-stream", ES, True),
    ("POST", "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream", ES, True),
    ("post", "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse-stream/", ES, True),
    ("POST", "/bedrock/model/amazon.titan-text-express-v1/invoke-with-response-stream", "Application/Vnd.Amazon.EventStream; x=1", True),
    ("POST", "/model/m/converse-stream", "text/event-stream", False),
    ("POST", "/model/m/converse", ES, False),
    ("POST", "/model/m/invoke", ES, False),
    ("GET", "/model/m/converse-stream", ES, False),
    ("POST", "/model//converse-stream", ES, False),
    ("POST", "/agents/a/agentAliases/b/sessions/c/text", ES, False),
    ("POST", "/v1/messages?next=/model/m/converse-stream", ES, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    shape = RequestShape(method, "bedrock-runtime.us-east-1.amazonaws.com", path, {}, b"{}")
    assert A.accepts(shape, ctype) is expected and A.name == "bedrock-eventstream"


# -- framing ---------------------------------------------------------------------------------
ALL_TYPES = (
    Header("t", HeaderType.BOOL_TRUE, True), Header("f", HeaderType.BOOL_FALSE, False),
    Header("b", HeaderType.BYTE, -128), Header("s", HeaderType.SHORT, 32767),
    Header("i", HeaderType.INTEGER, -2**31), Header("l", HeaderType.LONG, 2**63 - 1),
    Header("ba", HeaderType.BYTE_ARRAY, b"\x00\xff"), Header(":event-type", HeaderType.STRING, "héllo"),
    Header("ts", HeaderType.TIMESTAMP, 1_700_000_000_123), Header("u", HeaderType.UUID, bytes(range(16))),
)


def test_headers_of_every_type_round_trip_and_botocore_agrees() -> None:
    from botocore.eventstream import EventStreamBuffer
    msg = encode_frame(ALL_TYPES, b"payload")
    assert crcs_valid(msg) and parse_headers(encode_headers(ALL_TYPES)) == ALL_TYPES
    [f] = frames_of(msg)
    assert f.raw == msg and f.headers == ALL_TYPES and f.payload == b"payload" and f.with_payload(b"payload") == msg
    buf = EventStreamBuffer()
    buf.add_data(msg)
    [m] = list(buf)
    assert m.headers == {h.name: h.value for h in ALL_TYPES} and m.payload == b"payload"


@pytest.mark.parametrize("header", [
    Header("x", HeaderType.BYTE, 128), Header("x", HeaderType.BOOL_TRUE, False),
    Header("x", HeaderType.UUID, b"short"), Header("x", HeaderType.STRING, b"bytes"),
    Header("x" * 256, HeaderType.STRING, "v"), Header("x", HeaderType.BYTE_ARRAY, b"a" * 70000),
    Header("x", HeaderType.INTEGER, True),
])
def test_unencodable_headers_raise(header: Header) -> None:
    with pytest.raises(FramingError):
        encode_headers([header])


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_frames_headers_and_crcs(name: str) -> None:
    data = load(name)
    frames = frames_of(data)
    assert b"".join(f.raw for f in frames) == data and all(crcs_valid(f.raw) for f in frames)
    for f in frames:
        assert encode_headers(f.headers) == f.header_bytes and f.with_payload(f.payload) == f.raw
        assert [h.name for h in f.headers] == [":event-type", ":content-type", ":message-type"]


# -- channels on recorded streams ------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_channels_match_botocore(name: str) -> None:
    data = load(name)
    adapter = A()
    events = adapter.feed(data) + adapter.end()
    assert b"".join(e.raw for e in events) == data and adapter.failure is None
    if name in CONVERSE:
        assert channel_texts(events) == converse_view(data)[0]
    else:
        assert channel_texts(events) == {TEXT: "".join(i["outputText"] for i in invoke_inner(data))}
    assert all(e.splittable == bool(e.texts) for e in events)


def test_fixture_known_texts_and_non_token_frames() -> None:
    assert channel_texts(events_of(load("bedrock/sk-converse-stream-short.bin"))) == {TEXT: "2 + 2 = 4."}
    redacted = events_of(load("bedrock/converse-stream-claude37-redacted-reasoning.bin"))
    assert set(channel_texts(redacted)) == {TEXT}
    assert sum(b"redactedContent" in e.raw and not e.texts for e in redacted) == 2
    sig = events_of(load("bedrock/converse-stream-claude-sonnet4-reasoning.bin"))
    assert any(b'"signature"' in e.raw and not e.texts for e in sig)
    empty = events_of(load("bedrock/converse-stream-gpt-oss-empty-text-delta.bin"))
    assert not empty[1].texts and b'"text":""' in empty[1].raw
    assert channel_texts(events_of(load(TITAN)))[TEXT].startswith("\nThe sky is typically blue")


# -- properties ------------------------------------------------------------------------------
def anthropic_invoke_stream(name: str) -> bytes:
    """An Anthropic-on-Bedrock invoke stream built from a recorded Messages SSE stream."""
    out = []
    rnd = random.Random(name)
    for sse in sse_events(load(name)):
        if not sse.complete or not sse.data:
            continue
        obj = json.loads(sse.data)
        if obj.get("type") == "error":
            out.append(frame("modelStreamErrorException", {"message": obj["error"]["message"]},
                             message_type="exception",
                             extra=(Header(":exception-type", HeaderType.STRING, "modelStreamErrorException"),)))
            continue
        if obj.get("type") == "message_stop":
            obj["amazon-bedrock-invocationMetrics"] = {"inputTokenCount": 9, "outputTokenCount": 12,
                                                       "invocationLatency": 900, "firstByteLatency": 300}
        out.append(chunk(obj, pad=rnd.randint(1, 60)))
    return b"".join(out)


SYNTHETIC = {f"synthetic:{n}": functools.partial(anthropic_invoke_stream, n) for n in ANTHROPIC_FIXTURES}
STREAMS = {**{n: functools.partial(load, n) for n in FIXTURES}, **SYNTHETIC}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", list(STREAMS))
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = STREAMS[name]()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(A, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
@pytest.mark.parametrize("name", list(STREAMS))
def test_property_split_integrity(name: str, rnd: random.Random, data: st.DataObject) -> None:
    raw = STREAMS[name]()
    output, records = resplit(A, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(A, raw, records, output, cuts)
    for r in records:
        [orig] = frames_of(r.event.raw)
        pieces = [f for out in r.out for f in frames_of(out)]
        assert len(pieces) == len(r.out) and all(crcs_valid(p.raw) for p in pieces)
        assert all(p.header_bytes == orig.header_bytes for p in pieces)
        if r.pieces is not None and len(r.pieces) > 1:
            objs = [json.loads(p.payload) for p in pieces]
            original = json.loads(orig.payload)
            assert ["p" in o for o in objs] == [False] * (len(objs) - 1) + ["p" in original]
            assert objs[-1].get("p") == original.get("p")
            if "delta" in original:
                assert all(o.keys() <= original.keys() and o["contentBlockIndex"] == original["contentBlockIndex"]
                           for o in objs)


# -- real clients ----------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", CONVERSE)
def test_botocore_reads_same_converse_message(name: str, how: str) -> None:
    raw = load(name)
    output, records = resplit(A, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    assert any(len(r.pieces or ()) > 1 for r in records)
    cuts = tuple(range(0, len(output), 97))  # botocore's buffer across odd chunk boundaries
    assert converse_view(output, cuts) == converse_view(raw)
    assert converse_view(raw)[0] == channel_texts(events_of(raw))


def test_botocore_reads_titan_split_with_final_fields_on_last_piece() -> None:
    raw = load(TITAN)
    [original] = invoke_inner(raw)
    output, _ = resplit(A, raw, lambda e: [e.text[:1], e.text[1:20], e.text[20:]])
    inner = invoke_inner(output)
    assert len(inner) == 3 and "".join(i["outputText"] for i in inner) == original["outputText"]
    assert [i["completionReason"] for i in inner] == [None, None, "FINISH"]
    assert [i["totalOutputTextTokenCount"] for i in inner] == [None, None, 37]
    assert [i["inputTextTokenCount"] for i in inner] == [8, None, None]
    assert ["amazon-bedrock-invocationMetrics" in i for i in inner] == [False, False, True]
    assert inner[-1] == {**original, "outputText": inner[-1]["outputText"], "inputTextTokenCount": None}
    assert all(i["index"] == 0 for i in inner)
    assert [list(i) for i in inner[:2]] == [[k for k in original if k != "amazon-bedrock-invocationMetrics"]] * 2


def test_titan_mid_stream_chunk_keeps_its_nulls() -> None:
    mid = {"outputText": "hello world", "index": 0, "totalOutputTextTokenCount": None,
           "completionReason": None, "inputTextTokenCount": None}
    out, _ = resplit(A, chunk(mid), lambda e: ["hello", " world"])
    assert invoke_inner(out) == [{**mid, "outputText": "hello"}, {**mid, "outputText": " world"}]


_SDK_READABLE = [n for n in SYNTHETIC if "excerpt" not in n]


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", _SDK_READABLE)
def test_anthropic_bedrock_sdk_accumulates_same_message(name: str, how: str) -> None:
    raw = STREAMS[name]()
    source = load(name.removeprefix("synthetic:"))
    assert channel_texts(events_of(raw)) == channel_texts(parse(AnthropicMessagesAdapter, [source]))
    output, _ = resplit(A, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    assert bedrock_anthropic_view(output) == bedrock_anthropic_view(raw) == anthropic_view(source)


# -- targeted --------------------------------------------------------------------------------
@pytest.mark.parametrize(("delta", "channel", "path"), [
    ({"text": "Hello there"}, TEXT, ("text",)),
    ({"reasoningContent": {"text": "Hello there"}}, REASONING, ("reasoningContent", "text")),
    ({"toolUse": {"input": "Hello there"}}, TOOL_ARGS, ("toolUse", "input")),
])
def test_converse_split_pieces(delta: dict[str, Any], channel: Channel, path: tuple[str, ...]) -> None:
    raw = frame("contentBlockDelta", {"contentBlockIndex": 2, "delta": delta, "p": "abcdef"})
    [event] = events_of(raw)
    assert event.texts == ((channel, "Hello there"),) and event.splittable
    out = A().split(event, ["Hel", "lo", " there"])
    objs = [json.loads(frames_of(o)[0].payload) for o in out]
    def nested(s: str) -> dict:
        return {path[0]: s} if len(path) == 1 else {path[0]: {path[1]: s}}

    assert objs == [{"contentBlockIndex": 2, "delta": nested("Hel")},
                    {"contentBlockIndex": 2, "delta": nested("lo")},
                    {"contentBlockIndex": 2, "delta": nested(" there"), "p": "abcdef"}]
    assert A().split(event, ["Hello there"]) == [raw]
    with pytest.raises(ValueError):
        A().split(event, ["Hello"])


@pytest.mark.parametrize("raw", [
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "ab"}, "usage": {"x": 1}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "ab", "signature": "s"}}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "ab", "citation": {}}}),
    frame("chunk", {"bytes": base64.b64encode(b'{"outputText":"ab"}').decode(), "extra": 1}),
    chunk({"generation": "ab", "prompt_token_count": None, "stop_reason": None}),  # Meta Llama
    chunk({"outputs": [{"text": "ab", "stop_reason": None}]}),  # Mistral: the generic estimate
])
def test_counted_but_atomic(raw: bytes) -> None:
    [event] = events_of(raw)
    assert event.text == "ab" and not event.splittable and event.raw == raw


@pytest.mark.parametrize("raw", [
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": ""}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": 5}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "abc"}}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"redactedContent": "QUJD"}}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolResult": [{"text": "x"}]}}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": "text"}),
    frame("contentBlockDelta", b"not json"),
    frame("contentBlockDelta", b'["text"]'),
    frame("contentBlockDelta", b'{"delta":{"text":"\xff"}}'),
    frame("contentBlockStart", {"contentBlockIndex": 0, "start": {"toolUse": {"name": "f", "toolUseId": "t"}}}),
    frame("throttlingException", {"message": "slow down"}, message_type="exception"),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x"}}, message_type="error"),
    encode_frame([Header(":event-type", HeaderType.STRING, "contentBlockDelta"),
                  Header(":content-type", HeaderType.STRING, "text/plain"),
                  Header(":message-type", HeaderType.STRING, "event")], b'{"delta":{"text":"x"}}'),
    frame("chunk", {"bytes": "not base64!"}),
    frame("chunk", {"bytes": base64.b64encode(b"plain text").decode()}),
    chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}}),
    chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": {"outputTokenCount": 3}}),
    chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}}),
    chunk({"outputText": "", "index": 0, "completionReason": "FINISH"}),
    chunk({"type": ["content_block_delta"]}),
])
def test_non_token_frames_pass_through(raw: bytes) -> None:
    adapter = A()
    [event] = adapter.feed(raw) + adapter.end()
    assert event.raw == raw and not event.texts and adapter.failure is None


def _corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def _bad_streams() -> dict[str, tuple[bytes, int]]:
    """Broken streams and where their good frames end."""
    nova = load("bedrock/converse-stream-nova-micro-text.bin")
    ends = [0]
    for f in frames_of(nova):
        ends.append(ends[-1] + len(f.raw))
    k = 5
    bad_type = encode_frame(b"\x01x\x0a", b"{}")  # header type 10 does not exist
    dup = encode_frame(encode_headers([Header("a", HeaderType.STRING, "1")]) * 2, b"{}")
    short = struct.pack(">II", 15, 0)
    return {
        "prelude-crc": (_corrupt(nova, ends[k] + 9), ends[k]),
        "message-crc": (_corrupt(nova, ends[k + 1] - 2), ends[k]),
        "payload-byte": (_corrupt(nova, ends[k] + 40), ends[k]),
        "total-length": (_corrupt(nova, ends[k] + 3), ends[k]),
        "truncated": (nova[:-5], ends[-2]),
        "truncated-prelude": (nova[: ends[k] + 7], ends[k]),
        "garbage": (b"HTTP/1.1 500 oops\r\n\r\nnot an event stream at all", 0),
        "bad-header-type": (nova[: ends[k]] + bad_type + nova[ends[k]:], ends[k]),
        "duplicate-header": (nova[: ends[k]] + dup + nova[ends[k]:], ends[k]),
        "too-short": (short + struct.pack(">I", zlib.crc32(short)) + b"\0" * 8, 0),
    }


BAD = _bad_streams()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("case", list(BAD))
def test_malformed_falls_back_byte_identical(case: str, data: st.DataObject) -> None:
    raw, good = BAD[case]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=30), label="cuts")
    adapter = A()
    events = [e for c in rechunk(raw, cuts) for e in adapter.feed(c)] + adapter.end()
    assert b"".join(e.raw for e in events) == raw and adapter.failure
    head = events_of(raw[:good])
    assert [event_key(e) for e in events[: len(head)]] == [event_key(e) for e in head]
    assert all(not e.texts for e in events[len(head):])


def test_pacer_output_is_read_by_botocore_and_broken_stream_is_untouched() -> None:
    class Timing:
        ttft = 0.0

        def gap(self) -> float:
            return 0.001

        def chunk_size(self) -> int:
            return 1

    def paced(raw: bytes) -> tuple[bytes, StreamPacer]:
        pacer = StreamPacer(A(), Timing(), start=0.0)  # type: ignore[arg-type]
        for piece in rechunk(raw, range(0, len(raw), 300)):
            pacer.feed(piece, now=0.0)
        pacer.finish(now=0.0)
        return b"".join(e.data for e in pacer.pop_all()), pacer

    raw = load("bedrock/converse-stream-claude-sonnet4-reasoning.bin")
    out, pacer = paced(raw)
    assert pacer.failure is None and len(out) > len(raw) and converse_view(out) == converse_view(raw)
    broken, good = BAD["message-crc"]
    out, _ = paced(broken)
    head, tail = out[: len(out) - (len(broken) - good)], out[len(out) - (len(broken) - good):]
    assert tail == broken[good:] and len(head) > good  # frames before the bad one were split
    assert converse_view(head) == converse_view(broken[:good])
