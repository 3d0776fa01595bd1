"""The bridge's timer groups (retimer.proxy.bridge.timers): streams due within one half-millisecond
step of a grid share one loop timer, each is woken exactly once and never before its window, and
one stream's failing wake does not keep the others of its group asleep. Driven on a real asyncio
loop with stand-in streams (the real proxy's timers: tests/proxy/test_bridge_timers.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from retimer.proxy.bridge.timers import DirectTimers, PacingWakeup
from retimer.timing import emission


class Stream:
    """What DirectTimers needs of a paced stream; `wake_direct` notes when it was woken."""

    def __init__(self, fail: bool = False) -> None:
        self.finished = False
        self.handler: Any = SimpleNamespace(_server_event_lock=asyncio.Lock())
        self.routes: list[Any] | None = None
        self.wakeups: dict[PacingWakeup, float] = {}
        self.woken: list[tuple[float, float]] = []  # (when, due)
        self.batches: list[int] = []  # the parse-ahead steps each wake was allowed
        self.fail = fail

    def wake_direct(self, cmd: PacingWakeup, batch: int = 0) -> bool:
        due = self.wakeups.pop(cmd)
        self.woken.append((time.monotonic(), due))
        self.batches.append(batch)
        if self.fail:
            raise RuntimeError("a bug in one stream")
        return True


async def original_wakeup(handler: Any, request: Any) -> None:
    raise AssertionError("every stream's handler is known: mitmproxy's wakeup is never used")


def arm(timers: DirectTimers, stream: Stream, wake: float) -> None:
    cmd = PacingWakeup(0.0)
    stream.wakeups[cmd] = wake
    assert timers.arm(stream, cmd)


def run(streams_at: list[tuple[Stream, float]]) -> tuple[DirectTimers, list[dict[str, Any]]]:
    """Arm each stream for its offset (s from now), run the loop until all are due."""
    errors: list[dict[str, Any]] = []

    async def go() -> DirectTimers:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        timers = DirectTimers(original_wakeup, SimpleNamespace(draining=False))  # type: ignore[arg-type]
        now = time.monotonic()
        for stream, offset in streams_at:
            arm(timers, stream, now + offset)
        await asyncio.sleep(max(o for _, o in streams_at) + 0.05)
        return timers

    return asyncio.run(go()), errors


def test_streams_due_within_half_a_millisecond_share_a_timer_and_each_wakes_once_in_its_window() -> None:
    streams = [Stream() for _ in range(10)]
    timers, errors = run([(s, 0.020 + i * 0.00004) for i, s in enumerate(streams)])  # 0.36 ms apart
    assert not errors
    assert timers.shared >= 8  # two grid points at most
    assert timers.early == 0 and timers.direct == timers.written == 10
    for s in streams:
        ((when, due),) = s.woken
        assert when >= due - emission.WINDOW_S  # it had something to send: no re-arm


def test_streams_due_milliseconds_apart_keep_timers_of_their_own() -> None:
    streams = [Stream() for _ in range(5)]
    timers, errors = run([(s, 0.010 + i * 0.003) for i, s in enumerate(streams)])
    assert not errors
    assert timers.shared == 0
    assert [len(s.woken) for s in streams] == [1] * 5


def test_a_failing_wake_is_reported_and_the_rest_of_its_group_wakes() -> None:
    streams = [Stream(), Stream(fail=True), Stream()]
    timers, errors = run([(s, 0.015) for s in streams])
    assert timers.shared == 2  # one timer for the three
    assert [len(s.woken) for s in streams] == [1, 1, 1]
    assert [str(e["exception"]) for e in errors] == ["a bug in one stream"]


def test_the_streams_of_a_timer_share_one_parse_batch_and_a_late_timer_gives_none() -> None:
    """Each stream a timer wakes may parse ahead `emission.batch_steps` of the turn: the
    turn's share when the timer fired in time (on a loaded machine it may not have: then
    none, for all alike), and none when the loop was held up past its time."""
    together = [Stream() for _ in range(4)]
    timers, errors = run([(s, 0.015) for s in together])
    assert not errors and timers.shared == 3
    (batch,) = {b for s in together for b in s.batches}  # one value for the turn
    assert batch in (emission.PARSE_BATCH_STEPS // 4, 0)
    held = Stream()

    async def go() -> None:
        timers = DirectTimers(original_wakeup, SimpleNamespace(draining=False))  # type: ignore[arg-type]
        arm(timers, held, time.monotonic() + 0.010)
        time.sleep(0.030)  # the loop is busy past the timer's time
        await asyncio.sleep(0.02)

    asyncio.run(go())
    assert held.batches == [0]
