"""The fallback for LLM streams without a dedicated adapter: pace whole events, never edit them.

Any `text/event-stream` or NDJSON response is framed into events (SSE events or lines) that
go out byte-identical: every event is atomic, so `split` is never called. What the adapter
adds is an estimate of the text each event carries, so the pacer can count its tokens:

* JSON payloads: the string values under text-like keys (`text`, `content`, `delta`,
  `delta_content`, `response`, `token`, `message`, `parts`, `thinking`, ...), skipping
  errors, usage, logprobs, echoed user/system messages, cumulative full-text fields and
  strings that look like ids, URLs or base64. JSON-patch streams (ChatGPT and DeepSeek web)
  count `v` only when its path, given or inherited from the previous patch, is a text path.
  A string that repeats the previous value at the same place plus more (cumulative formats
  such as ChatGPT's legacy web stream) counts only the new suffix. A string that repeats
  text already counted, starting and ending where counted strings did (a final event with the
  whole answer: Cohere v1's stream-end `response.text` and its chat_history, a `.done` or
  `finalAnswer` event, a non-streaming body's mirrored `reasoning` / `reasoning_content`),
  counts nothing.
* SSE events named like metadata (`title`, `ping`, `error`, `message_limit`, `close`, ...)
  carry no tokens.
* Non-JSON data: the data itself, unless it looks like a blob; a base64 blob is decoded and
  any embedded `{"text": "..."}` JSON (Doubao's protobuf frames) is counted.

Events with no estimate are non-token events. The framing (SSE or NDJSON) is given by the
constructor or sniffed from the first non-blank byte: `{` or `[` means NDJSON.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from retimer.wire.blobs import looks_like_blob
from retimer.wire.ndjson import NDJSONLine, NDJSONParser, is_ndjson
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape
from retimer.wire.sse import SSEEvent, SSEParser, is_event_stream

__all__ = ["SKIP_KEYS", "TEXT_KEYS", "GenericStreamAdapter", "estimate_text", "looks_like_blob"]

Framing = Literal["sse", "ndjson"]

TEXT_KEYS = frozenset({
    "text", "content", "delta", "delta_content", "response", "token", "message", "parts",
    "thinking", "reasoning", "reasoning_content", "partial_json", "completion", "answer",
    "output_text", "arguments", "edit_content", "data",
})
SKIP_KEYS = frozenset({
    "error", "errors", "usage", "logprobs", "top_logprobs", "generated_text", "details",
    "citations", "sources", "metadata", "signature", "id", "ids", "url", "uri", "href",
})
_NON_TEXT_ROLES = frozenset({"user", "system", "developer", "tool"})
_TEXT_PATH = re.compile(r"content|text|parts|thinking|reasoning", re.IGNORECASE)
_SKIP_EVENT = re.compile(r"title|ping|error|limit|metadata|usage|session|ready|close", re.IGNORECASE)
_BLOB = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
_EMBEDDED_TEXT = re.compile(rb'\{"text":"(?:[^"\\]|\\.)*"\}')
_CUMULATIVE_MIN = 8  # a previous value shorter than this is not taken as a prefix
_REPEAT_MIN = 16  # a shorter string (a word, an indent) is never taken for a repeat
_REPEAT_SPAN = 1 << 18  # counted text kept for the repeat check (characters)
_REPEAT_TRIES = 16  # boundaries a string may repeat the counted text from, latest first


class GenericStreamAdapter(Adapter):
    """Paces any SSE or NDJSON stream by whole events; never alters a byte."""

    name: ClassVar[str] = "generic"

    def __init__(self, framing: Framing | None = None) -> None:
        self._framing: Framing | None = framing
        self._pending = bytearray()  # blank bytes seen before the framing is known
        self._sse = SSEParser()
        self._ndjson = NDJSONParser()
        self._last: dict[str, str] = {}  # place -> previous string there (cumulative check)
        self._parts: list[str] = []  # the text counted so far (its last _REPEAT_SPAN characters)
        self._length = 0  # of the text counted so far
        self._tail = ""  # its end, long enough to index the bounds waiting for text after them
        self._bounds: list[int] = [0]  # offsets in _counted where a counted string began or ended
        self._starts: dict[str, list[int]] = {}  # the _REPEAT_MIN characters after a bound -> bounds
        self._unindexed: list[int] = [0]  # bounds not followed by _REPEAT_MIN characters yet
        self._patch_path = ""  # the JSON-patch path a bare {"v": ...} inherits
        self._json_seen = False  # a JSON event came: a bare `end` after it is a terminator

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """Any event stream or NDJSON response; the addon must also require an LLM host."""
        return is_event_stream(content_type) or is_ndjson(content_type)

    @classmethod
    def for_content_type(cls, content_type: str) -> GenericStreamAdapter:
        """An instance with its framing fixed by the response content type."""
        return cls("ndjson" if is_ndjson(content_type) else "sse")

    def feed(self, data: bytes) -> list[Event]:
        if self._framing is None:
            self._pending += data
            stripped = self._pending.lstrip(b" \t\r\n")
            if stripped.startswith(b"\xef\xbb\xbf"):
                stripped = stripped[3:]
            if not stripped or b"\xef\xbb\xbf".startswith(stripped):  # a BOM cut short: wait
                return []
            self._framing = "ndjson" if stripped[:1] in (b"{", b"[") else "sse"
            data = bytes(self._pending)
            self._pending.clear()
        if self._framing == "sse":
            return [self._sse_event(e) for e in self._sse.feed(data)]
        return [self._line_event(line) for line in self._ndjson.feed(data)]

    def end(self) -> list[Event]:
        if self._framing is None:
            tail = bytes(self._pending)
            self._pending.clear()
            return [Event(raw=tail)] if tail else []
        if self._framing == "sse":
            return [self._sse_event(e) for e in self._sse.end()]
        return [self._line_event(line) for line in self._ndjson.end()]

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        raise ValueError("the generic adapter never splits events")

    def keepalive(self) -> bytes | None:
        """An SSE comment once the stream is known to be SSE; NDJSON has no ignorable line."""
        return b": keep-alive\n\n" if self._framing == "sse" else None

    # -- estimates -----------------------------------------------------------------------
    def _sse_event(self, sse: SSEEvent) -> Event:
        if not sse.complete or not sse.data or (sse.event and _SKIP_EVENT.search(sse.event)):
            return Event(raw=sse.raw)
        return self._atomic(sse.raw, self._estimate(sse.data))

    def _line_event(self, line: NDJSONLine) -> Event:
        if line.text is None:
            return Event(raw=line.raw)
        return self._atomic(line.raw, self._estimate(line.text))

    @staticmethod
    def _atomic(raw: bytes, estimate: str) -> Event:
        if not estimate:
            return Event(raw=raw)
        return Event(raw=raw, texts=((Channel.TEXT, estimate),), atomic=True)

    def estimate(self, data: str) -> str:
        """The estimated new text of one event's data, given what this stream counted before."""
        return self._estimate(data)

    def _estimate(self, data: str) -> str:
        stripped = data.lstrip("\ufeff").strip()  # an NDJSON body's BOM stays on its first line
        if not stripped or stripped == "[DONE]" or (stripped == "end" and self._json_seen):
            return ""  # OpenAI's terminator; JetBrains AI's `data: end` after its JSON events
        if stripped[0] in "{[\"":
            try:
                obj = json.loads(stripped)
            except (ValueError, RecursionError):
                pass
            else:
                self._json_seen = True
                out: list[str] = []
                try:
                    self._walk(obj, None, "", out)
                except RecursionError:
                    return ""
                return "".join(out)
        return _plain_estimate(stripped)

    def _walk(self, value: Any, key: str | None, place: str, out: list[str]) -> None:
        """Collect text-like strings of `value`, found under `key` at `place`."""
        if isinstance(value, dict):
            if _non_text_role(value):
                return
            if "v" in value and ("p" in value or "o" in value or len(value) == 1):
                self._patch(value, place, out)
                return
            for k, v in value.items():
                if isinstance(k, str) and k.lower() not in SKIP_KEYS:
                    self._walk(v, k.lower(), f"{place}/{k}", out)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self._walk(item, key, f"{place}/{i}", out)
        elif isinstance(value, str) and key in TEXT_KEYS:
            self._take(value, place, out)

    def _patch(self, op: dict[str, Any], place: str, out: list[str]) -> None:
        """A JSON-patch-like op {p, o, v}: `v` is text when its path is a text path."""
        path = op.get("p")
        if isinstance(path, str):
            self._patch_path = path
        v = op["v"]
        if isinstance(v, str):
            if not self._patch_path or _TEXT_PATH.search(self._patch_path):
                self._take(v, f"{place}#{self._patch_path}", out, cumulative=False)
        elif isinstance(v, (dict, list)):
            self._walk(v, "v", f"{place}/v", out)

    def _take(self, text: str, place: str, out: list[str], *, cumulative: bool = True) -> None:
        if not text or looks_like_blob(text):
            return
        previous = self._last.get(place, "")
        self._last[place] = text
        if cumulative and len(previous) >= _CUMULATIVE_MIN and text.startswith(previous):
            text = text[len(previous) :]
        text = self._unrepeated(text)
        if text:
            out.append(text)
            self._note_counted(text)

    def _unrepeated(self, text: str) -> str:
        """`text` without what repeats counted text from one counted boundary to another."""
        if len(text) < _REPEAT_MIN or text.isspace():
            return text
        starts = self._starts.get(text[:_REPEAT_MIN])
        if not starts:
            return text
        counted = self._counted_text()
        for start in reversed(starts[-_REPEAT_TRIES:]):
            if counted.startswith(text, start) and _has(self._bounds, start + len(text)):
                return ""  # counted already, whole
        return text

    def _counted_text(self) -> str:
        """The counted text as one string (joined only when a repeat is looked for)."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def _note_counted(self, text: str) -> None:
        """Add `text` to the counted text; index the boundaries by the text that follows them."""
        self._parts.append(text)
        self._length += len(text)
        self._bounds.append(self._length)
        self._unindexed.append(self._length)
        self._tail = (self._tail + text)[-(len(text) + _REPEAT_MIN):]
        tail_start = self._length - len(self._tail)  # every waiting bound is inside the tail
        while self._unindexed and self._unindexed[0] + _REPEAT_MIN <= self._length:
            bound = self._unindexed.pop(0)
            key = self._tail[bound - tail_start:bound - tail_start + _REPEAT_MIN]
            self._starts.setdefault(key, []).append(bound)
        if self._length > 2 * _REPEAT_SPAN:  # keep the recent text; boundaries move with it
            excess = self._length - _REPEAT_SPAN
            counted = self._counted_text()[excess:]
            self._parts, self._length = [counted], len(counted)
            self._bounds = [b - excess for b in self._bounds if b >= excess] or [0]
            self._starts = {}
            for b in self._bounds:
                if b + _REPEAT_MIN <= self._length:
                    self._starts.setdefault(counted[b:b + _REPEAT_MIN], []).append(b)
            self._unindexed = [b for b in self._bounds if b + _REPEAT_MIN > self._length]


def estimate_text(data: str) -> str:
    """The estimated token-bearing text of one event's data, without stream state."""
    return GenericStreamAdapter()._estimate(data)


