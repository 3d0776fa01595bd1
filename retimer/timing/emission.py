"""When a paced stream sends and when it wakes next: the policy HTTP streams (the proxy's pacing
bridge) and WebSocket messages (its WebSocket pacing) share. Sans-io: times and the pacer's
state in, decisions out; the shell owns the clock, the timers and the connection.

Timers run late (asyncio's are millisecond-grained, and the kernel adds slack to long sleeps),
so a stream asks to wake a little before its next due time and, once awake, sends everything
due within a window as wide as that head start, in one write: a token may leave up to WINDOW_S
before its due time, never later than the timer lets it. (A narrower window made most wakes
come too early by a fraction of a millisecond, which epoll cannot sleep: the stream re-armed a
zero timer, a loop pass each, until it was due, at a fifth of the proxy's CPU per event;
BENCHMARKS.md, "CPU per event".) While the proxy drains (shutdown), everything held
leaves at once. An HTTP stream that holds bytes also wakes for its keep-alive and at least every
MAX_SLEEP_S, and one still waiting on its upstream looks again as often, for a lost close.
"""

from __future__ import annotations

import math

from retimer.timing.pacer import Emission, StreamPacer

EARLY_S = 0.0008  # wake this much before the next due time (asyncio timers run late)
WINDOW_S = 0.0013  # on waking, send everything due within this window (> the head start)
LONG_SLEEP_S = 0.004  # sleeps longer than this wake a little earlier still (measured in bench/)
LONG_SLEEP_EARLY_S = 0.0004
MAX_SLEEP_S = 1.0  # a holding stream wakes at least this often (drain, keep-alives)
PARSE_AHEAD_S = 0.05  # after a write, once the pacer has parsed no further than this ahead,
PARSE_BATCH_S = 0.5  # it parses this far ahead in one batch (Playout.parse_ahead),
PARSE_BATCH_STEPS = 32  # at most this many network events (about 0.25 ms of CPU warm),
PARSE_BATCH_SLACK_S = 0.004  # when its next wake is at least this far off (a slower stream)
PARSE_BATCH_LATE_S = 0.002  # and its timer fired no later than this (the loop is not behind)


def to_send(pacer: StreamPacer, now: float, draining: bool) -> list[Emission]:
    """What leaves on a wake at `now`: what is due within the window, or, while the proxy
    drains, everything the pacer holds."""
    return pacer.flush(now) if draining else pacer.pop_due(now + WINDOW_S)


def batch_steps(late: float, sharing: int) -> int:
    """How many steps a stream may parse ahead in one batch after its write (see
    `Playout.parse_ahead`), woken `late` seconds after its timer's time with `sharing` streams
    on the same timer: none while the loop runs behind (the work would hold up writes that are
    due, a burst of new streams' first tokens above all), else PARSE_BATCH_STEPS shared by the
    streams of the loop turn, so a turn's batches stay under a millisecond."""
    if late > PARSE_BATCH_LATE_S:
        return 0
    return PARSE_BATCH_STEPS // max(1, sharing)


def keepalive_due(now: float, last_send: float, keepalive_s: float) -> bool:
    """The client will have had nothing for `keepalive_s` (0: never) within this wake's window."""
    return bool(keepalive_s) and now + WINDOW_S >= last_send + keepalive_s


def next_wake(
    now: float, next_due: float | None, *, holding: bool, awaiting_upstream: bool,
    last_send: float, keepalive_s: float,
) -> float | None:
    """When an HTTP stream wakes next (None: nothing to wake for): its next due time, but while
    it holds bytes no later than MAX_SLEEP_S from now nor than its keep-alive time (one not yet
    past: a past one found nothing to send), and while it waits on its upstream with nothing
    due, MAX_SLEEP_S from now."""
    if holding:
        cap = now + MAX_SLEEP_S
        if keepalive_s and last_send + keepalive_s > now:
            cap = min(cap, last_send + keepalive_s)
        return cap if next_due is None else min(next_due, cap)
    if next_due is None and awaiting_upstream:
        return now + MAX_SLEEP_S
    return next_due


def needs_timer(wake: float, pending: float | None) -> bool:
    """A new timer is needed for `wake` unless one due at `pending`, no later, is on its way."""
    return pending is None or pending > wake


def until_sendable(wake: float, now: float) -> float:
    """How long a wake that came before the window to wait on: until `wake` is in the window
    (a timer fires early only when a sooner wake was asked for and then moved)."""
    return max(0.0, wake - WINDOW_S - now)


def too_early(wake: float, now: float, draining: bool) -> float | None:
    """A timer for `wake` fired at `now`: how long to wait on, because nothing can be due yet
    (see `next_wake`); None: wake the stream now (always, while the proxy drains)."""
    if now + WINDOW_S < wake and not draining:
        return until_sendable(wake, now)
    return None


def shared_timer_at(wake: float) -> float:
    """When the timer that wakes a stream due at `wake` fires, if streams share timers: on a
    grid of WINDOW_S - EARLY_S steps, the first point whose window reaches `wake` (between
    EARLY_S and WINDOW_S before it, so the wake is never too early), and every stream due
    within one step wakes in one loop turn."""
    step = WINDOW_S - EARLY_S
    at = math.ceil((wake - WINDOW_S) / step) * step
    return at if at + WINDOW_S >= wake else at + step  # floating point


def timer_delay(wake: float, now: float) -> float:
    """How long to sleep to wake in time for `wake`: EARLY_S before it, and LONG_SLEEP_EARLY_S
    earlier still after a sleep longer than LONG_SLEEP_S (epoll rounds up to the millisecond
    and the kernel adds slack). A wake that comes too early sends nothing and asks again."""
    delay = max(0.0, wake - now - EARLY_S)
    if delay > LONG_SLEEP_S:
        delay -= LONG_SLEEP_EARLY_S
    return delay
