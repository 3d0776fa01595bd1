"""Pacing WebSocket messages: drop each server message, re-send it on the profile's schedule.

The turns and their timing are the core's (`retimer.timing.turns.WebSocketPlayout`): this feeds
it the messages mitmproxy shows in `websocket_message` and, on every wake of the socket's one
loop timer, asks it what to send (`step`). Messages are re-sent with mitmproxy's public
`inject.websocket` command; the bridge's `WebSocketOrder` keeps the server's later events
(including its close) back while messages are held, so nothing overtakes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from mitmproxy import ctx, http

from retimer.proxy.bridge.websocket_order import WebSocketOrder
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import PlayoutPool, Step, Turn
from retimer.timing.turns import WebSocketPlayout
from retimer.wire.prompt import TurnPrompts
from retimer.wire.protocols.websocket import decode_messages, encode_message

logger = logging.getLogger("retimer")

NewPacer = Callable[[http.HTTPFlow, float, bytes, TurnPrompts, int], tuple[StreamPacer, int]]
TurnDone = Callable[[http.HTTPFlow, Turn, float, str], None]


@dataclass(slots=True)
class PacedWebSocket:
    flow: http.HTTPFlow
    playout: WebSocketPlayout
    prompts: TurnPrompts  # the turns' prompts, a Responses chain followed from turn to turn
    timer: asyncio.TimerHandle | None = None
    timer_due: float = 0.0
    closed: bool = False
    in_flight: int = 0  # injected messages mitmproxy has not relayed yet

    def holding(self) -> bool:
        return self.in_flight > 0 or self.playout.holding

    @property
    def armed(self) -> float | None:
        return self.timer_due if self.timer is not None else None


class WebSocketPacing:
    """The WebSocket side of the Retimer addon: one PacedWebSocket per paced connection.
    `new_pacer` draws a turn's timing (given its start, the client message that opened it, the
    socket's prompts and the tokens the turn before answered), `on_done` records a turn that is over, with the time it
    ended: its last message sent (the close, for a turn cut off with messages held)."""

    def __init__(self, order: WebSocketOrder, pool: PlayoutPool, new_pacer: NewPacer, on_done: TurnDone) -> None:
        self._order = order  # the bridge's: keeps a socket's server events behind held messages
        self._pool = pool  # the bridge's: whether the proxy drains
        self._new_pacer = new_pacer
        self._on_done = on_done
        self.sockets: dict[str, PacedWebSocket] = {}

    def start(self, flow: http.HTTPFlow) -> None:
        prompts = TurnPrompts()
        pacer, index = self._new_pacer(flow, time.monotonic(), b"", prompts, 0)
        ws = PacedWebSocket(flow, WebSocketPlayout(pacer, index, self._pool), prompts)
        self.sockets[flow.id] = ws
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
            self._record(ws, ws.playout.client_message(now, message.content))
            return
        message.drop()
        # bytes that waited behind held messages count from when they came, not from now
        arrived = self._order.arrival(flow)
        came = now if arrived is None else min(arrived, now)
        if (asked := ws.playout.asked) is not None:  # the turn's first answer: draw its timing
            pacer, index = self._new_pacer(flow, asked.at, asked.content, ws.prompts, asked.answered)
            ws.playout.open_turn(pacer, index)
            now = time.monotonic()  # the draw took a moment: the timer counts from after it
        record = encode_message(message.content, is_text=message.is_text)
        self._arm(ws, ws.playout.server_message(record, now, ws.armed, came))

    def drain(self) -> None:
        """The proxy is shutting down (the pool drains): every held message goes out now,
        later ones at once."""
        for ws in list(self.sockets.values()):
            if ws.timer is not None:
                ws.timer.cancel()
                ws.timer = None
            self._wake(ws)

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
        for turn, left in ws.playout.close(now):
            lost += left
            if turn.messages:
                ended = outcome or ("client-gone" if left else "complete")
                last = now if left or turn.last_sent is None else turn.last_sent
                self._on_done(flow, turn, last, ended)
        if lost:
            closed_by = "client" if flow.websocket and flow.websocket.closed_by_client else "peer"
            logger.info(f"retimer: WebSocket closed by the {closed_by} with {lost} message(s) held")

    # -- internals -----------------------------------------------------------------------
    def _wake(self, ws: PacedWebSocket) -> None:
        ws.timer = None
        if ws.closed:
            return
        step = ws.playout.step(time.monotonic(), None)
        if step.data:
            for payload, is_text in decode_messages(step.data):
                ws.in_flight += 1
                ctx.master.commands.call("inject.websocket", ws.flow, True, payload, is_text)
        self._record(ws, step)
        self._arm(ws, step)

    def _record(self, ws: PacedWebSocket, step: Step) -> None:
        for turn in step.turns:
            if turn.messages:
                last = turn.last_sent if turn.last_sent is not None else time.monotonic()
                self._on_done(ws.flow, turn, last, "complete")

    def _arm(self, ws: PacedWebSocket, step: Step) -> None:
        if step.wake is None or ws.closed:
            return
        if ws.timer is not None:
            ws.timer.cancel()
        ws.timer_due = step.wake
        ws.timer = asyncio.get_running_loop().call_later(step.delay, self._wake, ws)
