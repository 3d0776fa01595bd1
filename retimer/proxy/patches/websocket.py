"""Injected WebSocket messages sent whole and intact (mitmproxy's `WebsocketLayer`).

retimer paces a WebSocket by dropping each server message and re-sending it with mitmproxy's
`inject.websocket`. mitmproxy 12 handles an injected message as if it had been received: its
fragments go into the *source* connection's frame buffer. When the server is half-way through a
long message (a Responses `response.created` echoing 50 kB of instructions arrives in several
TCP reads), that buffer holds the first part of it, and the injected message is joined onto it:
the client got one message made of two (found with GitHub Copilot's CLI over WebSockets). And it
cuts an injected text message into 4000-byte fragments decoded one by one, so a character
whose bytes straddle a cut becomes two U+FFFD.

Here an injected message goes straight to the other side: recorded in the flow and shown to the
`websocket_message` hook as mitmproxy does (the hook may drop it), then sent in fragments of
at most 4000 bytes cut at character boundaries. Received messages are relayed by mitmproxy's own
code, unchanged. One of retimer's patches (`retimer.proxy.patches`), installed by its `install()`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import wsproto.events
from mitmproxy import websocket
from mitmproxy.proxy import events, layer
from mitmproxy.proxy.layers import websocket as ws_layer
from wsproto.frame_protocol import Opcode

FRAGMENT_SIZE = 4000  # mitmproxy's own size for a message it re-fragments


def fragments(content: bytes, is_text: bool, size: int = FRAGMENT_SIZE) -> Iterator[wsproto.events.Message]:
    """`content` as wsproto message events of at most `size` bytes each, the last one finishing
    the message; a text message is cut only between characters."""
    start, end = 0, len(content)
    while True:
        cut = min(start + size, end)
        if is_text:
            while start < cut < end and content[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte
                cut -= 1
        finished = cut >= end
        piece = content[start:cut]
        if is_text:
            yield wsproto.events.TextMessage(piece.decode("utf-8", "replace"), message_finished=finished)
        else:
            yield wsproto.events.BytesMessage(piece, message_finished=finished)
        if finished:
            return
        start = cut


def _send_injected(
    ws: ws_layer.WebsocketLayer, event: ws_layer.WebSocketMessageInjected
) -> layer.CommandGenerator[None]:
    """mitmproxy's steps for a finished message (record it, the hook, send unless dropped), for
    an injected one, without the receiving side's frame buffer."""
    injected = event.message
    from_client = injected.from_client
    message = websocket.WebSocketMessage(injected.type, from_client, injected.content, injected=True)
    assert ws.flow.websocket is not None  # a WebsocketLayer's flow has one
    ws.flow.websocket.messages.append(message)
    yield ws_layer.WebsocketMessageHook(ws.flow)
    if message.dropped:
        return
    dst_ws = ws.server_ws if from_client else ws.client_ws
    for piece in fragments(message.content, message.type == Opcode.TEXT):
        yield dst_ws.send2(piece)


_mitmproxy_relay = getattr(ws_layer.WebsocketLayer, "relay_messages", None)  # checked by NEEDED


def _relay_messages(ws: ws_layer.WebsocketLayer, event: events.Event) -> layer.CommandGenerator[None]:
    if isinstance(event, ws_layer.WebSocketMessageInjected):
        yield from _send_injected(ws, event)
    else:
        assert _mitmproxy_relay is not None  # install() runs only after the start-up check
        yield from _mitmproxy_relay(ws, event)


def install() -> None:
    """Put `_relay_messages` in place of `WebsocketLayer.relay_messages` (once per process)."""
    if ws_layer.WebsocketLayer.relay_messages is _mitmproxy_relay:
        ws_layer.WebsocketLayer.relay_messages = _relay_messages  # type: ignore[method-assign]


NEEDED = {  # what this module relies on, for the start-up check (None: missing)
    "WebsocketLayer.relay_messages": _mitmproxy_relay,
    "WebSocketMessageInjected": getattr(ws_layer, "WebSocketMessageInjected", None),
    "WebsocketMessageHook": getattr(ws_layer, "WebsocketMessageHook", None),
    "WebsocketConnection.send2": getattr(getattr(ws_layer, "WebsocketConnection", None), "send2", None),
    "WebsocketLayer.client_ws": "client_ws" in inspect.unwrap(ws_layer.WebsocketLayer.start).__code__.co_names
    or None,
}
