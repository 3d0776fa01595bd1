"""Gemini `streamGenerateContent` without `alt=sse`: one JSON array streamed element by element.

The body is `[{...}\\n,\\r\\n{...}\\n]` (application/json), each element a GenerateContentResponse
sent when it is ready. A small incremental scanner (depth, strings, escapes) finds element
boundaries without parsing; events are:

* the opening: leading whitespace and `[`, sent as soon as it arrives;
* each element, with the separator before it (`,` and whitespace) as a prefix, complete at
  the bracket that closes it (a scalar element ends at the next separator);
* the closing: trailing separator bytes and `]`.

The raws concatenate back to the input exactly and do not depend on how it was chunked.
Elements are classified like the SSE chunks (see gemini_sse). A split writes several elements
joined by the stream's own separator style, so the output is still one valid JSON array.

Anything that is not an array (an error object, HTML) and whatever follows the closing `]`
passes through as it arrives; an unterminated array's tail goes out verbatim at `end()`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, ClassVar

from retimer.wire.media import is_json
from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, Event, RequestShape, check_split
from retimer.wire.protocols.gemini_sse import (
    classify_response,
    is_stream_generate,
    piece_response,
    wants_sse,
)
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.jsontext import MalformedJSON
from retimer.wire.protocols.repeats import SoFar

__all__ = ["GeminiJSONArrayAdapter"]

_WS = frozenset(b" \t\r\n")
_COMMA, _QUOTE, _BACKSLASH = ord(","), ord('"'), ord("\\")
_OPEN, _CLOSE = frozenset(b"{["), frozenset(b"}]")
_IN_STRING = re.compile(rb'["\\]')
_STRUCTURAL = re.compile(rb'["{}\[\], \t\r\n]')


class _State(Enum):
    START = auto()  # before the opening bracket
    BETWEEN = auto()  # gathering separator bytes before an element or the closing bracket
    ELEMENT = auto()  # inside an element
    PASS = auto()  # after the array, or not an array at all: bytes pass as they come


@dataclass(slots=True, frozen=True)
class _Element:
    """How a splittable element was written: its separator prefix and its layout."""

    prefix: bytes
    pretty: bool


class GeminiJSONArrayAdapter(Adapter):
    """Adapter for `models/*:streamGenerateContent` answered with a streamed JSON array."""

    name: ClassVar[str] = "gemini-json"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a `:streamGenerateContent` path without `alt=sse`, answered with JSON."""
        return (
            request.method.upper() == "POST"
            and is_stream_generate(request.path)
            and not wants_sse(request.path)
            and is_json(content_type)
        )

    def __init__(self) -> None:
        self._buf = bytearray()
        self._start = 0  # offset in _buf of the first byte no event has covered
        self._pos = 0  # where scanning resumes
        self._elem = 0  # offset of the current element's first byte (after its prefix)
        self._state = _State.START
        self._depth = 0
        self._in_string = False
        self._separator: bytes | None = None  # the last separator seen between two elements
        self._seen = SoFar()  # text counted per candidate, for repeats (see repeats.py)
        self._ended = False

    # -- parsing ---------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Event]:
        """Parse more bytes; return the events they complete."""
        if self._ended:
            raise RuntimeError("feed() called after end()")
        if not data:
            return []
        if self._state is _State.PASS:
            return [Event(raw=bytes(data))]
        self._buf += data
        events: list[Event] = []
        self._scan(events)
        if self._state is _State.PASS and self._start < len(self._buf):
            events.append(Event(raw=bytes(self._buf[self._start :])))
            self._start = self._pos = len(self._buf)
        self._compact()
        return events

    def end(self) -> list[Event]:
        """The stream ended: an unfinished element or separator goes out verbatim."""
        if self._ended:
            return []
        self._ended = True
        tail = bytes(self._buf[self._start :])
        self._buf.clear()
        self._start = self._pos = self._elem = 0
        return [Event(raw=tail)] if tail else []

    def _scan(self, events: list[Event]) -> None:
        buf = self._buf
        n = len(buf)
        pos = self._pos
        while pos < n and self._state is not _State.PASS:
            state = self._state
            if state is _State.START:
                b = buf[pos]
                if b in _WS:
                    pos += 1
                elif b == ord("["):
                    pos += 1
                    self._emit(events, pos, element=False)
                    self._state = _State.BETWEEN
                else:
                    self._state = _State.PASS  # not an array: everything passes unchanged
            elif state is _State.BETWEEN:
                b = buf[pos]
                if b in _WS or b == _COMMA:
                    pos += 1
                elif b == ord("]"):
                    pos += 1
                    self._emit(events, pos, element=False)
                    self._state = _State.PASS
                else:
                    self._elem = pos
                    self._state = _State.ELEMENT
                    self._depth = 0
                    self._in_string = False
            elif self._in_string:
                m = _IN_STRING.search(buf, pos)
                if m is None:
                    pos = n
                elif buf[m.start()] == _BACKSLASH:
                    if m.start() + 1 >= n:
                        pos = m.start()  # the escaped byte has not arrived: resume here
                        break
                    pos = m.start() + 2
                else:
                    self._in_string = False
                    pos = m.start() + 1
            else:
                m = _STRUCTURAL.search(buf, pos)
                if m is None:
                    pos = n
                    continue
                i = m.start()
                c = buf[i]
                if c == _QUOTE:
                    self._in_string = True
                    pos = i + 1
                elif c in _OPEN:
                    self._depth += 1
                    pos = i + 1
                elif c in _CLOSE and self._depth > 0:
                    self._depth -= 1
                    pos = i + 1
                    if self._depth == 0:
                        self._emit(events, pos, element=True)
                        self._state = _State.BETWEEN
                elif c == ord("}"):
                    pos = i + 1  # a stray closing brace: part of a malformed element
                elif self._depth == 0:  # separator or closing bracket after a scalar element
                    self._emit(events, i, element=True)
                    self._state = _State.BETWEEN
                    pos = i
                else:
                    pos = i + 1
        self._pos = pos

    def _emit(self, events: list[Event], stop: int, *, element: bool) -> None:
        """Cut buf[start:stop] into an event."""
        raw = bytes(self._buf[self._start : stop])
        if element:
            prefix_len = self._elem - self._start
            prefix = raw[:prefix_len]
            if b"," in prefix:
                self._separator = prefix
            events.append(self._element_event(raw, prefix_len))
        else:
            events.append(Event(raw=raw))
        self._start = stop

    def _element_event(self, raw: bytes, prefix_len: int) -> Event:
        """Decode one element; anything malformed or without text is a non-token event."""
        body = raw[prefix_len:]
        try:
            obj = jsontext.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, MalformedJSON):
            self._note("an array element that is not JSON")
            return Event(raw=raw)
        if not isinstance(obj, dict):
            return Event(raw=raw)
        if obj.get("error"):
            self._api_error = True
        texts, path = classify_response(obj, self._seen)
        if not texts:
            return Event(raw=raw)
        if path is None:
            return Event(raw=raw, texts=texts, atomic=True)
        target = JSONTarget(_Element(raw[:prefix_len], b"\n" in body), obj, path)
        return Event(raw=raw, texts=texts, payload=target)

    def _compact(self) -> None:
        cut = self._start
        if cut:
            del self._buf[:cut]
            self._start = 0
            self._pos -= cut
            self._elem = max(0, self._elem - cut)

    # -- splitting -------------------------------------------------------------------
    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        """Write len(pieces) array elements; the first keeps the event's own prefix."""
        check_split(event, pieces)
        target: JSONTarget[_Element] = event.payload
        if len(pieces) == 1:
            return [event.raw]
        element = target.frame
        separator = self._separator_for(element)
        last = len(pieces) - 1
        out: list[bytes] = []
        for i, piece in enumerate(pieces):
            obj = piece_response(target, piece, first=i == 0, last=i == last)
            out.append((element.prefix if i == 0 else separator) + _dumps(obj, element.pretty))
        return out

    def _separator_for(self, target: _Element) -> bytes:
        """The separator between elements, in the style this stream uses."""
        if b"," in target.prefix:
            return target.prefix
        if self._separator is not None:
            return self._separator
        return b"\n,\r\n" if target.pretty else b",\r\n"  # what Gemini sends


def _dumps(obj: Any, pretty: bool) -> bytes:
    """JSON for one element: indented like Gemini's when the original was; valid UTF-8."""
    indent = 2 if pretty else None
    separators = (",", ": ") if pretty else (",", ":")
    text = json.dumps(obj, ensure_ascii=False, indent=indent, separators=separators)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, indent=indent, separators=separators).encode("ascii")
