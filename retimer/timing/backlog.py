"""Upstream bytes a stream has not parsed yet, with their arrival times, handed out in slices.

Why: a fast upstream can deliver a whole answer (10,000 tokens) in one chunk. Parsing and
splitting all of it before the first token leaves costs a third of a second of CPU, in the
proxy's one thread, inside the first token's wait. The pacer parses instead only as far as its
schedule needs (what is due by now, and the next emission), so the cost is spread over the
stream and paid as tokens fall due. Slicing never changes what is parsed: every adapter reads
its bytes incrementally, and each slice keeps the arrival time of the chunk it came from.
"""

from __future__ import annotations

from collections import deque

__all__ = ["SLICE_BYTES", "Backlog"]

SLICE_BYTES = 4096  # parsed at a time: ~20 OpenAI events, well under a millisecond of CPU


class Backlog:
    """Chunks in arrival order; `take` gives the next slice of at most SLICE_BYTES bytes."""

    __slots__ = ("_chunks", "_offset", "end_at")

    def __init__(self) -> None:
        self._chunks: deque[tuple[bytes, float]] = deque()
        self._offset = 0  # bytes of the head chunk already taken
        self.end_at: float | None = None  # the upstream ended then; the adapter's end is due

    def push(self, data: bytes, arrival: float) -> None:
        if data:
            self._chunks.append((data, arrival))

    def take(self) -> tuple[bytes, float]:
        """The next slice and its arrival time (call only while the backlog is not empty)."""
        data, arrival = self._chunks[0]
        start = self._offset
        if start == 0 and len(data) <= SLICE_BYTES:
            self._chunks.popleft()
            return data, arrival
        end = start + SLICE_BYTES
        if end >= len(data):
            self._chunks.popleft()
            self._offset = 0
        else:
            self._offset = end
        return data[start:end], arrival

    def clear(self) -> None:
        self._chunks.clear()
        self._offset = 0
        self.end_at = None

    def __bool__(self) -> bool:
        return bool(self._chunks)
