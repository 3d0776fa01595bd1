"""`retimer --workers N`: N proxy processes on one listening address, and the parent that runs them.

The kernel spreads connections among the workers (SO_REUSEPORT: retimer.proxy.patches.listen);
no relay of ours sits in the path. The parent creates the CA once before any worker starts
(they share the confdir), holds the port, and is the one face of the run: one banner, one live
view fed with every worker's records and streams in flight (retimer.cli.proxy.worker_main sends them
down a pipe), Ctrl-C passed on to each worker once (each drains with its own grace period),
and one line when a worker dies. The records log is shared: each worker appends whole lines
(retimer.records.writer). Workers run in their own session, so a terminal's Ctrl-C reaches
them only through the parent, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from retimer.cli.cmdline import fail
from retimer.cli.proxy.options import ProxyConfig, check_port
from retimer.cli.proxy.worker_main import config_json
from retimer.records.notices import once_per_run

CHANNEL_LIMIT = 64 * 2**20  # a record line from a worker may be long (its trace)


def has_study(config: ProxyConfig) -> bool:
    """Whether the proxy runs a study (`retimer study`, or --set retimer_study=...)."""
    return bool(config.study) or any(s.split("=", 1)[0].strip() == "retimer_study" for s in config.sets)


@dataclass
class Worker:
    """One worker process, what it last said was in flight, and whether it is listening."""

    index: int
    proc: asyncio.subprocess.Process
    ready: asyncio.Future[int]
    active: list[dict[str, Any]] = field(default_factory=list)


class Workers:
    """Starts and stops the workers; hands their records to `on_record`."""

    def __init__(self, config: ProxyConfig, on_record: Callable[[dict[str, Any]], None] | None,
                 live: bool = False) -> None:
        """`on_record` None: the workers send no records; `live`: they send their streams in
        flight for a live view (each snapshot costs a record per stream: only when shown)."""
        self.config = config
        self.on_record = on_record or (lambda record: None)
        self.sends = f"{'records' if on_record else ''},{'live' if live else ''}"
        self.workers: list[Worker] = []
        self.stopping = 0  # signals passed on so far
        self.held: socket.socket | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.seen_errors: set[str] = set()
        self.said_once: set[str] = set()  # retimer.records.notices' keys shown so far
        self.study_state: Path | None = None  # the run's shared study positions (sqlite3)

    @property
    def port(self) -> int:
        return self.config.listen_port

    def snapshot(self) -> list[dict[str, Any]]:
        """Every worker's streams in flight, for the live view."""
        return [r for w in self.workers for r in w.active]

    async def start(self) -> None:
        """The CA, the port, then the workers; returns once every one listens (or fails in one
        line, with the workers' own message, when one cannot start)."""
        config = self.config
        from retimer.proxy.certs import ensure_ca
        from retimer.proxy.patches.listen import NoReusePort, reserve_port

        try:
            ensure_ca(config.confdir)  # once, before the workers, which share the confdir
        except OSError as e:
            fail(f"cannot create the CA in {config.confdir}: {e.strerror}", 1)
        if config.listen_port:
            check_port(config.listen_host, config.listen_port)
        try:
            self.held = reserve_port(config.listen_host, config.listen_port)
        except NoReusePort as e:
            fail(str(e))
        except OSError as e:
            fail(f"--listen-port: cannot listen on {config.listen_host}:{config.listen_port}: {e.strerror}")
        self.config = config = replace(config, listen_port=self.held.getsockname()[1])
        if has_study(config):  # the participants' unit positions, whichever worker serves
            from retimer.proxy.study.state import SharedState

            if config.study_state:  # --study-state: shared with other instances, theirs to keep
                SharedState(config.study_state).close()
            else:
                self.study_state = config.confdir / f"study-state-{os.getpid()}.sqlite"
                SharedState(self.study_state).close()  # the tables, before any worker opens it
                self.config = config = replace(config, study_state=str(self.study_state))
        for index in range(1, config.workers + 1):
            self.workers.append(await self._spawn(index))
        pending: set[asyncio.Future[Any]] = {asyncio.ensure_future(w.proc.wait()) for w in self.workers}
        ready: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(w.ready for w in self.workers)))
        done, _ = await asyncio.wait({ready, *pending}, return_when=asyncio.FIRST_COMPLETED)
        if ready not in done:  # a worker exited before it listened: its stderr said why
            ready.cancel()
            codes = [w.proc.returncode for w in self.workers if w.proc.returncode is not None]
            for w in self.workers:
                if w.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        w.proc.kill()
            await asyncio.gather(*(w.proc.wait() for w in self.workers), *self.tasks,
                                 return_exceptions=True)
            with contextlib.suppress(asyncio.CancelledError):  # taken: asyncio names it otherwise
                await ready
            if self.study_state is not None:
                self.study_state.unlink(missing_ok=True)
            raise SystemExit(codes[0] or 1)
        for task in pending:
            task.cancel()

    async def _spawn(self, index: int) -> Worker:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "retimer.cli.proxy.worker_main", str(index), str(write_fd), self.sends,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, pass_fds=(write_fd,), start_new_session=True,
            )
        finally:
            os.close(write_fd)
        assert proc.stdin is not None
        proc.stdin.write(config_json(self.config).encode() + b"\n")  # stays open: see worker_main
        worker = Worker(index, proc, loop.create_future())
        reader = asyncio.StreamReader(limit=CHANNEL_LIMIT)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                     os.fdopen(read_fd, "rb", buffering=0))
        self.tasks.append(asyncio.create_task(self._listen(worker, reader)))
        self.tasks.append(asyncio.create_task(self._errors(worker)))
        return worker

    async def _listen(self, worker: Worker, reader: asyncio.StreamReader) -> None:
        """What the worker sends: ready, records, streams in flight."""
        while line := await reader.readline():
            try:
                message = json.loads(line)
            except ValueError:  # never expected: skip it rather than lose the channel
                continue
            if "record" in message:
                self.on_record(message["record"])
            elif "active" in message:
                worker.active = message["active"]
            elif "ready" in message and not worker.ready.done():
                worker.ready.set_result(message["ready"])
        worker.active = []

    async def _errors(self, worker: Worker) -> None:
        """The worker's stderr, on ours (above the live table); a line every worker says at
        start-up (the same bad option) is shown once."""
        assert worker.proc.stderr is not None
        while line := await worker.proc.stderr.readline():
            text = line.decode(errors="replace")
            starting = not all(w.ready.done() for w in self.workers)
            if starting and text in self.seen_errors:
                continue
            self.seen_errors.add(text)
            if (once := once_per_run(text)) is not None:  # said by every worker that sees it
                if once in self.said_once:
                    continue
                self.said_once.add(once)
            sys.stderr.write(text)
            sys.stderr.flush()

    def interrupt(self) -> None:
        """Ctrl-C/SIGTERM: the first drains every worker, the next stops them at once."""
        self.stopping += 1
        for w in self.workers:
            if w.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.send_signal(signal.SIGINT)

    async def wait(self) -> int:
        """Until every worker exited: 0 when all stopped cleanly on a signal, else 1. A worker
        that dies on its own is reported in one line; the others keep serving."""
        waits = {asyncio.ensure_future(w.proc.wait()): w for w in self.workers}
        code = 0
        while waits:
            done, _ = await asyncio.wait(set(waits), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                w = waits.pop(task)
                rc = task.result()
                if not self.stopping or rc != 0:
                    code = 1
                    print(f"retimer: worker {w.index} (pid {w.proc.pid}) {_ended(rc)}; "
                          f"{len(waits)} still serving", file=sys.stderr, flush=True)
        await asyncio.gather(*self.tasks, return_exceptions=True)  # the last records are in
        if self.held is not None:
            self.held.close()
        if self.study_state is not None:
            for leftover in (self.study_state, Path(f"{self.study_state}-journal")):
                leftover.unlink(missing_ok=True)
        return code


def _ended(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


async def run_workers(config: ProxyConfig) -> int:
    """`retimer --workers N`: the banner, the live view of every worker, until stopped."""
    from retimer.cli.proxy.banner import print_banner
    from retimer.cli.proxy.liveview import LiveView
    from retimer.cli.proxy.runner import refresh_view

    view = LiveView(blind=bool(config.study))
    shown = not config.quiet
    workers = Workers(config, view if shown else None, live=shown and view.interactive)
    view.active = workers.snapshot
    await workers.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, workers.interrupt)
    print_banner(workers.config, None, None)
    if not config.quiet:
        view.start()
    refresher = asyncio.create_task(refresh_view(view)) if view.interactive and not config.quiet else None
    try:
        return await workers.wait()
    finally:
        if refresher:
            refresher.cancel()
        view.stop()


@contextlib.asynccontextmanager
async def serving(config: ProxyConfig, out: Any = None) -> AsyncIterator[Workers]:
    """The workers for `retimer run` and `retimer browser`: listening inside the block, their
    records as plain lines on `out` (stderr), drained and stopped after it."""
    from retimer.cli.proxy.liveview import LiveView

    view = LiveView(out=out or sys.stderr, interactive=False)
    workers = Workers(config, view if not config.quiet else None)  # no live table: no snapshots
    await workers.start()
    try:
        yield workers
    finally:
        workers.interrupt()
        await workers.wait()
        view.stop()
