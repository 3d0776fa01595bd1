"""A real agent's session recorded once into a cassette, then replayed with its upstream gone
(tests/e2e/test_clients_agents.py, tests/e2e/test_clients_ide.py: `check_cassette_replay`).

Recording: `retimer --record DIR` over the fake API with the harness's exact profile; the
agent does the harness's task (a tool call that writes FILE, then FINAL). Replaying: the same
working directory and a fresh home at the same paths (as a user re-runs a task in the same
checkout), `retimer --replay DIR` at 15,000 tok/s with a 50 ms TTFT, and the upstream a port
nobody listens on (reverse: `--upstream` it; forward: upstream_map.py points the real hosts at
it): the agent must finish the task with every LLM call served from the cassette and the fake
API asked nothing. The time figures (each replay's session time against what `retimer whatif`
predicts for its profile from the recording: the recording's time between calls plus the
profile's model time) are bench/clients.py's, suite `cassettes`, with an o3 replay beside.
"""

from __future__ import annotations

import json
import shutil
import time
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
    whatif_session,
)
from tests.support.clients.fakeapi import FakeAPI
from tests.support.clients.pacing import benchmarking, write_bench_row
from tests.support.proxy import RetimerProxy, free_port

REPLAY = ("--profile", "taalas-hc1-llama-3.1-8b", "--tps", "15000", "--ttft", "50ms",
          "--jitter", "0")
O3 = ("--profile", "o3", "--jitter", "0")
# the same profiles as `retimer whatif --profiles` names them
REPLAY_AS, O3_AS = "taalas-hc1-llama-3.1-8b:tps=15000,ttft=50ms,jitter=0", "o3:jitter=0"
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
    returns (recording, replay). Under bench/clients.py, a warm-up run before the recording, a
    replay at o3 too, and both replays' session times against `retimer whatif`'s prediction
    from the recording."""
    cassette = tmp / "cassette"
    runs = tmp / "run"  # the same work and home paths in every run
    if benchmarking():  # an agent's first run starts slower (cold files and caches): not it
        warm = start_proxy(tmp / "warm", fake, proxies.confdir, mode, PACED)
        try:
            run_agent(agent, mode, True, fake, script, proxies, runs, proxy=warm)
        finally:
            warm.stop()
        shutil.rmtree(runs)
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
    replay = replay_run(agent, mode, fake, script, proxies, tmp, REPLAY, len(recorded.records))
    if benchmarking():
        slow = replay_run(agent, mode, fake, script, proxies, tmp, O3, len(recorded.records))
        write_cassette_row(agent.name, mode, recorded, {REPLAY_AS: replay, O3_AS: slow}, tmp)
    return recorded, replay


def replay_run(agent: Agent, mode: str, fake: FakeAPI, script: TaskScript, proxies: Proxies,
               tmp: Path, profile: tuple[str, ...], calls: int) -> Run:
    """The task again from the cassette at `profile`, nothing listening upstream; asserts
    that it was done and that every call came from the cassette."""
    runs = tmp / "run"
    shutil.rmtree(runs)
    gone = free_port()  # nothing listens here: no call can reach an upstream
    player = start_proxy(tmp / f"replay-{profile[1]}", fake, proxies.confdir, mode,
                         (*profile, "--replay", str(tmp / "cassette")), fake_port=gone)
    try:
        replay = run_agent(agent, mode, True, fake, script, proxies, runs, proxy=player)
        replay.records = replay_records(player, 0, calls)
    finally:
        player.stop()
    what = f"{agent.name} ({mode}, replayed at {profile[1]})"
    tail = f"\n--- stdout ---\n{replay.stdout[-3000:]}\n--- stderr ---\n{replay.stderr[-5000:]}"
    assert replay.returncode == 0, f"{what}: exit {replay.returncode}{tail}"
    assert (runs / "work" / FILE).read_text() == agent.written, f"{what}: {FILE} not written{tail}"
    assert FINAL in replay.stdout, f"{what}: the final answer is not in its output{tail}"
    assert fake.requests == [], f"{what}: the fake API was asked {[r.path for r in fake.requests]}"
    served = [(r.get("cassette") or {}).get("match") for r in replay.records]
    assert len(served) == calls and all(m in SERVED for m in served), (
        f"{what}: the recording made {calls} calls; the replay's records say "
        f"{[(r['protocol'], r.get('cassette')) for r in replay.records]}")
    assert all(r["outcome"] == "complete" for r in replay.records), [
        r["outcome"] for r in replay.records]
    return replay


def write_cassette_row(client: str, mode: str, recorded: Run, replays: dict[str, Run],
                       tmp: Path) -> None:
    """bench/clients.py's figures, per replay profile: the replay's session time (its first
    call's start to its last call's end, `retimer whatif`'s "as recorded" total) against what
    `retimer whatif` predicted for that profile from the recording (the time between its calls,
    the agent's and its tools', plus the profile's model time)."""
    predicted = whatif_session(recorded.records, tmp / "whatif", ",".join(replays))
    # the process's wall time, start to exit, less the recording's model time: its tools, its
    # own work and its start-up and shut-down
    outside = recorded.wall - predicted["recorded"]["waiting_s"]
    for (name, run), figures in zip(replays.items(), predicted["profiles"], strict=True):
        measured = whatif_session(run.records, tmp / f"whatif-{len(name)}", "o3")  # (its recorded column)
        write_bench_row(suite="cassettes", client=client, mode=mode, profile=name,
                        recorded_s=predicted["recorded"]["total_s"],
                        between_s=predicted["between_s"], predicted_s=figures["total_s"],
                        replay_s=measured["recorded"]["total_s"], recorded_wall_s=recorded.wall,
                        predicted_wall_s=outside + figures["waiting_s"], wall_s=run.wall,
                        calls=len(run.records))
