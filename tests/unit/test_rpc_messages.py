"""Enveloped message streams (Connect, gRPC, gRPC-Web) read without a schema: the envelope
framer, protobuf text found and written back (checked with the real protobuf runtime), and the
adapters' events, splits, compressed messages and control messages."""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.wire.envelope import COMPRESSED, END_STREAM, TRAILERS, EnvelopeFramer, encode_envelope
from retimer.wire.protobuf_text import find_texts, replace_text
from retimer.wire.protocols.base import RequestShape
from retimer.wire.protocols.connect import ConnectStreamAdapter
from retimer.wire.protocols.grpc import GrpcStreamAdapter


def _message_classes() -> tuple[Any, Any]:
    """ChatChunk {text=1, model=2, index=3, delta=4 (Delta), blob=5} and Delta {content=1,
    thinking=2}, built from descriptors (no generated code)."""
    f = descriptor_pb2.FileDescriptorProto(name="retimer_test_chat.proto", package="rt", syntax="proto3")
    delta = f.message_type.add(name="Delta")
    for number, name in ((1, "content"), (2, "thinking")):
        delta.field.add(name=name, number=number, type=9, label=1)
    chunk = f.message_type.add(name="ChatChunk")
    chunk.field.add(name="text", number=1, type=9, label=1)
    chunk.field.add(name="model", number=2, type=9, label=1)
    chunk.field.add(name="index", number=3, type=5, label=1)
    chunk.field.add(name="delta", number=4, type=11, label=1, type_name=".rt.Delta")
    chunk.field.add(name="blob", number=5, type=12, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("rt.ChatChunk")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("rt.Delta")))


ChatChunk, Delta = _message_classes()
END = encode_envelope(b'{"metadata":{"x-request-id":["r1"]}}', END_STREAM)


def chunk(**kw: Any) -> bytes:
    return ChatChunk(**kw).SerializeToString()


def shape(content_type: str) -> RequestShape:
    return RequestShape("POST", "api2.cursor.sh", "/aiserver.v1.ChatService/StreamChat",
                        {"content-type": content_type}, b"")


# ------------------------------------------------------------------ the envelope


def test_envelopes_at_every_cut_and_a_broken_length() -> None:
    stream = b"".join(encode_envelope(chunk(text=w)) for w in ("one", "two", "three")) + END
    for cut in range(len(stream) + 1):
        framer = EnvelopeFramer()
        got = framer.feed(stream[:cut]) + framer.feed(stream[cut:])
        assert b"".join(e.raw for e in got) == stream and framer.rest() == b""
        assert [e.flags for e in got] == [0, 0, 0, END_STREAM]
    framer = EnvelopeFramer()
    bad = encode_envelope(chunk(text="ok")) + b"\x00\xff\xff\xff\xff" + b"junk"
    assert [e.message for e in framer.feed(bad)] == [chunk(text="ok")]
    assert framer.failure is not None and "not this framing" in framer.failure
    assert framer.passthrough() == b"\x00\xff\xff\xff\xffjunk"


# ------------------------------------------------------------------ protobuf text


def test_text_fields_found_and_ids_left_alone() -> None:
    msg = chunk(text="Hello there", model="gpt-4o-mini", index=3, blob=b"\x00\x01\x02")
    assert [(t.numbers, t.text) for t in find_texts(msg)] == [((1,), "Hello there")]
    nested = chunk(delta=Delta(content="Hi", thinking=""), model="claude-4-sonnet")
    assert [(t.numbers, t.text) for t in find_texts(nested)] == [((4, 1), "Hi")]
    both = chunk(delta=Delta(content=" world", thinking="Let me think."))
    assert [t.text for t in find_texts(both)] == [" world", "Let me think."]
    assert find_texts(b"\x0b\x00") == [] and find_texts(b"") == []  # a group; nothing
    # "R" (field 10, length-delimited), "e" (101): 103 bytes of prose also parse as a message
    sentence = "Re" + "garding your question, the answer depends on the version of the library. " * 2
    sentence = sentence[:103]
    (found,) = find_texts(chunk(text=sentence))
    assert sentence.endswith(found.text) and found.ambiguous  # counted, never split
    (event,) = ConnectStreamAdapter().feed(encode_envelope(chunk(text=sentence)))
    assert sentence.endswith(event.text) and not event.splittable
    schema = {(1,): True}  # once the stream showed field 1 is a string, it is read as one
    assert [(t.text, t.ambiguous) for t in find_texts(chunk(text=sentence), schema)] == [(sentence, False)]


