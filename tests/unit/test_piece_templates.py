"""A split event's pieces written from a template of the event's shape are, to the byte, the
pieces `piece` and `dumps` write: over every captured stream of the adapters that use
templates, and over made-up texts that JSON escapes in every way."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Adapter, Event
from retimer.wire.protocols.gemini_sse import GeminiSSEAdapter
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.protocols.sse_json import SSEJSONAdapter
from tests.support.adapter_checks import random_pieces
from tests.support.fixture_table import PACED, factory, read, wire

TEMPLATED = [n for n in PACED if getattr(factory(n)(), "template_pieces", False)]


def _split_both(make: Callable[[], Adapter], events: list[Event], seed: int) -> None:
    """Each splittable event cut at random, through a templating adapter and an ordinary one
    (fed the same events in the same order, as a stream's would be)."""
    templated = make()
    assert isinstance(templated, SSEJSONAdapter) and templated.template_pieces
    ordinary = type("Ordinary", (type(templated),), {"template_pieces": False})()
    rnd = random.Random(seed)
    for event in events:
        if event.splittable:
            pieces = random_pieces(event.text, rnd, max_pieces=5)
            assert list(templated.split_lazily(event, pieces)) == list(ordinary.split_lazily(event, pieces))


@pytest.mark.parametrize("name", TEMPLATED)
def test_every_captured_streams_pieces_are_the_ordinary_ones(name: str) -> None:
    make = factory(name)
    events = read(make, wire(name))
    for seed in range(3):
        _split_both(make, events, seed)


def test_templates_are_used() -> None:
    """A stream of same-shaped chunks: its pieces come from one template per kind."""
    adapter = OpenAIChatAdapter()
    chunks = b"".join(
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
        b'[{"index":0,"delta":{"content":' + json.dumps(t).encode() + b'},"finish_reason":null}]}\n\n'
        for t in ("Hello there world", " and again more", " the last words here"))
    events = [e for e in adapter.feed(chunks) if e.splittable]
    for e in events:
        list(adapter.split_lazily(e, [e.text[:3], e.text[3:8], e.text[8:]]))
    assert len(adapter._templates._made) == 3  # noqa: SLF001  first, middle, last: one shape


_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=2, max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.lists(_text, min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]),
       st.booleans(), st.integers(0, 1000))
def test_made_up_chunks_split_alike(texts: list[str], newline: str, named: bool, seed: int) -> None:
    """Chat chunks (a role on the first, a finish reason on the last), Anthropic deltas and
    Gemini chunks with texts holding quotes, backslashes, controls, and astral characters."""
    head = "event: message" + newline if named else ""
    chat, anthropic, gemini = [], [], []
    for i, text in enumerate(texts):
        delta = {"role": "assistant", "content": text} if i == 0 else {"content": text}
        finish = "stop" if i == len(texts) - 1 else None
        chat.append({"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        anthropic.append({"type": "content_block_delta", "index": 0,
                          "delta": {"type": "text_delta", "text": text}})
        gemini.append({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                       "index": 0}], "usageMetadata": {"promptTokenCount": 3}})
    for make, objs in ((OpenAIChatAdapter, chat), (AnthropicMessagesAdapter, anthropic),
                       (GeminiSSEAdapter, gemini)):
        for ascii_only in (False, True):
            body = "".join(f"{head}data: {json.dumps(o, ensure_ascii=ascii_only)}{newline}{newline}"
                           for o in objs).encode()
            events = make().feed(body)
            _split_both(make, events, seed)
