"""A line-per-event adapter and a fixed timing: the smallest parts a pacer can be driven with."""

from __future__ import annotations

from collections.abc import Sequence

from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape


class LineAdapter(Adapter):
    """A toy wire format: `T:<text>\\n` carries answer text, any other line carries none."""

    name = "lines"

    def __init__(self) -> None:
        self.buf = b""

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        return True

    def _event(self, raw: bytes) -> Event:
        if raw.startswith(b"T:") and raw.endswith(b"\n"):
            return Event(raw, ((Channel.TEXT, raw[2:-1].decode()),))
        return Event(raw)

    def feed(self, data: bytes) -> list[Event]:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [self._event(line + b"\n") for line in lines]

    def end(self) -> list[Event]:
        rest, self.buf = self.buf, b""
        return [Event(rest)] if rest else []

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        assert "".join(pieces) == event.text
        return [b"T:" + p.encode() + b"\n" for p in pieces]


class FixedTiming:
    def __init__(self, ttft: float, gap: float, chunk: int = 1) -> None:
        self.ttft = ttft
        self._gap = gap
        self._chunk = chunk

    def gap(self) -> float:
        return self._gap

    def chunk_size(self) -> int:
        return self._chunk


def text_of(data: bytes) -> str:
    return "".join(e.text for e in LineAdapter().feed(data))
