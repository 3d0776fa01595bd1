"""The Gemini web app's answer stream (gemini.google.com `StreamGenerate?...&rt=c`).

Wire format: an XSSI guard `)]}'` (some captures show it as `)`, `]`, `}'` on three lines;
both are accepted), then frames of `<decimal length>` + body, where the length counts the
UTF-16 code units (JavaScript `String.length`) of the body: the newline after the digits,
one JSON line, and the newline after it. The JSON is `[["wrb.fr",null,"<inner JSON>"]]`, the
inner JSON double-encoded as a string. Each answer frame repeats the WHOLE answer so far
(cumulative), at inner[4][0][1][0] (candidate 0's text; its thoughts, when shown, at
inner[4][0][37][0][0]), plus static metadata; other frames (ids, `{"28":...}` metadata,
`di`, `af.httprm`, the `e` trailer) carry no text and pass unchanged.

Tokens of a frame: its text's new suffix against the previous frame of the same candidate.
A text that does not extend the previous one (a rewrite) is counted from where they differ
and marked atomic. Splitting emits intermediate cumulative frames: the same frame with the
text cut at each piece boundary, the last piece being the original frame. The cut is made
on the source, not by re-serialising: the text literal loses its tail escape by escape, and
that deletion is mapped through the outer string's escapes, so every other byte (Google's
`\\u003d` escapes, separators, metadata) is kept; only the length prefix is recomputed.
The structured copy of the answer some frames also carry (paragraph runs) is not cut.

Anything that does not frame as described switches the adapter to pass-through: from that
point every byte goes out as it came, without tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qsl

from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape, check_split
from retimer.wire.protocols.jsontext import MalformedJSON
from retimer.wire.protocols.sse_json import request_path

__all__ = ["GeminiWebAdapter"]

_CONTENT_TYPES = frozenset({
    "", "application/json+protobuf", "application/json", "text/plain",
    "application/x-protobuf", "text/javascript", "application/javascript",
    "application/x-javascript",
})
_GUARDS = tuple(")]}'".replace("]", a + "]").replace("}", b + "}").encode()
                for a in ("", "\n", "\r\n") for b in ("", "\n", "\r\n"))
_WS_BYTES = b" \t\r\n"
_MAX_DIGITS = 9
# where candidate 0 keeps each channel's cumulative text
_TEXT_PATHS: tuple[tuple[Channel, tuple[int, ...]], ...] = (
    (Channel.TEXT, (1, 0)),
    (Channel.REASONING, (37, 0, 0)),
)
_JSON_WS = re.compile(r"[ \t\n\r]*")
# one decoded character of a JSON string literal's source: a run of plain characters (one
# each), an escaped surrogate pair, a \u escape, or a short escape
_LITERAL_TOKEN = re.compile(
    r"[^\\]+|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\.",
    re.S,
)
_DECODER = json.JSONDecoder()
# each piece of a split repeats the text so far: a frame whose new text's length times its
# size passes this is sent whole (a 64 KB jump would otherwise become ~130 MB of pieces)
_MAX_SPLIT_OUTPUT = 32 << 20


class _Malformed(Exception):
    """The bytes do not frame as expected: switch to pass-through."""


@dataclass(slots=True, frozen=True)
class _TextLiteral:
    """Where a frame's growing text sits in its source, so the frame can be rebuilt with the
    text cut (not a JSONTarget: the cut is made on the source, which is never re-serialised)."""

    lead: bytes  # whitespace before the length digits (goes on the first piece)
    body: str  # everything the length counts
    json_start: int  # the JSON line within body
    json_end: int
    outer: tuple[int, int]  # the inner-JSON string literal, within the JSON line
    inner_src: str  # the inner JSON source (that literal decoded)
    literal: tuple[int, int]  # the text's string literal, within inner_src
    base: int  # characters of the text the previous frame already had


class GeminiWebAdapter(Adapter):
    """Adapter for the Gemini web app's length-prefixed, cumulative StreamGenerate frames."""

    name: ClassVar[str] = "gemini-web"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to .../BardFrontendService/StreamGenerate with `rt=c`, any JSON/text type."""
        query = request.path.split("?", 1)[1].split("#", 1)[0] if "?" in request.path else ""
        return (
            request.method.upper() == "POST"
            and request_path(request.path).endswith("BardFrontendService/StreamGenerate")
            and ("rt", "c") in parse_qsl(query)
            and content_type.split(";", 1)[0].strip().lower() in _CONTENT_TYPES
        )

    def __init__(self) -> None:
        self._buf = bytearray()
        self._mode = "start"  # start (guard not settled), frames, raw (pass-through)
        self._scan = 0  # bytes of the current frame's body already counted
        self._units = 0  # UTF-16 units in them
        self._rcid: Any = None
        self._texts: dict[Channel, str] = {}  # previous frame's text per channel
        self._failure: str | None = None

    @property
    def failure(self) -> str | None:
        return self._failure

    # -- parsing ---------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Event]:
        if self._mode == "raw":
            return [Event(raw=bytes(data))] if data else []
        self._buf += data
        events: list[Event] = []
        try:
            if self._mode == "start" and not self._guard(events):
                return events
            while (event := self._frame()) is not None:
                events.append(event)
        except _Malformed as e:
            self._failure = str(e) or "the bytes do not frame as length-prefixed chunks"
            self._mode = "raw"
            if self._buf:
                events.append(Event(raw=bytes(self._buf)))
            self._buf.clear()
        return events

    def end(self) -> list[Event]:
        """An unfinished frame (or guard) goes out as it came."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._mode = "raw"
        return [Event(raw=rest)] if rest else []

    def _guard(self, events: list[Event]) -> bool:
        """Settle the XSSI guard; False while the bytes could still become one."""
        buf = bytes(self._buf)
        for guard in _GUARDS:
            if buf.startswith(guard):
                events.append(Event(raw=guard))
                del self._buf[: len(guard)]
                self._mode = "frames"
                return True
        if any(guard.startswith(buf) for guard in _GUARDS):
            return False
        self._mode = "frames"  # no guard: frames may still follow
        return True

    def _frame(self) -> Event | None:
        """The next complete frame, or None until more bytes arrive."""
        buf = self._buf
        n = len(buf)
        lead = 0
        while lead < n and buf[lead] in _WS_BYTES:
            lead += 1
        digits = lead
        while digits < n and 48 <= buf[digits] <= 57:
            digits += 1
        if digits == n:
            if digits - lead > _MAX_DIGITS:
                raise _Malformed
            return None
        if digits == lead or digits - lead > _MAX_DIGITS:
            raise _Malformed
        want = int(buf[lead:digits])
        start = digits + self._scan
        avail = bytes(buf[start:])
        try:
            text = avail[: _complete_utf8(avail)].decode("utf-8")
            broken = False
        except UnicodeDecodeError as e:
            text = avail[: e.start].decode("utf-8")
            broken = True
        units = _units(text)
        if self._units + units < want:
            if broken:
                raise _Malformed
            self._scan += len(text.encode("utf-8"))
            self._units += units
            return None
        need = want - self._units
        k = need if units == len(text) else _chars_for_units(text, need)
        end = start + len(text[:k].encode("utf-8"))
        raw = bytes(buf[:end])
        del buf[:end]
        self._scan = self._units = 0
        return self._classify(raw, lead, raw[digits:].decode("utf-8"))

    # -- classification --------------------------------------------------------------
    def _classify(self, raw: bytes, lead: int, body: str) -> Event:
        js = _JSON_WS.match(body).end()  # type: ignore[union-attr]
        je = len(body.rstrip(" \t\n\r"))
        try:
            outer = jsontext.loads(body[js:je]) if js < je else None
            entry = outer[0] if isinstance(outer, list) and outer else None
            if not (isinstance(entry, list) and len(entry) > 2 and entry[0] == "wrb.fr"
                    and isinstance(entry[2], str)):
                return Event(raw=raw)
            inner = jsontext.loads(entry[2])
        except MalformedJSON:
            return Event(raw=raw)
        candidates = inner[4] if isinstance(inner, list) and len(inner) > 4 else None
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(candidate, list) or not candidate:
            return Event(raw=raw)
        if candidate[0] != self._rcid:
            self._rcid = candidate[0]
            self._texts = {}
        texts: list[tuple[Channel, str]] = []
        grown: list[tuple[tuple[int, ...], int]] = []
        atomic = False
        for channel, path in _TEXT_PATHS:
            current = _get(candidate, path)
            if not isinstance(current, str):
                continue
            before = self._texts.get(channel, "")
            self._texts[channel] = current
            common = len(before) if current.startswith(before) else _common_prefix(before, current)
            atomic |= common < len(before)
            if len(current) > common:
                texts.append((channel, current[common:]))
                grown.append((path, common))
        if not texts:
            return Event(raw=raw)
        payload = None
        if len(texts) == 1 and not atomic and len(texts[0][1]) * len(raw) <= _MAX_SPLIT_OUTPUT:
            path, base = grown[0]
            payload = _target(raw, lead, body, js, je, (0, 2), (4, 0, *path), base)
        return Event(raw=raw, texts=tuple(texts), payload=payload, atomic=payload is None)

    # -- splitting -------------------------------------------------------------------
    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        check_split(event, pieces)
        if len(pieces) == 1:
            return [event.raw]
        t: _TextLiteral = event.payload
        cuts: list[int] = []
        total = t.base
        for piece in pieces[:-1]:
            total += len(piece)
            cuts.append(total)
        lit_start, lit_end = t.literal
        # the text literal keeps its source up to each cut, then its closing quote
        kept = _source_offsets(t.inner_src[lit_start + 1 : lit_end - 1], cuts)
        drops = [(lit_start + 1 + k, lit_end - 1) for k in kept]  # spans of inner_src
        o_start, o_end = t.outer
        line = t.body[t.json_start : t.json_end]
        # the same spans in the JSON line, through the outer literal's escapes
        marks = sorted({i for span in drops for i in span})
        where = dict(zip(marks, _source_offsets(line[o_start + 1 : o_end - 1], marks)))
        out: list[bytes] = []
        for i, (a, b) in enumerate(drops):
            cut_line = line[: o_start + 1 + where[a]] + line[o_start + 1 + where[b] :]
            body = t.body[: t.json_start] + cut_line + t.body[t.json_end :]
            frame = (str(_units(body)) + body).encode("utf-8")
            out.append(t.lead + frame if i == 0 else frame)
        out.append(event.raw[len(t.lead) :])
        return out


