"""`retimer --workers N`'s parent shows its workers' stderr (retimer.cli.proxy.workers): a
warning every worker gives once (retimer.records.notices) is shown once per run, whatever
counts each worker's own line carries; other lines are shown as often as they come."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from retimer.cli.proxy.workers import Worker, Workers
from retimer.records.notices import INFEASIBLE_CONDITION, UPSTREAM_BOUND


def notice(bound: int, seen: int) -> bytes:
    return (f"retimer: {bound} of the {seen} streams so far were upstream-bound: the upstream is "
            f"slower than the profile, and {UPSTREAM_BOUND}. To feel this speed, ...\n").encode()


def test_a_warning_each_worker_gives_is_shown_once(capsys: pytest.CaptureFixture[str]) -> None:
    infeasible = [f"retimer study: WARNING: {INFEASIBLE_CONDITION.format(place=p)}, not by "
                  "itself\n" for p in (1, 2)]
    other = b"retimer: a malformed stream passed through unchanged\n"
    said = [[notice(5, 5), other, infeasible[0].encode()],
            [notice(6, 7), other, infeasible[0].encode(), infeasible[1].encode()]]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        workers = Workers(SimpleNamespace(listen_port=0), None)  # type: ignore[arg-type]
        for index, lines in enumerate(said):
            stderr = asyncio.StreamReader()
            for line in lines:
                stderr.feed_data(line)
            stderr.feed_eof()
            ready: asyncio.Future[int] = loop.create_future()
            ready.set_result(8080)  # listening: past start-up, where equal lines are merged
            proc: Any = SimpleNamespace(stderr=stderr)
            workers.workers.append(Worker(index, proc, ready))
        for worker in workers.workers:
            await workers._errors(worker)

    asyncio.run(run())
    shown = capsys.readouterr().err.splitlines()
    assert shown == [notice(5, 5).decode().rstrip(), other.decode().rstrip(),
                     infeasible[0].rstrip(), other.decode().rstrip(), infeasible[1].rstrip()]
