"""The order of a paced WebSocket's events: while it still holds messages, the server's later
events (more data, its close frame, a reset) wait, so none overtakes them.

The messages themselves are paced with public hooks (`websocket.WebSocketPacing` drops each in
`websocket_message` and re-sends it with `inject.websocket`); what needs mitmproxy's internals
is order, so the bridge's `install()` wraps `WebsocketLayer.handle_event` to call
`WebSocketOrder.event` (its start-up check covers what this module uses).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mitmproxy import http
from mitmproxy.proxy import events
from mitmproxy.proxy.layer import CommandGenerator
from mitmproxy.proxy.layers.websocket import WebsocketLayer


class CloseFrameScanner:
    """Finds where the server's close frame starts in its byte stream (frame headers only).

    One read can carry the last messages and the close frame together; the part before the
    close goes to mitmproxy at once (its messages get held), the close waits its turn.
    """

    __slots__ = ("_head", "_skip", "seen")

    def __init__(self) -> None:
        self._head = b""  # a frame header cut by the end of the previous read
        self._skip = 0  # payload bytes of the current frame still to come
        self.seen = False

    def close_offset(self, data: bytes) -> int | None:
        """Offset in `data` where a close frame begins, or None (the scan state advances)."""
        pos, size = 0, len(data)
        while pos < size and not self.seen:
            if self._skip:
                step = min(self._skip, size - pos)
                self._skip -= step
                pos += step
                continue
            carried = len(self._head)
            buf = self._head + data[pos : pos + 14]
            if len(buf) < 2:
                self._head = buf
                return None
            length = buf[1] & 0x7F
            need = 2 + {126: 2, 127: 8}.get(length, 0) + (4 if buf[1] & 0x80 else 0)
            if len(buf) < need:
                self._head = buf
                return None
            if buf[0] & 0x0F == 0x8:
                self.seen = True
                return max(0, pos - carried)
            if length == 126:
                length = int.from_bytes(buf[2:4], "big")
            elif length == 127:
                length = int.from_bytes(buf[2:10], "big")
            self._head = b""
            pos += need - carried
            self._skip = length
        return None


@dataclass(slots=True)
class HeldWebSocket:
    holding: Callable[[], bool]  # true while the shell still holds messages to re-send
    deferred: list[tuple[events.Event, float]] = field(default_factory=list)  # waiting, and since when
    scanner: CloseFrameScanner = field(default_factory=CloseFrameScanner)
    delivering: float | None = None  # when the server event handed over last arrived (None: live)


class WebSocketOrder:
    """The WebSockets whose server events wait while their messages are held."""

    def __init__(self, original: Callable[[WebsocketLayer, events.Event], CommandGenerator[None]]) -> None:
        self._original = original  # mitmproxy's own WebsocketLayer.handle_event
        self._held: dict[str, HeldWebSocket] = {}

    def hold(self, flow: http.HTTPFlow, holding: Callable[[], bool]) -> None:
        """Keep this WebSocket's server events back while `holding()` is true (call at its start)."""
        self._held[flow.id] = HeldWebSocket(holding)

    def release(self, flow: http.HTTPFlow) -> None:
        self._held.pop(flow.id, None)

    def clear(self) -> None:
        self._held.clear()

    def arrival(self, flow: http.HTTPFlow) -> float | None:
        """When the server bytes whose messages mitmproxy is handing to the hooks now reached the
        proxy, if they waited behind held messages (None: they were handed over as they came).
        mitmproxy runs a message's hook after the event that carried it has been handed over,
        and no later server event is handed over while a hook is pending (`event`), so this
        holds until the next one."""
        held = self._held.get(flow.id)
        return held.delivering if held is not None else None

    def event(self, layer: WebsocketLayer, event: events.Event) -> CommandGenerator[None]:
        held = self._held.get(layer.flow.id)
        if held is None:
            yield from self._original(layer, event)
            return
        from_server = (
            isinstance(event, events.ConnectionEvent) and event.connection == layer.context.server
        )
        # a server event also waits while mitmproxy is paused on the hook of a message of an
        # earlier one: then every message's hook runs while `delivering` is its bytes' arrival
        if from_server and (held.deferred or held.holding() or layer._paused):
            held.deferred.append((event, time.monotonic()))
            return
        if from_server:
            yield from self._deliver(layer, held, event)
        else:
            yield from self._original(layer, event)
        yield from self._replay(layer, held)

    def _deliver(
        self, layer: WebsocketLayer, held: HeldWebSocket, event: events.Event,
        arrived: float | None = None,
    ) -> CommandGenerator[None]:
        """Hand a server event to mitmproxy. Every server byte passes here once, in order, so
        the scanner sees the whole stream: a close frame found in it waits at the head of the
        deferred events, behind the messages the same read carried (they get held first).
        `arrived`: when a deferred event reached the proxy (`arrival` tells the hooks)."""
        if isinstance(event, events.DataReceived) and not held.scanner.seen:
            cut = held.scanner.close_offset(event.data)
            if cut is not None:
                held.deferred.insert(0, (events.DataReceived(event.connection, event.data[cut:]),
                                         time.monotonic() if arrived is None else arrived))
                if not cut:
                    return
                event = events.DataReceived(event.connection, event.data[:cut])
        held.delivering = arrived  # until the next server event: its messages' hooks run later
        yield from self._original(layer, event)

    def _replay(self, layer: WebsocketLayer, held: HeldWebSocket) -> CommandGenerator[None]:
        # replay what waited once everything held is out (and no hook reply is pending)
        while held.deferred and not layer._paused and not held.holding():
            event, arrived = held.deferred.pop(0)
            yield from self._deliver(layer, held, event, arrived)
