"""The study state's worker (retimer.proxy.study.stateworker): its jobs in order on a thread of
their own, a bounded wait for a call and nothing changed by a call nobody waited for, kept writes
retried until the database takes them, and the loop free meanwhile."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from retimer.proxy.study import stateworker
from retimer.proxy.study.state import SharedState
from retimer.proxy.study.statedb import StateUnavailable
from retimer.proxy.study.stateworker import StateWorker


class Flaky:
    """A job that fails with StateUnavailable until `up` is set, counting its attempts."""

    def __init__(self, result: object = "ok") -> None:
        self.up = threading.Event()
        self.attempts = 0
        self.result = result

    def __call__(self) -> object:
        self.attempts += 1
        if not self.up.is_set():
            raise StateUnavailable("db: connection refused")
        return self.result


@pytest.fixture
def shared(tmp_path: Path) -> SharedState:
    state = SharedState(tmp_path / "state.sqlite", "s")
    yield state
    state.close()


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stateworker, "BACKOFF_S", (0.0, 0.01, 0.02))


def test_jobs_run_in_the_order_given_and_a_call_sees_a_kept_write(shared: SharedState) -> None:
    worker = StateWorker(shared.db)
    order: list[str] = []

    async def go() -> tuple[int, int]:
        worker.keep(lambda: order.append("kept") or shared.next_request("P1"), "a write")
        got = await worker.call(lambda: order.append("call") or shared.next_request("P1"), "a call")
        return got, await worker.call(lambda: shared.next_request("P2"), "another")

    assert asyncio.run(go()) == (1, 0)  # the kept write took position 0 first
    assert order == ["kept", "call"]
    worker.close()


def test_the_loop_runs_on_while_a_call_waits() -> None:
    """The job blocks its thread (a hung database); the event loop keeps its timers."""

    class Db:
        shown = "db"
        commit_allowed: Callable[[], bool] = staticmethod(lambda: True)

        def close(self) -> None:
            pass

    release = threading.Event()
    worker = StateWorker(Db())  # type: ignore[arg-type]
    ticks: list[float] = []

    async def go() -> object:
        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticker = asyncio.get_running_loop().create_task(tick())
        try:
            return await worker.call(lambda: release.wait(5) and "answered", "a hung call", wait=5)
        finally:
            ticker.cancel()

    threading.Timer(0.3, release.set).start()
    assert asyncio.run(go()) == "answered"
    assert len(ticks) >= 5  # the loop ran its timers while the call waited 0.3 s
    worker.close()


def test_a_call_that_cannot_be_answered_in_time_fails_and_never_runs_later(
        shared: SharedState, caplog: pytest.LogCaptureFixture) -> None:
    worker = StateWorker(shared.db)
    blocker = Flaky()  # a kept write ahead of the call, failing: the database is away
    taken: list[int] = []
    worker.keep(blocker, "a reply's end")

    async def go() -> None:
        with pytest.raises(StateUnavailable, match="no answer within 0.2 s"):
            await worker.call(lambda: taken.append(shared.next_request("P1")), "a position", wait=0.2)

    with caplog.at_level(logging.WARNING):
        asyncio.run(go())
        blocker.up.set()  # the database is back: the kept write goes in, the call does not
        worker.close()
    assert blocker.attempts >= 2 and worker.kept_late == 1 and worker.abandoned == 1
    assert taken == [] and shared.next_request("P1") == 0  # no position was used up
    text = caplog.text
    assert text.count("stopped answering") == 1 and "answers again" in text


def test_a_call_abandoned_while_it_runs_rolls_back(shared: SharedState) -> None:
    """The caller stops waiting while the job is inside its transaction: the COMMIT becomes a
    ROLLBACK, so the position nobody got is not used up."""
    worker = StateWorker(shared.db)
    entered, release = threading.Event(), threading.Event()

    def job() -> int:
        with shared.transaction():
            index = shared.next_request("P1")
            entered.set()
            release.wait(5)
        return index

    async def go() -> None:
        with pytest.raises(StateUnavailable):
            await worker.call(job, "a position", wait=0.2)
        assert entered.is_set()

    asyncio.run(go())
    release.set()
    asyncio.run(worker.call(lambda: None, "a barrier"))  # the job has ended by now
    assert asyncio.run(worker.call(lambda: shared.next_request("P1"), "a position")) == 0
    worker.close()


def test_a_kept_write_is_retried_until_it_is_taken_and_a_lost_one_is_named(
        shared: SharedState, caplog: pytest.LogCaptureFixture) -> None:
    worker = StateWorker(shared.db)
    late = Flaky()
    worker.keep(late, "a reply's end")
    time.sleep(0.1)
    late.up.set()
    assert asyncio.run(worker.call(lambda: "after", "a call")) == "after"
    assert late.attempts >= 3  # tried while away (no wait before the first retry), then taken
    never = Flaky()
    worker.keep(never, "a conversation's link")
    with caplog.at_level(logging.WARNING):
        worker.close(timeout=0.2)
    assert "did not take 1 write(s) before the proxy stopped (a conversation's link)" in caplog.text


def test_a_job_that_refuses_is_the_callers_to_handle(shared: SharedState) -> None:
    worker = StateWorker(shared.db)

    def refuse() -> None:
        raise ValueError("not yours")

    with pytest.raises(ValueError, match="not yours"):
        asyncio.run(worker.call(refuse, "a refusal"))
    assert asyncio.run(worker.call(lambda: 7, "next")) == 7  # the worker goes on
    worker.close()


def test_without_a_database_jobs_run_in_line() -> None:
    worker = StateWorker(None)
    seen: list[str] = []
    worker.keep(lambda: seen.append(threading.current_thread().name), "a write")
    assert asyncio.run(worker.call(lambda: threading.current_thread().name, "a call")) == seen[0]
    assert seen == [threading.main_thread().name]
    worker.close()


def test_a_result_committed_after_its_caller_left_is_taken_back_first(shared: SharedState) -> None:
    """The race a hung server leaves: the COMMIT is held, the caller stops waiting (and answers
    503), then the COMMIT goes through. The job's `undo` runs before any job given since (the
    caller's retry), so the retry finds the state as if the first attempt never happened."""
    worker = StateWorker(shared.db)
    release = threading.Event()
    order: list[str] = []

    def job() -> int:
        with shared.transaction():
            index = shared.next_request("P1")
        release.wait(5)  # committed; the answer is late
        return index

    async def go() -> int:
        with pytest.raises(StateUnavailable):
            await worker.call(job, "a position", wait=0.2,
                              undo=lambda index: order.append(f"undo {index}"))
        retry = asyncio.ensure_future(worker.call(lambda: order.append("retry") or 7, "the retry"))
        await asyncio.sleep(0.05)
        release.set()
        return await retry

    assert asyncio.run(go()) == 7
    assert order == ["undo 0", "retry"] and worker.undone == 1
    worker.close()


def test_a_result_that_came_as_the_wait_ran_out_is_the_callers(shared: SharedState) -> None:
    """The other side of that race: the job commits and answers just before the caller's wait
    runs out, but the loop, busy, only gets to both at once, the timeout first. The caller gets
    the committed result, not a 503: a 503 for a turn the state holds, with no `undo` to come
    (the job had seen its caller waiting), left that turn `pending` for good."""
    worker = StateWorker(shared.db)
    undone: list[int] = []

    def job() -> int:
        with shared.transaction():
            return shared.next_request("P1")

    async def go() -> int:
        # the loop held past the caller's deadline while the job finishes on its thread: its
        # answer and the wait's timeout are both due when the loop runs again
        asyncio.get_running_loop().call_soon(time.sleep, 0.5)
        return await worker.call(job, "a position", wait=0.2, undo=undone.append)

    assert asyncio.run(go()) == 0
    worker.close()
    assert undone == [] and shared.next_request("P1") == 1  # taken once, and kept
