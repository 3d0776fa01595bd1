"""RequestBody: one parse of a request body, read the same way by every reader it replaced."""

from __future__ import annotations

import codecs
import json

import pytest

from retimer.wire import media, request
from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import RequestShape
from retimer.wire.request import RequestBody


def test_parse_is_lazy_and_shared() -> None:
    body = RequestBody(b'{"model": "m", "stream": true, "max_tokens": 7}', "application/json")
    assert body.is_json and body.json_text and body.model == "m" and body.stream
    assert body.max_output_tokens == 7 and body.get("nope", "deeper") is None
    assert RequestBody.of(body) is body


@pytest.mark.parametrize(("raw", "is_json", "json_text"), [
    (b"", False, False),
    (b"null", True, True),
    (b"not json", False, False),
    (codecs.BOM_UTF8 + b'{"a": 1}', True, False),  # json.loads reads it from bytes, not from text
    ('{"a": 1}'.encode("utf-16-le"), True, False),
    (b"\xff\xfe\x00", False, False),
])
def test_json_views(raw: bytes, is_json: bool, json_text: bool) -> None:
    body = RequestBody(raw)
    assert (body.is_json, body.json_text) == (is_json, json_text)


def test_too_deep_and_out_of_range_numbers() -> None:
    deep = RequestBody(b"[" * 100_000 + b"]" * 100_000)
    assert deep.too_deep and not deep.is_json and deep.value is None
    huge = RequestBody(b'{"inputs": "x", "stream": true, "n": 1e999}')
    assert huge.is_json and not huge.double_range and not huge.too_deep


def test_from_text_keeps_lone_surrogates() -> None:
    text = json.dumps({"messages": ["\ud800"]}, ensure_ascii=False)
    body = RequestBody.of(text)
    assert body.text == text and body.json_text and body.value == {"messages": ["\ud800"]}


def test_hints() -> None:
    body = RequestBody(json.dumps({
        "generationConfig": {"maxOutputTokens": 64.0, "thinkingConfig": {"thinkingBudget": 0}},
    }).encode())
    assert body.max_output_tokens == 64 and body.reasoning_budget == 0
    assert RequestBody(b'{"thinking": {"type": "disabled"}}').reasoning_budget == 0
    assert RequestBody(b'{"max_tokens": true, "max_completion_tokens": -1}').max_output_tokens is None


def test_request_shape_parses_its_body_once_for_every_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    loads = json.loads

    def counting_loads(raw: bytes, **kwargs: object) -> object:
        calls.append(raw)
        return loads(raw, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(request.json, "loads", counting_loads)
    shape = RequestShape("POST", "tgi.local", "/", {"content-type": "application/json"},
                         b'{"inputs": "hi", "stream": true}')
    assert shape.parsed_body.content_type == "application/json"
    for content_type in (media.EVENT_STREAM, media.EVENT_STREAM, media.NDJSON):
        find_adapter(shape, content_type)
    assert find_adapter(shape, media.EVENT_STREAM) is not None and len(calls) == 1


@pytest.mark.parametrize(("content_type", "streamed"), [
    ("text/event-stream; charset=utf-8", True), ("application/x-ndjson", True),
    ("application/jsonlines", True), ("application/vnd.amazon.eventstream", True),
    ("application/x-jsonl", False), ("application/json", False), ("TEXT/EVENT-STREAM", True),
])
def test_is_streamed_keeps_the_proxy_markers(content_type: str, streamed: bool) -> None:
    assert media.is_streamed(content_type) is streamed


def test_media_types() -> None:
    assert media.is_event_stream(" Text/Event-Stream ;x=1") and not media.is_event_stream("text/plain")
    assert media.is_ndjson("application/json-seq") and media.is_amazon_event_stream(media.AMAZON_EVENT_STREAM)
    assert media.is_json("application/json; charset=utf-8") and not media.is_json("application/problem+json")
