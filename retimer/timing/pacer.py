"""One re-timed stream, sans-io: upstream bytes and arrival times in, timed output bytes out.

The pacer parses with a protocol adapter, cuts token text into BPE-like pieces, groups
consecutive tokens into network events of the profile's size (splitting upstream events where
a group ends inside one), and gives each group the due time of its last token. Groups and
non-token events stay in upstream order; the caller pops what is due and reports when it went.

Faults and bounds are decided here too, without I/O: `abort` gives everything that arrived when
the upstream broke, `release` turns the stream into pass-through (a buffer cap was reached),
`buffered` says how many bytes the stream keeps, and `idle` says what may keep a client's
connection alive while bytes are held (the adapter's keep-alive, or the next emission early).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from retimer.timing.metrics import StreamStats
from retimer.timing.scheduler import PassthroughScheduler, Scheduler, StreamTiming
from retimer.timing.strategy import SmoothPlan, Strategy
from retimer.wire.encoding import Decoder
from retimer.wire.protocols.base import Adapter, Channel, Event
from retimer.wire.tokenizer import split_tokens

CAP_PREFIX = "buffer cap"  # how a `release` reason for a reached buffer cap begins
BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class Emission:
    """Bytes that leave together at `due` (monotonic seconds)."""

    due: float
    data: bytes
    tokens: int
    channel: Channel | None


class StreamPacer:
    """Re-times one stream. Feed it bytes; pop what is due; it never emits before arrival."""

    def __init__(
        self,
        adapter: Adapter,
        timing: StreamTiming,
        start: float,
        *,
        passthrough: bool = False,
        decoder: Decoder | None = None,
        strategy: Strategy = Strategy.LIVE,
        target_tps: float = 0.0,
        expected_tokens: int | None = None,
    ) -> None:
        self.adapter = adapter
        self.decoder = decoder
        self.failure: str | None = None  # set when the stream fell back to pass-through
        # set when the body cannot be decoded (corrupt or cut-off compression): the client can
        # no longer decode it either, so the caller ends the stream as broken (`abort`)
        self.broken: str | None = None
        self.captured: bytearray | None = None  # set to a bytearray to keep the decoded body
        self._unparsed = bytearray()  # bytes fed to the adapter that no event has covered yet
        self.timing = timing
        self.passthrough = passthrough
        self.scheduler: Scheduler = (
            PassthroughScheduler(timing, start) if passthrough else Scheduler(timing, start)
        )
        self.stats = StreamStats(start=start, target_ttft=timing.ttft)
        self._queue: deque[Emission] = deque()
        self._queued_bytes = 0  # bytes in _queue and _open: scheduled, not yet popped
        # the first decoded bytes while they may still be a UTF-8 BOM (None once settled): a
        # BOM leaves at once on its own, so nothing (a keep-alive, a split) can come before it
        self._lead: bytes | None = b""
        self._sent_any = False
        self.keepalives = 0  # keep-alive comments sent while bytes were held
        self.released_early = 0  # emissions sent before their time to keep a client alive
        self._last_due = start
        self._finished = False
        # the open network event: tokens gathered until the profile's chunk size is reached
        self._open: list[bytes] = []
        self._open_tokens = 0
        self._open_due = 0.0
        self._open_channel: Channel | None = None
        self._chunk_left = 1 if passthrough else timing.chunk_size()
        # `smooth` and `replay` hold events back (with their arrival times) until they may go
        self.strategy = Strategy.LIVE if passthrough else strategy
        self._held: list[tuple[Event, float]] | None = (
            None if self.strategy is Strategy.LIVE else []
        )
        self.smooth = (
            SmoothPlan(target_tps, expected_tokens) if self.strategy is Strategy.SMOOTH else None
        )

    # -- input ---------------------------------------------------------------------------
    def feed(self, data: bytes, now: float) -> None:
        """Upstream bytes arrived at `now`."""
        self.stats.upstream_bytes(now)
        if self.broken is not None:
            return
        if self.decoder is not None:
            try:
                data = self.decoder.decode(data)
            except ValueError as e:
                self.broken = str(e)
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
            self._push(Emission(now, BOM, 0, None))
            return lead[len(BOM):]
        return lead

    def _parse(self, data: bytes, now: float) -> None:
        if self.failure is None:
            try:
                self._unparsed += data
                for event in self.adapter.feed(data):
                    self._accept(event, now)
                return
            except Exception as e:
                self._fail_open(e, now)
                return
        self._push(Emission(now, data, 0, None))

    def finish(self, now: float) -> None:
        """The upstream ended cleanly at `now`: whatever is left goes out."""
        if self._finished:
            return
        if self.decoder is not None and self.broken is None:
            try:
                self.decoder.end()
            except ValueError as e:
                self.broken = str(e)
        if self.broken is not None:
            return  # not a clean end after all: the caller aborts
        if self._lead:  # a body shorter than a BOM
            self._parse(self._settle_lead(b"", now, final=True), now)
        self._finished = True
        if self.failure is None:
            try:
                for event in self.adapter.end():
                    self._accept(event, now)
                self._release(now)
            except Exception as e:
                self._fail_open(e, now)
        self._close_open()

    def _fail_open(self, error: Exception, now: float) -> None:
        """The stream cannot be parsed: send what is queued, then the rest as it came."""
        self.failure = f"{type(error).__name__}: {error}"
        self._held = None  # held events' bytes are still in _unparsed: they go out below
        self._close_open()
        if self._unparsed:
            self._push(Emission(now, bytes(self._unparsed), 0, None))
        self._unparsed.clear()

    def release(self, reason: str, now: float) -> None:
        """Stop pacing (a buffer cap was reached: `reason` says which): everything held is due
        now, the rest passes as it comes, and the cache's copy is dropped (no entry is kept)."""
        if self.failure is None:
            self._fail_open(RuntimeError(), now)
            self.failure = f"{CAP_PREFIX}: {reason}"
        for e in self._queue:
            e.due = min(e.due, now)
        self._last_due = min(self._last_due, now)
        self.captured = None

    def abort(self, now: float) -> list[Emission]:
        """The upstream broke off: everything that arrived, in order, to send at once (held
        events, then a trailing partial event verbatim). The stream is over after this."""
        if not self._finished:
            if self._lead:
                self._parse(self._settle_lead(b"", now, final=True), now)
            self._finished = True
            if self.failure is None:
                try:
                    self._release(now)
                except Exception as e:
                    self._fail_open(e, now)
            self._close_open()
            if self._unparsed:
                self._push(Emission(now, bytes(self._unparsed), 0, None))
                self._unparsed.clear()
        return self.pop_all()

    def flush(self, now: float) -> list[Emission]:
        """Everything scheduled or held, now (the proxy is shutting down); a partial event
        stays until it completes. Later events are scheduled as they come: call again."""
        if self.failure is None:
            try:
                self._release(now)
            except Exception as e:
                self._fail_open(e, now)
        return self.pop_all()

    # -- bounds and keep-alives ------------------------------------------------------------
    @property
    def buffered(self) -> int:
        """Bytes this stream keeps: received and not yet popped, plus the cache's copy."""
        captured = len(self.captured) if self.captured is not None else 0
        return self._queued_bytes + len(self._unparsed) + captured

    @property
    def holding(self) -> bool:
        """Bytes have arrived that the client has not been given yet."""
        return bool(self._queue or self._open or self._unparsed)

    def idle(self, now: float, release: bool = False) -> list[Emission]:
        """The client has had nothing for a while and bytes are held: keep it alive.

        The adapter's keep-alive (an SSE comment) when the format has one and it is safe here
        (parsing intact, and never before the body's first bytes are settled: they may be the
        start of a BOM, which must come first); else, with `release`, the next held
        emission early. [] when neither applies.
        """
        if not self.holding:
            return []
        data = self.adapter.keepalive() if self.fallback is None else None
        if data is not None and not self._lead:
            self.keepalives += 1
            return [Emission(now, data, 0, None)]
        if not release:
            return []
        if not self._queue:
            self._close_open()
        if not self._queue:
            return []
        self.released_early += 1
        e = self._queue.popleft()
        self._queued_bytes -= len(e.data)
        return [e]

    @property
    def fallback(self) -> str | None:
        """Why (part of) the stream went through unparsed, by the pacer or the adapter."""
        return self.failure or self.adapter.failure

    # -- output --------------------------------------------------------------------------
    def next_due(self) -> float | None:
        if self._queue:
            return self._queue[0].due
        return self._open_due if self._open else None

    def pop_due(self, until: float) -> list[Emission]:
        """Every emission due at or before `until`, in order.

        A network event still waiting for tokens to fill it goes out when its last token is
        due: chunking groups tokens, it never holds them back.
        """
        out: list[Emission] = []
        queue = self._queue
        if not queue and self._open and self._open_due <= until:
            self._close_open()
        while queue and queue[0].due <= until:
            e = queue.popleft()
            self._queued_bytes -= len(e.data)
            out.append(e)
        return out

    def pop_all(self) -> list[Emission]:
        self._close_open()
        out = list(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        return out

    def sent(self, emissions: list[Emission], now: float) -> None:
        """The caller wrote `emissions` to the client at `now`."""
        if emissions:
            self._sent_any = True
        for e in emissions:
            if e.tokens:
                self.stats.emitted(now, e.tokens, e.channel, e.due)

    @property
    def done(self) -> bool:
        """The upstream has ended and nothing is left to send."""
        return self._finished and not self._queue

    @property
    def pending(self) -> int:
        return len(self._queue)

    # -- internals -----------------------------------------------------------------------
    def _accept(self, event: Event, now: float) -> None:
        """An event arrived: schedule it now (live) or hold it (smooth, replay)."""
        held = self._held
        if held is None:
            self._event(event, now)
            return
        held.append((event, now))
        if self.smooth is not None and event.texts:
            self.smooth.observe(now, len(split_tokens(event.text)))
            if self.smooth.ready(now):
                self._release(now)

    def _release(self, now: float) -> None:
        """Schedule the held events: smooth from its planned start, replay from the end."""
        held = self._held
        if held is None:
            return
        self._held = None
        if self.smooth is not None:
            self.scheduler.not_before = self.smooth.start(now)
            for event, arrival in held:
                self._event(event, arrival)
        else:
            for event, arrival in held:
                self._event(event, arrival, release=now)

    def _event(self, event: Event, now: float, release: float | None = None) -> None:
        """Schedule one event that arrived at `now`, not to leave before `release`."""
        size = len(event.raw) if event.upstream_size is None else event.upstream_size
        del self._unparsed[:size]
        arrival = now
        if release is not None:
            now = max(now, release)
        if not event.texts or not event.text:
            self._close_open()
            self._push(Emission(max(now, self._last_due), event.raw, 0, None))
            return
        channel = event.texts[0][0]
        if channel is Channel.REASONING and not self.scheduler.started:
            self._visible_reasoning()
        tokens = split_tokens(event.text)
        self.stats.upstream_tokens(arrival, len(tokens), channel)
        if self.passthrough or not event.splittable:
            self._close_open()
            due = self.scheduler.token(now)
            if len(tokens) > 1:
                # a whole event (a Gemini function call, an estimated event) leaves once all
                # its tokens are decoded: only the first comes free with the first chunk
                self.scheduler.end_first_chunk()
                due = self.scheduler.token(now, len(tokens) - 1)
            self._push(Emission(due, event.raw, len(tokens), channel))
            self._new_chunk()
            return
        pieces: list[str] = []
        piece_tokens: list[int] = []
        closes: list[bool] = []
        dues: list[float] = []
        cur: list[str] = []
        for tok in tokens:
            due = self.scheduler.token(now)
            cur.append(tok)
            self._chunk_left -= 1
            if self._chunk_left <= 0:
                pieces.append("".join(cur))
                piece_tokens.append(len(cur))
                closes.append(True)
                dues.append(due)
                cur = []
                self._new_chunk()  # drawn now: the next token may belong to this event
        if cur:
            pieces.append("".join(cur))
            piece_tokens.append(len(cur))
            closes.append(False)
            dues.append(self.scheduler.last_due or now)
        datas = [event.raw] if len(pieces) == 1 else self.adapter.split(event, pieces)
        for data, n, close, due in zip(datas, piece_tokens, closes, dues, strict=True):
            self._open.append(data)
            self._queued_bytes += len(data)
            self._open_tokens += n
            self._open_due = due
            self._open_channel = channel
            if close:
                self._close_open(partial=False)

    def _visible_reasoning(self) -> None:
        """The stream shows its reasoning, paced token by token: no hidden thinking time."""
        skip = getattr(self.timing, "skip_hidden_reasoning", None)
        if skip is not None:
            skip()
            self.stats.target_ttft = self.timing.ttft

    def _new_chunk(self) -> None:
        self.scheduler.end_first_chunk()
        self._chunk_left = 1 if self.passthrough else self.timing.chunk_size()

    def _close_open(self, partial: bool = True) -> None:
        if not self._open:
            return
        data = self._open[0] if len(self._open) == 1 else b"".join(self._open)
        self._queued_bytes -= len(data)  # counted while open; _push counts it again
        self._push(Emission(self._open_due, data, self._open_tokens, self._open_channel))
        self._open = []
        self._open_tokens = 0
        if partial:
            # a chunk cut short by a non-token event or the end: the next one starts afresh
            self._new_chunk()

    def _push(self, emission: Emission) -> None:
        if emission.due < self._last_due:
            emission.due = self._last_due  # keep upstream order
        self._last_due = emission.due
        self._queue.append(emission)
        self._queued_bytes += len(emission.data)
