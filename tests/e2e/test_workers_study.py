"""`retimer study --workers 2`: one participant's unit positions and counterbalancing do not
depend on which worker took a connection (the workers share them in one sqlite3 file), and the
rating page offers the latest stream whichever worker served it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from retimer.proxy.study.files import load_study
from tests.support.study import TEXT, StudyProxy, chat, write_study
from tests.support.upstream import FakeLLM

pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=2)


def _started(proxy: StudyProxy) -> StudyProxy:
    proxy.start()
    deadline = time.monotonic() + 30
    while "retimer listening on" not in proxy.stdout() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proxy


def test_request_units_are_numbered_once_across_workers(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path, ratings=True)
    design, profiles = load_study(str(study))
    proxy = _started(StudyProxy(tmp_path / "p", study, "P3", "--workers", "2"))
    try:
        n = 16
        for i in range(n):  # one connection each: the kernel picks the worker every time
            assert chat(proxy.url, fake, f"question {i}").status_code == 200
        records = proxy.records(n)
        rate = f"{proxy.url}/rate?latest=1"
        latest = [httpx.get(rate, timeout=10).json()["stream"] for _ in range(6)]
    finally:
        proxy.stop()
    assert proxy.proc.returncode == 0
    assert {r["worker"] for r in records} == {1, 2}
    assert [r["unit"] for r in records] == list(range(n))  # no position given twice or skipped
    for r in records:  # the counterbalanced order, as one process would give it
        assert r["condition"] == design.condition("P3", r["unit"]).name
        assert r["target"]["ttft_ms"] == pytest.approx(profiles[r["condition"]].ttft.p50 * 1000)
    assert latest == [records[-1]["id"]] * 6  # whichever worker answers the page
    assert not list((tmp_path / "p" / "confdir").glob("study-state-*"))  # removed at exit
    shown = proxy.stdout() + proxy.stderr()  # blinded: banner and view name no condition
    assert not [c for c in design.names if c in shown] and "gpt-5" not in shown


def test_conversation_units_agree_across_workers(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path, unit="conversation")
    design, _ = load_study(str(study))
    proxy = _started(StudyProxy(tmp_path / "p", study, "P1", "--workers", "2"))
    history: dict[str, list[dict[str, str]]] = {c: [] for c in "ABC"}
    order = "ABCABCACB"
    try:
        for conv in order:  # a new connection per turn: turns of one conversation meet both workers
            history[conv].append({"role": "user", "content": f"opening of {conv}"
                                  if not history[conv] else "and then?"})
            with httpx.Client(proxy=proxy.url, timeout=30) as client:
                r = client.post(fake.url + "/v1/chat/completions", json={
                    "model": "m", "stream": True, "messages": history[conv]})
                assert r.status_code == 200
            history[conv].append({"role": "assistant", "content": TEXT})
        records = proxy.records(len(order))
    finally:
        proxy.stop()
    units = [r["unit"] for r in records]
    assert units == [{"A": 0, "B": 1, "C": 2}[c] for c in order]  # first-seen order, shared
    assert {r["worker"] for r in records} == {1, 2}
    for r in records:
        assert r["condition"] == design.condition("P1", r["unit"]).name
