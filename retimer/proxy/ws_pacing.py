"""Pacing WebSocket messages: drop each server message, re-send it on the profile's schedule.

A WebSocket to an LLM service carries turns: the client sends a request message, the server
streams its answer as many messages. Each client message starts a new turn with its own
timing (TTFT counts from it) and its own record; server messages before the first client
message form turn 0, timed from the connection's start. Messages are re-sent with mitmproxy's
public `inject.websocket` command from a loop timer; the bridge keeps the server's later events
(including its close) back while messages are held, so nothing overtakes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mitmproxy import ctx, http

from retimer.proxy.bridge_websocket import WebSocketOrder
from retimer.timing import emission
from retimer.timing.pacer import StreamPacer
from retimer.wire.protocols.websocket import decode_messages, encode_message

logger = logging.getLogger("retimer")

NewPacer = Callable[[http.HTTPFlow, float], tuple[StreamPacer, int]]
TurnDone = Callable[[http.HTTPFlow, StreamPacer, float, str, int], None]


@dataclass(slots=True)
class Turn:
    pacer: StreamPacer
    index: int
    messages: int = 0  # server messages fed: a turn with any gets a record, tokens or not


@dataclass(slots=True)
class PacedWebSocket:
    flow: http.HTTPFlow
    turns: deque[Turn] = field(default_factory=deque)
    timer: asyncio.TimerHandle | None = None
    timer_due: float = 0.0
    closed: bool = False
    in_flight: int = 0  # injected messages mitmproxy has not relayed yet

    def holding(self) -> bool:
        return self.in_flight > 0 or any(t.pacer.next_due() is not None for t in self.turns)


class WebSocketPacing:
    """The WebSocket side of the addon: one PacedWebSocket per paced connection."""

    def __init__(self, order: WebSocketOrder, new_pacer: NewPacer, on_done: TurnDone) -> None:
        self._order = order  # the bridge's: keeps a socket's server events behind held messages
        self._new_pacer = new_pacer
        self._on_done = on_done
        self.sockets: dict[str, PacedWebSocket] = {}
        self.draining = False  # shutting down: held messages go out at once

    def start(self, flow: http.HTTPFlow) -> None:
        ws = PacedWebSocket(flow)
        self.sockets[flow.id] = ws
        self._new_turn(ws, time.monotonic())
        self._order.hold(flow, ws.holding)

    def message(self, flow: http.HTTPFlow) -> None:
        ws = self.sockets.get(flow.id)
        if ws is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.injected:
            if not message.from_client:
                ws.in_flight = max(0, ws.in_flight - 1)
            return
        now = time.monotonic()
        if message.from_client:
            ws.turns[-1].pacer.finish(now)
            self._new_turn(ws, now)
            self._retire(ws)
            return
        message.drop()
        turn = ws.turns[-1]
        turn.messages += 1
        turn.pacer.feed(encode_message(message.content, is_text=message.is_text), now)
        self._schedule(ws, now)

    def drain(self) -> None:
        """The proxy is shutting down: every held message goes out now, later ones at once."""
        self.draining = True
        for ws in list(self.sockets.values()):
            if ws.timer is not None:
                ws.timer.cancel()
                ws.timer = None
            self._emit(ws)

    def shutdown(self, outcome: str) -> None:
        """Record every open WebSocket's turns as ended with `outcome` (the proxy stops)."""
        for ws in list(self.sockets.values()):
            self.end(ws.flow, outcome)

    def end(self, flow: http.HTTPFlow, outcome: str | None = None) -> None:
        ws = self.sockets.pop(flow.id, None)
        self._order.release(flow)
        if ws is None:
            return
        ws.closed = True
        if ws.timer is not None:
            ws.timer.cancel()
        now = time.monotonic()
        lost = 0
        for turn in ws.turns:
            turn.pacer.finish(now)
            left = turn.pacer.pop_all()
            lost += len(left)
            if turn.messages:
                ended = outcome or ("client-gone" if left else "complete")
                self._on_done(flow, turn.pacer, now, ended, turn.index)
        if lost:
            closed_by = "client" if flow.websocket and flow.websocket.closed_by_client else "peer"
            logger.info(f"retimer: WebSocket closed by the {closed_by} with {lost} message(s) held")

    # -- internals -----------------------------------------------------------------------
    def _new_turn(self, ws: PacedWebSocket, now: float) -> None:
        pacer, index = self._new_pacer(ws.flow, now)
        ws.turns.append(Turn(pacer, index))

    def _retire(self, ws: PacedWebSocket) -> None:
        """Finished turns with nothing left to send are recorded and dropped."""
        while len(ws.turns) > 1 and ws.turns[0].pacer.done:
            turn = ws.turns.popleft()
            if turn.messages:
                self._on_done(ws.flow, turn.pacer, time.monotonic(), "complete", turn.index)

    def _schedule(self, ws: PacedWebSocket, now: float) -> None:
        due = next((d for t in ws.turns if (d := t.pacer.next_due()) is not None), None)
        if due is None or ws.closed:
            return
        if not emission.needs_timer(due, ws.timer_due if ws.timer is not None else None):
            return
        if ws.timer is not None:
            ws.timer.cancel()
        delay = 0.0 if self.draining else emission.timer_delay(due, now)
        ws.timer_due = due
        ws.timer = asyncio.get_running_loop().call_later(delay, self._emit, ws)

    def _emit(self, ws: PacedWebSocket) -> None:
        ws.timer = None
        if ws.closed:
            return
        now = time.monotonic()
        for turn in ws.turns:
            if turn.pacer.next_due() is None:
                continue  # earlier turns are drained: later ones may send
            batch = emission.to_send(turn.pacer, now, self.draining)
            for sent in batch:
                for payload, is_text in decode_messages(sent.data):
                    ws.in_flight += 1
                    ctx.master.commands.call("inject.websocket", ws.flow, True, payload, is_text)
            turn.pacer.sent(batch, now)
            if turn.pacer.next_due() is not None:
                break  # this turn still holds messages: later turns wait behind it
        self._retire(ws)
        self._schedule(ws, time.monotonic())
