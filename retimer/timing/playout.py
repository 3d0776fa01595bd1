"""One HTTP stream's playout, h11-style: the shell feeds what arrived and asks one question per wake.

The shell (the proxy's pacing bridge) owns the clock, the timers and the connection; this owns
every decision between them. It feeds upstream bytes (`feed`), the upstream's clean end (`end`)
or its breaking off (`abort`), and on every wake asks `step(now, armed)`: the bytes to write now,
whether a new timer is needed and when, and whether the stream is over; once it has written
the bytes it calls `parse_ahead`. Behind `step` sit the stream's `StreamPacer` (parsing, the
timing model, chunking) and `retimer.timing.emission`'s policy (the send window, keep-alives,
how early to wake, how far to parse ahead). A passthrough stream, whose bytes the
shell passes on as they come, is only counted (`passed`, `passed_end`, `passed_abort`).

Bounds are decided here too: a `PlayoutPool` holds the limits (`Settings`), whether the proxy is
draining (shutdown) and the bytes all its streams hold together; past a cap a stream becomes
pass-through. What the shell should tell the user comes back as `StreamWarning`s in `warnings`
(it knows the host, which costs a header parse, only when there is something to say).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from retimer.timing import emission
from retimer.timing.pacer import Emission, StreamPacer

__all__ = ["COUNT_EVERY_S", "End", "Playout", "PlayoutPool", "Settings", "Step", "StreamWarning", "Turn"]

COUNT_EVERY_S = 0.1  # a passthrough stream's bytes are parsed and counted at most this often


@dataclass(slots=True)
class Settings:
    """The bounds and keep-alive policy (the `retimer_*` options of `retimer.proxy.safety`)."""

    max_stream_buffer: int = 16 * 2**20  # bytes one stream may keep before pass-through
    max_total_buffer: int = 256 * 2**20  # bytes all streams together may keep
    keepalive_s: float = 4.0  # idle time, while bytes are held, before a keep-alive (0: never)
    idle_release: bool = False  # formats without a keep-alive: send the next emission early


class PlayoutPool:
    """The playouts of one proxy process: their limits, the bytes they hold together (`held`,
    kept current in O(1) per change) and whether the proxy is draining (shutting down)."""

    __slots__ = ("draining", "held", "settings")

    def __init__(self) -> None:
        self.settings = Settings()
        self.held = 0
        self.draining = False  # shutting down: every stream sends what it holds when it wakes


class End(StrEnum):
    """How a stream ends, when `step` says it is over."""

    COMPLETE = "complete"  # every byte is out: the shell sends the upstream's end
    BROKEN = "broken"  # the body cannot be decoded: the shell ends the stream with an error


@dataclass(slots=True)
class Turn:
    """One turn of a WebSocket (`retimer.timing.turns`): a client message and the server's answer."""

    pacer: StreamPacer
    index: int  # the stream index its timing was drawn with (its record's)
    number: int = 0  # its place in the socket: 0 for what the server sent before any client message
    messages: int = 0  # server messages fed: a turn with any gets a record, tokens or not
    last_sent: float | None = None  # when its last message went to the client: where the turn ends


class Step(NamedTuple):
    """The answer to one wake. `wake`/`delay`: arm a new timer (None: the one armed will do, or
    nothing is left to wake for); `reason`: why a BROKEN stream broke; `turns`: a WebSocket's
    turns that are over, to record."""

    data: bytes
    wake: float | None = None
    delay: float = 0.0
    end: End | None = None
    reason: str = ""
    turns: tuple[Turn, ...] = ()


class StreamWarning(NamedTuple):
    """A warning about one stream, worded around its host: `retimer: {before}{host}{after}`."""

    before: str
    after: str

    def message(self, host: str) -> str:
        return f"retimer: {self.before}{host}{self.after}"


_NOTHING = Step(b"")


