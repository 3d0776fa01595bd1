"""Ollama NDJSON adapter: framing, channels, splitting, integrity, official client models."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.ndjson import NDJSONParser, is_ndjson
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.ollama import OllamaAdapter
from tests.support.adapter_checks import (
    channel_texts,
    check_integrity,
    event_key,
    parse,
    random_pieces,
    rechunk,
    resplit,
    two_pieces,
)
from tests.support.fixture_streams import load

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
NDJSON = "application/x-ndjson"
FIXTURES = ("ollama/sk-phi3-api-chat-tail-excerpt.ndjson", "ollama/sk-phi3-api-generate-tail-excerpt.ndjson")
STATS = {"total_duration": 5_000_000, "load_duration": 100, "prompt_eval_count": 10,
         "prompt_eval_duration": 200, "eval_count": 42, "eval_duration": 3_000}


def line(obj: dict[str, Any], newline: str = "\n") -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + newline).encode()


def chat(content: str = "", thinking: str | None = None, *, done: bool = False, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking is not None:
        message["thinking"] = thinking
    obj: dict[str, Any] = {"model": "qwen3", "created_at": "2025-06-01T10:00:00.123456789Z",
                           "message": message, "done": done}
    if done:
        obj.update({"done_reason": "stop", **STATS})
    obj.update(extra)
    return obj


def gen(response: str = "", thinking: str | None = None, *, done: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"model": "qwen3", "created_at": "2025-06-01T10:00:00Z", "response": response}
    if thinking is not None:
        obj["thinking"] = thinking
    obj["done"] = done
    if done:
        obj.update({"done_reason": "stop", "context": [1, 2, 3], **STATS})
    return obj


def synthetic_chat() -> bytes:
    tool = {"function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
    return b"".join([
        line(chat("", "Let me think… 🤔 about ")),
        line(chat("", "the weather.")),
        line(chat("", "", tool_calls=None) | {"message": {"role": "assistant", "content": "",
                                                          "tool_calls": [tool]}}),
        line(chat("Hello, ")),
        line(chat("wörld 🌍 — naïve café\n")),
        b"\n",
        line(chat("multi\nline \"quoted\" text")),
        line(chat("!", done=True)).rstrip(b"\n"),
    ])


def synthetic_generate() -> bytes:
    return b"".join([
        line(gen("", "思考中……"), "\r\n"),
        line(gen("答案是 ", None), "\r\n"),
        line(gen("42。")),
        line(gen("", done=True)),
    ])


SYNTHETIC = {"chat": synthetic_chat(), "generate": synthetic_generate()}
ALL_STREAMS = [*(load(n) for n in FIXTURES), *SYNTHETIC.values()]
IDS = [*FIXTURES, *SYNTHETIC]


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="localhost:11434", path=path, headers={}, body=b"{}")


# -- accepts -------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/api/chat", NDJSON, True),
    ("POST", "/api/generate", "application/x-ndjson; charset=utf-8", True),
    ("post", "/ollama/api/chat/", NDJSON, True),
    ("POST", "/api/chat?x=1", NDJSON, True),
    ("POST", "/api/chat", "application/json", False),
    ("POST", "/api/chat", "text/event-stream", False),
    ("POST", "/api/pull", NDJSON, False),
    ("GET", "/api/chat", NDJSON, False),
    ("POST", "/v1/chat/completions", NDJSON, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert OllamaAdapter.accepts(shape(path, method), ctype) is expected


def test_is_ndjson() -> None:
    assert is_ndjson("Application/X-NDJSON; charset=utf-8") and is_ndjson("application/jsonl")
    assert not is_ndjson("application/json") and not is_ndjson("text/event-stream")


# -- framing ---------------------------------------------------------------------------------
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=12))
def test_framer_raws_concatenate_and_ignore_chunking(data: bytes, cuts: list[int]) -> None:
    def frame(chunks: list[bytes]) -> list[tuple[bytes, str | None, str]]:
        parser = NDJSONParser()
        lines = [ln for c in chunks for ln in parser.feed(c)] + parser.end()
        return [(ln.raw, ln.text, ln.newline) for ln in lines]

    whole = frame([data])
    assert b"".join(r for r, _, _ in whole) == data
    assert frame(rechunk(data, cuts)) == whole
    assert all(nl for _, _, nl in whole[:-1])


# -- fixtures --------------------------------------------------------------------------------
def test_fixture_chat_texts() -> None:
    events = parse(OllamaAdapter, [load(FIXTURES[0])])
    assert [e.texts for e in events] == [((TEXT, t),) for t in (" these", " times", " of", " day", ".")] + [()]
    assert all(e.splittable for e in events[:-1])
    assert b"".join(e.raw for e in events) == load(FIXTURES[0])


def test_fixture_generate_texts() -> None:
    events = parse(OllamaAdapter, [load(FIXTURES[1])])
    assert channel_texts(events) == {TEXT: " daylight hours."}
    assert events[-1].texts == () and b'"context":[' in events[-1].raw


def test_synthetic_channels() -> None:
    events = parse(OllamaAdapter, [SYNTHETIC["chat"]])
    texts = channel_texts(events)
    assert texts[REASONING] == "Let me think… 🤔 about the weather."
    assert texts[TEXT] == "Hello, wörld 🌍 — naïve café\nmulti\nline \"quoted\" text!"
    assert texts[TOOL_ARGS] == 'get_weather{"city":"Zürich"}'
    [tool] = [e for e in events if any(c == TOOL_ARGS for c, _ in e.texts)]
    assert tool.atomic and not tool.splittable
    assert events[-1].splittable  # the done line with content is splittable
    assert channel_texts(parse(OllamaAdapter, [SYNTHETIC["generate"]])) == {
        REASONING: "思考中……", TEXT: "答案是 42。"}


@pytest.mark.parametrize("data", ALL_STREAMS, ids=IDS)
@given(st.data())
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_property_rechunking(data: bytes, draw: st.DataObject) -> None:
    cuts = draw.draw(st.lists(st.integers(0, len(data)), max_size=30))
    events = parse(OllamaAdapter, rechunk(data, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in parse(OllamaAdapter, [data])]
    assert b"".join(e.raw for e in events) == data


def test_rechunking_byte_by_byte() -> None:
    data = SYNTHETIC["chat"]
    one = parse(OllamaAdapter, [data[i : i + 1] for i in range(len(data))])
    assert [event_key(e) for e in one] == [event_key(e) for e in parse(OllamaAdapter, [data])]


@pytest.mark.parametrize("data", ALL_STREAMS, ids=IDS)
@given(st.randoms(use_true_random=False), st.data())
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_property_split_integrity(data: bytes, rnd: random.Random, draw: st.DataObject) -> None:
    output, records = resplit(OllamaAdapter, data, lambda e: random_pieces(e.text, rnd))
    cuts = draw.draw(st.lists(st.integers(0, len(output)), max_size=20))
    check_integrity(OllamaAdapter, data, records, output, cuts)
    for record in records:
        if record.pieces is None:
            continue
        objs = [json.loads(b) for b in record.out]
        assert all(o.get("done") is False for o in objs[:-1])
        assert all(not (set(o) & {"done_reason", "eval_count", "context"}) for o in objs[:-1])
        original = json.loads(record.event.raw)
        assert objs[-1].get("done") == original.get("done")
        assert all(b.endswith(b"\n") for b in record.out[:-1])
        assert record.out[-1].endswith(b"\n") == record.event.raw.endswith(b"\n")


# -- split details -----------------------------------------------------------------------------
def only(data: bytes) -> Event:
    [event] = parse(OllamaAdapter, [data])
    return event


def test_split_final_line_moves_stats_to_last_piece() -> None:
    event = only(line(chat("Done now", done=True)))
    first, second = (json.loads(b) for b in OllamaAdapter().split(event, ["Done", " now"]))
    assert first == {**chat("Done"), "done": False}
    assert second == chat(" now", done=True)
    assert list(second) == list(chat("x", done=True))  # key order kept


def test_split_generate_and_thinking() -> None:
    event = only(line(gen("", "abc def")))
    assert event.texts == ((REASONING, "abc def"),)
    pieces = [json.loads(b) for b in OllamaAdapter().split(event, ["abc", " def"])]
    assert pieces == [gen("", "abc"), gen("", " def")]


def test_split_unterminated_and_crlf_lines() -> None:
    out = OllamaAdapter().split(only(line(chat("ab")).rstrip(b"\n")), ["a", "b"])
    assert out[0].endswith(b"}\n") and out[1].endswith(b"}")
    out = OllamaAdapter().split(only(line(chat("ab"), "\r\n")), ["a", "b"])
    assert all(b.endswith(b"}\r\n") for b in out)


def test_single_piece_returns_raw_and_bad_pieces_raise() -> None:
    adapter = OllamaAdapter()
    event = only(line(chat("hello")))
    assert adapter.split(event, ["hello"]) == [event.raw]
    with pytest.raises(ValueError):
        adapter.split(event, ["hel", "p"])
    with pytest.raises(ValueError):
        adapter.split(only(line(chat("a", "b"))), ["a"])  # two texts: not splittable


@pytest.mark.parametrize("raw", [
    b'{"error":"model \\"x\\" not found"}\n',
    b"not json\n",
    b"[1,2]\n",
    b"\xff\xfe\n",
    b"\n",
    line(chat("", done=True)),
    line({"status": "pulling manifest"}),
])
def test_non_token_lines_pass_through(raw: bytes) -> None:
    event = only(raw)
    assert event.raw == raw and event.texts == ()


def test_lone_surrogate_splits_into_valid_utf8() -> None:
    event = only(b'{"message":{"role":"assistant","content":"a\\ud800b"},"done":false}\n')
    out = OllamaAdapter().split(event, two_pieces(event.text))
    for b in out:
        b.decode("utf-8")
    assert channel_texts(parse(OllamaAdapter, [b"".join(out)])) == {TEXT: "a\ud800b"}


# -- the official client's models accept every piece ----------------------------------------------
@pytest.mark.parametrize("data", ALL_STREAMS, ids=IDS)
def test_ollama_client_models_accept_pieces(data: bytes) -> None:
    ollama = pytest.importorskip("ollama")
    output, records = resplit(OllamaAdapter, data, lambda e: list(e.text))
    assert any(r.pieces for r in records)
    for out_line in output.splitlines():
        if not out_line.strip():
            continue
        obj = json.loads(out_line)
        model = ollama.ChatResponse if "message" in obj else ollama.GenerateResponse
        model.model_validate(obj)