def _has(bounds: list[int], offset: int) -> bool:
    """True when `offset` is in the sorted list `bounds`."""
    i = bisect.bisect_left(bounds, offset)
    return i < len(bounds) and bounds[i] == offset


def _non_text_role(obj: dict[str, Any]) -> bool:
    """An echoed user/system/tool message (ChatGPT web repeats the prompt first)."""
    role = obj.get("role")
    author = obj.get("author")
    if isinstance(author, dict):
        role = author.get("role", role)
    return isinstance(role, str) and role.lower() in _NON_TEXT_ROLES


def _plain_estimate(data: str) -> str:
    """Non-JSON data: itself, or the text embedded in a base64 blob, or nothing."""
    base64_like = _BLOB.fullmatch(data) is not None and any(c.isdigit() for c in data)
    if not base64_like:
        return "" if looks_like_blob(data) else data
    try:
        alt = b"-_" if "-" in data or "_" in data else None
        raw = base64.b64decode(data + "=" * (-len(data) % 4), altchars=alt)
    except (binascii.Error, ValueError):
        return ""
    texts: list[str] = []
    for m in _EMBEDDED_TEXT.finditer(raw):
        try:
            value = json.loads(m.group().decode("utf-8"))["text"]
        except (ValueError, KeyError):
            continue
        if isinstance(value, str):
            texts.append(value)
    return "".join(texts)
