"""Incremental Server-Sent-Events framing, sans-io in the style of h11.

Adapters must pass untouched events out byte-identical, so the parser never rebuilds an
event from its fields: each `SSEEvent` keeps the exact bytes it was parsed from (its comment
and blank lines included), and concatenating every `raw` in order gives back the input.
Fields are parsed per the WHATWG "event stream interpretation" rules: LF, CRLF and CR all end
a line, one space after the colon is dropped, a UTF-8 BOM at the very start is ignored.

Input may be cut anywhere (inside a CRLF pair, a multi-byte character, a `data:` line): bytes
are only interpreted once their line is complete, so the events do not depend on how the
stream was chunked. The price is that a CR at the very end of the fed bytes is held until the
next byte (or `end()`) tells whether it is half of a CRLF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from retimer.wire.media import is_event_stream

__all__ = ["CR", "CRLF", "LF", "SSEEvent", "SSEParser", "format_event", "is_event_stream"]

LF = "\n"
CRLF = "\r\n"
CR = "\r"

_LINE_END = re.compile(rb"[\r\n]")
_BOM = b"\xef\xbb\xbf"
_SPLIT_LINES = re.compile(r"\r\n|\r|\n")


# not frozen: one is made per event and a frozen dataclass __init__ costs ~4x; treat as read-only
@dataclass(slots=True)
class SSEEvent:
    """One SSE event block as it arrived, with its parsed fields.

    `raw` holds the event's exact bytes: any blank and comment lines before it, its lines, and
    the blank line that ended it. `raw[:body_start]` is the part before its first field line
    (what must survive if the event is re-serialised). `complete` is False only for the
    trailing bytes returned by `end()` (an event the upstream never terminated): SSE clients
    drop those, so adapters should not treat them as content.
    """

    raw: bytes
    event: str | None = None
    data: str | None = None  # data lines joined with "\n"; None when there was no data line
    id: str | None = None
    retry: int | None = None
    comments: tuple[str, ...] = ()  # comment texts, one optional leading space removed
    newline: str = LF  # line ending of the event's first line: LF, CRLF or CR
    body_start: int = 0
    complete: bool = True

    @property
    def preamble(self) -> bytes:
        """Blank and comment lines that precede the first field line."""
        return self.raw[: self.body_start]


@dataclass(slots=True)
class _Block:
    """Fields gathered for the event being parsed."""

    has_lines: bool = False
    event: str | None = None
    data: list[str] | None = None
    id: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)
    newline: str | None = None
    body_start: int | None = None


class SSEParser:
    """Feed bytes, get complete `SSEEvent`s; `end()` returns whatever is left, verbatim."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._event_start = 0  # offset in _buf where the pending event's bytes begin
        self._line_start = 0  # offset of the line being scanned
        self._scan = 0  # where to resume looking for a line ending
        self._at_stream_start = True
        self._last_newline = LF
        self._block = _Block()
        self._ended = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Parse more bytes; return the events they complete, in order."""
        if self._ended:
            raise RuntimeError("SSEParser.feed() called after end()")
        if not data:
            return []
        buf = self._buf
        buf += data
        events: list[SSEEvent] = []
        n = len(buf)
        pos = self._scan
        while True:
            if pos < n and pos == self._event_start == self._line_start and not self._at_stream_start:
                end = self._plain_event(pos, events)
                if end:
                    pos = self._event_start = self._line_start = end
                    continue
            m = _LINE_END.search(buf, pos)
            if m is None:
                pos = n
                break
            i = m.start()
            if buf[i] == 13:  # CR: a CRLF pair may be cut right after it
                if i + 1 == n:
                    pos = i
                    break
                end = i + 2 if buf[i + 1] == 10 else i + 1
            else:
                end = i + 1
            self._line(i, end, events)
            pos = end
        self._scan = pos
        self._compact()
        return events

    def end(self) -> list[SSEEvent]:
        """The stream ended: return the last event and any trailing bytes, verbatim."""
        if self._ended:
            return []
        self._ended = True
        events: list[SSEEvent] = []
        buf = self._buf
        n = len(buf)
        if self._scan < n:  # a held CR: now known to be a line ending on its own
            self._line(self._scan, n, events)
        if self._line_start < n:  # an unterminated last line still counts for its fields
            self._line(n, n, events)
        if self._event_start < n:
            events.append(self._make_event(n, complete=False))
        buf.clear()
        self._event_start = self._line_start = self._scan = 0
        return events

    # -- internals -------------------------------------------------------------------
    def _plain_event(self, start: int, events: list[SSEEvent]) -> int:
        """The common case in one step: a whole `[event: NAME LF] data: PAYLOAD LF LF` block at
        `start`, LF endings only, appended as the line-by-line path would make it; the offset
        after it, or 0 to take the general path (any other shape, or not all arrived yet)."""
        buf = self._buf
        stop = buf.find(b"\n\n", start)
        if stop < 0 or buf.find(b"\r", start, stop) >= 0:
            return 0
        name: str | None = None
        line = start
        if buf.startswith(b"event: ", start):
            line = buf.find(b"\n", start) + 1
            if line > stop:
                return 0
            name = buf[start + 7:line - 1].decode("utf-8", "replace")
        if not buf.startswith(b"data: ", line) or buf.find(b"\n", line, stop) >= 0:
            return 0
        events.append(SSEEvent(
            raw=bytes(buf[start:stop + 2]), event=name,
            data=buf[line + 6:stop].decode("utf-8", "replace"), newline=LF,
        ))
        self._last_newline = LF
        return stop + 2

    def _line(self, stop: int, end: int, events: list[SSEEvent]) -> None:
        """Interpret the line buf[line_start:stop]; its ending runs to `end`."""
        buf = self._buf
        start = self._line_start
        line = bytes(buf[start:stop])
        self._line_start = end
        if self._at_stream_start:
            self._at_stream_start = False
            if line.startswith(_BOM):
                line = line[len(_BOM) :]
        newline = buf[stop:end].decode("ascii") if end > stop else None
        block = self._block
        if not line:
            if end > stop and block.has_lines:
                events.append(self._make_event(end, complete=True))
            return
        if not block.has_lines:
            block.has_lines = True
            block.newline = newline
        if newline is not None:
            self._last_newline = newline
        text = line.decode("utf-8", "replace")
        if text.startswith(":"):
            value = text[1:]
            block.comments.append(value[1:] if value.startswith(" ") else value)
            return
        if block.body_start is None:
            block.body_start = start - self._event_start
        name, colon, value = text.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            if block.data is None:
                block.data = []
            block.data.append(value)
        elif name == "event":
            block.event = value
        elif name == "id":
            if "\0" not in value:
                block.id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                block.retry = int(value)

    def _make_event(self, end: int, *, complete: bool) -> SSEEvent:
        """Cut buf[event_start:end] into an event and reset the field state."""
        block = self._block
        raw = bytes(self._buf[self._event_start : end])
        self._event_start = end
        self._block = _Block()
        return SSEEvent(
            raw=raw,
            event=block.event,
            data=None if block.data is None else "\n".join(block.data),
            id=block.id,
            retry=block.retry,
            comments=tuple(block.comments),
            newline=block.newline or self._last_newline,
            body_start=len(raw) if block.body_start is None else block.body_start,
            complete=complete,
        )

    def _compact(self) -> None:
        """Drop the bytes of events already returned."""
        cut = self._event_start
        if cut:
            del self._buf[:cut]
            self._event_start = 0
            self._line_start -= cut
            self._scan -= cut


def format_event(
    event_name: str | None,
    data: str,
    newline: str = LF,
    *,
    event_id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Serialise one event: optional `event:` line, one `data:` line per line of `data`.

    Used for the pieces of a split event, which keep the original's name and line endings.
    """
    if newline not in (LF, CRLF, CR):
        raise ValueError(f"not an SSE line ending: {newline!r}")
    lines: list[str] = []
    if event_name is not None:
        lines.append(f"event: {event_name}")
    if "\n" in data or "\r" in data:
        lines.extend(f"data: {part}" for part in _SPLIT_LINES.split(data))
    else:  # one line (compact JSON always is): no split to make
        lines.append(f"data: {data}")
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    return (newline.join(lines) + newline + newline).encode("utf-8")

