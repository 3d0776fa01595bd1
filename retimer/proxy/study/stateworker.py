"""The study state's database calls, off the proxy's event loop: one thread runs them in order.

Why: a call on the loop stalls every stream for as long as it takes, and a database that hangs
(a stopped server, a lost network) takes as long as it hangs. Here the loop waits on a future
for a bound and goes on serving; the thread keeps the connection, connects anew at once when it
was lost (a restarted server leaves each connection failing once), then backs off while the
database stays away. Two kinds of job, run in the order given (a call after a kept write sees it):

- `call`: a request needs the answer (a unit's position, the page's state). Its caller waits at
  most `wait` seconds, then gets `StateUnavailable` and answers "try again"; a job not started by
  then never runs, and one still running rolls back at its COMMIT (`statedb.Abandoned`), so an
  answer nobody got changed nothing.
- `keep`: a write that must happen although nobody waits for it (a reply's end, a link, a stream
  offered for rating). It is kept in memory, in order, and retried until the database takes it;
  what is left when the proxy stops is named in a warning.

Without a database (`MemoryState`, the page's private sqlite3) the jobs run at once, in line.

A job is attempted again after a lost connection, so every job must be safe to repeat: a
connection lost after the server took the COMMIT but before it said so runs it twice. The kept
writes are (a turn ends once, links and records are upserts); a page turn finds itself begun;
a `unit: request` position is kept under its request's flow id and given again.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from retimer.proxy.study.statedb import Abandoned, StateDB, StateUnavailable

__all__ = ["BACKOFF_S", "WAIT_S", "StateWorker"]

log = logging.getLogger(__name__)
T = TypeVar("T")

WAIT_S = 4.0  # how long a request waits for the state before it is answered "try again"
BACKOFF_S = (0.0, 0.1, 0.25, 0.5, 1.0)  # pauses between attempts (the last repeats)
STOP_S = 5.0  # at shutdown, how long kept writes may still take


@dataclass(eq=False)
class _Job:
    run: Callable[[], Any]
    what: str
    future: concurrent.futures.Future[Any] | None  # None: a kept write (nobody waits)
    deadline: float = float("inf")
    abandoned: bool = False
    attempts: int = field(default=0)
    undo: Callable[[Any], object] | None = None  # for a result committed after its caller left
    # the caller's giving up and the thread's answering, one at a time: either the answer is
    # given first (the caller takes it, however late its loop sees it) or the caller gives up
    # first (the thread undoes what it committed)
    lock: threading.Lock = field(default_factory=threading.Lock)


class StateWorker:
    """Runs the jobs of one state database on a thread of their own (`db` None: in line)."""

    def __init__(self, db: StateDB | None, name: str = "retimer-study-state") -> None:
        self.db = db
        self.name = name
        self._jobs: collections.deque[_Job] = collections.deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_by = float("inf")
        self.outage_since: float | None = None  # monotonic: the database stopped answering
        self.outages = 0  # times it stopped answering (then came back, or not yet)
        self.abandoned = 0  # calls whose caller stopped waiting
        self.kept_late = 0  # kept writes that needed more than one attempt
        self.dropped: list[str] = []  # kept writes given up at the proxy's stop
        self.undone = 0  # calls committed after their caller stopped waiting, then taken back

    # -- the loop's side ----------------------------------------------------------------------
    async def call(self, job: Callable[[], T], what: str, wait: float = WAIT_S,
                   undo: Callable[[T], object] | None = None) -> T:
        """`job()`'s result, run on the state's thread; `StateUnavailable` after `wait` seconds
        (the job then changes nothing). One race is left: a COMMIT the database held (a hung
        server) and took after the caller stopped waiting; then `undo(result)` runs, before
        any job given since (the caller's retry among them). A result given before the caller
        stopped waiting is the caller's, even when its loop sees the timeout first."""
        if self.db is None:
            return job()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        item = _Job(job, what, future, time.monotonic() + wait, undo=undo)
        self._put(item)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), wait)
        except TimeoutError:
            with item.lock:
                answered = future.done() and not future.cancelled()
                item.abandoned = not answered
            if answered:  # it came as the wait ran out, before the loop saw it: it stands
                return future.result()
            self.abandoned += 1
            raise StateUnavailable(f"{self._shown}: no answer within {wait:g} s") from None

    def keep(self, job: Callable[[], object], what: str) -> None:
        """Run `job()` once the database takes it, after every job given before it."""
        if self.db is None:
            try:
                job()
            except StateUnavailable as e:  # a private in-memory database does not go away
                log.warning(f"retimer study: {what} was not kept ({e})")
            return
        self._put(_Job(job, what, None))

    @property
    def backlog(self) -> int:
        """Jobs given and not yet done (kept writes waiting for the database among them)."""
        return len(self._jobs)

    def close(self, timeout: float = STOP_S) -> None:
        """Stop: kept writes get `timeout` seconds more; then the connection closes."""
        thread = self._thread
        if thread is not None:
            with self._wake:
                self._stopping = True
                self._stop_by = time.monotonic() + timeout
                self._wake.notify()
            thread.join(timeout + 1.0)
            left = self.dropped + [j.what for j in self._jobs if j.future is None]
            if left:
                log.warning(f"retimer study: the state database did not take {len(left)} "
                            f"write(s) before the proxy stopped ({', '.join(left[:5])})")
        if self.db is not None and (thread is None or not thread.is_alive()):
            self.db.close()

    @property
    def _shown(self) -> str:
        return self.db.shown if self.db is not None else "the study's state"

    def _put(self, job: _Job) -> None:
        with self._wake:
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            self._wake.notify()

    # -- the thread's side --------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and not self._stopping:
                    self._wake.wait()
                if not self._jobs:
                    return
                job = self._jobs[0]
            self._run(job)
            with self._wake:
                self._jobs.popleft()
                if self._stopping and (not self._jobs or time.monotonic() > self._stop_by):
                    return

    def _run(self, job: _Job) -> None:
        """Attempt `job` until it is done, its caller stops waiting, or (kept writes) the
        proxy's stop allows no more time."""
        assert self.db is not None
        future = job.future
        if future is not None and not future.set_running_or_notify_cancel():
            return  # the caller gave up before it started
        self.db.commit_allowed = lambda: not job.abandoned
        while True:
            if job.abandoned:
                return
            try:
                result = job.run()
            except Abandoned:
                return
            except StateUnavailable as e:
                if not self._retry(job, e):
                    return
                continue
            except BaseException as e:  # noqa: BLE001 - the caller's to handle (PageRefused, ...)
                self._answered()
                if future is not None:
                    future.set_exception(e)
                else:
                    log.warning(f"retimer study: {job.what} failed ({type(e).__name__}: {e})")
                return
            self._answered()
            if job.attempts and future is None:
                self.kept_late += 1
            with job.lock:
                if job.abandoned:
                    if job.undo is not None:
                        self._undo(job, result)
                elif future is not None:
                    future.set_result(result)
            return

    def _undo(self, job: _Job, result: object) -> None:
        """Take back what a job committed after its caller stopped waiting: at once, or first
        in line if the database went away again."""
        undo = job.undo
        assert undo is not None
        self.undone += 1
        log.warning(f"retimer study: {job.what} was taken by the database after the request "
                    "had been answered 503; taking it back")
        with self._wake:  # right after the current job, before every job given since
            self._jobs.insert(1, _Job(lambda: undo(result), f"taking back {job.what}", None))

    def _retry(self, job: _Job, error: StateUnavailable) -> bool:
        """After a failed attempt: wait the next back-off pause (False: give up)."""
        if self.outage_since is None:
            self.outage_since = time.monotonic()
            self.outages += 1
            log.warning(f"retimer study: the study's state database stopped answering ({error}); "
                        "requests wait for it, writes are kept until it is back")
        pause = BACKOFF_S[min(job.attempts, len(BACKOFF_S) - 1)]
        job.attempts += 1
        if time.monotonic() + pause >= min(job.deadline, self._stop_by):
            if job.future is not None:
                job.future.set_exception(error)
            else:
                self.dropped.append(job.what)
            return False
        if pause:
            with self._wake:
                self._wake.wait(pause)  # a stop cuts the pause short
        return True

    def _answered(self) -> None:
        if self.outage_since is not None:
            log.warning(f"retimer study: the study's state database answers again (after "
                        f"{time.monotonic() - self.outage_since:.1f} s)")
            self.outage_since = None