# -- helpers ---------------------------------------------------------------------------
def _target(raw: bytes, lead: int, body: str, js: int, je: int, outer_path: tuple[int, ...],
            text_path: tuple[int, ...], base: int) -> _TextLiteral | None:
    """Locate the two string literals a cut touches; None unless they read back exactly."""
    line = body[js:je]
    try:
        o_start, o_end, inner_src = _locate(line, outer_path)
        t_start, t_end, text = _locate(inner_src, text_path)
        if not isinstance(inner_src, str) or not isinstance(text, str):
            return None
        # the escape tokenizer must agree with the JSON decoder on both literals
        if _source_offsets(line[o_start + 1 : o_end - 1], [len(inner_src)]) != [o_end - o_start - 2]:
            return None
        if _source_offsets(inner_src[t_start + 1 : t_end - 1], [len(text)]) != [t_end - t_start - 2]:
            return None
    except (ValueError, IndexError, RecursionError):
        return None
    return _TextLiteral(raw[:lead], body, js, je, (o_start, o_end), inner_src, (t_start, t_end), base)


def _locate(src: str, path: tuple[int, ...]) -> tuple[int, int, Any]:
    """Start, end and value of the JSON value at `path` (array indices) in the text `src`."""
    pos = _JSON_WS.match(src).end()  # type: ignore[union-attr]
    for index in path:
        if src[pos] != "[":
            raise ValueError("not an array")
        pos = _JSON_WS.match(src, pos + 1).end()  # type: ignore[union-attr]
        for _ in range(index):
            _, pos = _DECODER.raw_decode(src, pos)
            pos = _JSON_WS.match(src, pos).end()  # type: ignore[union-attr]
            if src[pos] != ",":
                raise ValueError("array too short")
            pos = _JSON_WS.match(src, pos + 1).end()  # type: ignore[union-attr]
    value, end = _DECODER.raw_decode(src, pos)
    return pos, end, value