@pytest.mark.parametrize("text", ["x", "Hello, world!", "naïve café 東京 🚀", "\n\tindented", "a" * 300])
def test_replace_text_keeps_every_other_field(text: str) -> None:
    msg = chunk(delta=Delta(content="original words here"), model="gpt-4o-mini", index=7, blob=b"\xff")
    (found,) = find_texts(msg)
    out = ChatChunk.FromString(replace_text(msg, found.path, text))
    assert out.delta.content == text
    assert (out.model, out.index, out.blob) == ("gpt-4o-mini", 7, b"\xff")


@given(st.text(min_size=1, max_size=40).filter(lambda s: s.isprintable() and not s.isspace()),
       st.integers(0, 2**31 - 1))
@settings(max_examples=60, deadline=None)
def test_pieces_put_back_together_are_the_message_text(text: str, index: int) -> None:
    msg = chunk(delta=Delta(content=text), index=index)
    texts = find_texts(msg)
    if not texts:  # an id-like token (letters and digits, no space) is left alone
        return
    (found,) = texts
    if found.ambiguous:  # its bytes also read as a message: counted, never split
        assert found.text.endswith(text)
        return
    cut = len(text) // 2
    parts = [ChatChunk.FromString(replace_text(msg, found.path, p)) for p in (text[:cut], text[cut:]) if p]
    assert "".join(p.delta.content for p in parts) == text and all(p.index == index for p in parts)


# ------------------------------------------------------------------ the adapters


@pytest.mark.parametrize("content_type, adapter", [
    ("application/connect+proto", ConnectStreamAdapter), ("application/connect+json", ConnectStreamAdapter),
    ("application/grpc", GrpcStreamAdapter), ("application/grpc+proto", GrpcStreamAdapter),
    ("application/grpc-web+proto", GrpcStreamAdapter), ("Application/GRPC; charset=x", GrpcStreamAdapter)])
def test_accepts_its_own_types_only(content_type: str, adapter: type) -> None:
    assert adapter.accepts(shape(content_type), content_type)
    other = GrpcStreamAdapter if adapter is ConnectStreamAdapter else ConnectStreamAdapter
    assert not other.accepts(shape(content_type), content_type)
    assert not adapter.accepts(shape("application/grpc-web-text"), "application/grpc-web-text")
    assert not adapter.accepts(RequestShape("GET", "h", "/", {}, b""), content_type)


def _stream() -> bytes:
    messages = [chunk(model="gpt-4o-mini"), chunk(delta=Delta(content="The"), index=0),
                chunk(delta=Delta(content=" answer is forty-two."), index=0),
                chunk(delta=Delta(content="a", thinking="b"))]
    return b"".join(encode_envelope(m) for m in messages) + END


def test_events_are_the_messages_byte_for_byte_at_any_chunking() -> None:
    stream = _stream()
    rnd = random.Random(3)
    for _ in range(50):
        adapter = ConnectStreamAdapter()
        cuts = sorted(rnd.sample(range(1, len(stream)), 6))
        events = []
        for a, b in zip([0, *cuts], [*cuts, len(stream)]):
            events += adapter.feed(stream[a:b])
        events += adapter.end()
        assert b"".join(e.raw for e in events) == stream
        assert [e.text for e in events] == ["", "The", " answer is forty-two.", "ab", ""]
        assert [e.splittable for e in events] == [False, True, True, False, False]


def test_a_field_read_both_ways_is_settled_by_the_stream() -> None:
    """"\n\nThe answer" is Delta{content: "The answer"} and printable text at once: counted,
    never split, until a value at that field reads one way only (a length that is a control
    character); then it splits, as a message."""
    adapter = GrpcStreamAdapter()
    both = encode_envelope(chunk(delta=Delta(content="The answer")))
    (first,) = adapter.feed(both)
    assert first.text == "The answer" and not first.splittable
    adapter.feed(encode_envelope(chunk(delta=Delta(content=" is forty-two."))))  # 14: \x0e
    (later,) = adapter.feed(both)
    assert later.text == "The answer" and later.splittable
    framer = EnvelopeFramer()
    parts = framer.feed(b"".join(adapter.split(later, ["The", " answer"])))
    assert [ChatChunk.FromString(p.message).delta.content for p in parts] == ["The", " answer"]


