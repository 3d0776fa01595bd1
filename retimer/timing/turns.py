"""A WebSocket's playout, turn by turn, h11-style like an HTTP stream's (`retimer.timing.playout`).

A WebSocket to an LLM service carries turns: the client sends a request message, the server
streams its answer as many messages. Each client message starts a new turn with its own timing
(TTFT counts from it, the shell draws its pacer) and its own record; server messages before the
first client message form turn 0, timed from the connection's start. The shell feeds messages
(as the WebSocket adapter's records) and asks `step(now, armed)` on each wake: the records to
send now, a timer to arm, and the turns that are over. A turn's messages go in order, and a
later turn's wait behind an earlier turn's held ones.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from retimer.timing import emission
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import PlayoutPool, Step, Turn

__all__ = ["ClosedTurn", "WebSocketPlayout"]


class ClosedTurn(NamedTuple):
    """A turn of a WebSocket that closed: `left` messages were still held (never sent)."""

    turn: Turn
    left: int


class WebSocketPlayout:
    """The turns of one paced WebSocket."""

    __slots__ = ("_pool", "turns")

    def __init__(self, pacer: StreamPacer, index: int, pool: PlayoutPool) -> None:
        self._pool = pool
        self.turns: deque[Turn] = deque([Turn(pacer, index)])

    @property
    def holding(self) -> bool:
        """Messages have arrived that the client has not been sent yet."""
        return any(t.pacer.next_due() is not None for t in self.turns)

    def client_message(self, now: float, pacer: StreamPacer, index: int) -> Step:
        """The client sent a message at `now`: the current turn's upstream is over and a new
        turn starts, timed by `pacer`. The step names the turns that are over."""
        self.turns[-1].pacer.finish(now)
        self.turns.append(Turn(pacer, index))
        return Step(b"", turns=self._retire())

    def server_message(self, record: bytes, now: float, armed: float | None,
                       arrived: float | None = None) -> Step:
        """A server message (as the WebSocket adapter's record), seen at `now`, whose bytes
        reached the proxy at `arrived` (earlier when they waited behind held messages; the
        upstream's timing is theirs): when to wake to send it (nothing goes out before)."""
        turn = self.turns[-1]
        turn.messages += 1
        turn.pacer.feed(record, now if arrived is None else min(arrived, now))
        return self._wake(now, armed, b"", ())

    def step(self, now: float, armed: float | None) -> Step:
        """A wake at `now`: the records due (a turn's, then the next turn's once the earlier one
        has sent all it holds), the next timer and the turns that are over."""
        draining = self._pool.draining
        parts: list[bytes] = []
        for turn in self.turns:
            pacer = turn.pacer
            if pacer.next_due() is None:
                continue  # earlier turns are drained: later ones may send
            batch = emission.to_send(pacer, now, draining)
            parts.extend(e.data for e in batch)
            pacer.sent(batch, now)
            if pacer.next_due() is not None:
                break  # this turn still holds messages: later turns wait behind it
        return self._wake(now, armed, b"".join(parts), self._retire())

    def close(self, now: float) -> list[ClosedTurn]:
        """The WebSocket closed at `now`: every turn is over, what is held is never sent."""
        closed = []
        for turn in self.turns:
            turn.pacer.finish(now)
            closed.append(ClosedTurn(turn, len(turn.pacer.pop_all())))
        return closed

    def _wake(self, now: float, armed: float | None, data: bytes, retired: tuple[Turn, ...]) -> Step:
        due = next((d for t in self.turns if (d := t.pacer.next_due()) is not None), None)
        if due is None or not emission.needs_timer(due, armed):
            return Step(data, turns=retired)
        delay = 0.0 if self._pool.draining else emission.timer_delay(due, now)
        return Step(data, due, delay, turns=retired)

    def _retire(self) -> tuple[Turn, ...]:
        """Finished turns with nothing left to send leave (the shell records those with messages)."""
        retired: list[Turn] = []
        while len(self.turns) > 1 and self.turns[0].pacer.done:
            retired.append(self.turns.popleft())
        return tuple(retired)
