"""The pacing bridge: the only module that touches mitmproxy's private internals.

mitmproxy's public `flow.response.stream` callable runs only when upstream data arrives, so it
can neither emit on a timer nor split one upstream chunk into several timed writes. For a paced
flow we therefore wrap `HttpStream._handle_event`: upstream `ResponseData` goes into the
stream's `StreamPacer`, timed bytes go to the client as `SendHttp(ResponseData)` when a
`RequestWakeup` we asked for comes back as `Wakeup`, and `ResponseEndOfMessage` is held until
the last byte is out. The real flow and upstream connection stay intact (mitmweb shows them).
`check_internals()` verifies at start-up that every private name used here still exists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import http as http_layer

from .pacer import Emission, StreamPacer

logger = logging.getLogger(__name__)

EARLY_S = 0.0008  # wake this much before the next due time (asyncio timers run late)
WINDOW_S = 0.0005  # on waking, send everything due within this window
LONG_SLEEP_S = 0.004  # sleeps longer than this wake a little earlier still (measured in bench/)
LONG_SLEEP_EARLY_S = 0.0004

HttpStream = http_layer.HttpStream
SendHttp = http_layer.SendHttp
ResponseData = http_layer.ResponseData
ResponseEndOfMessage = http_layer.ResponseEndOfMessage
ResponseProtocolError = http_layer.ResponseProtocolError
RequestProtocolError = http_layer.RequestProtocolError

DoneCallback = Callable[[http.HTTPFlow, StreamPacer, float, str], None]


class InternalsMissing(RuntimeError):
    """This mitmproxy lacks a private name the bridge relies on."""


class PacingWakeup(commands.RequestWakeup):
    """A wakeup the bridge asked for; recognised (and dropped if stale) on return."""

    __slots__ = ()


@dataclass(slots=True)
class PacedFlow:
    pacer: StreamPacer
    on_done: DoneCallback
    held_end: Any = None  # ResponseEndOfMessage waiting for the last bytes
    finished: bool = False
    warned: bool = False
    wakeups: dict[PacingWakeup, float] = field(default_factory=dict)  # outstanding -> due


_paced: dict[str, PacedFlow] = {}
_original_handle_event: Callable[..., Any] | None = None


def check_internals() -> None:
    """Fail with one clear line when mitmproxy changed what the bridge wraps."""
    needed = {
        "HttpStream._handle_event": getattr(HttpStream, "_handle_event", None),
        "HttpStream.state_stream_response_body": getattr(
            HttpStream, "state_stream_response_body", None
        ),
        "layers.http.SendHttp": getattr(http_layer, "SendHttp", None),
        "layers.http.ResponseData": getattr(http_layer, "ResponseData", None),
        "layers.http.ResponseEndOfMessage": getattr(http_layer, "ResponseEndOfMessage", None),
        "events.Wakeup": getattr(events, "Wakeup", None),
    }
    missing = [name for name, value in needed.items() if value is None]
    if missing:
        from mitmproxy.version import VERSION

        raise InternalsMissing(
            f"mitmproxy {VERSION} lacks {', '.join(missing)}; retimer needs mitmproxy >=12.2.3,<13"
        )


def install() -> None:
    """Wrap HttpStream once per process (idempotent)."""
    global _original_handle_event
    if _original_handle_event is not None:
        return
    check_internals()
    _original_handle_event = HttpStream._handle_event
    HttpStream._handle_event = _handle_event  # type: ignore[method-assign]


def pace(flow: http.HTTPFlow, pacer: StreamPacer, on_done: DoneCallback) -> None:
    """Re-time this flow's response body; call from `responseheaders` with stream=True set."""
    if _original_handle_event is None:
        raise RuntimeError("retimer.bridge.install() was not called")
    _paced[flow.id] = PacedFlow(pacer, on_done)


def active() -> int:
    return len(_paced)


def _handle_event(self: Any, event: events.Event) -> Generator[commands.Command, Any, None]:
    flow = getattr(self, "flow", None)
    paced = _paced.get(flow.id) if flow is not None else None
    if isinstance(event, events.Wakeup) and isinstance(event.command, PacingWakeup):
        if paced is not None and paced.wakeups.pop(event.command, None) is not None:
            yield from _emit(self, paced)
        return  # a stale wakeup for a finished stream
    assert _original_handle_event is not None
    if paced is None or paced.finished:
        yield from _original_handle_event(self, event)
        return
    streaming = self.server_state == self.state_stream_response_body
    if isinstance(event, ResponseData) and streaming:
        paced.pacer.feed(event.data, time.monotonic())
        if paced.pacer.failure and not paced.warned:
            paced.warned = True
            logger.warning(
                f"retimer: cannot parse the {paced.pacer.adapter.name} stream from "
                f"{self.flow.request.pretty_host} ({paced.pacer.failure}); "
                "passing the rest through unchanged"
            )
        yield from _emit(self, paced)
    elif isinstance(event, ResponseEndOfMessage) and streaming:
        paced.pacer.finish(time.monotonic())
        paced.held_end = event
        yield from _emit(self, paced)
    elif isinstance(event, ResponseProtocolError):
        # the upstream broke: the client gets everything that arrived, then the same error
        yield from _send(self, paced, paced.pacer.pop_all(), time.monotonic())
        _finish(self, paced, "upstream-error")
        yield from _original_handle_event(self, event)
    elif isinstance(event, RequestProtocolError):
        _finish(self, paced, "client-gone")
        yield from _original_handle_event(self, event)
    else:
        yield from _original_handle_event(self, event)


def _emit(self: Any, paced: PacedFlow) -> Generator[commands.Command, Any, None]:
    pacer = paced.pacer
    now = time.monotonic()
    due = pacer.pop_due(now + WINDOW_S)
    if due:
        yield from _send(self, paced, due, now)
    if pacer.done:
        if paced.held_end is not None:
            end = paced.held_end
            _finish(self, paced, "complete")
            assert _original_handle_event is not None
            yield from _original_handle_event(self, end)
        return
    next_due = pacer.next_due()
    if next_due is None:
        return
    if paced.wakeups and min(paced.wakeups.values()) <= next_due:
        return  # an earlier or equal wakeup is already on its way
    delay = max(0.0, next_due - now - EARLY_S)
    if delay > LONG_SLEEP_S:
        delay -= LONG_SLEEP_EARLY_S  # epoll rounds up to the ms and the kernel adds slack
    cmd = PacingWakeup(delay)
    paced.wakeups[cmd] = next_due
    yield cmd


def _send(
    self: Any, paced: PacedFlow, batch: list[Emission], now: float
) -> Generator[commands.Command, Any, None]:
    if not batch:
        return
    data = batch[0].data if len(batch) == 1 else b"".join(e.data for e in batch)
    if self.context.options.store_streamed_bodies:
        self.response_body_buf += data
    yield SendHttp(ResponseData(self.stream_id, data), self.context.client)
    paced.pacer.sent(batch, now)


def _finish(self: Any, paced: PacedFlow, outcome: str) -> None:
    paced.finished = True
    _paced.pop(self.flow.id, None)
    try:
        paced.on_done(self.flow, paced.pacer, time.monotonic(), outcome)
    except Exception:  # a broken record must never break the stream
        logger.exception("retimer: recording a finished stream failed")
