"""One re-timed stream, sans-io: upstream bytes and arrival times in, timed output bytes out.

This module holds the input, fault and bounds half of `StreamPacer`; how parsed events become
timed network events is its base class's, `retimer.timing.grouping.EventGrouper`. The pacer
decodes the body, parses it with a protocol adapter and hands the events to the grouper; the
caller pops what is due and reports when it went. That work is done as the schedule needs
it, not when bytes arrive: what arrived waits in the stream's backlog
(`retimer.timing.backlog`) and is parsed, and a split event serialised, only as far as what
is due by now and the next emission (a 10k-token burst costs about a millisecond before its
first token, not a third of a second); the result is the same.

Faults and bounds are decided here too, without I/O, and `state` (a `PacerState`) says where
the stream stands: the adapter failing turns it UNPARSED, `cap_reached` (a buffer cap) CAPPED,
a body that cannot be decoded BROKEN; `abort` gives everything that arrived when the upstream
broke off. `buffered` says how many bytes the stream keeps, and `idle` what may keep a
client's connection alive while bytes are held: the adapter's keep-alive, or the next
emission released early (the one thing "release" means here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from retimer.timing.backlog import Backlog
from retimer.timing.grouping import EventGrouper
from retimer.timing.metrics import StreamStats
from retimer.timing.outbox import Emission, Outbox
from retimer.timing.scheduler import TokenClock
from retimer.timing.strategy import Strategy
from retimer.wire.encoding import Decoder
from retimer.wire.protocols.base import Adapter, AdapterError

__all__ = ["BOM", "CAP_PREFIX", "Emission", "PacerState", "StreamPacer"]

logger = logging.getLogger(__name__)

CAP_PREFIX = "buffer cap"  # how the `failure` of a CAPPED stream begins (records show it)
BOM = b"\xef\xbb\xbf"
# what an adapter raises for input it cannot read; ValueError until every adapter raises
# AdapterError (its subclass). Anything else is a bug, logged with its traceback.
EXPECTED_ADAPTER_ERRORS: tuple[type[Exception], ...] = (AdapterError, ValueError)


class PacerState(StrEnum):
    """Where a stream stands. It starts PACING; UNPARSED and CAPPED pass the rest of the
    stream through, and BROKEN, reachable from any state, ends it."""

    PACING = "pacing"  # the adapter reads events; they leave on the profile's clock
    UNPARSED = "unparsed"  # the adapter could not read on: held bytes go now, the rest as it comes
    CAPPED = "capped"  # a buffer cap was reached: likewise, on the caller's word
    BROKEN = "broken"  # the body cannot be decoded: the caller ends the stream as broken


class StreamPacer(EventGrouper):
    """Re-times one stream. Feed it bytes; pop what is due; it never emits before arrival."""

    def __init__(
        self,
        adapter: Adapter,
        timing: TokenClock,
        start: float,
        *,
        passthrough: bool = False,
        decoder: Decoder | None = None,
        strategy: Strategy = Strategy.LIVE,
        target_tps: float = 0.0,
        expected_tokens: int | None = None,
    ) -> None:
        """`passthrough`: the profile adds no time (tokens leave as they arrive, still counted)."""
        self.adapter = adapter
        self.decoder = decoder
        self.state = PacerState.PACING
        # why the stream went through unparsed or unpaced (UNPARSED, CAPPED); kept if it breaks
        self.failure: str | None = None
        self.broken: str | None = None  # why the body cannot be decoded (BROKEN)
        self.captured: bytearray | None = None  # set to a bytearray to keep the decoded body
        self._unparsed = bytearray()  # bytes received that no event has covered yet
        self._backlog = Backlog()  # received bytes not yet given to the adapter (parsed as due)
        super().__init__(timing, start, passthrough=passthrough, strategy=strategy,
                         target_tps=target_tps, expected_tokens=expected_tokens)
        self.stats = StreamStats(start=start, target_ttft=timing.ttft)
        self._outbox = Outbox(start)
        # the first decoded bytes while they may still be a UTF-8 BOM (None once settled): a
        # BOM leaves at once on its own, so nothing (a keep-alive, a split) can come before it
        self._lead: bytes | None = b""
        self.keepalives = 0  # keep-alive comments sent while bytes were held
        self.released_early = 0  # emissions sent before their time to keep a client alive
        self._ended = False

    # -- input ---------------------------------------------------------------------------
    def feed(self, data: bytes, now: float) -> None:
        """Upstream bytes arrived at `now`."""
        self._take_in(data, now)
        if self.state is PacerState.PACING:
            self._pump(now)

    def receive(self, data: bytes, now: float) -> None:
        """Upstream bytes arrived at `now` that the caller passes on unchanged itself (a
        passthrough stream): kept with their arrival time, parsed and counted by `tally`.
        Parsing many chunks at once costs less than one at a time, and nothing waits on it."""
        self._take_in(data, now)

    def tally(self, batch: list[Emission] | None = None) -> None:
        """Parse what `receive` kept and count it as sent when it arrived (passthrough only:
        the client had every byte as it came); `batch`: what `abort` gave instead."""
        assert self.passthrough, "only a passthrough stream's bytes leave as they arrive"
        if batch is None:
            batch = self.pop_all() if self._ended else self.pop_due(float("inf"))
        for e in batch:
            if e.tokens:
                self.stats.emitted(e.due, e.tokens, e.channel, e.due)

    def _take_in(self, data: bytes, now: float) -> None:
        self.stats.upstream_bytes(now)
        if self.state is PacerState.BROKEN:
            return
        if self.decoder is not None:
            try:
                data = self.decoder.decode(data)
            except ValueError as e:
                self._break(str(e))
                return
        if self.captured is not None:
            self.captured += data
        if self._lead is not None:
            data = self._settle_lead(data, now, final=False)
            if not data:
                return
        self._parse(data, now)

    def _settle_lead(self, data: bytes, now: float, final: bool) -> bytes:
        """Take a leading BOM off the body and send it now; the bytes that follow it."""
        assert self._lead is not None
        lead = self._lead + data
        if not final and len(lead) < len(BOM) and BOM.startswith(lead):
            self._lead = lead
            return b""
        self._lead = None
        if lead.startswith(BOM):
            self._outbox.push(Emission(now, BOM, 0, None))
            return lead[len(BOM):]
        return lead

    def _parse(self, data: bytes, now: float) -> None:
        """Bytes in: kept in the backlog while parsing (the caller pumps), else due now."""
        if self.state is PacerState.PACING:
            self._unparsed += data
            self._backlog.push(data, now)
        else:
            self._outbox.push(Emission(now, data, 0, None))

    def prepare(self, until: float, batch_until: float, steps: int | None) -> None:
        """Parse ahead: the caller calls this right after a send, so parsing is done before
        tokens fall due, not when they do. Only once the schedule reaches no further than
        `until`, and then in one batch, as far as `batch_until`, at most `steps` steps (a
        network event, an event or a slice each; None: no bound) and one slice of bytes.

        Why in batches (BENCHMARKS.md, "Session 30"): in the proxy, between two wakes of a
        stream, mitmproxy and the other streams push its objects out of the CPU's caches, and
        the same parsing costs about three times as much cold as warm; a batch pays the cold
        start once for many network events."""
        if self._outbox.horizon <= until:
            self._pump(batch_until, slices=1, steps=steps)

    def _pump(self, until: float, *, queued: bool = False, slices: int | None = None,
              steps: int | None = None) -> None:
        """Work through the backlog as far as the schedule needs: until everything due by
        `until` is scheduled (and, with `queued`, at least one emission is queued). In order:
        the pieces of a split event (one network event at a time), the events parsed, the
        bytes (a slice at a time), then, after the upstream ended, the adapter's end.
        `slices` and `steps` bound the work of one call (None: no bound)."""
        backlog, outbox = self._backlog, self._outbox
        events = backlog.events
        # a BROKEN body still gets what was decoded before the break (at once, it would have)
        while outbox.horizon <= until or (queued and not outbox.pending):
            if steps is not None:
                if steps == 0:
                    break  # the batch is done: the rest when the schedule needs it
                steps -= 1
            arrival = None
            try:  # each step calls the adapter: see `_failed`
                if backlog.split is not None:
                    arrival = backlog.split.arrival
                    self._split_step()
                elif events:
                    event, arrival = events.popleft()
                    self._accept(event, arrival)
                elif backlog:
                    if slices is not None:
                        if slices == 0:
                            break  # the budget is spent; the adapter's end waits for its bytes
                        slices -= 1
                    data, arrival = backlog.take()
                    events.extend((event, arrival) for event in self.adapter.feed(data))
                elif backlog.end_at is not None and self.state is PacerState.PACING:
                    arrival, backlog.end_at = backlog.end_at, None
                    self._end_adapter(arrival)
                else:
                    break
            except Exception as e:
                self._failed(e, arrival)
        if self.state is not PacerState.PACING:
            backlog.end_at = None  # nothing left to parse: the adapter's end is moot
        if self._ended and backlog.end_at is None and backlog.drained:
            self._close_open()  # the upstream's end closes the last network event

    def _read(self, step: Callable[[], None], now: float) -> None:
        """Run `step`, which calls the adapter, as `_pump` runs its steps."""
        try:
            step()
        except Exception as e:
            self._failed(e, now)

    def _failed(self, e: Exception, now: float | None) -> None:
        """A step of `_pump` (which calls the adapter) raised: parsing stops and the client
        gets the bytes unchanged; a failure that is not the expected kind is a bug, logged
        with its traceback."""
        if not isinstance(e, EXPECTED_ADAPTER_ERRORS):
            logger.exception(f"retimer: the {self.adapter.name} adapter failed unexpectedly; "
                             "passing the rest of the stream through unchanged", exc_info=e)
        assert now is not None
        self._stop_parsing(PacerState.UNPARSED, f"{type(e).__name__}: {e}", now)

    def _end_adapter(self, now: float) -> None:
        for event in self.adapter.end():
            self._accept(event, now)
        self._schedule_held(now)

    def finish(self, now: float) -> None:
        """The upstream ended cleanly at `now`: whatever is left goes out."""
        if self._ended:
            return
        if self.decoder is not None and self.state is not PacerState.BROKEN:
            try:
                self.decoder.end()
            except ValueError as e:
                self._break(str(e))
        if self.state is PacerState.BROKEN:
            return  # not a clean end after all: the caller aborts
        if self._lead:  # a body shorter than a BOM
            self._parse(self._settle_lead(b"", now, final=True), now)
        self._ended = True
        self._backlog.end_at = now
        self._pump(now)

    def _stop_parsing(self, state: PacerState, reason: str, now: float) -> None:
        """Parsing stops (the adapter failed, or a cap was reached): what is queued goes first,
        then the bytes no event covered, then the rest as it comes."""
        if self.state is not PacerState.BROKEN:  # a broken body stays broken
            self.state = state
        self.failure = reason
        self._held = None  # held events' bytes are still in _unparsed: they go out below
        self._backlog.clear()  # the backlog's bytes and events too
        if self._backlog.split is not None:  # the pieces already cut go first, if they can
            try:
                self._drain_split()
            except Exception:
                self._backlog.split = None
        self._close_open()
        if self._unparsed:
            self._outbox.push(Emission(now, bytes(self._unparsed), 0, None))
        self._unparsed.clear()

    def _break(self, reason: str) -> None:
        self.state = PacerState.BROKEN
        self.broken = reason

    def cap_reached(self, reason: str, now: float) -> None:
        """Stop pacing (a buffer cap was reached: `reason` says which): everything held is due
        now, the rest passes as it comes, and the cache's copy is dropped (no entry is kept)."""
        if self.state is PacerState.PACING:
            self._stop_parsing(PacerState.CAPPED, f"{CAP_PREFIX}: {reason}", now)
        self._outbox.due_now(now)
        self.captured = None

    def abort(self, now: float) -> list[Emission]:
        """The upstream broke off: everything that arrived, in order, to send at once (held
        events, then a trailing partial event verbatim). The stream is over after this."""
        if not self._ended:
            if self._lead:
                self._parse(self._settle_lead(b"", now, final=True), now)
            self._ended = True
            self._pump(float("inf"))
            if self._held is not None:
                self._read(lambda: self._schedule_held(now), now)
            self._pump(float("inf"))  # the last held event's pieces, before the partial one
            self._close_open()
            if self._unparsed:
                self._outbox.push(Emission(now, bytes(self._unparsed), 0, None))
                self._unparsed.clear()
        return self.pop_all()

    def flush(self, now: float) -> list[Emission]:
        """Everything scheduled or held, now (the proxy is shutting down); a partial event
        stays until it completes. Later events are scheduled as they come: call again."""
        self._pump(float("inf"))
        if self._held is not None:
            self._read(lambda: self._schedule_held(now), now)
        return self.pop_all()

    # -- bounds and keep-alives ------------------------------------------------------------
    @property
    def buffered(self) -> int:
        """Bytes this stream keeps: received and not yet popped, plus the cache's copy."""
        captured = len(self.captured) if self.captured is not None else 0
        split = self._backlog.split.size if self._backlog.split is not None else 0
        return self._outbox.queued_bytes + len(self._unparsed) + split + captured

    @property
    def holding(self) -> bool:
        """Bytes have arrived that the client has not been given yet."""
        return not self._outbox.empty or bool(self._unparsed) or self._backlog.split is not None

    def idle(self, now: float, release_early: bool = False) -> list[Emission]:
        """The client has had nothing for a while and bytes are held: keep it alive.

        The adapter's keep-alive (an SSE comment) when the format has one and it is safe here
        (parsing intact, and never before the body's first bytes are settled: they may be the
        start of a BOM, which must come first); else, with `release_early`, the next held
        emission before its time. [] when neither applies.
        """
        if not self.holding:
            return []
        data = self.adapter.keepalive() if self.fallback is None else None
        if data is not None and not self._lead:
            self.keepalives += 1
            return [Emission(now, data, 0, None)]
        if not release_early:
            return []
        self._pump(float("-inf"), queued=True)
        if not self._outbox.pending:
            self._close_open()
        e = self._outbox.pop_next()
        if e is None:
            return []
        self.released_early += 1
        return [e]

    @property
    def fallback(self) -> str | None:
        """Why (part of) the stream went through unparsed, by the pacer or the adapter."""
        return self.failure or self.adapter.failure

    # -- output --------------------------------------------------------------------------
    def next_due(self) -> float | None:
        outbox = self._outbox
        if not outbox.pending:  # else the head of the queue is due first, whatever is parsed next
            self._pump(float("-inf"), queued=True)
        return outbox.next_due()

    def pop_due(self, until: float) -> list[Emission]:
        """Every emission due at or before `until`, in order.

        A network event still waiting for tokens to fill it goes out when its last token is
        due: chunking groups tokens, it never holds them back. The backlog is parsed as far
        as `until` needs.
        """
        self._pump(until)
        if self._outbox.due_by(until):
            self._close_open()
        return self._outbox.pop_due(until)

    def pop_all(self) -> list[Emission]:
        self._pump(float("inf"))
        self._close_open()
        return self._outbox.pop_all()

    def sent(self, emissions: list[Emission], now: float) -> None:
        """The caller wrote `emissions` to the client at `now`."""
        for e in emissions:
            if e.tokens:
                self.stats.emitted(now, e.tokens, e.channel, e.due)

    @property
    def ended(self) -> bool:
        """The upstream has ended (cleanly, or broken off)."""
        return self._ended

    @property
    def done(self) -> bool:
        """The upstream has ended and nothing is left to send."""
        return self._ended and self._backlog.drained and self._backlog.end_at is None \
            and not self._outbox.pending

    @property
    def pending(self) -> int:
        """Emissions scheduled and not yet popped (the open network event not counted)."""
        return self._outbox.pending

    @property
    def backlog(self) -> bool:
        """Bytes have arrived that the adapter has not parsed yet (they are parsed as due)."""
        return bool(self._backlog)

    @property
    def open_pieces(self) -> int:
        """Pieces gathered in the network event still waiting for tokens to fill it."""
        return self._outbox.open_pieces

    @property
    def unparsed_bytes(self) -> int:
        """Bytes given to the adapter that no complete event has covered yet."""
        return len(self._unparsed)
