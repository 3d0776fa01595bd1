"""What a stream has received and not scheduled yet: bytes not parsed (handed out in slices,
with their arrival times), events parsed and not scheduled, and the pieces of a split event.

Why: a fast upstream can deliver a whole answer (10,000 tokens) in one chunk, as many events
or as one. Parsing and splitting all of it before the first token leaves costs a third of a
second of CPU, in the proxy's one thread, inside the first token's wait. The pacer works
instead only as far as its schedule needs (what is due by now, and the next emission), so the
cost is spread over the stream and paid as tokens fall due. This never changes the result:
every adapter reads its bytes incrementally, each slice keeps the arrival time of the chunk it
came from, and a split event's pieces are serialised in order, one network event at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from retimer.wire.protocols.base import Channel, Event

__all__ = ["SLICE_BYTES", "Backlog", "PendingSplit"]

SLICE_BYTES = 4096  # parsed at a time: ~20 OpenAI events, well under a millisecond of CPU


@dataclass(slots=True)
class PendingSplit:
    """A split event's pieces still to schedule: (tokens, closes its network event, due) each,
    and their bytes, serialised as they are taken (`Adapter.split_lazily`)."""

    datas: Iterator[bytes]
    plan: deque[tuple[int, bool, float]]
    channel: Channel
    size: int  # the event's upstream bytes, counted as held until its last piece is scheduled
    arrival: float


class Backlog:
    """Chunks in arrival order (`take` gives the next slice of at most SLICE_BYTES bytes), the
    events parsed from them and not scheduled yet, and the split event being scheduled."""

    __slots__ = ("_chunks", "_offset", "end_at", "events", "split")

    def __init__(self) -> None:
        self._chunks: deque[tuple[bytes, float]] = deque()
        self._offset = 0  # bytes of the head chunk already taken
        self.end_at: float | None = None  # the upstream ended then; the adapter's end is due
        self.events: deque[tuple[Event, float]] = deque()  # parsed, with their arrival times
        self.split: PendingSplit | None = None

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
        """Forget the bytes and events (the pacer stopped parsing; the split is its business)."""
        self._chunks.clear()
        self._offset = 0
        self.end_at = None
        self.events.clear()

    def __bool__(self) -> bool:
        """Bytes wait to be parsed."""
        return bool(self._chunks)

    @property
    def drained(self) -> bool:
        """Nothing waits: no bytes, no parsed event, no piece of a split event."""
        return not self._chunks and not self.events and self.split is None
