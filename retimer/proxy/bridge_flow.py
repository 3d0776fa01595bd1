"""A paced stream's state in the pacing bridge, the bridge's bounds, and how a stream that
cannot end cleanly is ended: the data side of `retimer.proxy.bridge`, apart from its logic.
Part of the bridge: one of the modules allowed on mitmproxy's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http
from mitmproxy.proxy.layers import http as http_layer

from retimer.proxy.bridge_timers import PacingWakeup
from retimer.timing.pacer import StreamPacer

ResponseProtocolError = http_layer.ResponseProtocolError
ErrorCode = http_layer.ErrorCode

DoneCallback = Callable[[http.HTTPFlow, StreamPacer, float, str], None]


@dataclass(slots=True)
class Settings:
    """The bounds and keep-alive policy (the `retimer_*` options of `retimer.proxy.safety`)."""

    max_stream_buffer: int = 16 * 2**20  # bytes one stream may keep before pass-through
    max_total_buffer: int = 256 * 2**20  # bytes all streams together may keep
    keepalive_s: float = 4.0  # idle time, while bytes are held, before a keep-alive (0: never)
    idle_release: bool = False  # formats without a keep-alive: send the next emission early


@dataclass(slots=True)
class PacedFlow:
    """One stream the bridge paces (or, passthrough, counts) and what it keeps for it."""

    flow: http.HTTPFlow
    pacer: StreamPacer
    on_done: DoneCallback
    held_end: Any = None  # ResponseEndOfMessage waiting for the last bytes
    finished: bool = False
    warned: bool = False
    wakeups: dict[PacingWakeup, float] = field(default_factory=dict)  # outstanding -> due
    last_send: float = 0.0  # when the client last got bytes (or the response head)
    counted: int = 0  # this stream's share of PacingBridge.buffered
    handler: Any = None  # its connection's mitmproxy ConnectionHandler, once a wakeup named it
    routes: Any = None  # the HTTP layers that route its wakeups (bridge_timers.routes)
    stream: Any = None  # its HttpStream, once its timers are armed
    counting: bool = False  # passthrough: mitmproxy sends the body as it comes, the pacer counts
    tallied: float = 0.0  # passthrough: when its bytes were last counted
    direct: Any = None  # its bridge_direct.ClientWriter once looked for (False: none)
    keep_body: bool | None = None  # mitmproxy's store_streamed_bodies, read at its first send


def server_error(stream: Any, message: str) -> Any:
    """The error a broken upstream would give this stream (ended as the server's fault)."""
    return ResponseProtocolError(stream.stream_id, message, ErrorCode.GENERIC_SERVER_ERROR)


def upstream_gone(stream: Any, paced: PacedFlow) -> bool:
    """The upstream connection has ended, yet the stream got neither its end nor an error.

    mitmproxy 12 can lose a server connection's close: a reader whose drain failed on the
    reset cancels its own task, and if it then waits for the connection's event lock, the
    cancellation lands there and ConnectionClosed is never delivered (seen in the soak under
    load). A plain proxy would leave that client waiting for its read timeout; a stream that
    retimer keeps alive with SSE comments would wait for ever. So each wake checks."""
    conn = getattr(stream.flow, "server_conn", None)
    return (
        paced.held_end is None and not paced.pacer.done
        and conn is not None and conn.timestamp_end is not None
    )
