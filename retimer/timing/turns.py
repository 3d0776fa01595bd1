"""A WebSocket's playout, turn by turn, h11-style like an HTTP stream's (`retimer.timing.playout`).

A WebSocket to an LLM service carries turns: the client sends a request message, the server
streams its answer as many messages. Each client message starts a new turn with its own timing
(TTFT counts from it) and its own record; server messages before the first client message form
turn 0, timed from the connection's start. The shell draws a turn's pacer when the turn's first
server message comes (`asked` says since when the turn runs and what opened it): estimating
the client message's prompt then, not while it is on its way, keeps that cost (milliseconds for
an agent's 50 kB request) out of the upstream's time. A turn ends when its last
message is sent (`Turn.last_sent`), not when the next one starts: the client's pause between
turns (its tools, its user) is no part of any turn. The shell feeds messages
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

__all__ = ["Asked", "ClosedTurn", "WebSocketPlayout"]


class Asked(NamedTuple):
    """A client message that opened a turn no server message has answered yet."""

    at: float  # when it came: the turn's start
    content: bytes
    answered: int  # the tokens the turn before it got from the upstream
    number: int  # the turn's place in the socket


class ClosedTurn(NamedTuple):
    """A turn of a WebSocket that closed: `left` messages were still held (never sent)."""

    turn: Turn
    left: int


class WebSocketPlayout:
    """The turns of one paced WebSocket."""

    __slots__ = ("_asked", "_pool", "_told", "turns")

    def __init__(self, pacer: StreamPacer, index: int, pool: PlayoutPool) -> None:
        self._pool = pool
        self.turns: deque[Turn] = deque([Turn(pacer, index)])
        self._asked: Asked | None = None
        self._told = 0  # client messages so far

    @property
    def holding(self) -> bool:
        """Messages have arrived that the client has not been sent yet."""
        return any(t.pacer.next_due() is not None for t in self.turns)

    @property
    def asked(self) -> Asked | None:
        """The client message whose turn has no server message yet: the shell draws that
        turn's pacer (`open_turn`) before it feeds the turn's first server message."""
        return self._asked

    def client_message(self, now: float, content: bytes) -> Step:
        """The client sent `content` at `now`: the current turn's upstream is over and a new
        turn starts (a message no server message answered is replaced by the next one). The
        step names the turns that are over."""
        if self._asked is None:
            last = self.turns[-1]
            last.pacer.finish(now)
            answered = last.pacer.stats.upstream.tokens
        else:
            answered = self._asked.answered
        self._told += 1
        self._asked = Asked(now, content, answered, self._told)
        return Step(b"", turns=self._retire())

    def open_turn(self, pacer: StreamPacer, index: int) -> None:
        """The turn `asked` opened gets its timing (`pacer`, drawn with stream `index`)."""
        assert self._asked is not None, "no client message awaits its turn"
        self.turns.append(Turn(pacer, index, self._asked.number))
        self._asked = None

    def server_message(self, record: bytes, now: float, armed: float | None,
                       arrived: float | None = None) -> Step:
        """A server message (as the WebSocket adapter's record), seen at `now`, whose bytes
        reached the proxy at `arrived` (earlier when they waited behind held messages; the
        upstream's timing is theirs): when to wake to send it (nothing goes out before)."""
        assert self._asked is None, "open_turn first: a client message awaits its turn"
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
            if batch:
                parts.extend(e.data for e in batch)
                pacer.sent(batch, now)
                turn.last_sent = now
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
        """Finished turns with nothing left to send leave (the shell records those with messages);
        the last stays to take the server's messages, unless a client message has ended it."""
        retired: list[Turn] = []
        keep = 0 if self._asked is not None else 1
        while len(self.turns) > keep and self.turns[0].pacer.done:
            retired.append(self.turns.popleft())
        return tuple(retired)
