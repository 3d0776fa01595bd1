"""How a stream's token events become timed network events: the scheduling half of the pacer.

Consecutive tokens are grouped into network events of the profile's size, an upstream event
split where a group ends inside it, and each group is due with its last token. Non-token
events and whole (unsplittable) events close the open group and keep their upstream order.
The `smooth` and `replay` strategies hold events back (with their arrival times) until they
may go. A split event's pieces are serialised lazily, one network event at a time, as the
schedule needs them (see `retimer.timing.backlog`).

Why a mixin and not an object the pacer delegates to: `EventGrouper` is a base class of
`retimer.timing.pacer.StreamPacer`, which feeds it events on the per-event hot path, so the
split costs no extra call or attribute hop per event. It owns the schedule's state (the
scheduler, the held events, the tokens left in the open network event) and works on the
pacer's queues, declared on the class and set by the pacer.
"""

from __future__ import annotations

from collections import deque

from retimer.timing.backlog import Backlog, PendingSplit
from retimer.timing.metrics import StreamStats
from retimer.timing.outbox import Emission, Outbox
from retimer.timing.scheduler import PassthroughScheduler, Scheduler, TokenClock
from retimer.timing.strategy import SmoothPlan, Strategy
from retimer.wire.protocols.base import Adapter, Channel, Event
from retimer.wire.tokenizer import split_tokens

__all__ = ["EventGrouper"]


class EventGrouper:
    """Schedules parsed events: token events grouped into timed network events, in order."""

    # the pacer's, set before any event is scheduled
    adapter: Adapter
    stats: StreamStats
    _outbox: Outbox
    _backlog: Backlog
    _unparsed: bytearray  # bytes received that no event has covered yet

    def __init__(
        self,
        timing: TokenClock,
        start: float,
        *,
        passthrough: bool,
        strategy: Strategy,
        target_tps: float,
        expected_tokens: int | None,
    ) -> None:
        self.timing = timing
        self.passthrough = passthrough
        self.scheduler: Scheduler = (
            PassthroughScheduler(timing, start) if passthrough else Scheduler(timing, start)
        )
        self._chunk_left = 1 if passthrough else timing.chunk_size()
        # `smooth` and `replay` hold events back (with their arrival times) until they may go
        self.strategy = Strategy.LIVE if passthrough else strategy
        self._held: list[tuple[Event, float]] | None = (
            None if self.strategy is Strategy.LIVE else []
        )
        self.smooth = (
            SmoothPlan(target_tps, expected_tokens) if self.strategy is Strategy.SMOOTH else None
        )
        self._replay_from: float | None = None  # replay: no event leaves before the upstream's end

    def _accept(self, event: Event, now: float) -> None:
        """An event arrived: schedule it now (live) or hold it (smooth, replay)."""
        held = self._held
        if held is None:
            self._event(event, now, self._replay_from)
            return
        held.append((event, now))
        if self.smooth is not None and event.texts:
            self.smooth.observe(now, len(split_tokens(event.text)))
            if self.smooth.ready(now):
                self._schedule_held(now)

    def _schedule_held(self, now: float) -> None:
        """Release the held events: smooth from its planned start, replay from the end. They go
        back to the front of the backlog's parsed events, in order, and are scheduled (split,
        serialised) as the schedule needs them, like any parsed event."""
        held = self._held
        if held is None:
            return
        self._held = None
        if self.smooth is not None:
            self.scheduler.not_before = self.smooth.start(now)
        else:
            self._replay_from = now
        self._backlog.events.extendleft(reversed(held))

    def _event(self, event: Event, now: float, not_before: float | None = None) -> None:
        """Schedule one event that arrived at `now`, not to leave before `not_before`."""
        if self._backlog.split is not None:
            self._drain_split()  # the split event before it is scheduled whole first
        size = len(event.raw) if event.upstream_size is None else event.upstream_size
        del self._unparsed[:size]
        arrival = now
        if not_before is not None:
            now = max(now, not_before)
        text = event.text if event.texts else ""
        if not text:
            self._close_open()
            self._outbox.push(Emission(max(now, self._outbox.last_due), event.raw, 0, None))
            return
        channel = event.texts[0][0]
        if channel is Channel.REASONING and not self.scheduler.started:
            self._visible_reasoning()
        tokens = split_tokens(text)
        self.stats.upstream_tokens(arrival, len(tokens), channel)
        if self.passthrough or not event.splittable:
            self._close_open()
            due = self.scheduler.token(now)
            if len(tokens) > 1:
                # a whole event (a Gemini function call, an estimated event) leaves once all
                # its tokens are decoded: only the first comes free with the first chunk
                self.scheduler.end_first_chunk()
                due = self.scheduler.token(now, len(tokens) - 1)
            self._outbox.push(Emission(due, event.raw, len(tokens), channel))
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
        datas = iter((event.raw,)) if len(pieces) == 1 else self.adapter.split_lazily(event, pieces)
        plan = deque(zip(piece_tokens, closes, dues, strict=True))
        self._backlog.split = PendingSplit(datas, plan, channel, size, arrival)
        self._split_step()  # the first network event now; the rest as the schedule needs it

    def _split_step(self) -> None:
        """Schedule the pieces of the split event up to the end of a network event."""
        split = self._backlog.split
        assert split is not None
        plan = split.plan
        while plan:
            n, close, due = plan[0]
            data = next(split.datas)
            plan.popleft()
            self._outbox.add_piece(data, n, due, split.channel)
            if close:
                self._outbox.close_open()  # its successor's size is drawn already
                break
        if not plan:
            self._backlog.split = None

    def _drain_split(self) -> None:
        while self._backlog.split is not None:
            self._split_step()

    def _visible_reasoning(self) -> None:
        """The stream shows its reasoning, paced token by token: no hidden thinking time."""
        skip = getattr(self.timing, "skip_hidden_reasoning", None)
        if skip is not None:
            skip()
            self.stats.target_ttft = self.timing.ttft

    def _new_chunk(self) -> None:
        self.scheduler.end_first_chunk()
        self._chunk_left = 1 if self.passthrough else self.timing.chunk_size()

    def _close_open(self) -> None:
        """A network event cut short by a non-token event or the end: the next starts afresh."""
        if self._outbox.close_open():
            self._new_chunk()
