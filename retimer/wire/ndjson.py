"""Incremental newline-delimited JSON framing, sans-io like `retimer.wire.sse`.

Each `NDJSONLine` keeps the exact bytes it was cut from (line ending included), so
concatenating every `raw` in order gives back the input. Lines end at LF (a CR before it is
part of the ending); LF never occurs inside a multi-byte UTF-8 sequence, so bytes can be cut
anywhere and the lines do not depend on the chunking. The last line may lack its newline
(Ollama ends streams that way): `end()` returns it with `terminated=False`.
"""

from __future__ import annotations

from dataclasses import dataclass

from retimer.wire.media import is_ndjson

__all__ = ["NDJSONLine", "NDJSONParser", "is_ndjson"]


# not frozen: one is made per event and a frozen dataclass __init__ costs ~4x; treat as read-only
@dataclass(slots=True)
class NDJSONLine:
    """One line as it arrived: `raw` with its ending, `text` without it (None: not UTF-8)."""

    raw: bytes
    text: str | None
    newline: str  # "\n", "\r\n", or "" for an unterminated last line

    @property
    def terminated(self) -> bool:
        return self.newline != ""


class NDJSONParser:
    """Feed bytes, get complete lines; `end()` returns an unterminated tail, verbatim."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0
        self._ended = False

    def feed(self, data: bytes) -> list[NDJSONLine]:
        """Cut more bytes into lines; return the lines they complete, in order."""
        if self._ended:
            raise RuntimeError("NDJSONParser.feed() called after end()")
        buf = self._buf
        buf += data
        lines: list[NDJSONLine] = []
        start = 0
        while (i := buf.find(b"\n", max(start, self._scan))) >= 0:
            lines.append(_line(bytes(buf[start : i + 1])))
            start = i + 1
        if start:
            del buf[:start]
        self._scan = len(buf)
        return lines

    def end(self) -> list[NDJSONLine]:
        """The stream ended: return the unterminated last line, if any."""
        if self._ended:
            return []
        self._ended = True
        tail = bytes(self._buf)
        self._buf.clear()
        return [_line(tail)] if tail else []


def _line(raw: bytes) -> NDJSONLine:
    if raw.endswith(b"\r\n"):
        body, newline = raw[:-2], "\r\n"
    elif raw.endswith(b"\n"):
        body, newline = raw[:-1], "\n"
    else:
        body, newline = raw, ""
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return NDJSONLine(raw=raw, text=text, newline=newline)

