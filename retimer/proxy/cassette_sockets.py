"""WebSocket sessions in cassettes: a socket's turns recorded as calls, and a loopback
WebSocket server that answers a replayed socket's client messages from the cassette.

Recording (`SocketRecording`): every client message opens a turn; the server messages that
follow it, as they came from the upstream (before retimer paces them), are the turn's body
(`retimer.wire.protocols.websocket.encode_message` frames), up to the next client message or
the close. What the server sent before any client message (a Realtime `session.created`) is
turn 0.

Replaying (`SocketReplayServer`): the handshake is pointed at this server (`Redirect`), which
accepts it as the upstream would and, for each client message it receives, sends the answer
the Cassettes addon queued for it when mitmproxy showed it the message (`ReplayedSocket`):
the recorded turn's messages at once, which the Retimer addon then paces like an upstream's,
or an `error` event when the turn matched no recorded one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from mitmproxy import http
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from retimer.cassette.format import UpstreamTiming
from retimer.proxy.loopback import LoopbackReplay, Redirect
from retimer.wire.protocols.websocket import encode_message

__all__ = ["FinishedTurn", "ReplayedSocket", "SocketRecording", "SocketReplayServer"]

logger = logging.getLogger("retimer")

SOCKET_TOKEN_KEY = "retimer_cassette_socket_token"  # flow.metadata: the replay server's token
Messages = list[tuple[bytes, bool]]  # (payload, is_text) in the order they are sent


@dataclass(frozen=True)
class FinishedTurn:
    """A recorded turn: the client message that opened it (b"" for turn 0), the server's
    messages as frames, and how the upstream timed them."""

    turn: int
    asked: bytes
    body: bytes
    messages: int
    timing: UpstreamTiming


@dataclass
class SocketRecording:
    """One socket's turns as they happen (times from `time.monotonic`)."""

    socket: int  # the session's n-th recorded socket
    turn: int = 0
    asked: bytes = b""
    started: float = field(default_factory=time.monotonic)
    body: bytearray = field(default_factory=bytearray)
    messages: int = 0
    first: float | None = None
    last: float | None = None

    def server_message(self, payload: bytes, is_text: bool, now: float) -> None:
        self.body += encode_message(payload, is_text=is_text)
        self.messages += 1
        self.first = now if self.first is None else self.first
        self.last = now

    def client_message(self, payload: bytes, now: float) -> FinishedTurn | None:
        """The turn before is over (returned, unless it was turn 0 with nothing in it); a new
        one opens."""
        done = self.finish()
        self.turn += 1
        self.asked, self.started = payload, now
        self.body, self.messages, self.first, self.last = bytearray(), 0, None, None
        return done

    def finish(self) -> FinishedTurn | None:
        """The current turn as it stands (None: turn 0, and the server sent nothing first)."""
        if self.turn == 0 and not self.messages:
            return None
        return FinishedTurn(self.turn, self.asked, bytes(self.body), self.messages,
                            UpstreamTiming(self._ms(self.first), self._ms(self.last)))

    def _ms(self, at: float | None) -> float | None:
        return None if at is None else round((at - self.started) * 1000, 3)


@dataclass
class ReplayedSocket:
    """A replayed socket: what to send on the handshake, then per client message."""

    redirect: Redirect
    first: Messages = field(default_factory=list)
    answers: deque[Messages] = field(default_factory=deque)
    told: int = 0  # client messages seen (the next one opens turn told + 1)


class SocketReplayServer(LoopbackReplay[ReplayedSocket]):
    """WebSocket (wsproto) on 127.0.0.1, one `ReplayedSocket` per expected token."""

    token_key = SOCKET_TOKEN_KEY

    def serve(self, flow: http.HTTPFlow, first: Messages) -> ReplayedSocket:
        """Point the handshake of `flow` at this server; `first` goes out once it is accepted."""
        socket = ReplayedSocket(self.point(flow), first)
        self.pending[socket.redirect.token] = socket
        return socket

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        socket: ReplayedSocket | None = None
        try:
            while data := await reader.read(65536):
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, Request):
                        socket = self._accept(ws, event, writer)
                        if socket is None:
                            return
                    elif isinstance(event, Message) and event.message_finished and socket:
                        answer = socket.answers.popleft() if socket.answers else []
                        _send(ws, writer, answer)
                    elif isinstance(event, Ping):
                        writer.write(ws.send(event.response()))
                    elif isinstance(event, CloseConnection):
                        writer.write(ws.send(event.response()))
                        await writer.drain()
                        return
                await writer.drain()
        except (LocalProtocolError, RemoteProtocolError, ConnectionError) as e:
            logger.debug(f"retimer: cassette WebSocket replay: {e}")
            writer.transport.abort()

    def _accept(self, ws: WSConnection, request: Request, writer: asyncio.StreamWriter
                ) -> ReplayedSocket | None:
        socket = self.claim(list(request.extra_headers))  # put back before the 101
        if socket is None:
            writer.write(ws.send(RejectConnection(status_code=404)))
            return None
        writer.write(ws.send(AcceptConnection()))
        _send(ws, writer, socket.first)
        return socket


def _send(ws: WSConnection, writer: asyncio.StreamWriter, messages: Messages) -> None:
    for payload, is_text in messages:
        event = TextMessage(payload.decode()) if is_text else BytesMessage(payload)
        writer.write(ws.send(event))
