"""A real agent's session recorded once into a cassette, then replayed with its upstream gone
(tests/e2e/test_clients_agents.py, tests/e2e/test_clients_ide.py: `check_cassette_replay`).

Recording: `retimer --record DIR` over the fake API with the harness's exact profile; the
agent does the harness's task (a tool call that writes FILE, then FINAL). Replaying: the same
working directory and a fresh home at the same paths (as a user re-runs a task in the same
checkout), `retimer --replay DIR` at 15,000 tok/s with a 50 ms TTFT, and the upstream a port
nobody listens on (reverse: `--upstream` it; forward: upstream_map.py points the real hosts at
it): the agent must finish the task with every LLM call served from the cassette and the fake
API asked nothing. The wall-time figures (the replay against the recording's tool time plus the
replay profile's predicted model time) are bench/clients.py's, suite `cassettes`.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.clients.agent_harness import (
    FILE,
    FINAL,
    PACED,
    Agent,
    Proxies,
    Run,
    TaskScript,
    check_run,
    log_lines,
    run_agent,
    start_proxy,
)
from tests.support.clients.fakeapi import FakeAPI
from tests.support.clients.pacing import benchmarking, predicted_s, write_bench_row
from tests.support.proxy import RetimerProxy, free_port

REPLAY = ("--profile", "taalas-hc1-llama-3.1-8b", "--tps", "15000", "--ttft", "50ms",
          "--jitter", "0")
SERVED = ("replayed", "matched loosely")


def replay_records(proxy: RetimerProxy, seen: int, expected: int) -> list[dict[str, Any]]:
    """The replay's records after the first `seen` lines, once `expected` are in (5 s at most:
    a record is written as its stream ends at the proxy)."""
    deadline = time.monotonic() + 5
    while True:
        records = [json.loads(x) for x in log_lines(proxy)[seen:]]
        if len(records) >= expected or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def check_cassette_replay(agent: Agent, mode: str, fake: FakeAPI, script: TaskScript,
                          proxies: Proxies, tmp: Path) -> tuple[Run, Run]:
    """Record the task once, replay it with the upstream gone; asserts what the replay did and
    returns (recording, replay)."""
    cassette = tmp / "cassette"
    runs = tmp / "run"  # the same work and home paths in both runs
    recorder = start_proxy(tmp / "record", fake, proxies.confdir, mode,
                           (*PACED, "--record", str(cassette)))
    try:
        recorded = run_agent(agent, mode, True, fake, script, proxies, runs, proxy=recorder)
    finally:
        recorder.stop()
    problems = check_run(recorded, agent)
    assert not problems, "\n".join(problems)
    index = json.loads((cassette / "cassette.json").read_text())
    assert len(index["calls"]) == len(recorded.records), (
        f"{agent.name}: {len(recorded.records)} records, {len(index['calls'])} calls recorded")

    shutil.rmtree(runs)
    gone = free_port()  # nothing listens here: no call can reach an upstream
    player = start_proxy(tmp / "replay", fake, proxies.confdir, mode,
                         (*REPLAY, "--replay", str(cassette)), fake_port=gone)
    try:
        replay = run_agent(agent, mode, True, fake, script, proxies, runs, proxy=player)
        replay.records = replay_records(player, 0, len(recorded.records))
    finally:
        player.stop()
    what = f"{agent.name} ({mode}, replayed)"
    tail = f"\n--- stdout ---\n{replay.stdout[-3000:]}\n--- stderr ---\n{replay.stderr[-5000:]}"
    assert replay.returncode == 0, f"{what}: exit {replay.returncode}{tail}"
    assert (runs / "work" / FILE).read_text() == agent.written, f"{what}: {FILE} not written{tail}"
    assert FINAL in replay.stdout, f"{what}: the final answer is not in its output{tail}"
    assert fake.requests == [], f"{what}: the fake API was asked {[r.path for r in fake.requests]}"
    served = [(r.get("cassette") or {}).get("match") for r in replay.records]
    assert len(served) == len(recorded.records) and all(m in SERVED for m in served), (
        f"{what}: the recording made {len(recorded.records)} calls; the replay's records say "
        f"{[(r['protocol'], r.get('cassette')) for r in replay.records]}")
    assert all(r["outcome"] == "complete" and r["target"]["tps"] == 15000.0
               for r in replay.records), [(r["outcome"], r["target"]) for r in replay.records]
    if benchmarking():
        write_cassette_row(agent.name, mode, recorded, replay)
    return recorded, replay


def write_cassette_row(client: str, mode: str, recorded: Run, replay: Run) -> None:
    """bench/clients.py's figures: the replay's wait against the recording's tool time (its
    wait less its calls' model time) plus the replay profile's model time."""
    recorded_llm = llm_time(recorded.records)
    tools = recorded.wall - recorded_llm
    predicted = profile_time(replay.records)
    write_bench_row(suite="cassettes", client=client, mode=mode, recorded_s=recorded.wall,
                    recorded_llm_s=recorded_llm, tools_s=tools, replay_s=replay.wall,
                    replay_llm_s=predicted, expected_s=tools + predicted,
                    calls=len(replay.records))


def llm_time(records: list[dict[str, Any]]) -> float:
    """Seconds during which at least one of the calls was in flight at the proxy: the union
    of each record's [start, start + emitted duration]."""
    return _union([(r, r["emitted"]["duration_ms"] / 1000) for r in records])


def profile_time(records: list[dict[str, Any]]) -> float:
    """The same union with each call's duration as its profile gives it (TTFT + (tokens - 1)
    / rate; a call that carried no token, such as a WebSocket prewarm, is not held)."""
    return _union([(r, predicted_s(r)) for r in records if r["emitted"]["tokens"]])


def _union(calls: list[tuple[dict[str, Any], float]]) -> float:
    spans = sorted((start, start + took) for r, took in calls
                   if (start := datetime.fromisoformat(r["time"]).timestamp()))
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total