def _source_offsets(literal: str, wanted: Sequence[int]) -> list[int]:
    """For each decoded character index in `wanted` (ascending), its offset in the literal's
    source (its length for the index one past the end); ValueError past that."""
    out: list[int] = []
    w = 0
    count = 0
    for m in _LITERAL_TOKEN.finditer(literal):
        size = m.end() - m.start() if literal[m.start()] != "\\" else 1
        while w < len(wanted) and wanted[w] < count + size:
            out.append(m.start() + (wanted[w] - count if size > 1 else 0))
            w += 1
        count += size
    while w < len(wanted) and wanted[w] == count:
        out.append(len(literal))
        w += 1
    if w < len(wanted):
        raise ValueError("index past the end of the literal")
    return out


def _get(obj: Any, path: tuple[int, ...]) -> Any:
    for index in path:
        if not isinstance(obj, list) or index >= len(obj):
            return None
        obj = obj[index]
    return obj


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _units(text: str) -> int:
    """UTF-16 code units, as JavaScript's String.length counts them."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _chars_for_units(text: str, units: int) -> int:
    """How many characters of `text` make exactly `units` UTF-16 units."""
    count = 0
    for i, ch in enumerate(text):
        if count == units:
            return i
        count += 2 if ord(ch) > 0xFFFF else 1
        if count > units:
            raise _Malformed  # the length ends inside a surrogate pair
    return len(text)


def _complete_utf8(data: bytes) -> int:
    """Length of `data` without a multi-byte UTF-8 sequence cut at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead (or ASCII) byte
            size = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(data) - back if size > back else len(data)
    return len(data)
