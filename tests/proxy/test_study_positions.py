"""A unit's position in a shared state, taken by the Study addon's job (retimer.proxy.study):
the state's worker attempts a job again after a lost connection, so a COMMIT the server took
just before the connection died runs twice; a `unit: request` position must not be used up by
the second run (the participant's next unit would skip a row of the design)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mitmproxy.addonmanager import Loader
from mitmproxy.test import taddons, tflow

from retimer.proxy.study import stateworker
from retimer.proxy.study.addon import Study
from retimer.proxy.study.state import SharedState
from retimer.proxy.study.statedb import StateUnavailable
from retimer.proxy.study.stateworker import StateWorker
from tests.support.study import write_study


class Seed:
    """The Retimer addon's seed option, which the Study addon sets for a shared state."""

    def load(self, loader: Loader) -> None:
        loader.add_option("retimer_seed", int, -1, "the timing's seed")


def chat_flow() -> tflow.HTTPFlow:
    flow = tflow.tflow()
    flow.request.method, flow.request.path = "POST", "/v1/chat/completions"
    flow.request.headers["content-type"] = "application/json"
    flow.request.headers["x-retimer-participant"] = "P1"
    flow.request.content = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    return flow


def test_a_request_units_job_run_again_takes_the_same_position(tmp_path: Path) -> None:
    study = Study(lambda: None)
    with taddons.context(Seed(), study) as tctx:
        tctx.configure(study, retimer_study=str(write_study(tmp_path)),
                       retimer_study_state=str(tmp_path / "state.sqlite"))
        design = study.design
        assert design is not None and isinstance(study.state, SharedState)
        first = chat_flow()
        job = study.assignment(first, design, "P1")
        (fields, _), (again, _) = job(), job()  # the same request's job, committed twice
        assert fields["unit"] == again["unit"] == 0
        assert fields["condition"] == again["condition"] == design.condition("P1", 0).name
        (following, _) = study.assignment(chat_flow(), design, "P1")()
        assert following["unit"] == 1  # the next request takes the next row, none skipped


def test_a_commit_taken_before_the_connection_died_uses_up_no_position(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the worker: the job commits, then its connection is reported lost; the worker
    runs it again and the caller gets the position the first run took."""
    monkeypatch.setattr(stateworker, "BACKOFF_S", (0.0, 0.01))
    shared = SharedState(tmp_path / "state.sqlite", "s")
    worker = StateWorker(shared.db)
    runs: list[int] = []

    def job() -> int:
        with shared.transaction():
            index = shared.next_request("P1", "flow-1")
        runs.append(index)
        if len(runs) == 1:  # the server took the COMMIT; its answer was lost with the connection
            raise StateUnavailable("db: server closed the connection unexpectedly")
        return index

    try:
        assert asyncio.run(worker.call(job, "a unit's position")) == 0
        assert runs == [0, 0]
        assert asyncio.run(worker.call(lambda: shared.next_request("P1", "flow-2"), "the next")) == 1
    finally:
        worker.close()
        shared.close()