def test_a_split_message_is_messages_carrying_the_slices() -> None:
    adapter = GrpcStreamAdapter()
    (event,) = adapter.feed(encode_envelope(chunk(delta=Delta(content=" is forty-two."), index=5,
                                                  model="gpt-4o-mini")))
    pieces = [" is", " forty", "-two."]
    out = b"".join(adapter.split(event, pieces))
    framer = EnvelopeFramer()
    parts = [ChatChunk.FromString(e.message) for e in framer.feed(out)]
    assert [p.delta.content for p in parts] == pieces
    assert all((p.index, p.model) == (5, "gpt-4o-mini") for p in parts)
    with pytest.raises(ValueError):
        adapter.split(event, ["does not add up"])


def test_a_gzip_message_is_read_and_its_pieces_go_out_plain() -> None:
    adapter = ConnectStreamAdapter()
    msg = chunk(delta=Delta(content="Compressed words"))
    (event,) = adapter.feed(encode_envelope(gzip.compress(msg), COMPRESSED))
    assert event.text == "Compressed words" and event.splittable
    framer = EnvelopeFramer()
    parts = framer.feed(b"".join(adapter.split(event, ["Compressed", " words"])))
    assert [p.flags for p in parts] == [0, 0]
    assert [ChatChunk.FromString(p.message).delta.content for p in parts] == ["Compressed", " words"]
    other = ConnectStreamAdapter()
    (snappy,) = other.feed(encode_envelope(b"\x00not gzip", COMPRESSED))
    assert snappy.text == "" and other.anomaly is not None and "not gzip" in other.anomaly


def test_json_messages_split_on_their_text_key() -> None:
    adapter = ConnectStreamAdapter()
    body = {"id": "msg_01", "delta": {"content": "Hello world"}, "usage": {"text": "no"}}
    (event,) = adapter.feed(encode_envelope(json.dumps(body).encode()))
    assert event.text == "Hello world" and event.splittable
    framer = EnvelopeFramer()
    parts = [json.loads(e.message) for e in framer.feed(b"".join(adapter.split(event, ["Hello", " world"])))]
    assert parts == [{**body, "delta": {"content": "Hello"}}, {**body, "delta": {"content": " world"}}]


def test_control_messages_and_unknown_flags_pass_whole() -> None:
    adapter = GrpcStreamAdapter()
    trailers = encode_envelope(b"grpc-status: 0\r\ngrpc-message: \r\n", TRAILERS)
    odd = encode_envelope(chunk(text="words here"), 0x04)
    events = adapter.feed(trailers + odd)
    assert [(e.raw, e.texts) for e in events] == [(trailers, ()), (odd, ())]


def test_a_broken_stream_passes_the_rest_as_it_came() -> None:
    adapter = ConnectStreamAdapter()
    good = encode_envelope(chunk(text="fine words"))
    events = adapter.feed(good + b"\x00\xff\xff\xff\xff" + b"rest of it")
    assert b"".join(e.raw for e in events) == good + b"\x00\xff\xff\xff\xffrest of it"
    assert adapter.failure is not None
    assert [e.raw for e in adapter.feed(b" more")] == [b" more"]


def test_an_error_ending_is_the_apis_error() -> None:
    """The response cache keeps no stream that ended in the API's error."""
    ok, failed = ConnectStreamAdapter(), ConnectStreamAdapter()
    ok.feed(encode_envelope(chunk(text="fine words")) + END)
    failed.feed(encode_envelope(chunk(text="fine words")) + encode_envelope(
        b'{"error":{"code":"resource_exhausted","message":"quota"}}', END_STREAM))
    assert (ok.api_error, failed.api_error) == (False, True)
    zipped = ConnectStreamAdapter()
    zipped.feed(encode_envelope(gzip.compress(b'{"error":{"code":"internal"}}'), END_STREAM | COMPRESSED))
    assert zipped.api_error
    web_ok, web_failed = GrpcStreamAdapter(), GrpcStreamAdapter()
    web_ok.feed(encode_envelope(b"grpc-status: 0\r\ngrpc-message: \r\n", TRAILERS))
    web_failed.feed(encode_envelope(b"grpc-status: 8\r\ngrpc-message: quota\r\n", TRAILERS))
    assert (web_ok.api_error, web_failed.api_error) == (False, True)