class Playout:
    """One paced (or, passthrough, counted) HTTP stream. `pacer` is public for what reads a
    stream's figures (records, the live view); the shell drives it through the methods here."""

    __slots__ = ("_counted", "_ended", "_pool", "_tallied", "_warned", "last_send", "pacer", "warnings")

    def __init__(self, pacer: StreamPacer, pool: PlayoutPool, now: float) -> None:
        self.pacer = pacer
        self._pool = pool
        self.last_send = now  # when the client last got bytes (or the response head)
        self._counted = 0  # this stream's share of pool.held
        self._ended = False  # the upstream ended cleanly (its end waits for the last byte)
        self._tallied = 0.0  # passthrough: when its bytes were last counted
        self._warned = False
        self.warnings: list[StreamWarning] = []  # for the shell to log, then clear

    # -- a paced stream --------------------------------------------------------------------
    def feed(self, data: bytes, now: float) -> None:
        """Upstream body bytes arrived at `now`."""
        pacer = self.pacer
        pacer.feed(data, now)
        self._warn_once()
        if pacer.broken is None:
            self._account()
            self._check_caps(now)

    def end(self, now: float) -> None:
        """The upstream ended cleanly at `now` (a body that turns out undecodable breaks)."""
        pacer = self.pacer
        pacer.finish(now)
        if pacer.broken is None:
            self._warn_once()
            self._ended = True

    def abort(self, now: float) -> bytes:
        """The upstream broke off (or the body cannot be decoded): everything that arrived, to
        write now; the stream is over after this."""
        batch = self.pacer.abort(now)
        if not batch:
            return b""
        self._sent(batch, now)
        return batch[0].data if len(batch) == 1 else b"".join(e.data for e in batch)

    @property
    def waiting(self) -> bool:
        """The upstream has not ended the stream yet (nor has it broken off, nor its body)."""
        pacer = self.pacer
        return not self._ended and not pacer.done and pacer.broken is None

    def step(self, now: float, armed: float | None) -> Step:
        """One wake at `now`, with the earliest timer already armed for this stream due at
        `armed` (None: none): what to write, whether to arm another timer, whether it ended."""
        pacer = self.pacer
        if pacer.broken is not None:
            self.warnings.append(StreamWarning(
                f"the {pacer.adapter.name} stream from ",
                f" is corrupt ({pacer.broken}); the client gets what was decoded, then an error"))
            return Step(self.abort(now), end=End.BROKEN, reason=f"retimer: {pacer.broken}")
        pool = self._pool
        settings = pool.settings
        due = emission.to_send(pacer, now, pool.draining)
        if not due and emission.keepalive_due(now, self.last_send, settings.keepalive_s):
            due = pacer.idle(now, settings.idle_release)
        data = b""
        if due:
            data = due[0].data if len(due) == 1 else b"".join(e.data for e in due)
            self._sent(due, now)
        if pacer.done:
            if self._ended:
                return Step(data, end=End.COMPLETE)
            return Step(data) if data else _NOTHING
        wake = emission.next_wake(
            now, pacer.next_due(), holding=pacer.holding, awaiting_upstream=not self._ended,
            last_send=self.last_send, keepalive_s=settings.keepalive_s,
        )
        if wake is None or not emission.needs_timer(wake, armed):
            return Step(data) if data else _NOTHING
        return Step(data, wake, emission.timer_delay(wake, now))

    def parse_ahead(self, now: float, wake: float | None, steps: int) -> None:
        """The shell wrote a step's bytes at `now` (the step asked to wake at `wake`): parse
        what falls due next now, so tokens do not wait on their parsing when they fall due,
        and this write did not wait on it either. In a batch of up to `steps` steps once the
        schedule runs short (`StreamPacer.prepare`; the shell asks `emission.batch_steps`),
        unless that is under two or the next wake too close to hold up for one: then only as
        far as falls due soon, as the stream's wakes go."""
        until = now + emission.PARSE_AHEAD_S
        if steps < 2 or (wake is not None and wake - now < emission.PARSE_BATCH_SLACK_S):
            self.pacer.prepare(until, until, None)
        else:
            self.pacer.prepare(until, now + emission.PARSE_BATCH_S, steps)

    def release(self) -> None:
        """The stream is over: its bytes no longer count against the pool."""
        self._pool.held -= self._counted
        self._counted = 0

    # -- a passthrough stream: the shell passes every byte on as it comes ------------------
    def passed(self, data: bytes, now: float) -> None:
        """Body bytes the shell passed on unchanged at `now`: kept with their arrival time,
        parsed and counted at most every COUNT_EVERY_S (the live view's pace) and at the end."""
        pacer = self.pacer
        pacer.receive(data, now)
        if now - self._tallied >= COUNT_EVERY_S:
            pacer.tally()
            self._tallied = now
            self._warn_once()

    def passed_end(self, now: float) -> None:
        """The upstream ended cleanly at `now`: count the rest (a body that turns out
        undecodable counts as broken off)."""
        pacer = self.pacer
        pacer.finish(now)
        if pacer.broken is None:
            pacer.tally()
            self._warn_once()
        else:  # the client has the body as it came, to decode itself
            pacer.tally(pacer.abort(now))
            self.warnings.append(StreamWarning(
                f"the {pacer.adapter.name} stream from ",
                f" cannot be decoded to count it ({pacer.broken}); passed on unchanged"))

    def passed_abort(self, now: float) -> None:
        """The upstream broke off at `now`: count what arrived."""
        self.pacer.tally(self.pacer.abort(now))

    # -- internals ---------------------------------------------------------------------------
    def _sent(self, batch: list[Emission], now: float) -> None:
        self.pacer.sent(batch, now)
        self.last_send = now
        self._account()

    def _warn_once(self) -> None:
        """One warning per stream: it fell back to pass-through, or it carried a malformed part."""
        if self._warned:
            return
        pacer = self.pacer
        if failure := pacer.fallback:
            self._warned = True
            self.warnings.append(StreamWarning(
                f"cannot parse the {pacer.adapter.name} stream from ",
                f" ({failure}); passing the rest through unchanged"))
        elif anomaly := pacer.adapter.anomaly:
            self._warned = True
            self.warnings.append(StreamWarning(
                f"the {pacer.adapter.name} stream from ", f" has {anomaly}; passed on unchanged"))

    def _account(self) -> None:
        """Keep the pool's total of held bytes current (O(1): this stream's change only)."""
        now_held = self.pacer.buffered
        self._pool.held += now_held - self._counted
        self._counted = now_held

    def _check_caps(self, now: float) -> None:
        """Past a cap the stream becomes pass-through: what it holds goes out at once."""
        pacer = self.pacer
        if pacer.failure is not None:
            return  # passing through already: nothing is held for long
        held, total, settings = self._counted, self._pool.held, self._pool.settings
        if held > settings.max_stream_buffer:
            reason = f"{held} bytes held > {settings.max_stream_buffer} per stream"
        elif total > settings.max_total_buffer:
            reason = f"{total} bytes held by all streams > {settings.max_total_buffer}"
        else:
            return
        pacer.cap_reached(reason, now)
        self._account()
        self._warned = True
        self.warnings.append(StreamWarning(
            "the stream from ", f" reached the buffer cap ({reason}); passing it through unpaced"))
