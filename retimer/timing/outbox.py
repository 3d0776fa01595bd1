"""What a stream has scheduled and not yet handed to the caller: emissions in upstream order.

Two parts: the queue of emissions with their due times, and the open network event, whose
token pieces gather until the profile's chunk size is reached (or a non-token event or the
end cuts it short). An emission is never due before the one queued ahead of it, so the
stream keeps its upstream order whatever the due times say.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from retimer.wire.protocols.base import Channel

__all__ = ["Emission", "Outbox"]


@dataclass(slots=True)
class Emission:
    """Bytes that leave together at `due` (monotonic seconds)."""

    due: float
    data: bytes
    tokens: int
    channel: Channel | None


class Outbox:
    """Scheduled emissions and the open network event, with the bytes they hold counted."""

    __slots__ = ("_queue", "queued_bytes", "last_due", "_open", "_open_tokens", "_open_due",
                 "_open_channel")

    def __init__(self, start: float) -> None:
        self._queue: deque[Emission] = deque()
        self.queued_bytes = 0  # bytes queued or in the open event: scheduled, not yet popped
        self.last_due = start  # the latest due time queued: nothing after it may leave earlier
        self._open: list[bytes] = []
        self._open_tokens = 0
        self._open_due = 0.0
        self._open_channel: Channel | None = None

    def push(self, emission: Emission) -> None:
        """Queue `emission`, no earlier than the one ahead of it."""
        if emission.due < self.last_due:
            emission.due = self.last_due  # keep upstream order
        self.last_due = emission.due
        self._queue.append(emission)
        self.queued_bytes += len(emission.data)

    def add_piece(self, data: bytes, tokens: int, due: float, channel: Channel) -> None:
        """A piece of a token event joins the open network event, which is due with its last token."""
        self._open.append(data)
        self.queued_bytes += len(data)
        self._open_tokens += tokens
        self._open_due = due
        self._open_channel = channel

    def close_open(self) -> bool:
        """Queue the open network event as one emission; False when none was open."""
        if not self._open:
            return False
        data = self._open[0] if len(self._open) == 1 else b"".join(self._open)
        self.queued_bytes -= len(data)  # counted while open; push counts it again
        self.push(Emission(self._open_due, data, self._open_tokens, self._open_channel))
        self._open = []
        self._open_tokens = 0
        return True

    def due_by(self, until: float) -> bool:
        """The queue is empty and the open event's last token is due by `until`: time to close it."""
        return not self._queue and bool(self._open) and self._open_due <= until

    def pop_due(self, until: float) -> list[Emission]:
        """Every queued emission due at or before `until`, in order."""
        out: list[Emission] = []
        queue = self._queue
        while queue and queue[0].due <= until:
            e = queue.popleft()
            self.queued_bytes -= len(e.data)
            out.append(e)
        return out

    def pop_next(self) -> Emission | None:
        """The first queued emission, whenever it is due (None: the queue is empty)."""
        if not self._queue:
            return None
        e = self._queue.popleft()
        self.queued_bytes -= len(e.data)
        return e

    def pop_all(self) -> list[Emission]:
        """Every queued emission (close the open event first to include it)."""
        out = list(self._queue)
        self._queue.clear()
        self.queued_bytes = 0
        return out

    def due_now(self, now: float) -> None:
        """Nothing queued waits past `now` any more."""
        for e in self._queue:
            e.due = min(e.due, now)
        self.last_due = min(self.last_due, now)

    @property
    def horizon(self) -> float:
        """How far the schedule reaches: the latest due time queued or in the open event."""
        return max(self.last_due, self._open_due) if self._open else self.last_due

    def next_due(self) -> float | None:
        """When the first emission is due: the queue's head, else the open event's last token."""
        if self._queue:
            return self._queue[0].due
        return self._open_due if self._open else None

    @property
    def pending(self) -> int:
        """Emissions queued (the open event not counted)."""
        return len(self._queue)

    @property
    def open_pieces(self) -> int:
        """Pieces gathered in the open network event."""
        return len(self._open)

    @property
    def empty(self) -> bool:
        """Nothing queued and no open event."""
        return not self._queue and not self._open
