"""A WebSocket LLM server (Realtime-like) and a client that goes through an HTTP proxy, on wsproto.

The server answers every client message with a scripted burst of server messages (all written
at once, so any spreading in time is the proxy's doing), then optionally closes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Message, Request, TextMessage


@dataclass
class WSReply:
    """What the server sends for one client message: (payload, is_text) in order."""

    messages: list[tuple[bytes | str, bool]]
    close_after: bool = False
    gap: float = 0.0  # seconds between the messages' writes (0: all in one write)
    pieces: int = 1  # each message's frame written in this many parts, `gap` apart


@dataclass
class FakeWSLLM:
    replies: list[WSReply]
    port: int = 0
    greeting: list[tuple[bytes | str, bool]] = field(default_factory=list)  # sent on accept
    received: list[str] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)  # each reply's first, last write

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeWSLLM:
        self._thread.start()
        assert self._ready.wait(10), "fake WebSocket server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        turn = 0
        try:
            while True:
                data = await reader.read(65536)
                ws.receive_data(data or None)
                out = b""
                for event in ws.events():
                    if isinstance(event, Request):
                        out += ws.send(AcceptConnection())
                        for payload, _ in self.greeting:
                            out += ws.send(Message(data=payload))
                    elif isinstance(event, TextMessage):
                        self.received.append(event.data)
                        reply = self.replies[min(turn, len(self.replies) - 1)]
                        turn += 1
                        first = time.monotonic()
                        for i, (payload, _is_text) in enumerate(reply.messages):
                            frame = ws.send(Message(data=payload))
                            if reply.pieces > 1:  # the proxy reads the message a part at a time
                                size = -(-len(frame) // reply.pieces)
                                for at in range(0, len(frame), size):
                                    writer.write(out + frame[at:at + size])
                                    await writer.drain()
                                    out = b""
                                    await asyncio.sleep(reply.gap)
                                continue
                            out += frame
                            if reply.gap and i < len(reply.messages) - 1:
                                writer.write(out)  # one write per message, `gap` apart
                                await writer.drain()
                                out = b""
                                await asyncio.sleep(reply.gap)
                        self.spans.append((first, time.monotonic()))
                        if reply.close_after:
                            out += ws.send(CloseConnection(code=1000, reason="done"))
                    elif isinstance(event, CloseConnection):
                        if ws.state.name == "REMOTE_CLOSING":
                            out += ws.send(event.response())
                if out:
                    writer.write(out)
                    await writer.drain()
                if not data:
                    break
        except (ConnectionError, OSError, asyncio.CancelledError):  # 3.12.1 logs a cancelled handler
            pass
        finally:
            writer.close()


def responses_turn(text: str) -> WSReply:
    """A Responses-over-WebSocket answer as Codex gets it: deltas, then the events that repeat
    the whole text (`*.done`, `response.completed`)."""
    words = text.split(" ")
    seq = iter(range(1000))
    def ev(kind: str, **f: object) -> tuple[str, bool]:
        return json.dumps({"type": kind, "sequence_number": next(seq), **f}), True
    item = {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}
    return WSReply([
        ev("response.created", response={"id": "resp_1", "output": []}),
        ev("response.output_item.added", item={**item, "content": []}),
        *[ev("response.output_text.delta", item_id="msg_1", delta=(" " if i else "") + w)
          for i, w in enumerate(words)],
        ev("response.output_text.done", item_id="msg_1", text=text),
        ev("response.content_part.done", part={"type": "output_text", "text": text}),
        ev("response.output_item.done", item=item),
        ev("response.completed", response={"id": "resp_1", "output": [item]}),
    ])


PREWARM = WSReply([(json.dumps({"type": "response.created", "response": {"id": "resp_0"}}), True),
                   (json.dumps({"type": "response.completed",
                                "response": {"id": "resp_0", "output": []}}), True)])


@dataclass
class Received:
    at: float
    data: str | bytes


class ProxiedWSClient:
    """A blocking WebSocket client that speaks to `url` through an HTTP proxy (absolute-form)."""

    def __init__(self, proxy_port: int, host: str, port: int, path: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=30)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.closed_by_server = False
        self.close_code: int | None = None
        target = f"http://{host}:{port}{path}"
        self.sock.sendall(self.ws.send(Request(host=f"{host}:{port}", target=target)))
        self._pending: list[object] = []
        while not any(isinstance(e, AcceptConnection) for e in self._pending):
            self._read()
        self._pending = [e for e in self._pending if not isinstance(e, AcceptConnection)]

    def _read(self) -> bool:
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        self._pending.extend(self.ws.events())
        return bool(data)

    def send(self, text: str) -> float:
        self.sock.sendall(self.ws.send(Message(data=text)))
        return time.monotonic()

    def receive_until(self, last: str, timeout: float = 20.0) -> list[Received]:
        """Messages up to one containing `last` (or until the server closes), with arrival times."""
        out: list[Received] = []
        partial: list[str | bytes] = []
        deadline = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while time.monotonic() < deadline:
            while self._pending:
                event = self._pending.pop(0)
                if isinstance(event, (TextMessage, BytesMessage)):
                    partial.append(event.data)
                    if not event.message_finished:
                        continue
                    data = "".join(partial) if isinstance(event, TextMessage) else b"".join(partial)  # type: ignore[arg-type]
                    partial = []
                    out.append(Received(time.monotonic(), data))
                    if isinstance(data, str) and last in data:
                        return out
                elif isinstance(event, CloseConnection):
                    self.closed_by_server = True
                    self.close_code = event.code
                    return out
            if not self._read():
                return out
        raise TimeoutError(f"no message containing {last!r} within {timeout}s; got {len(out)}")

    def close(self) -> None:
        try:
            self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        except Exception:
            pass
        self.sock.close()
