"""The wire's typed errors: what it cannot read raises AdapterError (a ValueError), nothing bare."""

from __future__ import annotations

import gzip

import pytest

from retimer.wire import errors
from retimer.wire.encoding import BodyDecodingError, decoder_for
from retimer.wire.eventstream import FramingError, Header, HeaderType, encode_headers
from retimer.wire.protocols import base, jsontext
from retimer.wire.protocols.websocket import BrokenRecord, WebSocketMessageAdapter, decode_messages, encode_message


def test_adapter_error_is_one_class_and_a_value_error() -> None:
    assert base.AdapterError is errors.AdapterError
    assert issubclass(errors.AdapterError, ValueError)
    for cls in (errors.MalformedJSON, FramingError, BrokenRecord):
        assert issubclass(cls, errors.AdapterError)


@pytest.mark.parametrize("text", ["{", "[1,]", '{"n": 1e999}', b"\xff{}", "[" * 100_000 + "]" * 100_000])
def test_jsontext_raises_malformed_json(text: str | bytes) -> None:
    with pytest.raises(errors.MalformedJSON):
        jsontext.loads(text)


def test_jsontext_reads_what_round_trips() -> None:
    assert jsontext.loads('{"n": 1.5, "s": "x"}') == {"n": 1.5, "s": "x"}


def test_framing_error_is_an_adapter_error() -> None:
    with pytest.raises(errors.AdapterError):
        encode_headers([Header("x", HeaderType.UUID, b"short")])


def test_broken_websocket_record() -> None:
    good = encode_message(b"{}", is_text=True)
    with pytest.raises(BrokenRecord):
        decode_messages(good[:-1])
    with pytest.raises(errors.AdapterError):
        WebSocketMessageAdapter().feed(b"x" + good[1:])


def test_corrupt_body_raises_body_decoding_error() -> None:
    decoder = decoder_for("gzip")
    assert decoder is not None
    decoder.decode(gzip.compress(b"hello")[:8])
    with pytest.raises(BodyDecodingError):
        decoder.end()
    assert not issubclass(BodyDecodingError, errors.AdapterError)  # a broken stream, not a pass-through
